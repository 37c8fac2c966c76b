// `rfos s3`: an S3-compatible gateway (docs/s3.md). HTTP/1.1 on Boost.Beast (one event loop; keep-alive, many
// connections), AWS Signature V4, and buckets as containers of one pool whose objects are the named objects of
// client/named_objects.h, so `rfos get` reads what S3 put and S3 lists what `rfos put` stored.
//
// Storage calls never run on the event loop: they go to worker threads, each with its own container handles;
// bodies stream between the two through bounded channels, so a 1 GiB PUT or GET holds a few MiB of memory.
//
// Each access key is a local user of the server's access model: the gateway's own, or another the server trusts
// it to act for (its `trusted_agents`, as for `rfos agent`). Beast and Asio stay inside gateway.cc.
//
// Thread-safety: start and stop from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/control_client.h"
#include "common/status.h"

namespace rfos::s3 {

struct AccessKey {
  std::string access_key;
  std::string secret_key;
  std::string user;  // the local user the key acts as; "": the gateway's own
};

struct GatewayConfig {
  std::string listen = "127.0.0.1:9000";  // HOST:PORT (port 0: any free one)
  std::string control_address;            // "": client::default_control_address()
  client::TlsFiles tls;
  std::string pool = "default";  // where buckets are containers
  std::string provider;          // data plane; "": the pool's
  std::string region = "us-east-1";
  // Virtual-hosted-style requests: a Host of "<bucket>.<domain>" for one of these names the bucket, and the
  // path is all key (the DNS names must lead to the gateway: a wildcard record, or /etc/hosts). Path-style
  // requests work either way.
  std::vector<std::string> domains;
  std::vector<AccessKey> keys;
  // With no keys configured: where the gateway keeps the key pair it makes at its first start (0600 in a 0700
  // directory). "": $HOME/.config/rfos/s3-keys.yaml.
  std::string keys_file;
  // HTTPS on the listener: PEM files of its certificate (chain) and key. Empty: plain HTTP.
  std::string https_cert;
  std::string https_key;
  // Unsigned requests act as this local user (not root, not the gateway's own user: the server must trust the
  // gateway for it), so a bucket whose ACL grants EVERYONE@ (or that user) is open to them. "": refused.
  std::string anonymous_user;
  uint32_t workers = 8;  // threads that make storage calls
  uint32_t timeout_ms = 30000;
};

// Reads a YAML config (docs/s3.md) into *config; keys not given keep their values.
Status load_gateway_config(const std::string& path, GatewayConfig* config);
// The keys in `path` (a list of {access_key, secret_key, user}); with none there and `create`, makes one key pair
// for the gateway's own user and writes it (0600). *created says whether it did. kPermissionDenied when others
// than the owner may read the file.
Result<std::vector<AccessKey>> load_or_make_keys(const std::string& path, bool create, bool* created);

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> start(const GatewayConfig& config);
  ~Gateway();
  uint16_t port() const;
  void stop();

  class Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::s3
