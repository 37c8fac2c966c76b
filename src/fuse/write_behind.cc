#include "fuse/write_behind.h"

#include <algorithm>
#include <cstring>

namespace rfos::fuse {

WriteBehind::WriteBehind(posix::Namespace& ns, unsigned threads, uint64_t max_bytes)
    : ns_(ns), max_bytes_(max_bytes), writers_(threads) {}

WriteBehind::~WriteBehind() = default;

std::shared_ptr<WriteBehind::File> WriteBehind::file_locked(const ObjectId& oid) {
  auto& f = files_[oid];
  if (!f) f = std::make_shared<File>();
  return f;
}

WriteBytes WriteBytes::copy_of(const char* data, size_t size) {
  std::shared_ptr<uint8_t[]> copy(new uint8_t[size]);
  std::memcpy(copy.get(), data, size);
  return {copy, copy.get(), size};
}

void WriteBehind::submit(const ObjectId& oid, uint64_t offset, WriteBytes bytes) {
  uint64_t end = offset + bytes.size;
  std::unique_lock lock(mu_);
  std::shared_ptr<File> f = file_locked(oid);
  if (f->ranges.empty() && bytes.size <= kHoldBytes) {
    const char* p = reinterpret_cast<const char*>(bytes.data);
    if (!f->holding) {
      f->holding = true;
      f->held_at = offset;
      f->held.assign(p, bytes.size);
      return;
    }
    if (offset == f->held_at + f->held.size() && f->held.size() + bytes.size <= kHoldBytes) {
      f->held.append(p, bytes.size);
      return;
    }
  }
  release_locked(oid, f);
  landed_.wait(lock, [&] {
    bool room = f->ranges.empty() || f->bytes + bytes.size <= max_bytes_;
    bool overlap = std::any_of(f->ranges.begin(), f->ranges.end(),
                               [&](const auto& r) { return r.first < end && offset < r.second; });
    return room && !overlap;
  });
  f->ranges.emplace_back(offset, end);
  f->bytes += bytes.size;
  lock.unlock();
  writers_.post([this, oid, offset, bytes = std::move(bytes), f] { land(oid, offset, bytes, *f); });
}

void WriteBehind::land(const ObjectId& oid, uint64_t offset, const WriteBytes& bytes, File& f) {
  Status s = ns_.write(oid, offset, {bytes.data, bytes.size});
  std::lock_guard lock(mu_);
  landed_locked(f, offset, bytes.size, s);
}

void WriteBehind::landed_locked(File& f, uint64_t offset, uint64_t size, const Status& s) {
  auto it = std::find(f.ranges.begin(), f.ranges.end(), std::make_pair(offset, offset + size));
  if (it != f.ranges.end()) f.ranges.erase(it);
  f.bytes -= size;
  if (!s.is_ok() && f.failed.is_ok()) f.failed = s;
  landed_.notify_all();
}

std::pair<uint64_t, std::string> WriteBehind::take_held_locked(File& f) {
  f.holding = false;
  std::pair<uint64_t, std::string> held(f.held_at, std::move(f.held));
  f.held.clear();
  f.ranges.emplace_back(held.first, held.first + held.second.size());  // overlapping writes wait for it
  f.bytes += held.second.size();
  return held;
}

void WriteBehind::release_locked(const ObjectId& oid, const std::shared_ptr<File>& f) {
  if (!f->holding) return;
  auto [offset, held] = take_held_locked(*f);
  WriteBytes bytes = WriteBytes::copy_of(held.data(), held.size());
  writers_.post([this, oid, offset, bytes = std::move(bytes), f] { land(oid, offset, bytes, *f); });
}

bool WriteBehind::wait(const ObjectId& oid) {
  std::unique_lock lock(mu_);
  auto it = files_.find(oid);
  if (it == files_.end()) return false;
  release_locked(oid, it->second);
  if (it->second->ranges.empty()) return false;
  std::shared_ptr<File> f = it->second;
  landed_.wait(lock, [&] { return f->ranges.empty(); });
  return true;
}

std::optional<posix::Attr> WriteBehind::store_held(std::unique_lock<std::mutex>& lock, const ObjectId& oid, File& f,
                                                   const posix::SetAttr& times, const posix::Cred& cred) {
  auto [at, held] = take_held_locked(f);
  lock.unlock();
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(held.data()), held.size());
  const bool with_times = times.set_atime || times.set_mtime;
  auto both = ns_.write_and_touch(oid, at, bytes, times, cred);
  std::optional<posix::Attr> attrs;
  Status s = both.is_ok() ? Status::ok() : both.status();
  if (both.is_ok() && both->has_value()) attrs = **both;
  // Not one for a single operation, or the times refused (the caller's setattr reports that): the bytes as any
  // write.
  if ((both.is_ok() && !both->has_value()) || (!both.is_ok() && with_times)) s = ns_.write(oid, at, bytes);
  lock.lock();
  landed_locked(f, at, held.size(), s);
  return attrs;
}

std::optional<posix::Attr> WriteBehind::land_all(std::unique_lock<std::mutex>& lock, const ObjectId& oid,
                                                 const std::shared_ptr<File>& f, const posix::SetAttr& times,
                                                 const posix::Cred& cred) {
  std::optional<posix::Attr> attrs;
  if (f->holding && f->ranges.empty())  // the held write and the time update, at once, from this thread
    attrs = store_held(lock, oid, *f, times, cred);
  else
    release_locked(oid, f);
  landed_.wait(lock, [&] { return f->ranges.empty(); });
  return attrs;
}

std::optional<posix::Attr> WriteBehind::land_with(const ObjectId& oid, const posix::SetAttr& times,
                                                  const posix::Cred& cred) {
  std::unique_lock lock(mu_);
  auto it = files_.find(oid);
  if (it == files_.end()) return std::nullopt;
  return land_all(lock, oid, it->second, times, cred);
}

bool WriteBehind::pending(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  auto it = files_.find(oid);
  return it != files_.end() && (!it->second->ranges.empty() || it->second->holding);
}

Status WriteBehind::settle(const ObjectId& oid, std::optional<posix::Attr>* touched) {
  std::unique_lock lock(mu_);
  auto it = files_.find(oid);
  if (it == files_.end()) return Status::ok();
  std::shared_ptr<File> f = it->second;
  auto attrs = land_all(lock, oid, f, {}, {});
  if (attrs && touched) *touched = *attrs;
  Status failed = f->failed;
  f->failed = Status::ok();
  auto again = files_.find(oid);  // idle and reported: forget it (a submit meanwhile would hold ranges)
  if (again != files_.end() && again->second->ranges.empty() && again->second->failed.is_ok() &&
      !again->second->holding)
    files_.erase(again);
  return failed;
}

}  // namespace rfos::fuse
