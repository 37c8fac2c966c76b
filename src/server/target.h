// A target's data plane: one thread that owns a transport worker and serves data-plane requests against the
// target's engine. Every request's capability is checked (signature, expiry, container, rights) before the
// engine is touched. Update payloads land straight in the engine's buffers (update_begin); fetch replies are
// sent from them.
//
// Updates and fetches run to completion on the target thread: index work and checksums inline, block reads
// and writes on the target's own io_uring (Engine::fetch_submit / update_submit), polled by the same loop
// that polls the transport; an update's index commit joins the engine's group commit (its commit thread) and
// comes back to this loop. Many requests are in flight per target. Punches, aggregation and syncs still block on
// the media, on a few helper threads per target whose continuations come back to the target thread. Namespace
// operations (posix/dir_ops.h) run one at a time, each one atomic batch: on the target thread while the engine
// commits nothing else, else on a helper of their own (target_namespace.cc).
//
// Thread-safety: start/stop from the owner; everything else runs on the target's thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/ids.h"
#include "common/rate_limit.h"
#include "common/status.h"
#include "server/config.h"
#include "wire/capability.h"

namespace rfos::engine {
class Engine;
}

namespace rfos::server {

// Sessions ended before their capabilities expire: the control plane adds them at disconnect, every target
// refuses their requests. Entries leave once the capability would have expired anyway.
//
// Thread-safety: all methods are safe from any thread.
class Revocations {
 public:
  void revoke(const Uuid& session, uint64_t expires_unix_ms);
  bool revoked(const Uuid& session, uint64_t now_unix_ms);

 private:
  std::mutex mu_;
  std::map<Uuid, uint64_t> ended_;  // session -> expiry of its capability
};

// The limits of the tenants whose capabilities carry them (wire::CapabilityQos), shared by every target of the
// server: all the sessions of one tenant, whichever agents opened them, draw on one pair of buckets. A request
// the buckets do not admit is answered Busy with the time to wait (the client sends it again then), so nothing
// waits inside a target.
//
// Thread-safety: all methods are safe from any thread.
class QosLedger {
 public:
  // 0: admitted (charged one I/O and `bytes`); otherwise the nanoseconds until it may be, nothing charged.
  uint64_t admit(const wire::CapabilityQos& qos, uint64_t bytes, uint64_t now_ns);

 private:
  struct Tenant {
    wire::CapabilityQos limits;
    std::unique_ptr<TenantQos> buckets;
  };
  std::mutex mu_;
  std::map<Uuid, Tenant> tenants_;
};

// Which use claimed each grant (wire kGrant), shared by every target of the server: a grant is lent to all of
// them, and moves bytes for the one request that used it first, whichever targets that request's pieces reach.
//
// Thread-safety: all methods are safe from any thread.
class GrantClaims {
 public:
  // Whether `use` (by `session`) may move bytes with grant `id`: true for the first use, which claims it until
  // `until_ms` (the grant's end), and for that use again; false for any other.
  bool claim(std::string_view id, std::string_view use, const Uuid& session, uint64_t until_ms, uint64_t now_ms);

 private:
  struct Claim {
    std::string use;
    Uuid session;
    uint64_t until_ms = 0;
  };
  std::mutex mu_;
  std::map<std::string, Claim, std::less<>> claims_;
};

class Target {
 public:
  // The data plane of target `index` of `count` over `engine`, as `config` says (provider, media_threads,
  // bypass_media, payload_timeout_ms). Errors from the transport (kNotSupported: provider unavailable here).
  static Result<std::unique_ptr<Target>> start(uint32_t index, uint32_t count, engine::Engine* engine,
                                               const ServerConfig& config, const std::string& secret,
                                               std::shared_ptr<Revocations> revocations, std::shared_ptr<QosLedger> qos,
                                               std::shared_ptr<GrantClaims> claims);
  ~Target();
  // The worker address clients connect to (binary; published in the pool map).
  const std::string& address() const;
  // The target's clock: the newest epoch it has stamped, or was advanced to (safe from any thread).
  uint64_t last_epoch() const;
  // Versions up to this epoch have been aggregated (the last pass that completed; 0 before the first).
  uint64_t aggregated_epoch() const;
  // Moves the clock to at least `epoch` (a snapshot's), so later writes are stamped above it.
  void advance_clock(uint64_t epoch);
  void stop();

  class Impl;

 private:
  explicit Target(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::server
