// rfos pool acl ... and rfos cont acl ...: one set of subcommands for both.
#include <cstdio>

#include "cli/cli.h"

namespace rfos::cli {

namespace {
void print_acl(const client::Acl& a) {
  std::printf("# owner: %s\n# owner-group: %s\n", a.owner.c_str(), a.owner_group.empty() ? "-" : a.owner_group.c_str());
  for (const std::string& e : a.entries) std::printf("%s\n", e.c_str());
}
}  // namespace

void add_acl_commands(CLI::App& parent, Context& ctx, std::shared_ptr<std::string> pool,
                      std::shared_ptr<std::string> cont, bool container) {
  const std::string what = container ? "the container's" : "the pool's";
  const std::string name = container ? "cont acl" : "pool acl";
  auto* acl = parent.add_subcommand("acl", "access control: get, set, update, delete, set-owner");
  acl->require_subcommand(1);
  auto add_target = [pool, cont, container](CLI::App* cmd) {
    if (container) {
      cmd->add_option("--pool", *pool, "pool label or uuid")->required();
      cmd->add_option("cont", *cont, "container label or uuid")->required();
    } else {
      cmd->add_option("pool", *pool, "pool label or uuid")->required();
    }
  };
  auto entries = std::make_shared<std::vector<std::string>>();

  auto* get = acl->add_subcommand("get", "print " + what + " owner, owner group and entries (needs r)");
  add_target(get);
  get->callback([&ctx, pool, cont, name] {
    auto a = ctx.control()->acl_get(*pool, *cont);
    if (ctx.check(a.status(), name + " get")) print_acl(*a);
  });

  auto* set = acl->add_subcommand("set", "replace " + what + " entries (needs a)");
  add_target(set);
  set->add_option("-e,--entry", *entries, "an entry: A::alice@:rw, A:G:devs@:r, A::OWNER@:rwa, A::EVERYONE@:r")
      ->required();
  set->callback([&ctx, pool, cont, entries, name] {
    auto a = ctx.control()->acl_set(*pool, *cont, *entries);
    if (ctx.check(a.status(), name + " set")) print_acl(*a);
  });

  auto* update = acl->add_subcommand("update", "add entries, replacing those of the same principals (needs a)");
  add_target(update);
  update->add_option("-e,--entry", *entries, "an entry: A::alice@:rw, A:G:devs@:r, A::EVERYONE@:r")->required();
  update->callback([&ctx, pool, cont, entries, name] {
    auto a = ctx.control()->acl_update(*pool, *cont, *entries);
    if (ctx.check(a.status(), name + " update")) print_acl(*a);
  });

  auto principals = std::make_shared<std::vector<std::string>>();
  auto* del = acl->add_subcommand("delete", "remove the entries of principals (needs a)");
  add_target(del);
  del->add_option("-p,--principal", *principals, "u:alice@, g:devs@, OWNER@, GROUP@ or EVERYONE@")->required();
  del->callback([&ctx, pool, cont, principals, name] {
    auto a = ctx.control()->acl_remove(*pool, *cont, *principals);
    if (ctx.check(a.status(), name + " delete")) print_acl(*a);
  });

  auto owner = std::make_shared<std::string>(), group = std::make_shared<std::string>();
  auto* chown =
      acl->add_subcommand("set-owner", "give " + what.substr(4) + " to another user or group (administrators)");
  add_target(chown);
  chown->add_option("--user", *owner, "the new owner");
  chown->add_option("--group", *group, "the new owner group");
  chown->callback([&ctx, pool, cont, owner, group, name] {
    auto a = ctx.control()->set_owner(*pool, *cont, *owner, *group);
    if (ctx.check(a.status(), name + " set-owner")) print_acl(*a);
  });
}

}  // namespace rfos::cli
