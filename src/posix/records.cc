#include "posix/records.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "common/coding.h"

namespace rfos::posix {

Cred Cred::of_process() {
  Cred c{static_cast<uint32_t>(geteuid()), static_cast<uint32_t>(getegid()), {}};
  gid_t groups[256];
  int n = getgroups(256, groups);
  for (int i = 0; i < n; ++i) c.groups.push_back(groups[i]);
  return c;
}

Cred Cred::with_groups_later(uint32_t uid, uint32_t gid, std::function<Result<std::vector<uint32_t>>()> fetch) {
  Cred c{uid, gid, {}};
  c.groups_known = false;
  c.later = std::make_shared<LaterGroups>();
  c.later->fetch = std::move(fetch);
  return c;
}

// Learnt groups are written once, under the lock, before `fetched` is set, and never again: the pointer stays good.
const std::vector<uint32_t>* learnt_groups(const Cred& cred) {
  if (cred.groups_known) return &cred.groups;
  std::lock_guard lock(cred.later->mu);
  return cred.later->fetched && cred.later->failed.is_ok() ? &cred.later->groups : nullptr;
}

const std::vector<uint32_t>* groups_of(const Cred& cred) {
  if (cred.groups_known) return &cred.groups;
  LaterGroups& l = *cred.later;
  std::lock_guard lock(l.mu);
  if (!l.fetched && l.fetch) {
    auto got = l.fetch();
    l.fetched = true;
    if (got.is_ok()) l.groups = std::move(*got);
    if (!got.is_ok()) l.failed = got.status();
  }
  if (l.fetched && l.failed.is_ok()) return &l.groups;
  l.needed = true;
  return nullptr;
}

bool groups_needed(const Cred& cred) {
  if (cred.groups_known) return false;
  std::lock_guard lock(cred.later->mu);
  return cred.later->needed;
}

namespace {
constexpr uint8_t kInodeVersion = 2;
constexpr uint8_t kEntryVersion = 1;
}  // namespace

std::string encode_inode(const Attr& a, uint64_t floor) {
  std::string s;
  put_le<uint8_t>(&s, kInodeVersion);
  put_le<uint32_t>(&s, a.mode);
  put_le<uint32_t>(&s, a.uid);
  put_le<uint32_t>(&s, a.gid);
  put_le<uint32_t>(&s, a.nlink);
  put_le<uint64_t>(&s, a.rdev);
  put_le<uint64_t>(&s, floor);
  put_le<uint64_t>(&s, a.atime_ns);
  put_le<uint64_t>(&s, a.mtime_ns);
  put_le<uint64_t>(&s, a.ctime_ns);
  put_le<uint32_t>(&s, a.chunk);
  put_le<uint64_t>(&s, a.parent.hi);
  put_le<uint64_t>(&s, a.parent.lo);
  put_le<uint32_t>(&s, a.flags);
  return s;
}

Result<Attr> decode_inode(const ObjectId& oid, std::string_view in, uint64_t* floor) {
  ByteReader r(in);
  Attr a;
  uint8_t version = 0;
  a.oid = oid;
  if (!r.get_le(&version) || (version != 1 && version != kInodeVersion) || !r.get_le(&a.mode) || !r.get_le(&a.uid) ||
      !r.get_le(&a.gid) || !r.get_le(&a.nlink) || !r.get_le(&a.rdev) || !r.get_le(floor) || !r.get_le(&a.atime_ns) ||
      !r.get_le(&a.mtime_ns) || !r.get_le(&a.ctime_ns) || !r.get_le(&a.chunk) || !r.get_le(&a.parent.hi) ||
      !r.get_le(&a.parent.lo) || (version == kInodeVersion && !r.get_le(&a.flags)) || r.remaining() != 0)
    return error(StatusCode::kCorruption, "inode " + oid.to_string() + " is damaged");
  if (version == 1) a.flags = kSpans;  // made before the flag: nothing known of where its data lies
  a.size = *floor;
  return a;
}

std::string encode_entry(const ObjectId& oid, uint32_t type) {
  std::string s;
  put_le<uint8_t>(&s, kEntryVersion);
  put_le<uint32_t>(&s, type & S_IFMT);
  put_le<uint64_t>(&s, oid.hi);
  put_le<uint64_t>(&s, oid.lo);
  return s;
}

Result<DirEntry> decode_entry(std::string_view name, std::string_view in) {
  ByteReader r(in);
  DirEntry e;
  uint8_t version = 0;
  e.name = name;
  if (!r.get_le(&version) || version != kEntryVersion || !r.get_le(&e.type) || !r.get_le(&e.oid.hi) ||
      !r.get_le(&e.oid.lo) || r.remaining() != 0)
    return error(StatusCode::kCorruption, "directory entry '" + std::string(name) + "' is damaged");
  return e;
}

Status check_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..")
    return error(StatusCode::kInvalidArgument, "'" + std::string(name) + "' cannot be created or removed");
  if (name.size() > kNameMax) return error(StatusCode::kNameTooLong, "a name is at most 255 bytes");
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos)
    return error(StatusCode::kInvalidArgument, "a name cannot hold '/' or NUL");
  return Status::ok();
}

namespace {
// Membership in `gid`; none when it would take groups not to be had.
std::optional<bool> member(const Cred& c, uint32_t gid) {
  if (c.gid == gid) return true;
  const std::vector<uint32_t>* groups = groups_of(c);
  if (!groups) return std::nullopt;
  return std::find(groups->begin(), groups->end(), gid) != groups->end();
}
}  // namespace

