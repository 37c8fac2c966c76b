// The `rfos` command line: one subcommand (family) per file, registered by main.cc.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "client/control_client.h"
#include "posix/namespace.h"

namespace rfos::cli {

// Options every client subcommand shares, and the exit code a subcommand leaves.
struct Context {
  std::string addr;      // --addr, else $RFOS_ADDR, else the local server's socket
  client::TlsFiles tls;  // --tls-ca/--tls-cert/--tls-key, else RFOS_TLS_CA/CERT/KEY
  uint32_t timeout_ms = 5000;
  int exit_code = 0;
  // --agent, else $RFOS_AGENT: control calls go through that agent, made for this user (rfos only; the
  // function that makes such a client is rfos's, agent_control).
  std::string agent;
  std::unique_ptr<client::ControlClient> (*through_agent)(const Context&) = nullptr;

  std::unique_ptr<client::ControlClient> control() const {
    if (!agent.empty() && through_agent) return through_agent(*this);
    return client::ControlClient::create(addr, timeout_ms, tls);
  }
  // Prints "rfos <what>: <status>" to stderr and sets a non-zero exit code. Returns false when !s.
  bool check(const Status& s, const std::string& what);
};

// Both executables: the logging level from the environment, the control address and TLS files from theirs.
Context make_context();
// --addr, --tls-*, --timeout-ms, --version.
void add_global_options(CLI::App& app, Context& ctx);

// A control client relayed by the agent at ctx.agent (cmd_agent.cc): Context::through_agent in rfos.
std::unique_ptr<client::ControlClient> agent_control(const Context& ctx);

void add_server_command(CLI::App& app, Context& ctx);
void add_pool_commands(CLI::App& app, Context& ctx);
void add_cont_commands(CLI::App& app, Context& ctx);
void add_fsck_command(CLI::App& app, Context& ctx);
void add_object_commands(CLI::App& app, Context& ctx);
void add_bench_command(CLI::App& app, Context& ctx);
void add_fs_commands(CLI::App& app, Context& ctx);  // mount, fs
void add_agent_command(CLI::App& app, Context& ctx);
void add_s3_command(CLI::App& app, Context& ctx);

std::string human_bytes(uint64_t bytes);

// A container's POSIX namespace with the control client its sessions are opened through (cli/namespace_access.cc).
struct Mounted {
  std::unique_ptr<client::ControlClient> control;
  std::unique_ptr<posix::Namespace> ns;
  std::string owner;           // the container's
  uint32_t open_sessions = 0;  // on the container, before this one opened its own
};
Result<Mounted> open_namespace(const Context& ctx, const std::string& pool, const std::string& cont,
                               const std::string& provider);
// The directory that will hold `path` and the last name in it.
Result<std::pair<posix::Attr, std::string>> parent_of(posix::Namespace& ns, const posix::Cred& cred,
                                                      std::string_view path);

// An option that takes a size: bytes, or with a unit as fio and dd take them (4k, 1m, 2g, 1MiB: powers of
// 1024), read by CLI11.
template <typename T>
CLI::Option* add_size_option(CLI::App* cmd, const std::string& name, T& value, const std::string& what) {
  return cmd->add_option(name, value, what)->transform(CLI::AsSizeValue(false));
}

// `acl get|set|update|delete` and `set-owner` under `parent` (pool or cont): `pool` is the pool the commands act
// on (or in), `cont` the container (empty: the pool itself).
void add_acl_commands(CLI::App& parent, Context& ctx, std::shared_ptr<std::string> pool,
                      std::shared_ptr<std::string> cont, bool container);

}  // namespace rfos::cli
