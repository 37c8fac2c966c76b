// The POSIX namespace's records and rules, shared by the client's namespace (posix/namespace.h) and the targets
// that carry out namespace operations (posix/dir_ops.h): the inode and entry records, where they live, and the
// permission rules Linux applies. docs/posix.md has the layout.
//
// Thread-safety: pure functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace rfos::posix {

// Supplementary groups learnt only when a decision needs them (Cred::later).
struct LaterGroups {
  std::function<Result<std::vector<uint32_t>>()> fetch;  // none on a target: the client must send them
  std::mutex mu;
  bool fetched = false;
  std::vector<uint32_t> groups;
  Status failed;        // what fetch said, if it failed
  bool needed = false;  // a decision needed them and they could not be had here
};

struct Cred {
  Cred() = default;
  Cred(uint32_t uid_, uint32_t gid_, std::vector<uint32_t> groups_ = {})
      : uid(uid_), gid(gid_), groups(std::move(groups_)) {}
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary, when groups_known
  // Whether `groups` holds them. A caller whose groups cost something to learn (the mount reads them from /proc,
  // about 11 us a request) leaves them to `later`, asked the first time membership in a group other than `gid`
  // decides something. A target never has them then: it answers kGroupsNeeded, having changed nothing, and the
  // client asks again with them (Namespace's dir_op).
  bool groups_known = true;
  std::shared_ptr<LaterGroups> later;  // set when !groups_known
  // The calling process's effective uid and gid and its groups: whom the CLI and the C API act as.
  static Cred of_process();
  // A caller whose groups `fetch` gives when they are needed.
  static Cred with_groups_later(uint32_t uid, uint32_t gid, std::function<Result<std::vector<uint32_t>>()> fetch);
};
// The supplementary groups of `cred` when they are known or can be learnt here; nullptr when not (a target's
// copy of a caller that left them out, or a fetch that failed).
const std::vector<uint32_t>* groups_of(const Cred& cred);
// Its supplementary groups if known or learnt already, without learning them; nullptr when not.
const std::vector<uint32_t>* learnt_groups(const Cred& cred);
// Whether a decision about `cred` needed its groups and they could not be had: what it decided is not to be
// acted on (execute answers kGroupsNeeded).
bool groups_needed(const Cred& cred);

struct Attr {
  ObjectId oid;
  uint32_t mode = 0;  // S_IFMT bits included
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t rdev = 0;
  uint64_t size = 0;
  uint64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  uint32_t chunk = 0;  // file chunk size
  ObjectId parent;     // directories: the directory holding them
  // A regular file whose data may lie beyond its first chunk (kSpans), so on other targets than its home: its
  // size is then asked of every target. Clear, every byte is in the first chunk, which lives on the home target
  // with the inode (a file made by posix::execute), so the home target alone knows the size. Set by a writer
  // before it writes past the first chunk; records of layout version 1 read as set.
  uint32_t flags = 0;
};
inline constexpr uint32_t kSpans = 1;

struct DirEntry {
  std::string name;
  ObjectId oid;
  uint32_t type = 0;  // S_IFMT bits
};

// setattr: which fields to change. touch: mtime and ctime to the time of whoever applies it (after a write).
// spans: kSpans set (a writer about to write past the first chunk), nothing else changes.
struct SetAttr {
  bool set_mode = false, set_uid = false, set_gid = false, set_size = false, set_atime = false, set_mtime = false;
  bool touch = false, spans = false;
  uint32_t mode = 0, uid = 0, gid = 0;
  uint64_t size = 0, atime_ns = 0, mtime_ns = 0;

  // Whether it changes nothing but the times, if those (what a write may carry: Namespace::write_and_touch).
  bool only_times() const { return !(set_mode || set_uid || set_gid || set_size || touch || spans); }
};

inline constexpr size_t kNameMax = 255;
inline constexpr size_t kSymlinkMax = 4095;
// The largest file: the engine keeps array offsets below 2^62 (engine::kArrayOffsetMax), so a size or a write
// beyond is EFBIG here, as on a local file system at its limit, rather than a size set that no read can reach or
// a write that the mount acknowledged and the targets then refuse.
inline constexpr uint64_t kMaxFileSize = uint64_t{1} << 62;

// Where the records live: every inode is an object; its record under dkey "/" akey "a", a symlink's target
// under "/" "l", xattrs under "/x"; a directory's entries are dkeys named after the entry, akey "e".
inline constexpr std::string_view kInodeDkey = "/";  // no entry name can be "/"
inline constexpr std::string_view kXattrDkey = "/x";
inline constexpr std::string_view kInodeAkey = "a";
inline constexpr std::string_view kLinkAkey = "l";
inline constexpr std::string_view kEntryAkey = "e";

// The inode record (version 2: version 1 and the flags); `floor` is a file's size floor (its size is max(floor,
// end of its data)).
std::string encode_inode(const Attr& a, uint64_t floor);
Result<Attr> decode_inode(const ObjectId& oid, std::string_view in, uint64_t* floor);
std::string encode_entry(const ObjectId& oid, uint32_t type);
Result<DirEntry> decode_entry(std::string_view name, std::string_view in);

// kInvalidArgument for "", ".", "..", '/' or NUL in it; kNameTooLong over 255 bytes.
Status check_name(std::string_view name);
// Membership in `gid`: false when it would take groups not to be had (every use of it is then the more
// restrictive answer, and groups_needed says so).
bool in_group(const Cred& c, uint32_t gid);
// As the kernel checks: mask of R_OK, W_OK, X_OK. The groups are asked for only when the group's and the
// others' bits answer differently; refused when they are not to be had.
bool permits(const Attr& a, const Cred& c, int mask);
// The sticky bit: in such a directory only the owner of an entry, of the directory, or root removes it (EPERM).
Status sticky_ok(const Attr& dir, const Attr& victim, const Cred& cred);
// The attributes of a new inode made by `cred` in directory `dir` (setgid directories hand down their group).
Attr new_inode(const Attr& dir, const ObjectId& oid, uint32_t mode, uint64_t rdev, uint32_t chunk, const Cred& cred,
               uint64_t now_ns);
// Whether `cred` may make the change `set` to `cur` (kNotPermitted, kPermissionDenied, kIsDirectory, ...).
Status check_setattr(const Attr& cur, const SetAttr& set, const Cred& cred);
// Makes it (after check_setattr), at time `now_ns`; a size change moves the floor only (the caller punches).
void apply_setattr(Attr& a, uint64_t& floor, const SetAttr& set, const Cred& cred, uint64_t now_ns);

}  // namespace rfos::posix
