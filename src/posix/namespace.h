// The POSIX namespace over objects (DAOS's dfs, our layout): directories, files, symlinks and hard links in
// one container, shared by any number of clients. Layout (docs/posix.md):
//
//   every inode is an object; its attributes live under dkey "/" (no file name can be "/"):
//     akey "a": the inode record (mode, uid, gid, nlink, rdev, size floor, times, chunk size, parent)
//     akey "l": a symlink's target
//   xattrs: dkey "/x", one akey per name
//   a directory (class S1: every entry on one target) has one dkey per entry name, akey "e": the entry
//     (file type and the inode's object id), created insert-if-absent, so racing creates get EEXIST
//   a file (class SX: striped) keeps its bytes in akey "d" under dkey = 8-byte big-endian chunk index, at
//     array offset = file offset; its size is max(size floor, end of the data), so writers never update the
//     inode to grow a file, and truncate moves the floor and punches what lies beyond
//
// Operations take the caller's credentials and check permissions the way Linux does (owner, group and
// supplementary groups, mode bits, sticky and setgid directories; uid 0 passes). Errors are Statuses whose
// to_errno() is what a Linux file system answers (ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR, ...).
//
// Thread-safety: a Namespace may be used from many threads; it hands each call a container session of its own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/container.h"
#include "client/file_stream.h"
#include "common/ids.h"
#include "common/status.h"
#include "posix/dir_ops.h"
#include "posix/records.h"

namespace rfos::posix {

struct DirPage {
  std::vector<DirEntry> entries;
  std::string anchor;  // pass back to continue
  bool done = false;
};

struct StatFs {
  uint64_t total_bytes = 0, free_bytes = 0;
  uint32_t block_size = 4096;
  uint32_t name_max = 255;
};

inline constexpr std::string_view kChunkXattr = "user.rfos.chunk_size";
inline constexpr uint32_t kMinChunk = 4096, kMaxChunk = 1u << 30;  // a multiple of 4 KiB in between

class Namespace {
 public:
  // Opens a container session per thread as needed through `open_session`; creates the root directory the
  // first time (owner root, mode 0755 unless root_mode says otherwise).
  using SessionFactory = std::function<Result<std::unique_ptr<client::Container>>()>;
  using SpaceQuery = std::function<Result<StatFs>()>;  // the pool's space, for statfs
  static Result<std::unique_ptr<Namespace>> open(SessionFactory open_session, SpaceQuery space,
                                                 uint32_t root_mode = 0755);
  // The namespace of container `cont` of `pool` (labels or uuids): sessions opened through `control` with
  // options `o`, statfs from the pool's space. `control` must outlive the namespace.
  static Result<std::unique_ptr<Namespace>> open(client::ControlClient& control, const std::string& pool,
                                                 const std::string& cont, const client::ContainerOptions& o);
  ~Namespace();

  ObjectId root() const;

  Result<Attr> lookup(const ObjectId& dir, std::string_view name, const Cred& cred);
  Result<Attr> getattr(const ObjectId& oid);
  // getattr, and for a small file (up to 4095 bytes, all of it on its home target) its bytes in the same round
  // trip (*data set; left empty otherwise): what an open that reads next needs.
  Result<Attr> getattr_with_data(const ObjectId& oid, std::optional<std::string>* data);
  // Walks an absolute or root-relative path ("/" = root), following no symlink in the last component.
  Result<Attr> resolve(std::string_view path, const Cred& cred);

  Result<Attr> mkdir(const ObjectId& dir, std::string_view name, uint32_t mode, const Cred& cred);
  // A regular file (or, with mknod's S_IFMT bits, a fifo, socket or device node). EEXIST when the name exists.
  // chunk: a regular file's chunk size (0: the container's, 1 MiB unless its chunk property says otherwise).
  Result<Attr> mknod(const ObjectId& dir, std::string_view name, uint32_t mode, uint64_t rdev, const Cred& cred,
                     uint32_t chunk = 0);
  Result<Attr> symlink(const ObjectId& dir, std::string_view name, std::string_view target, const Cred& cred);
  Result<std::string> readlink(const ObjectId& oid);
  Result<Attr> link(const ObjectId& oid, const ObjectId& dir, std::string_view name, const Cred& cred);
  // Removes a name; returns the inode's attributes after it (nlink 0: it is gone once nobody holds it open,
  // see forget()).
  Result<Attr> unlink(const ObjectId& dir, std::string_view name, const Cred& cred);
  // The same, for a caller that says which files it has open (`open`, up to kMaxKeep): an inode left without
  // links and not among them is purged in the same operation (*purged set; forget() has nothing left to do).
  Result<Attr> unlink(const ObjectId& dir, std::string_view name, const Cred& cred, std::span<const ObjectId> open,
                      bool* purged);
  Status rmdir(const ObjectId& dir, std::string_view name, const Cred& cred);
  // A file the rename replaces that loses its last name is purged; with `left`, it is not but named in *left
  // (unchanged when there is none), for the caller to forget() once nobody holds it open: a mount's reader of the
  // file it replaced reads on, as after an unlink (the write-then-rename pattern of editors, rsync and installers).
  Status rename(const ObjectId& src_dir, std::string_view src, const ObjectId& dst_dir, std::string_view dst,
                unsigned flags, const Cred& cred, ObjectId* left = nullptr);
  Result<Attr> setattr(const ObjectId& oid, const SetAttr& set, const Cred& cred);
  // Deletes the object of an inode whose link count is 0 (after its last user let go).
  Status forget(const ObjectId& oid);

