// Rate limits: I/Os per second and bytes per second, each a token bucket with a burst. The agent holds each
// tenant to its own (agent/qos.h); a server's targets hold every session whose capability carries a tenant's
// limits to them together (server/qos_ledger.h).
//
// Thread-safety: TokenBucket is not thread-safe; TenantQos::admit from any thread.
#pragma once

#include <cstdint>
#include <mutex>

namespace rfos {

struct QosLimits {
  double iops = 0;         // I/Os per second; 0: no limit
  double bytes_per_s = 0;  // 0: no limit
  double burst_ios = 0;    // what may go at once above the rate (0: a tenth of a second's worth, at least 1)
  double burst_bytes = 0;  // (0: a tenth of a second's worth, at least 1 MiB)
  bool limited() const { return iops > 0 || bytes_per_s > 0; }
};

// Tokens that come at `rate` a second up to `burst`. The clock is the caller's (nanoseconds), so tests drive it.
class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(double rate, double burst, uint64_t now_ns) : rate_(rate), burst_(burst), level_(burst), at_(now_ns) {}
  // Nanoseconds until `n` tokens are there (0: they are). A request larger than the burst waits for a full bucket
  // and may then take it, leaving the level below zero: it is paid for by the time that follows.
  uint64_t wait_for(double n, uint64_t now_ns);
  void take(double n) { level_ -= n; }
  bool unlimited() const { return rate_ <= 0; }

 private:
  void refill(uint64_t now_ns);
  double rate_ = 0, burst_ = 0, level_ = 0;
  uint64_t at_ = 0;
};

class TenantQos {
 public:
  TenantQos(const QosLimits& limits, uint64_t now_ns);
  // Takes one I/O of `bytes` when both buckets allow it now (returns 0); otherwise takes nothing and returns
  // the nanoseconds to wait before asking again.
  uint64_t admit(uint64_t bytes, uint64_t now_ns);

 private:
  std::mutex mu_;
  TokenBucket ios_, bytes_;
};

}  // namespace rfos
