// The mount's inode table: FUSE inode numbers for the namespace's objects, and what the kernel holds of each
// (lookups it has not forgotten, open files). An inode whose last name was removed lives on until both are
// gone; then its object is purged (Namespace::forget), as a local file system frees an unlinked open file on
// its last close.
//
// It also keeps each inode's attributes as last seen (from the home target, or the answer to this mount's own
// change), so the kernel's attribute queries within the attribute timeout cost no round trip; the kernel drops
// its own copy after every write, and the close before the query brought the new one.
//
// Thread-safety: every member may be called from any FUSE thread; `purge` runs outside the table's lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "posix/records.h"

namespace rfos::fuse {

using Ino = uint64_t;               // fuse_ino_t
inline constexpr Ino kRootIno = 1;  // FUSE_ROOT_ID

class Inodes {
 public:
  Inodes(const ObjectId& root, std::function<void(const ObjectId&)> purge);

  // The object behind `ino`; kNotFound for a number the kernel should no longer hold (stale).
  Result<ObjectId> oid(Ino ino);
  // The inode number of `oid`, with one lookup more (an entry handed to the kernel).
  Ino remember(const ObjectId& oid);
  // The kernel forgot `n` lookups.
  void forget(Ino ino, uint64_t n);
  // A file of `ino` was opened (+1) or released (-1).
  void opened(Ino ino, int delta);
  // `oid` lost its last name: purged once the kernel holds nothing of it (now, if it holds nothing already).
  void unlinked(const ObjectId& oid);
  // The objects of files open through this mount, up to `max` (false when there are more).
  bool open_files(size_t max, std::vector<ObjectId>* out);
  // The number the kernel holds `oid` by; none when it holds none.
  std::optional<Ino> known(const ObjectId& oid);
  // The inode number stat and readdir show for `oid` (st_ino, d_ino), which is not the number the kernel holds it
  // by (remember): the same for the object's whole life, on every mount and after the kernel forgot it, as
  // backup tools, find -inum and hard-link detection across runs expect. Objects are named by 120 random bits
  // (posix::Namespace), so their low 64 bits serve: two files share a number with odds of about n^2 / 2^65 for
  // n files (GlusterFS folds its 128-bit ids alike). The root's is 1. (The kernel's handles stay the mount's
  // own, so the mount is not NFS-exportable.)
  uint64_t number(const ObjectId& oid) const;
  size_t size();

  // Attributes of `oid` as seen at steady time `at_ns` (steady_now_ns), kept while the kernel holds the inode.
  // With `writes_then` (writes_of before they were asked for): kept only if no write came since, which may have
  // moved the size or the times after the target answered.
  void seen(const ObjectId& oid, const posix::Attr& a, uint64_t at_ns, std::optional<uint64_t> writes_then = {});
  // The attributes seen at most `max_age_ns` before `now_ns`, and how old they are; false when none.
  bool recent(Ino ino, uint64_t now_ns, uint64_t max_age_ns, posix::Attr* a, uint64_t* age_ns);
  // A write of `oid` up to byte `end` through this mount (counted: an open file's copy of the bytes is good while
  // it stays). The size seen of it grows to `end`; the attributes stay good otherwise, since a write moves the
  // times only when its file is closed (docs/posix.md), and that close brings them. So an fstat after each write
  // costs no round trip and does not wait for the write to land.
  // Returns the write's number (writes_of just after it; 0 when the kernel holds no inode of `oid`).
  uint64_t written(const ObjectId& oid, uint64_t end);
  // The times of `oid` were set (utimensat, futimens) after the writes counted so far: a close of a file written
  // through this mount moves its mtime (the writes' update, docs/posix.md) only for a write after them, as a
  // local file system's writes moved it before the times were set (tar and cp -p set them before the close).
  // Returns what was recorded before, for times_restore when the set fails: it is recorded before the set is
  // sent, so that a close racing it does not move the mtime after it.
  std::optional<uint64_t> times_set(const ObjectId& oid);
  void times_restore(const ObjectId& oid, std::optional<uint64_t> before);
  // Whether the times of `oid` were set after its write number `write`.
  bool times_set_since(const ObjectId& oid, uint64_t write);
  uint64_t writes(Ino ino);
  uint64_t writes_of(const ObjectId& oid);
  // `oid` was made through this mount at `now_ns`: it has no extended attributes (until xattrs_changed), which
  // the kernel asks about before every write (security.capability) and is answered within the attribute
  // timeout without a round trip.
  void created(const ObjectId& oid, uint64_t now_ns);
  bool no_xattrs(Ino ino, uint64_t now_ns, uint64_t max_age_ns);
  void xattrs_changed(const ObjectId& oid);
  // Attributes a change left (they carry its ctime): kept unless newer ones (a later ctime) are.
  void changed(const posix::Attr& a, uint64_t now_ns);
  // Forgets what was seen of `oid` (a change whose result this mount did not see whole), or of every inode.
  void stale(const ObjectId& oid);
  void stale_all();

 private:
  struct Node {
    ObjectId oid;
    uint64_t lookups = 0;
    uint32_t opens = 0;
    bool unlinked = false;
    bool seen = false;
    uint64_t seen_at_ns = 0;
    uint64_t writes = 0;
    std::optional<uint64_t> times_set;  // writes when the times were last set
    bool no_xattrs = false;
    uint64_t no_xattrs_at_ns = 0;
    posix::Attr attr;
  };
  Node* node_of(const ObjectId& oid);  // under mu_; null when the kernel was not handed `oid`
  // Drops a node nobody holds; sets *purge when its object must go too.
  bool release_if_unused(std::unordered_map<Ino, Node>::iterator it, ObjectId* purge);

  const ObjectId root_;
  std::function<void(const ObjectId&)> purge_;
  std::mutex mu_;
  std::unordered_map<Ino, Node> nodes_;
  std::map<ObjectId, Ino> inos_;
  std::unordered_set<Ino> open_;  // nodes with open files
  Ino next_ = kRootIno + 1;
};

}  // namespace rfos::fuse