  // Durability. Operations and small writes are visible to every client when they return, and durable (they
  // survive the loss of power on the server) after sync(); a kill of the server process loses nothing
  // acknowledged either way. set_durable(true) makes each durable when it returns (the mount's -o sync).
  // docs/posix.md, "Durability and coherence".
  Status sync();
  void set_durable(bool durable);

  // Notices of the namespace changes other clients make (posix::Notice, wire kWatch), from every target, on a
  // session and a thread of their own, renewed within their lease, while the returned Watch lives; `on_notice`
  // runs on that thread. This namespace's own changes bring none. A notice is a hint to drop cached state
  // sooner: one lost (a target restarted, a send failed) leaves caches to their timeouts.
  class Watch {
   public:
    virtual ~Watch() = default;
  };
  Result<std::unique_ptr<Watch>> watch(std::function<void(const Notice&)> on_notice);

  // Called with a directory's attributes as an operation left them (a mount's attribute cache keeps them);
  // set before the namespace is used.
  void on_directory_changed(std::function<void(const Attr&)> observer);

  // File data. read returns the bytes read (short at end of file). write is durable on return.
  Result<size_t> read(const ObjectId& oid, uint64_t offset, std::span<uint8_t> out);
  // The same with the file's size as the caller knows it (a mount's open file): no size query to the targets.
  Result<size_t> read(const ObjectId& oid, uint64_t offset, std::span<uint8_t> out, uint64_t size);
  Status write(const ObjectId& oid, uint64_t offset, std::span<const uint8_t> data);
  // Grows regular file `oid` to at least `size` bytes (its floor rises; nothing is cut, so what another client
  // appended meanwhile stays) and moves its mtime and ctime; returns its attributes. fallocate without
  // FALLOC_FL_KEEP_SIZE, and before a punch that keeps the size.
  Result<Attr> grow_to(const ObjectId& oid, uint64_t size, const Cred& cred);
  // Drops the bytes of [offset, offset + length) of regular file `f` (as getattr gave it: its size and layout):
  // they read as zeros. Nothing past f.size is touched, and only the first chunk of a file that lies wholly in
  // it (kSpans clear). A size is the greater of the floor and the data's end, so a caller that keeps the size
  // raises the floor to it first (grow_to(f.oid, f.size)). Moves no times.
  Status punch(const Attr& f, uint64_t offset, uint64_t length);
  // Updates the times of a file written through this namespace (mtime/ctime = now); returns its attributes.
  Result<Attr> touch_written(const ObjectId& oid);
  // A small write (up to 4095 bytes) inside a file's first chunk and the times it moves, as one operation of the
  // file's home target; returns the file's attributes after it. nullopt (nothing done) where that does not
  // apply: write() and touch_written() then. With `times` (atime and mtime, nothing else), those are set after
  // the write, as setattr(oid, times, cred) would: a mount's held write and the utimensat after it (tar, cp -p)
  // in one round trip; a refusal changes nothing.
  Result<std::optional<Attr>> write_and_touch(const ObjectId& oid, uint64_t offset, std::span<const uint8_t> data,
                                              const SetAttr& times = {}, const Cred& cred = {});

  // A whole regular file from `source` at dir/name, all or nothing (rfos put of a path, rfos fs copy): the bytes
  // go into a new file under a hidden name in the same directory ("." + name + ".rfos-put-" + hex), `depth`
  // pieces in flight, and it is renamed over `name` once all of them are durable; a file of that name stays
  // readable until then. On failure the new file is removed (a client that dies half-way leaves the hidden one:
  // any rm clears it). Returns the new file's attributes.
  Result<Attr> put_file(const ObjectId& dir, std::string_view name, uint32_t mode, const client::StreamSource& source,
                        const Cred& cred, uint32_t depth = 16, const client::StreamProgress& progress = {});
  // Writes all of `source` into the regular file `f` from offset 0, `depth` pieces in flight, then updates its
  // times; returns the bytes written. In place: a failure leaves what was written (rfos fs copy onto an existing
  // file, which keeps its inode, owner, links and xattrs, as cp does).
  Result<uint64_t> write_file(const Attr& f, const client::StreamSource& source, uint32_t depth = 16,
                              const client::StreamProgress& progress = {});
  // A whole regular file (`a`, as lookup or getattr gave it) to `sink`, in order, `depth` pieces read ahead;
  // kNotFound when the file went away while it was read.
  Status get_file(const Attr& a, const client::StreamSink& sink, uint32_t depth = 16,
                  const client::StreamProgress& progress = {});

