// rfos server: start the storage server.
#include <cstdio>

#include "cli/cli.h"
#include "server/server.h"

namespace rfos::cli {

void add_server_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("server", "run a storage server (until SIGINT/SIGTERM)");
  auto config = std::make_shared<server::ServerConfig>();
  auto file = std::make_shared<std::string>();
  auto flags = std::make_shared<server::ServerConfig>();
  cmd->add_option("--config", *file, "YAML config file (flags override it)");
  cmd->add_option("--data-dir", flags->data_dir,
                  "where targets and metadata live, the server user's alone (default /var/lib/rfos)");
  cmd->add_option("--control-socket", flags->control_socket,
                  "the control plane for local callers, known by their uid (default /run/rfos/control.sock; '' "
                  "for none)");
  cmd->add_option("--control-addr", flags->control_addr,
                  "a TCP control listener HOST:PORT for remote callers: needs --tls-cert/--tls-key/--tls-ca "
                  "(mutual TLS) or --insecure (default: none)");
  cmd->add_flag("--insecure", flags->insecure, "allow --control-addr without TLS; its callers are anonymous");
  cmd->add_option("--tls-cert", flags->tls_cert, "the server's certificate, PEM");
  cmd->add_option("--tls-key", flags->tls_key, "the server's key, PEM");
  cmd->add_option("--tls-ca", flags->tls_ca, "the CA whose client certificates are accepted, PEM");
  cmd->add_option("--admin", flags->admins, "a name with every right (beside root and the server's user); repeatable");
  auto trust = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--trust-agent", *trust,
                  "NAME[=USER,group:G,...]: an agent (rfos agent) that may act for local users; without users, for "
                  "any but an administrator; repeatable");
  cmd->add_option("--data-sync", flags->data_sync,
                  "always (default): block data synced before each commit; auto: left to the index's sync where "
                  "the engine checked that suffices");
  cmd->add_option("--capability-ttl-s", flags->capability_ttl_s,
                  "capability lifetime (default 3600; renewed by clients)");
  cmd->add_option("--provider", flags->provider,
                  "data-plane provider: ucx+tcp, ucx+shm, ofi+tcp, ... (default ucx+tcp)");
  cmd->add_option("--targets", flags->targets, "number of targets (default: one per core; fixed at first start)");
  add_size_option(cmd, "--target-bytes", flags->target_bytes, "block file size of each target (default 1 GiB)");
  cmd->add_option("--media-threads", flags->media_threads,
                  "helper threads per target for engine calls that block: punches, aggregation (default 2)");
  cmd->add_option("--payload-timeout-ms", flags->payload_timeout_ms,
                  "how long a target waits for an update's payload from a silent sender before it gives the update "
                  "up (libfabric providers; default 30000)");
  add_size_option(cmd, "--session-buffer-bytes", flags->session_buffer_bytes,
                  "engine buffers one session may hold on a target at once; more gets Busy, which clients retry "
                  "(0: no limit; default 16777216)");
  cmd->add_option("--log-level", flags->log_level,
                  "diagnostics: trace, debug, info, warn, error, off (default: $RFOS_LOG_LEVEL, else info)");
  cmd->add_flag("--bypass-media", flags->bypass_media,
                "benchmarks only: answer reads with zeros and drop writes, to measure the data plane alone");
  auto defaults = std::make_shared<bool>(false);
  cmd->add_flag("--create-defaults", *defaults,
                "create a pool and a container labelled 'default' unless they exist (what `make run` does)");
  cmd->callback([&ctx, cmd, config, file, flags, defaults, trust] {
    if (!file->empty() && !ctx.check(server::load_config_file(*file, config.get()), "server")) return;
    // Flags given on the command line override the file.
    if (cmd->count("--data-dir")) config->data_dir = flags->data_dir;
    if (cmd->count("--control-addr")) config->control_addr = flags->control_addr;
    if (cmd->count("--control-socket")) config->control_socket = flags->control_socket;
    if (cmd->count("--insecure")) config->insecure = true;
    if (cmd->count("--tls-cert")) config->tls_cert = flags->tls_cert;
    if (cmd->count("--tls-key")) config->tls_key = flags->tls_key;
    if (cmd->count("--tls-ca")) config->tls_ca = flags->tls_ca;
    if (cmd->count("--admin")) config->admins = flags->admins;
    for (const std::string& t : *trust) {
      size_t eq = t.find('=');
      std::vector<std::string>& users = config->trusted_agents[t.substr(0, eq)];
      if (eq == std::string::npos) users.push_back("*");
      for (size_t start = eq + 1; eq != std::string::npos && start <= t.size();) {
        size_t comma = t.find(',', start);
        users.push_back(t.substr(start, comma == std::string::npos ? comma : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    if (cmd->count("--data-sync")) config->data_sync = flags->data_sync;
    if (cmd->count("--capability-ttl-s")) config->capability_ttl_s = flags->capability_ttl_s;
    if (cmd->count("--provider")) config->provider = flags->provider;
    if (cmd->count("--targets")) config->targets = flags->targets;
    if (cmd->count("--target-bytes")) config->target_bytes = flags->target_bytes;
    if (cmd->count("--media-threads")) config->media_threads = flags->media_threads;
    if (cmd->count("--payload-timeout-ms")) config->payload_timeout_ms = flags->payload_timeout_ms;
    if (cmd->count("--session-buffer-bytes")) config->session_buffer_bytes = flags->session_buffer_bytes;
    if (cmd->count("--bypass-media")) config->bypass_media = true;
    if (cmd->count("--log-level")) config->log_level = flags->log_level;
    if (config->bypass_media)
      std::fprintf(stderr, "rfos server: --bypass-media: nothing written is stored (data-plane benchmarks only)\n");
    auto on_started = [&ctx, defaults](const std::string& addr) {
      if (!*defaults) return;
      auto cc = client::ControlClient::create(addr, ctx.timeout_ms);  // as the server's own user: an administrator
      if (!cc->pool_query("default").is_ok()) ctx.check(cc->pool_create("default").status(), "server: default pool");
      if (!cc->cont_query("default", "default").is_ok())
        ctx.check(cc->cont_create("default", "default", {}).status(), "server: default container");
      std::printf(
          "rfos server: pool 'default' and container 'default' are ready. From another terminal:\n"
          "  build/bin/rfos put KEY FILE      # store a file (or - for stdin) as object KEY\n"
          "  build/bin/rfos get KEY OUT       # read it back (- for stdout)\n"
          "  build/bin/rfos mount DIR         # the container as files and directories (FUSE, as root)\n"
          "  build/bin/rfos pool list         # more: build/bin/rfos --help\n"
          "(control plane %s; set RFOS_ADDR or --addr when it is not unix:/run/rfos/control.sock)\n",
          addr.c_str());
      std::fflush(stdout);
    };
    ctx.exit_code = server::run_server(*config, on_started);
  });
}

}  // namespace rfos::cli
