#include "client/sealing.h"

#include <algorithm>
#include <functional>
#include <utility>

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
  uint32_t len = length_field(record.data());
  return len == 0 ? kSealBlock : len;
}

BlockLocks::Hold& BlockLocks::Hold::operator=(Hold&& o) noexcept {
  if (this != &o) {
    release();
    locks_ = std::exchange(o.locks_, nullptr);
    list_ = o.list_;
    held_ = o.held_;
  }
  return *this;
}

void BlockLocks::Hold::release() {
  if (locks_) std::exchange(locks_, nullptr)->drop(list_, held_);
}

BlockLocks::Want BlockLocks::want(uint64_t array, uint64_t first, uint64_t end) {
  Want w;
  w.held_ = {array, first, end, false};
  w.list_ = &wanted_;
  std::lock_guard lock(mu_);
  wanted_.push_back(w.held_);
  w.locks_ = this;
  return w;
}

BlockLocks::Hold BlockLocks::try_lock(uint64_t array, uint64_t first, uint64_t end, bool shared, uint64_t* seen) {
  Hold h;
  std::lock_guard lock(mu_);
  bool kept_out = std::any_of(held_.begin(), held_.end(),
                              [&](const Held& o) { return overlap(o, array, first, end) && !(shared && o.shared); });
  if (shared && !kept_out)
    kept_out =
        std::any_of(wanted_.begin(), wanted_.end(), [&](const Held& o) { return overlap(o, array, first, end); });
  if (kept_out) {
    *seen = releases_;
    return h;
  }
  h.held_ = {array, first, end, shared};
  h.list_ = &held_;
  held_.push_back(h.held_);
  h.locks_ = this;
  return h;
}

void BlockLocks::drop(std::vector<Held>* list, const Held& h) {
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(list->begin(), list->end(), [&](const Held& o) {
      return o.array == h.array && o.first == h.first && o.end == h.end && o.shared == h.shared;
    });
    if (it != list->end()) list->erase(it);
    ++releases_;
  }
  cv_.notify_all();
}

void BlockLocks::wait(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return releases_ != seen; });
}

uint64_t sealed_array(std::string_view cont, const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  std::string k(cont);
  k.push_back('\0');
  k.append(reinterpret_cast<const char*>(&oid.hi), 8).append(reinterpret_cast<const char*>(&oid.lo), 8);
  put_be16(&k, static_cast<uint16_t>(dkey.size()));
  k.append(dkey);
  k.append(akey);
  return std::hash<std::string>{}(k) | 1;
}

}  // namespace rfos::client
