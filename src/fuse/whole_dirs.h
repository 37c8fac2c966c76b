// Directories whose every name a mount knows: made empty by this mount and changed since only through it, with no
// notice of another client's change (Namespace::watch). A lookup of a name such a directory does not hold is
// answered absent without a round trip: the kernel looks up every name before it makes it (open with O_CREAT,
// mkdir, tar, cp), so a file made in a new directory costs one round trip less.
//
// Notices are a hint and may be lost, so what is known lasts only `lifetime_ns` from the directory's making (the
// mount's negative timeout): a name another client made in it shows within that, as a name's cached absence does
// (docs/posix.md, coherence). Bounded: at most `max_dirs` directories and `max_names` names each.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "common/ids.h"

namespace rfos::fuse {

class WholeDirs {
 public:
  WholeDirs(uint64_t lifetime_ns, size_t max_dirs = 4096, size_t max_names = 65536);

  // This mount made `dir`, empty, at now_ns.
  void made(const ObjectId& dir, uint64_t now_ns);
  // This mount made or removed `name` in `dir`.
  void named(const ObjectId& dir, std::string_view name);
  void unnamed(const ObjectId& dir, std::string_view name);
  // What is known of `dir` may be wrong (a change that failed, another client's change): it is no longer used.
  void forget(const ObjectId& dir);
  // Whether `dir` is known not to hold `name` at now_ns; *left_ns: for how much longer that knowledge lasts.
  bool absent(const ObjectId& dir, std::string_view name, uint64_t now_ns, uint64_t* left_ns);
  size_t size();

 private:
  struct Dir {
    uint64_t until_ns = 0;
    std::set<std::string, std::less<>> names;
  };

  const uint64_t lifetime_ns_;
  const size_t max_dirs_, max_names_;
  std::mutex mu_;
  std::map<ObjectId, Dir> dirs_;
};

}  // namespace rfos::fuse
