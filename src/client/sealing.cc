#include "client/sealing.h"

#include <algorithm>

#include "common/coding.h"

namespace rfos::client {

std::string SealPlace::aad() const {
  std::string a = cont + "/" + oid + "/";
  put_be16(&a, static_cast<uint16_t>(dkey.size()));
  a.append(dkey);
  put_be16(&a, static_cast<uint16_t>(akey.size()));
  a.append(akey);
  return a;
}

std::string SealPlace::legacy() const { return cont + "/" + oid + "/" + dkey + "/" + akey; }

uint32_t sealed_length(std::span<const uint8_t> record) {
  if (std::all_of(record.begin(), record.end(), [](uint8_t b) { return b == 0; })) return 0;
  uint32_t len = record[29] | (uint32_t{record[30]} << 8);
  return len == 0 ? kSealBlock : len;
}

bool BlockLocks::try_lock(uint64_t array, uint64_t first, uint64_t end, uint64_t* seen) {
  std::lock_guard lock(mu_);
  for (const Held& h : held_) {
    if (h.array == array && h.first < end && first < h.end) {
      *seen = releases_;
      return false;
    }
  }
  held_.push_back({array, first, end});
  return true;
}

void BlockLocks::unlock(uint64_t array, uint64_t first, uint64_t end) {
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(held_.begin(), held_.end(),
                           [&](const Held& h) { return h.array == array && h.first == first && h.end == end; });
    if (it != held_.end()) held_.erase(it);
    ++releases_;
  }
  cv_.notify_all();
}

void BlockLocks::wait(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return releases_ != seen; });
}

}  // namespace rfos::client
