// The control plane's Unix socket, where local callers are known by the kernel. gRPC's own Unix listener tells a
// service nothing about its caller, so this one accepts the connections itself, reads each one's peer credentials
// (SO_PEERCRED, SO_PEERGROUPS) and hands the connected socket to the gRPC server, which names its calls' peer
// "fd:N". who() maps that name back to the credentials taken at accept.
//
// Why an fd number is a safe key: gRPC closes a connection's socket only when its transport is destroyed, and a
// call in progress holds its transport; so while a handler runs, fd N is still that caller's connection and the
// number cannot have been reused by a later accept.
//
// The socket is 0666 (any local user may call; the server decides what each may do) in a directory only the
// server's user (or root) may write, so nobody else can put a socket of their own in its place.
//
// Thread-safety: who() from any thread; start() and the destructor from the owner.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/principal.h"

namespace grpc {
class Server;
}

namespace rfos::server {

class LocalListener {
 public:
  // Binds `path`, creating its directory (0755) when missing. A stale socket (nobody listening) is replaced; a
  // live one is kInvalidArgument ("another server listens there"). kPermissionDenied when the directory is
  // writable by someone other than this user or root.
  static Result<std::unique_ptr<LocalListener>> bind(const std::string& path);
  ~LocalListener();  // stops accepting and removes the socket

  // Starts accepting connections for `server` (built and started).
  void start(grpc::Server* server);
  // Stops accepting (before the gRPC server shuts down); who() still answers for the connections it has.
  void stop_accepting();
  // The caller behind a gRPC peer string ("fd:N"); nullopt for any other peer.
  std::optional<Principal> who(std::string_view peer) const;
  const std::string& path() const;

  class Impl;

 private:
  explicit LocalListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::server
