// rfos server: the I/O engine of one storage node. It owns the targets (one engine each, under
// data_dir/target-N, each with its data-plane thread), the management store (pools and containers with their
// owners and ACLs, sessions, the capability secret, under data_dir/mgmt) and the gRPC control service, which
// knows every caller (server/principal.h) and checks it against the ACLs (server/acl.h).
//
// Thread-safety: start() and shutdown() from one thread; the control service is internally synchronized.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/config.h"

namespace rfos::server {

class Server {
 public:
  // Opens (creating on first start) the targets and the management store, reconciles them, and starts the
  // control service. Errors: kInvalidArgument (config), kIoError (media, bind), kCorruption.
  static Result<std::unique_ptr<Server>> start(const ServerConfig& config);
  ~Server();

  // Where local clients reach the control service: "unix:PATH" of the control socket, else the TCP listener
  // (with the bound port when the config asked for port 0).
  std::string control_address() const;
  // The TCP listener, HOST:PORT ("" when there is none).
  std::string tcp_address() const;
  // The targets' durability mode in words (Engine::durability).
  std::string durability() const;
  // Blocks until shutdown() is called from another thread (or a signal handler's thread).
  void wait();
  void shutdown();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `rfos server`: runs until SIGINT/SIGTERM. Prints where it listens, then calls `on_started` with the control
// address (for first-start chores such as default pools). Returns the process exit code.
int run_server(const ServerConfig& config, const std::function<void(const std::string&)>& on_started = {});

}  // namespace rfos::server
