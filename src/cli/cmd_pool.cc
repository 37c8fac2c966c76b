// rfos pool create|list|query|destroy
#include <cstdio>

#include "cli/cli.h"

namespace rfos::cli {

namespace {
void print_pool(const client::PoolInfo& p) {
  std::printf("%s  %-16s targets %u  %s free of %s  containers %u\n", p.uuid.c_str(),
              p.label.empty() ? "-" : p.label.c_str(), p.targets, human_bytes(p.free_bytes).c_str(),
              human_bytes(p.total_bytes).c_str(), p.containers);
}
}  // namespace

void add_pool_commands(CLI::App& app, Context& ctx) {
  auto* pool = app.add_subcommand("pool", "manage pools");
  pool->require_subcommand(1);

  auto label = std::make_shared<std::string>();
  auto* create = pool->add_subcommand("create", "create a pool on every target of the server");
  create->add_option("label", *label, "a name for the pool (letters, digits, '-', '_', '.')");
  create->callback([&ctx, label] {
    auto p = ctx.control()->pool_create(*label);
    if (ctx.check(p.status(), "pool create")) print_pool(*p);
  });

  pool->add_subcommand("list", "list pools")->callback([&ctx] {
    auto pools = ctx.control()->pool_list();
    if (!ctx.check(pools.status(), "pool list")) return;
    for (const auto& p : *pools) print_pool(p);
  });

  auto id = std::make_shared<std::string>();
  auto* query = pool->add_subcommand("query", "show one pool");
  query->add_option("pool", *id, "pool label or uuid")->required();
  query->callback([&ctx, id] {
    auto p = ctx.control()->pool_query(*id);
    if (ctx.check(p.status(), "pool query")) print_pool(*p);
  });

  auto force = std::make_shared<bool>(false);
  auto* destroy = pool->add_subcommand("destroy", "destroy a pool and give its space back");
  destroy->add_option("pool", *id, "pool label or uuid")->required();
  destroy->add_flag("--force", *force, "also destroy the containers it holds");
  destroy->callback([&ctx, id, force] { ctx.check(ctx.control()->pool_destroy(*id, *force), "pool destroy"); });
}

}  // namespace rfos::cli
