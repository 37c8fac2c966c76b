// Named fault points, compiled into the product and off by default (3FS FaultInjection, DAOS_FAIL_CHECK).
//
// Code marks a place with `if (RFOS_FAULT("blockio.write")) return error(...)`; tests arm a point by name,
// either in-process (fault::arm) or for a child process through the environment:
//   RFOS_FAULTS="blockio.write=3,engine.before_commit=1"   (fire on the Nth hit from now, once)
// An unarmed point costs one relaxed atomic load.
//
// Thread-safety: all functions are safe to call from any thread.
#pragma once

#include <atomic>
#include <string_view>

namespace rfos::fault {

namespace detail {
extern std::atomic<int> armed_count;
bool hit(std::string_view name);
}  // namespace detail

// Arms `name` to fire once, on its `nth` hit from now (1 = the next hit).
void arm(std::string_view name, int nth = 1);
// Disarms every point.
void disarm_all();
// Reads RFOS_FAULTS from the environment (called once by Engine::open; harmless to call again).
void arm_from_env();

}  // namespace rfos::fault

#define RFOS_FAULT(name) \
  (::rfos::fault::detail::armed_count.load(std::memory_order_relaxed) > 0 && ::rfos::fault::detail::hit(name))
