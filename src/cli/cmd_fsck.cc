// rfos fsck: check a target's index and block allocator offline.
#include <cstdio>

#include "cli/cli.h"
#include "engine/engine.h"

namespace rfos::cli {

void add_fsck_command(CLI::App& app, Context& ctx) {
  auto dir = std::make_shared<std::string>();
  auto* fsck = app.add_subcommand("fsck", "check a target's index and block allocator (the target must not be in use)");
  fsck->add_option("--data-dir", *dir, "the target directory (holds index/ and blocks)")->required();
  fsck->callback([&ctx, dir] {
    engine::EngineOptions opts;
    opts.dir = *dir;
    opts.create = false;
    auto engine = engine::Engine::open(opts);
    if (!ctx.check(engine.status(), "fsck")) return;
    Status s = (*engine)->check();
    auto space = (*engine)->space();
    std::printf("%s: %s (%s free of %s)\n", dir->c_str(), s.to_string().c_str(), human_bytes(space.free_bytes).c_str(),
                human_bytes(space.total_bytes).c_str());
    if (!s.is_ok()) ctx.exit_code = 1;
  });
}

}  // namespace rfos::cli
