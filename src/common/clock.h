// The clocks as rfos counts them: the wall clock in nanoseconds or milliseconds since the Unix epoch (file times,
// capability expiry, the targets' epochs, which follow it), and a steady clock for durations and deadlines
// (steady_now). Both go through here, so that a test can move time forward (a capability's expiry, a request's
// deadline, a renewal) without sleeping: clock::advance moves both, for the whole process.
//
// Thread-safety: safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rfos {

namespace clock {
// What tests added to both clocks (nanoseconds); 0 outside tests.
inline std::atomic<int64_t> offset_ns{0};
// Moves both clocks forward by `d` (tests only).
inline void advance(std::chrono::nanoseconds d) { offset_ns.fetch_add(d.count(), std::memory_order_relaxed); }
inline void reset() { offset_ns.store(0, std::memory_order_relaxed); }
}  // namespace clock

inline uint64_t wall_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count() +
      clock::offset_ns.load(std::memory_order_relaxed));
}
inline uint64_t wall_ms() { return wall_ns() / 1000000; }

inline std::chrono::steady_clock::time_point steady_now() {
  return std::chrono::steady_clock::now() + std::chrono::nanoseconds(clock::offset_ns.load(std::memory_order_relaxed));
}

}  // namespace rfos
