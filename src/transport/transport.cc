#include "transport/transport.h"

#include "transport/sim/sim.h"

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace rfos::transport {

Result<Registration> Worker::alloc_memory(size_t len, void** addr) {
  if (len == 0) return error(StatusCode::kInvalidArgument, "cannot allocate an empty range");
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return error(StatusCode::kNoSpace, std::string("mmap: ") + std::strerror(errno));
  madvise(m, len, MADV_HUGEPAGE);  // advice: fewer pages for the fabric and the CPU to walk
  auto r = register_memory(m, len);
  if (!r.is_ok())
    munmap(m, len);
  else
    *addr = m;
  return r;
}

void Worker::free_memory(const Registration& r, void* addr, size_t len) {
  deregister_memory(r);
  munmap(addr, len);
}

Result<std::unique_ptr<Worker>> make_ucx_worker(const std::string& provider, const WorkerOptions& options);
Result<std::unique_ptr<Worker>> make_ofi_worker(const std::string& provider, const WorkerOptions& options);

Result<std::unique_ptr<Worker>> Worker::create(const std::string& provider, const WorkerOptions& options) {
  if (provider == "sim") return sim::Fabric::process().create_worker(options);
  if (provider.rfind("ucx+", 0) == 0) return make_ucx_worker(provider, options);
  if (provider.rfind("ofi+", 0) == 0) return make_ofi_worker(provider, options);
  return error(StatusCode::kNotSupported, "unknown data-plane provider '" + provider + "'");
}

bool spin_until(const std::function<int()>& progress, std::atomic<bool>& signaled,
                std::chrono::steady_clock::time_point until, const WakeSource* also) {
  while (std::chrono::steady_clock::now() < until) {
    if (progress() != 0 || (also && also->ready())) return true;
    if (signaled.exchange(false, std::memory_order_relaxed)) return true;
    sched_yield();
  }
  return false;
}

void poll_then_nap(const std::function<int()>& progress, std::atomic<bool>& signaled, int timeout_ms,
                   const WakeSource* also, Naps* naps) {
  // An idle server does not burn its cores: after about 100 ms of naps in a row it spins little and naps
  // longer. Its next event brings the spinning back, wherever its thread found it: a target that found each
  // request in its own loop, not here, stayed in the long naps (docs/BENCHMARKS.md, "Small files").
  if (naps->last_event != naps->seen) {
    naps->in_a_row = 0;
    naps->seen = naps->last_event;
  }
  bool idle = naps->in_a_row >= 100;
  if (spin_until(progress, signaled, std::chrono::steady_clock::now() + std::chrono::microseconds(idle ? 20 : 1000),
                 also) ||
      signaled.exchange(false)) {
    naps->in_a_row = 0;
    return;
  }
  ++naps->in_a_row;
  int nap_us = std::min(timeout_ms * 1000, idle ? 1000 : 50);
  if (also == nullptr || also->fd < 0) return std::this_thread::sleep_for(std::chrono::microseconds(nap_us));
  if (also->arm && also->arm()) return;
  pollfd pfd{also->fd, POLLIN, 0};
  timespec ts{0, nap_us * 1000L};
  ppoll(&pfd, 1, &ts, nullptr);
}

uint32_t payload_sends_at_once(std::string_view provider) { return provider == "ucx+tcp" ? 1 : 0; }

bool one_sided_in_hardware(std::string_view provider) {
  return provider == "ucx+rc" || provider == "ucx+dc_x" || provider == "ucx+ud" || provider == "ofi+verbs";
}

}  // namespace rfos::transport
