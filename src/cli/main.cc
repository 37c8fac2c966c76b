// rfos: the user-facing command. The client commands run here; `rfos server` and `rfos fsck`, which need the
// engine (RocksDB, io_uring), run in rfos-server beside this binary, which this one becomes (exec) for them, so
// that every other command starts without loading the engine's libraries.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli.h"

namespace {

// The subcommand argv names (after the global options and their values), or "".
std::string_view subcommand_of(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.empty() || a[0] != '-') return a;
    bool takes_value = a == "--addr" || a == "--tls-ca" || a == "--tls-cert" || a == "--tls-key" ||
                       a == "--timeout-ms" || a == "--agent";
    if (takes_value) ++i;  // "--addr=X" carries its value itself
  }
  return {};
}

// Becomes rfos-server (from the same directory as this binary) with the same arguments; returns only on failure.
int run_node_command(char** argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "rfos: cannot find where rfos is installed: %s\n", std::strerror(errno));
    return 1;
  }
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + "rfos-server";
  execv(path.c_str(), argv);
  std::fprintf(stderr, "rfos: cannot run %s (install it beside rfos): %s\n", path.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view sub = subcommand_of(argc, argv);
  if (sub == "server" || sub == "fsck") return run_node_command(argv);

  rfos::cli::Context ctx = rfos::cli::make_context();
  CLI::App app{"rfos: an RDMA-first object store for AI data paths"};
  rfos::cli::add_global_options(app, ctx);
  app.add_option("--agent", ctx.agent,
                 "through the rfos agent on this socket (or $RFOS_AGENT): control commands, mount and bench "
                 "(docs/agent.md)");
  ctx.through_agent = &rfos::cli::agent_control;
  auto* version = app.add_subcommand("version", "print the version");
  version->callback([] { std::printf("rfos 0.1.0\n"); });
  app.add_subcommand("whoami", "who the server takes this client for")->callback([&ctx] {
    auto info = ctx.control()->server_info();
    if (ctx.check(info.status(), "whoami")) std::printf("%s\n", info->caller.c_str());
  });
  // Listed for --help; run by rfos-server (above).
  app.add_subcommand("server", "run a storage server (until SIGINT/SIGTERM); rfos server --help for its options")
      ->allow_extras();
  app.add_subcommand("fsck", "check a target's index and block allocator offline; rfos fsck --help")->allow_extras();
  rfos::cli::add_pool_commands(app, ctx);
  rfos::cli::add_cont_commands(app, ctx);
  rfos::cli::add_object_commands(app, ctx);
  rfos::cli::add_bench_command(app, ctx);
  rfos::cli::add_fs_commands(app, ctx);
  rfos::cli::add_agent_command(app, ctx);
  rfos::cli::add_s3_command(app, ctx);
  CLI11_PARSE(app, argc, argv);
  return ctx.exit_code;
}
