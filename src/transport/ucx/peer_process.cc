#include "transport/ucx/peer_process.h"

#include <unistd.h>

#include <string>

#include "common/proc_stat.h"

namespace rfos::transport::ucx {

PeerProcess PeerProcess::self() {
  PeerProcess p;
  p.pid = static_cast<uint64_t>(getpid());
  p.start = process_start_time(p.pid);
  return p;
}

uint64_t process_start_time(uint64_t pid) {
  auto start = proc_stat_fields(pid, {22});
  return start.empty() ? 0 : start[0];
}

bool ProcessWatch::watch(Handle h, const PeerProcess& p) {
  if (p.start == 0 || process_start_time(p.pid) != p.start) return false;
  watched_[h] = p;
  return true;
}

std::vector<ProcessWatch::Handle> ProcessWatch::gone(std::chrono::steady_clock::time_point now) {
  std::vector<Handle> out;
  if (watched_.empty() || now < next_) return out;
  next_ = now + interval_;
  std::unordered_map<uint64_t, uint64_t> start_of;  // one look at /proc per process, for its many endpoints
  for (auto& [h, p] : watched_) {
    auto [it, fresh] = start_of.try_emplace(p.pid, 0);
    if (fresh) it->second = process_start_time(p.pid);
    if (it->second != p.start) out.push_back(h);
  }
  return out;
}

}  // namespace rfos::transport::ucx
