#include "transport/transport.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace rfos::transport {

Result<std::unique_ptr<Worker>> make_ucx_worker(const std::string& provider);
Result<std::unique_ptr<Worker>> make_ofi_worker(const std::string& provider);

Result<std::unique_ptr<Worker>> Worker::create(const std::string& provider) {
  if (provider.rfind("ucx+", 0) == 0) return make_ucx_worker(provider);
  if (provider.rfind("ofi+", 0) == 0) return make_ofi_worker(provider);
  return error(StatusCode::kNotSupported, "unknown data-plane provider '" + provider + "'");
}

void poll_then_nap(const std::function<int()>& progress, std::atomic<bool>& signaled, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  while (std::chrono::steady_clock::now() < until && !signaled.load(std::memory_order_relaxed))
    if (progress() != 0) return;
  signaled = false;
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(timeout_ms * 1000, 50)));
}

}  // namespace rfos::transport
