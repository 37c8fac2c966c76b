// A target's data plane: one thread that owns a transport worker and serves data-plane requests against the
// target's engine. Every request's capability is checked (signature, expiry, container, rights) before the
// engine is touched. Update payloads land straight in the engine's buffers (update_begin); fetch replies are
// sent from them (fetch_begin).
//
// Engine calls that wait on media run on a few helper threads per target (the engine's API is synchronous):
// the target thread only serves the network and runs their continuations, so many requests are in flight
// per target and its updates share group commits.
//
// Thread-safety: start/stop from the owner; everything else runs on the target's thread.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace rfos::engine {
class Engine;
}

namespace rfos::server {

class Target {
 public:
  // Errors from the transport (kNotSupported: provider unavailable here).
  static Result<std::unique_ptr<Target>> start(uint32_t index, engine::Engine* engine, const std::string& provider,
                                               const std::string& secret, uint32_t media_threads);
  ~Target();
  // The worker address clients connect to (binary; published in the pool map).
  const std::string& address() const;
  void stop();

  class Impl;

 private:
  explicit Target(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::server
