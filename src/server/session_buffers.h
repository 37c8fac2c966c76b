// Engine buffers each session holds on one target (ServerConfig::session_buffer_bytes), so one session cannot
// take every buffer. A request's charge lives as long as its buffers: it rides in the same callbacks, so a
// transfer the fabric never completes (a peer that stops moving bytes; a one-sided operation libfabric never
// finishes, docs/wire-format.md) keeps its charge, and its session, not every session, runs out of buffers.
//
// Thread-safety: charge() from the target thread; a Charge may be destroyed on any thread (the last callback
// holding it may run on the engine's commit thread), so the counters are atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/ids.h"
#include "common/status.h"

namespace rfos::server {

class SessionBuffers {
 public:
  struct Charge {
    std::shared_ptr<std::atomic<uint64_t>> held;
    uint64_t bytes = 0;
    ~Charge() {
      if (held) held->fetch_sub(bytes, std::memory_order_relaxed);
    }
    // A fetch that asked for a single value's whole length is charged what it turned out to hold.
    void grow_to(uint64_t n) {
      if (!held || n <= bytes) return;
      held->fetch_add(n - bytes, std::memory_order_relaxed);
      bytes = n;
    }
  };

  // 0: no limit.
  void set_share(uint64_t bytes) { share_ = bytes; }

  // Charges `bytes` to `session`, or kBusy when that would take it past its share. A session holding nothing
  // here always gets its request through (one request may be larger than the share; the engine's own limits
  // apply to it).
  Result<std::shared_ptr<Charge>> charge(const Uuid& session, uint64_t bytes) {
    auto charge = std::make_shared<Charge>();
    if (share_ == 0) return charge;
    auto& held = held_[session];
    if (!held) held = std::make_shared<std::atomic<uint64_t>>(0);
    uint64_t now = held->load(std::memory_order_relaxed);
    if (now > 0 && (bytes > share_ || now > share_ - bytes))  // no overflow
      return error(StatusCode::kBusy, "the session holds " + std::to_string(now) + " bytes of this target's buffers (" +
                                          std::to_string(share_) + " at most)");
    held->fetch_add(bytes, std::memory_order_relaxed);
    charge->held = held;
    charge->bytes = bytes;
    if (held_.size() > 4096) {  // bounded: sessions come and go; drop the counters nothing holds
      for (auto it = held_.begin(); it != held_.end();)
        it = it->second.use_count() == 1 ? held_.erase(it) : std::next(it);
    }
    return charge;
  }

 private:
  uint64_t share_ = 0;
  std::map<Uuid, std::shared_ptr<std::atomic<uint64_t>>> held_;
};

}  // namespace rfos::server
