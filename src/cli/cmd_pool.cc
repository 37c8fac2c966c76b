// rfos pool create|list|query|destroy|acl
#include <cstdio>

#include "cli/cli.h"

namespace rfos::cli {

namespace {
void print_pool(const client::PoolInfo& p) {
  std::printf("%s  %-16s targets %u  %s free of %s  containers %u  owner %s:%s\n", p.uuid.c_str(),
              p.label.empty() ? "-" : p.label.c_str(), p.targets, human_bytes(p.free_bytes).c_str(),
              human_bytes(p.total_bytes).c_str(), p.containers, p.owner.c_str(),
              p.owner_group.empty() ? "-" : p.owner_group.c_str());
}
}  // namespace

void add_pool_commands(CLI::App& app, Context& ctx) {
  auto* pool = app.add_subcommand("pool", "manage pools");
  pool->require_subcommand(1);

  auto label = std::make_shared<std::string>();
  auto options = std::make_shared<client::PoolCreateOptions>();
  auto* create = pool->add_subcommand("create", "create a pool on every target of the server (administrators)");
  create->add_option("label", *label, "a name for the pool (letters, digits, '-', '_', '.')");
  create->add_option("--user", options->owner, "its owner (default: you)");
  create->add_option("--group", options->owner_group, "its owner group (default: your primary group)");
  create->add_option("--acl", options->acl, "its ACL entries (default: A::OWNER@:rwa A:G:GROUP@:r)");
  create->callback([&ctx, label, options] {
    auto p = ctx.control()->pool_create(*label, *options);
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
    if (!ctx.check(p.status(), "pool query")) return;
    print_pool(*p);
    std::printf("  epoch %llu  aggregated to %llu  engine buffers %s in use of %s\n", (unsigned long long)p->epoch,
                (unsigned long long)p->aggregated_epoch, human_bytes(p->buffer_bytes_in_use).c_str(),
                human_bytes(p->buffer_bytes).c_str());
  });

  auto force = std::make_shared<bool>(false);
  auto* destroy = pool->add_subcommand("destroy", "destroy a pool and give its space back");
  destroy->add_option("pool", *id, "pool label or uuid")->required();
  destroy->add_flag("--force", *force, "also destroy the containers it holds");
  destroy->callback([&ctx, id, force] { ctx.check(ctx.control()->pool_destroy(*id, *force), "pool destroy"); });

  add_acl_commands(*pool, ctx, std::make_shared<std::string>(), std::make_shared<std::string>(), false);
}

}  // namespace rfos::cli
