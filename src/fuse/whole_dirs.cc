#include "fuse/whole_dirs.h"

namespace rfos::fuse {

WholeDirs::WholeDirs(uint64_t lifetime_ns, size_t max_dirs, size_t max_names)
    : lifetime_ns_(lifetime_ns), max_dirs_(max_dirs), max_names_(max_names) {}

void WholeDirs::made(const ObjectId& dir, uint64_t now_ns) {
  if (lifetime_ns_ == 0) return;
  std::lock_guard lock(mu_);
  if (dirs_.size() >= max_dirs_) std::erase_if(dirs_, [&](const auto& d) { return d.second.until_ns <= now_ns; });
  if (dirs_.size() >= max_dirs_) return;
  dirs_[dir] = Dir{now_ns + lifetime_ns_, {}};
}

void WholeDirs::named(const ObjectId& dir, std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) return;
  if (it->second.names.size() >= max_names_)
    dirs_.erase(it);
  else
    it->second.names.emplace(name);
}

void WholeDirs::unnamed(const ObjectId& dir, std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) return;
  auto n = it->second.names.find(name);
  if (n != it->second.names.end()) it->second.names.erase(n);
}

void WholeDirs::forget(const ObjectId& dir) {
  std::lock_guard lock(mu_);
  dirs_.erase(dir);
}

bool WholeDirs::absent(const ObjectId& dir, std::string_view name, uint64_t now_ns, uint64_t* left_ns) {
  std::lock_guard lock(mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) return false;
  if (it->second.until_ns <= now_ns) {
    dirs_.erase(it);
    return false;
  }
  if (it->second.names.count(name)) return false;
  *left_ns = it->second.until_ns - now_ns;
  return true;
}

size_t WholeDirs::size() {
  std::lock_guard lock(mu_);
  return dirs_.size();
}

}  // namespace rfos::fuse