bool in_group(const Cred& c, uint32_t gid) { return member(c, gid).value_or(false); }

bool permits(const Attr& a, const Cred& c, int mask) {
  if (c.uid == 0) return !(mask & X_OK) || S_ISDIR(a.mode) || (a.mode & 0111);
  auto allows = [mask](uint32_t bits) { return (bits & static_cast<uint32_t>(mask)) == static_cast<uint32_t>(mask); };
  if (c.uid == a.uid) return allows((a.mode >> 6) & 7);
  bool group = allows((a.mode >> 3) & 7), other = allows(a.mode & 7);
  if (group == other) return group;  // membership decides nothing: not asked
  std::optional<bool> in = member(c, a.gid);
  if (!in) return false;  // not to be had: refused (and a target answers kGroupsNeeded instead)
  return *in ? group : other;
}

Status sticky_ok(const Attr& dir, const Attr& victim, const Cred& cred) {
  if (!(dir.mode & S_ISVTX) || cred.uid == 0 || cred.uid == dir.uid || cred.uid == victim.uid) return Status::ok();
  return error(StatusCode::kNotPermitted, "the directory is sticky and the entry is someone else's");
}

Attr new_inode(const Attr& dir, const ObjectId& oid, uint32_t mode, uint64_t rdev, uint32_t chunk, const Cred& cred,
               uint64_t now_ns) {
  bool is_dir = S_ISDIR(mode);
  Attr a;
  a.oid = oid;
  a.mode = (mode & S_IFMT) | (mode & 07777);
  a.uid = cred.uid;
  a.gid = cred.gid;
  if (dir.mode & S_ISGID) {  // setgid directories pass on their group, and to subdirectories the bit itself
    a.gid = dir.gid;
    if (is_dir) a.mode |= S_ISGID;
  }
  if (!is_dir && (a.mode & S_ISGID) && cred.uid != 0 && !in_group(cred, a.gid))
    a.mode &= ~static_cast<uint32_t>(S_ISGID);
  a.nlink = is_dir ? 2 : 1;
  a.rdev = rdev;
  a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns;
  a.chunk = S_ISREG(mode) ? chunk : 0;
  if (is_dir) {
    a.parent = dir.oid;
    a.size = 4096;
  }
  return a;
}

Status check_setattr(const Attr& cur, const SetAttr& set, const Cred& cred) {
  bool owner = cred.uid == 0 || cred.uid == cur.uid;
  // A writer that is not the owner may drop a file's set-id bits, and nothing else: what the kernel asks for
  // when such a writer writes to a set-id file (file_remove_privs), so that the write does not leave a
  // set-id program someone else changed.
  const uint32_t setid = S_ISUID | S_ISGID;
  bool drops_setid_only = set.set_mode && ((set.mode & 07777) & ~setid) == ((cur.mode & 07777) & ~setid) &&
                          (set.mode & setid) != (cur.mode & setid) && ((set.mode & setid) & ~(cur.mode & setid)) == 0;
  if (set.set_mode && !owner && !(drops_setid_only && S_ISREG(cur.mode) && permits(cur, cred, W_OK)))
    return error(StatusCode::kNotPermitted, "only the owner changes the mode");
  if (set.set_uid && set.uid != cur.uid && cred.uid != 0)
    return error(StatusCode::kNotPermitted, "only root changes the owner");
  if (set.set_gid && set.gid != cur.gid && cred.uid != 0 && !(cred.uid == cur.uid && in_group(cred, set.gid)))
    return error(StatusCode::kNotPermitted, "the owner may only pick a group of their own");
  if (set.set_size) {
    if (S_ISDIR(cur.mode)) return error(StatusCode::kIsDirectory, "is a directory");
    if (!S_ISREG(cur.mode)) return error(StatusCode::kInvalidArgument, "not a regular file");
    if (!permits(cur, cred, W_OK)) return error(StatusCode::kPermissionDenied, "no write permission");
    if (set.size > kMaxFileSize) return error(StatusCode::kTooLarge, "beyond the largest file size (2^62 bytes)");
  }
  if ((set.set_atime || set.set_mtime || set.touch) && !owner && !permits(cur, cred, W_OK))
    return error(StatusCode::kPermissionDenied, "only the owner or a writer sets times");
  return Status::ok();
}

void apply_setattr(Attr& a, uint64_t& floor, const SetAttr& set, const Cred& cred, uint64_t now_ns) {
  if (set.set_mode) {
    a.mode = (a.mode & S_IFMT) | (set.mode & 07777);
    if ((a.mode & S_ISGID) && cred.uid != 0 && !in_group(cred, a.gid)) a.mode &= ~static_cast<uint32_t>(S_ISGID);
  }
  bool chown = (set.set_uid && set.uid != a.uid) || (set.set_gid && set.gid != a.gid);
  if (set.set_uid) a.uid = set.uid;
  if (set.set_gid) a.gid = set.gid;
  if (chown && !S_ISDIR(a.mode)) {  // as Linux: a change of owner drops setuid, and setgid of group-executables
    a.mode &= ~static_cast<uint32_t>(S_ISUID);
    if (a.mode & S_IXGRP) a.mode &= ~static_cast<uint32_t>(S_ISGID);
  }
  if (set.set_size) {
    floor = set.size;
    a.size = set.size;
    a.mtime_ns = now_ns;
  }
  if (set.set_atime) a.atime_ns = set.atime_ns;
  if (set.set_mtime) a.mtime_ns = set.mtime_ns;
  if (set.touch) a.mtime_ns = now_ns;
  a.ctime_ns = now_ns;
}

}  // namespace rfos::posix