  // Many files at once, for data loaders and copies of trees of small files. `depth` operations in flight on one
  // session; each file gets its own result, and one's failure stops none of the others.
  //
  // put_files creates each dir/name (EEXIST when the name exists) with its bytes in the same operation, as a
  // file made through the mount and closed is: one round trip for a file of up to kMaxDirData bytes; a larger
  // one is created in the batch and its bytes written after it. Visible at once, durable at the next sync().
  struct NewFile {
    std::string name;
    uint32_t mode = 0644;
    std::string data;
  };
  std::vector<Result<Attr>> put_files(const ObjectId& dir, std::span<const NewFile> files, const Cred& cred,
                                      size_t depth = 32);
  // get_files reads whole regular files of `dir` by name, checked as open(O_RDONLY) is: one round trip (the
  // lookup brings the bytes) for a file of up to kMaxDirData bytes held with its directory, get_file for others.
  std::vector<Result<std::string>> get_files(const ObjectId& dir, std::span<const std::string> names, const Cred& cred,
                                             size_t depth = 32);

  // Directory listing in the engine's key order, a page at a time; stable under concurrent changes (an entry present
  // throughout appears exactly once; the anchor is the last name returned).
  Result<DirPage> readdir(const ObjectId& dir, const std::string& anchor, size_t max);
  // The same with each entry's attributes where its inode lives with the directory (every inode made here
  // does): one round trip per page, for readdirplus. Up to kMaxPageEntries a page.
  Result<DirPlusPage> readdir_plus(const ObjectId& dir, const std::string& anchor, size_t max);
  // readdir_plus with every entry's attributes (asked of its inode's target where the page has none): what
  // `ls -l` shows. An entry removed since the page was read is left out.
  Result<DirPlusPage> list(const ObjectId& dir, const std::string& anchor, size_t max);

  // The xattr `user.rfos.chunk_size` (decimal bytes) reads and, on an empty regular file, sets its chunk size.
  Status setxattr(const ObjectId& oid, std::string_view name, std::string_view value, int flags, const Cred& cred);
  Result<std::string> getxattr(const ObjectId& oid, std::string_view name);
  Result<std::vector<std::string>> listxattr(const ObjectId& oid);
  Status removexattr(const ObjectId& oid, std::string_view name, const Cred& cred);

  Result<StatFs> statfs();

  // What check() found: a consistent namespace has every list empty.
  struct CheckReport {
    uint64_t directories = 0, files = 0;          // reachable from the root
    std::vector<std::string> dangling;            // entries whose inode is gone (their paths)
    std::vector<ObjectId> orphans;                // inodes no entry reaches, with links left
    std::vector<ObjectId> unlinked;               // inodes of no name and no links: an open file's, or a purge
                                                  // that did not happen (a client died holding it)
    std::vector<std::string> wrong_links;         // files whose link count differs from their names ("path n/m")
    std::vector<std::string> unfinished_puts;     // hidden files of put_file that never got their name
    std::vector<ObjectId> unfinished_put_inodes;  // theirs, in the same order
    // Objects holding file data that no inode and no named object claims: chunks of a removed file whose purge
    // did not reach every target (its client died between the steps), or objects the raw API wrote in a file's
    // layout. Their space is held until they are punched.
    std::vector<ObjectId> leaked;
    bool consistent() const { return dangling.empty() && orphans.empty() && wrong_links.empty(); }
    // What `rfos fs check` prints: the counts, a line per finding, then "consistent" or "INCONSISTENT".
    std::string describe() const;
  };
  // Walks the whole namespace from the root and every object of the container, read-only (rfos fs check). Run it
  // while nothing writes the namespace: an operation in flight shows as an inconsistency.
  Result<CheckReport> check();
  // Gives back what `found` (a check's report) says is held and reachable from nowhere: dangling entries of
  // files and unfinished puts lose their names (each only if it is still what the check saw), unlinked inodes
  // are purged, and, with `punch_leaked`, leaked file data that looks like what an unfinished purge leaves is
  // punched; a dangling entry of a directory, orphans (inodes with links left and no name) and wrong link counts
  // stay, for someone to look at. One item's failure stops none of the others. Only while no client has the
  // container open (`rfos fs check --repair` asks the server), as a file system is repaired unmounted: an
  // unlinked file is one a live mount may still read, and an unfinished put one a live put is still writing.
  struct RepairReport {
    size_t repaired = 0;
    std::vector<std::string> left;    // found, and left alone on purpose
    std::vector<std::string> failed;  // found, and the repair failed
  };
  // What it changed is in *out even where it stops part-way (the error says why it stopped).
  Status repair(const CheckReport& found, bool punch_leaked, RepairReport* out);

  // Whether `oid` is an inode of a namespace (it holds an inode record): how `rfos ls` tells the namespace's
  // objects from others.
  static Result<bool> holds_inode(client::Container& c, const ObjectId& oid);

  // Permission check as the kernel does it: mask of R_OK, W_OK, X_OK.
  static bool permits(const Attr& a, const Cred& c, int mask);

  class Impl;

 private:
  explicit Namespace(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::posix
