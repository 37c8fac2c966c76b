// rfos cont create|list|query|destroy|acl, rfos cont snap create|list|destroy
#include <cstdio>

#include "cli/cli.h"

namespace rfos::cli {

namespace {
void print_cont(const client::ContInfo& c) {
  std::printf("%s  %-16s oclass %s  chunk %s  csum %s/%u B  snapshots %zu  owner %s:%s\n", c.uuid.c_str(),
              c.label.empty() ? "-" : c.label.c_str(), c.props.oclass.c_str(), human_bytes(c.props.chunk_bytes).c_str(),
              c.props.csum_off ? "off" : "crc32c", c.props.csum_chunk_bytes, c.snapshots.size(), c.owner.c_str(),
              c.owner_group.empty() ? "-" : c.owner_group.c_str());
}
}  // namespace

void add_cont_commands(CLI::App& app, Context& ctx) {
  auto* cont = app.add_subcommand("cont", "manage containers");
  cont->require_subcommand(1);
  auto pool = std::make_shared<std::string>();
  auto id = std::make_shared<std::string>();
  auto props = std::make_shared<client::ContProps>();

  auto* create = cont->add_subcommand("create", "create a container in a pool");
  create->add_option("--pool", *pool, "pool label or uuid")->required();
  create->add_option("label", *id, "a name for the container");
  create->add_option("--oclass", props->oclass, "default object class: S1 or SX (default SX)");
  add_size_option(create, "--chunk-size", props->chunk_bytes, "file/array chunk size in bytes (default 1 MiB)");
  add_size_option(create, "--csum-chunk", props->csum_chunk_bytes, "checksum chunk in bytes (default 4096)");
  create->add_flag("--no-csum", props->csum_off, "no end-to-end checksums (data at rest is still checksummed)");
  auto acl = std::make_shared<std::vector<std::string>>();
  create->add_option("--acl", *acl, "its ACL entries (default: A::OWNER@:rwa A:G:GROUP@:r); you own it");
  create->callback([&ctx, pool, id, props, acl] {
    auto c = ctx.control()->cont_create(*pool, *id, *props, *acl);
    if (ctx.check(c.status(), "cont create")) print_cont(*c);
  });

  auto* list = cont->add_subcommand("list", "list the containers of a pool");
  list->add_option("--pool", *pool, "pool label or uuid")->required();
  list->callback([&ctx, pool] {
    auto cs = ctx.control()->cont_list(*pool);
    if (!ctx.check(cs.status(), "cont list")) return;
    for (const auto& c : *cs) print_cont(c);
  });

  auto* query = cont->add_subcommand("query", "show one container");
  query->add_option("--pool", *pool, "pool label or uuid")->required();
  query->add_option("cont", *id, "container label or uuid")->required();
  query->callback([&ctx, pool, id] {
    auto c = ctx.control()->cont_query(*pool, *id);
    if (ctx.check(c.status(), "cont query")) print_cont(*c);
  });

  auto* destroy = cont->add_subcommand("destroy", "destroy a container and give its space back");
  destroy->add_option("--pool", *pool, "pool label or uuid")->required();
  destroy->add_option("cont", *id, "container label or uuid")->required();
  destroy->callback([&ctx, pool, id] { ctx.check(ctx.control()->cont_destroy(*pool, *id), "cont destroy"); });

  add_acl_commands(*cont, ctx, pool, id, true);

  // Snapshots: named by their epoch, which `rfos get --snapshot` and `rfos ls --snapshot` read at.
  auto* snap = cont->add_subcommand("snap", "container snapshots: create, list, destroy");
  snap->require_subcommand(1);
  auto epoch = std::make_shared<uint64_t>(0);
  auto* snap_create = snap->add_subcommand("create", "pin the container's current state; prints its epoch");
  snap_create->add_option("--pool", *pool, "pool label or uuid")->required();
  snap_create->add_option("cont", *id, "container label or uuid")->required();
  snap_create->callback([&ctx, pool, id] {
    auto e = ctx.control()->snapshot_create(*pool, *id);
    if (ctx.check(e.status(), "cont snap create")) std::printf("%llu\n", static_cast<unsigned long long>(*e));
  });
  auto* snap_list = snap->add_subcommand("list", "the container's snapshots, oldest first");
  snap_list->add_option("--pool", *pool, "pool label or uuid")->required();
  snap_list->add_option("cont", *id, "container label or uuid")->required();
  snap_list->callback([&ctx, pool, id] {
    auto es = ctx.control()->snapshot_list(*pool, *id);
    if (!ctx.check(es.status(), "cont snap list")) return;
    for (uint64_t e : *es) std::printf("%llu\n", static_cast<unsigned long long>(e));
  });
  auto* snap_destroy = snap->add_subcommand("destroy", "drop a snapshot (aggregation reclaims what only it kept)");
  snap_destroy->add_option("--pool", *pool, "pool label or uuid")->required();
  snap_destroy->add_option("cont", *id, "container label or uuid")->required();
  snap_destroy->add_option("--epoch", *epoch, "the snapshot's epoch (from snap create or snap list)")->required();
  snap_destroy->callback(
      [&ctx, pool, id, epoch] { ctx.check(ctx.control()->snapshot_destroy(*pool, *id, *epoch), "cont snap destroy"); });
}

}  // namespace rfos::cli
