// The wall clock as rfos counts it: nanoseconds or milliseconds since the Unix epoch (file times, capability
// expiry, the targets' epochs, which follow it). Durations and deadlines use std::chrono::steady_clock instead.
//
// Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>

namespace rfos {

inline uint64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
inline uint64_t wall_ms() { return wall_ns() / 1000000; }

}  // namespace rfos
