// rfos: the one user-facing binary. Subcommands arrive with their layers; today: version and fsck.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "engine/engine.h"

int main(int argc, char** argv) {
  CLI::App app{"rfos: an RDMA-first object store for AI data paths"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "rfos 0.1.0");

  auto* version = app.add_subcommand("version", "print the version");
  version->callback([] { std::printf("rfos 0.1.0\n"); });

  std::string dir;
  auto* fsck = app.add_subcommand("fsck", "check a target's index and block allocator (the target must not be in use)");
  fsck->add_option("--data-dir", dir, "the target directory (holds index/ and blocks)")->required();
  int rc = 0;
  fsck->callback([&] {
    rfos::engine::EngineOptions opts;
    opts.dir = dir;
    opts.create = false;
    auto engine = rfos::engine::Engine::open(opts);
    if (!engine.is_ok()) {
      std::fprintf(stderr, "rfos fsck: %s\n", engine.status().to_string().c_str());
      rc = 1;
      return;
    }
    rfos::Status s = (*engine)->check();
    auto space = (*engine)->space();
    std::printf("%s: %s (%llu of %llu MiB free)\n", dir.c_str(), s.to_string().c_str(),
                static_cast<unsigned long long>(space.free_bytes >> 20),
                static_cast<unsigned long long>(space.total_bytes >> 20));
    rc = s.is_ok() ? 0 : 1;
  });
  CLI11_PARSE(app, argc, argv);
  return rc;
}
