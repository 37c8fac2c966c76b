// Where UCX cannot tell that a peer died (shared memory in UCX 1.13), a worker watches the process the peer's
// hello names instead: a process as its id and its start time (clock ticks since boot, /proc/PID/stat's 22nd
// field), which together name one process even after the id is reused. Only a process that exists now with the
// start time the hello gives is watched: a peer in another pid namespace is not. The claim is not proved
// (docs/wire-format.md, "Dead peers on shm").
//
// Thread-safety: a ProcessWatch belongs to its worker's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace rfos::transport::ucx {

struct PeerProcess {
  uint64_t pid = 0;
  uint64_t start = 0;
  static PeerProcess self();
};

// The start time of process `pid`, 0 when there is no such process (or /proc cannot tell).
uint64_t process_start_time(uint64_t pid);

class ProcessWatch {
 public:
  using Handle = uint64_t;  // the worker's endpoint handle
  explicit ProcessWatch(std::chrono::milliseconds interval = std::chrono::milliseconds(500)) : interval_(interval) {}

  // Watches `p` for `h` when it names a live process; returns whether it does.
  bool watch(Handle h, const PeerProcess& p);
  void forget(Handle h) { watched_.erase(h); }
  bool watching(Handle h) const { return watched_.count(h) != 0; }
  bool empty() const { return watched_.empty(); }
  // The handles whose process has ended, looked at no more often than every `interval` (/proc reads are not
  // free; a dead peer's buffers may wait that long). They stay watched until forgotten.
  std::vector<Handle> gone(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
  std::unordered_map<Handle, PeerProcess> watched_;
};

}  // namespace rfos::transport::ucx
