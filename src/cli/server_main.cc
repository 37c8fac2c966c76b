// rfos-server: the commands that need the engine (`rfos server`, `rfos fsck`), which rfos runs here (it execs
// this binary with its own arguments), so that the client commands start without the engine's libraries.
#include "cli/cli.h"

int main(int argc, char** argv) {
  rfos::cli::Context ctx = rfos::cli::make_context();
  CLI::App app{"rfos: an RDMA-first object store for AI data paths (the storage node's commands)"};
  app.name("rfos");
  rfos::cli::add_global_options(app, ctx);
  rfos::cli::add_server_command(app, ctx);
  rfos::cli::add_fsck_command(app, ctx);
  CLI11_PARSE(app, argc, argv);
  return ctx.exit_code;
}
