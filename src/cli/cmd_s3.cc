// rfos s3: the S3 gateway (s3/gateway.h), until SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "cli/cli.h"
#include "s3/gateway.h"

namespace rfos::cli {

void add_s3_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("s3", "run an S3-compatible gateway over a pool's containers (until SIGINT/SIGTERM)");
  auto config = std::make_shared<s3::GatewayConfig>();
  auto flags = std::make_shared<s3::GatewayConfig>();
  auto file = std::make_shared<std::string>();
  cmd->add_option("--config", *file, "a YAML file (docs/s3.md); flags override it");
  cmd->add_option("--listen", flags->listen, "HOST:PORT to serve HTTP on (default 127.0.0.1:9000)");
  cmd->add_option("--pool", flags->pool, "the pool whose containers are the buckets (default 'default')");
  cmd->add_option("--provider", flags->provider, "data-plane provider (default: the pool's)");
  cmd->add_option("--region", flags->region, "the region clients sign for (default us-east-1)");
  cmd->add_option("--domain", flags->domains,
                  "serve virtual-hosted-style requests: a Host of BUCKET.DOMAIN names the bucket (repeatable)");
  cmd->add_option("--keys-file", flags->keys_file,
                  "where the key pair made at the first start lives (default ~/.config/rfos/s3-keys.yaml)");
  cmd->add_option("--workers", flags->workers, "threads making storage calls (default 8)");
  cmd->add_option("--https-cert", flags->https_cert, "serve HTTPS with this PEM certificate (chain)");
  cmd->add_option("--https-key", flags->https_key, "... and this PEM key");
  cmd->add_option("--anonymous-user", flags->anonymous_user,
                  "unsigned requests act as this local user (the server must trust the gateway for it; buckets "
                  "open to EVERYONE@ by their ACL are then public); default: unsigned requests are refused");
  cmd->callback([&ctx, cmd, config, flags, file] {
    if (!file->empty() && !ctx.check(s3::load_gateway_config(*file, config.get()), "s3")) return;
    if (cmd->count("--listen")) config->listen = flags->listen;
    if (cmd->count("--pool")) config->pool = flags->pool;
    if (cmd->count("--provider")) config->provider = flags->provider;
    if (cmd->count("--region")) config->region = flags->region;
    if (cmd->count("--domain")) config->domains = flags->domains;
    if (cmd->count("--keys-file")) config->keys_file = flags->keys_file;
    if (cmd->count("--workers")) config->workers = flags->workers;
    if (cmd->count("--https-cert")) config->https_cert = flags->https_cert;
    if (cmd->count("--https-key")) config->https_key = flags->https_key;
    if (cmd->count("--anonymous-user")) config->anonymous_user = flags->anonymous_user;
    if (config->control_address.empty()) config->control_address = ctx.addr;
    if (config->tls.empty()) config->tls = ctx.tls;
    bool created = false;
    if (config->keys.empty()) {
      if (config->keys_file.empty()) {
        const char* home = std::getenv("HOME");
        config->keys_file = std::string(home && *home ? home : "/root") + "/.config/rfos/s3-keys.yaml";
      }
      auto keys = s3::load_or_make_keys(config->keys_file, true, &created);
      if (!ctx.check(keys.status(), "s3")) return;
      config->keys = std::move(keys).value();
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    auto g = s3::Gateway::start(*config);
    if (!ctx.check(g.status(), "s3")) return;
    const std::string host = config->listen.substr(0, config->listen.rfind(':'));
    const char* scheme = config->https_cert.empty() ? "http" : "https";
    std::printf("rfos s3: listening on %s://%s:%u (pool %s, server %s)\n", scheme, host.c_str(), (*g)->port(),
                config->pool.c_str(), config->control_address.c_str());
    if (created) {
      const s3::AccessKey& k = config->keys.front();
      std::printf(
          "rfos s3: made a key pair (kept in %s, readable by this user only):\n"
          "  access key: %s\n  secret key: %s\n"
          "  try: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY='%s' aws --endpoint-url %s://%s:%u "
          "--region %s s3 ls\n",
          config->keys_file.c_str(), k.access_key.c_str(), k.secret_key.c_str(), k.access_key.c_str(),
          k.secret_key.c_str(), scheme, host.c_str(), (*g)->port(), config->region.c_str());
    } else if (!config->keys_file.empty()) {
      std::printf("rfos s3: %zu key(s) from %s\n", config->keys.size(), config->keys_file.c_str());
    }
    std::fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    std::printf("rfos s3: signal %d, shutting down\n", sig);
    (*g)->stop();
  });
}

}  // namespace rfos::cli
