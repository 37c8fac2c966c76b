#include "fuse/inodes.h"

#include <algorithm>
#include <utility>

namespace rfos::fuse {

Inodes::Inodes(const ObjectId& root, std::function<void(const ObjectId&)> purge)
    : root_(root), purge_(std::move(purge)) {
  nodes_[kRootIno].oid = root;
  nodes_[kRootIno].lookups = 1;
  inos_[root] = kRootIno;
}

Result<ObjectId> Inodes::oid(Ino ino) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return error(StatusCode::kNotFound, "stale inode number");
  return it->second.oid;
}

Ino Inodes::remember(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  auto it = inos_.find(oid);
  Ino ino = it != inos_.end() ? it->second : next_++;
  if (it == inos_.end()) {
    inos_[oid] = ino;
    nodes_[ino] = Node{};
    nodes_[ino].oid = oid;
  }
  ++nodes_[ino].lookups;
  return ino;
}

void Inodes::forget(Ino ino, uint64_t n) {
  ObjectId purge;
  {
    std::lock_guard lock(mu_);
    auto it = nodes_.find(ino);
    if (it == nodes_.end() || ino == kRootIno) return;
    it->second.lookups -= std::min(n, it->second.lookups);
    if (!release_if_unused(it, &purge)) return;
  }
  if (purge != ObjectId{}) purge_(purge);
}

void Inodes::opened(Ino ino, int delta) {
  ObjectId purge;
  {
    std::lock_guard lock(mu_);
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return;
    it->second.opens += delta;
    if (it->second.opens > 0)
      open_.insert(ino);
    else
      open_.erase(ino);
    if (!release_if_unused(it, &purge)) return;
  }
  if (purge != ObjectId{}) purge_(purge);
}

void Inodes::unlinked(const ObjectId& oid) {
  {
    std::lock_guard lock(mu_);
    auto it = inos_.find(oid);
    if (it != inos_.end()) {
      nodes_[it->second].unlinked = true;
      return;
    }
  }
  purge_(oid);
}

std::optional<Ino> Inodes::known(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  auto it = inos_.find(oid);
  if (it == inos_.end()) return std::nullopt;
  return it->second;
}

uint64_t Inodes::number(const ObjectId& oid) const {
  if (oid == root_) return kRootIno;
  return oid.lo > kRootIno ? oid.lo : (oid.lo ^ oid.hi) | 2;  // never the root's (0 and 1: 1 in 2^63)
}

void Inodes::seen(const ObjectId& oid, const posix::Attr& a, uint64_t at_ns, std::optional<uint64_t> writes_then) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  if (!n || (n->seen && n->seen_at_ns > at_ns)) return;  // a newer one is kept
  if (writes_then && *writes_then != n->writes) return;  // a write came after they were asked for
  n->seen = true;
  n->seen_at_ns = at_ns;
  n->attr = a;
}

bool Inodes::recent(Ino ino, uint64_t now_ns, uint64_t max_age_ns, posix::Attr* a, uint64_t* age_ns) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || !it->second.seen || now_ns < it->second.seen_at_ns ||
      now_ns - it->second.seen_at_ns >= max_age_ns)
    return false;
  *a = it->second.attr;
  *age_ns = now_ns - it->second.seen_at_ns;
  return true;
}

void Inodes::stale(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  if (n) n->seen = false;
}

bool Inodes::open_files(size_t max, std::vector<ObjectId>* out) {
  std::lock_guard lock(mu_);
  out->clear();
  if (open_.size() > max) return false;
  for (Ino ino : open_) out->push_back(nodes_.at(ino).oid);
  return true;
}

uint64_t Inodes::written(const ObjectId& oid, uint64_t end) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  if (!n) return 0;
  ++n->writes;
  if (n->attr.size < end) n->attr.size = end;
  return n->writes;
}

std::optional<uint64_t> Inodes::times_set(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  if (!n) return std::nullopt;
  return std::exchange(n->times_set, n->writes);
}

void Inodes::times_restore(const ObjectId& oid, std::optional<uint64_t> before) {
  std::lock_guard lock(mu_);
  if (Node* n = node_of(oid)) n->times_set = before;
}

bool Inodes::times_set_since(const ObjectId& oid, uint64_t write) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  return n && n->times_set && *n->times_set >= write;
}

uint64_t Inodes::writes_of(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  return n ? n->writes : 0;
}

uint64_t Inodes::writes(Ino ino) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? 0 : it->second.writes;
}

void Inodes::created(const ObjectId& oid, uint64_t now_ns) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  if (!n) return;
  n->no_xattrs = true;
  n->no_xattrs_at_ns = now_ns;
}

bool Inodes::no_xattrs(Ino ino, uint64_t now_ns, uint64_t max_age_ns) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(ino);
  return it != nodes_.end() && it->second.no_xattrs && now_ns >= it->second.no_xattrs_at_ns &&
         now_ns - it->second.no_xattrs_at_ns < max_age_ns;
}

void Inodes::xattrs_changed(const ObjectId& oid) {
  std::lock_guard lock(mu_);
  Node* n = node_of(oid);
  if (n) n->no_xattrs = false;
}

void Inodes::changed(const posix::Attr& a, uint64_t now_ns) {
  std::lock_guard lock(mu_);
  Node* n = node_of(a.oid);
  if (!n || (n->seen && n->attr.ctime_ns > a.ctime_ns)) return;
  n->seen = true;
  n->seen_at_ns = now_ns;
  n->attr = a;
}

void Inodes::stale_all() {
  std::lock_guard lock(mu_);
  for (auto& [ino, node] : nodes_) node.seen = false;
}

Inodes::Node* Inodes::node_of(const ObjectId& oid) {
  auto i = inos_.find(oid);
  if (i == inos_.end()) return nullptr;
  auto it = nodes_.find(i->second);
  return it == nodes_.end() ? nullptr : &it->second;
}

size_t Inodes::size() {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

bool Inodes::release_if_unused(std::unordered_map<Ino, Node>::iterator it, ObjectId* purge) {
  if (it->second.lookups > 0 || it->second.opens > 0) return false;
  if (it->second.unlinked) *purge = it->second.oid;
  inos_.erase(it->second.oid);
  nodes_.erase(it);
  return true;
}

}  // namespace rfos::fuse
