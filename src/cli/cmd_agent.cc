// rfos agent: the offloaded client (agent/agent.h), until SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>

#include "agent/agent.h"
#include "agent/agent_client.h"
#include "cli/cli.h"

namespace rfos::cli {

std::unique_ptr<client::ControlClient> agent_control(const Context& ctx) {
  return client::ControlClient::relayed(agent::AgentClient::control_relay(ctx.agent, ctx.timeout_ms), ctx.timeout_ms);
}

void add_agent_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("agent", "run the offloaded client that serves local apps (until SIGINT/SIGTERM)");
  auto config = std::make_shared<agent::AgentConfig>();
  auto file = std::make_shared<std::string>();
  auto flags = std::make_shared<agent::AgentConfig>();
  cmd->add_option("--config", *file, "a YAML file (docs/agent.md); flags override it");
  cmd->add_option("--listen", flags->listen, "the Unix socket apps connect to (default /run/rfos/agent.sock)");
  cmd->add_option("--provider", flags->provider, "data-plane provider (default: the pool's)");
  cmd->add_option("--cpus", flags->cpus, "a CPU list the agent pins itself to (1, 2-3,6; default: none)");
  add_size_option(cmd, "--max-buffer-bytes", flags->max_buffer_bytes, "an app's shared buffer, at most (default 1g)");
  cmd->callback([&ctx, cmd, config, file, flags] {
    if (!file->empty() && !ctx.check(agent::load_agent_config(*file, config.get()), "agent")) return;
    if (cmd->count("--listen")) config->listen = flags->listen;
    if (cmd->count("--provider")) config->provider = flags->provider;
    if (cmd->count("--cpus")) config->cpus = flags->cpus;
    if (cmd->count("--max-buffer-bytes")) config->max_buffer_bytes = flags->max_buffer_bytes;
    if (config->control_address.empty()) config->control_address = ctx.addr;
    if (config->tls.ca.empty()) config->tls = ctx.tls;
    // Signals go to a thread of our own (sigwait): blocked before any other thread starts.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    auto a = agent::Agent::start(*config);
    if (!ctx.check(a.status(), "agent")) return;
    std::printf("rfos agent: serving apps on %s (server %s)\n", (*a)->socket_path().c_str(),
                config->control_address.c_str());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    std::printf("rfos agent: signal %d, shutting down\n", sig);
    (*a)->stop();
  });
}

}  // namespace rfos::cli
