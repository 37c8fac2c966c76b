#include "common/rate_limit.h"

#include <algorithm>

namespace rfos {

void TokenBucket::refill(uint64_t now_ns) {
  if (now_ns > at_) {
    level_ = std::min(burst_, level_ + rate_ * double(now_ns - at_) / 1e9);
    at_ = now_ns;
  }
}

uint64_t TokenBucket::wait_for(double n, uint64_t now_ns) {
  if (unlimited()) return 0;
  refill(now_ns);
  double need = std::min(n, burst_);
  if (level_ >= need) return 0;
  return static_cast<uint64_t>((need - level_) / rate_ * 1e9) + 1;
}

TenantQos::TenantQos(const QosLimits& l, uint64_t now_ns) {
  if (l.iops > 0) ios_ = TokenBucket(l.iops, l.burst_ios > 0 ? l.burst_ios : std::max(1.0, l.iops / 10), now_ns);
  if (l.bytes_per_s > 0)
    bytes_ = TokenBucket(l.bytes_per_s,
                         l.burst_bytes > 0 ? l.burst_bytes : std::max(double(1 << 20), l.bytes_per_s / 10), now_ns);
}

uint64_t TenantQos::admit(uint64_t bytes, uint64_t now_ns) {
  std::lock_guard lock(mu_);
  uint64_t wait = std::max(ios_.wait_for(1, now_ns), bytes_.wait_for(double(bytes), now_ns));
  if (wait > 0) return wait;
  if (!ios_.unlimited()) ios_.take(1);
  if (!bytes_.unlimited()) bytes_.take(double(bytes));
  return 0;
}

}  // namespace rfos
