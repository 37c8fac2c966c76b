// What both executables of the CLI share (rfos, and rfos-server behind `rfos server` and `rfos fsck`).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "common/log.h"

namespace rfos::cli {

bool Context::check(const Status& s, const std::string& what) {
  if (s.is_ok()) return true;
  std::fprintf(stderr, "rfos %s: %s\n", what.c_str(), s.to_string().c_str());
  // Exit codes: 1 for errors the server reports, 3 when no server answers.
  exit_code = (s.code() == StatusCode::kTimeout || s.code() == StatusCode::kShutdown) ? 3 : 1;
  return false;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

void add_global_options(CLI::App& app, Context& ctx) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "rfos 0.1.0");
  app.add_option("--addr", ctx.addr,
                 "control plane: unix:/path or HOST:PORT (default: $RFOS_ADDR, else unix:/run/rfos/control.sock)");
  app.add_option("--tls-ca", ctx.tls.ca, "mutual TLS: the CA of the server's certificate, PEM (or $RFOS_TLS_CA)");
  app.add_option("--tls-cert", ctx.tls.cert, "mutual TLS: this client's certificate, PEM (or $RFOS_TLS_CERT)");
  app.add_option("--tls-key", ctx.tls.key, "mutual TLS: this client's key, PEM (or $RFOS_TLS_KEY)");
  app.add_option("--timeout-ms", ctx.timeout_ms, "deadline of each control call")->capture_default_str();
}

Context make_context() {
  log::init_from_env();
  Context ctx;
  ctx.addr = client::default_control_address();
  ctx.tls = client::TlsFiles::from_env();
  if (const char* a = std::getenv("RFOS_AGENT")) ctx.agent = a;
  return ctx;
}

}  // namespace rfos::cli
