#define FUSE_USE_VERSION 34
#include "fuse/mount.h"
#include "common/clock.h"
#include "fuse/inodes.h"
#include "fuse/whole_dirs.h"
#include "fuse/write_behind.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

namespace rfos::fuse {
namespace {

using posix::Attr;
using posix::Cred;
using posix::Namespace;

struct FileHandle {
  ObjectId oid;
  std::mutex mu;
  uint64_t size = 0;  // as last seen; refreshed when a read goes past it
  bool written = false;
  uint64_t last_write = 0;  // the number of its last write (Inodes::written)
  bool sync = false;        // opened O_SYNC or O_DSYNC: each write durable before it returns
  // A small file's bytes as the open found them; reads are answered from them while nobody wrote the file
  // through this mount since (`writes_at_open`). Another client's write shows at the next open (close-to-open).
  std::optional<std::string> data;
  fuse_ino_t ino = 0;
  uint64_t writes_at_open = 0;
};

struct DirHandle {
  ObjectId oid;
  std::mutex mu;
  // Fetched so far, with the inodes' attributes where the directory's target had them (and when the page
  // was asked for): offsets index into it, so they stay stable.
  std::vector<posix::DirPlusEntry> entries;
  std::vector<uint64_t> fetched_at;
  std::string anchor;
  bool done = false;
};

// The buffers requests are read into. libfuse allocates each (its size is libfuse's: the largest request);
// they are kept here for the next request instead of being freed.
class RequestBuffers {
 public:
  RequestBuffers() = default;
  RequestBuffers(const RequestBuffers&) = delete;
  RequestBuffers& operator=(const RequestBuffers&) = delete;
  ~RequestBuffers() {
    for (void* p : free_) std::free(p);
  }

  void* take() {  // null when none is free: libfuse allocates one
    std::lock_guard lock(mu_);
    if (free_.empty()) return nullptr;
    void* p = free_.back();
    free_.pop_back();
    return p;
  }
  void give(void* p) {
    std::lock_guard lock(mu_);
    if (free_.size() < kKeep)
      free_.push_back(p);
    else
      std::free(p);
  }

 private:
  static constexpr size_t kKeep = 64;  // 64 MiB at most kept idle
  std::mutex mu_;
  std::vector<void*> free_;
};

// The buffer the calling worker read its current request into (see serve_requests).
thread_local fuse_buf* t_request = nullptr;

void reply_status(fuse_req_t req, const Status& s);

class Fs {
 public:
  Fs(Namespace& ns, const MountOptions& o) : ns_(ns), opt_(o) {
    static_assert(kRootIno == FUSE_ROOT_ID);
    // A directory's attributes after each change go into the cache: the kernel asks for them before the next
    // change in it (its permission check), and that costs no round trip.
    ns_.on_directory_changed([this](const Attr& d) { inodes_.changed(d, now_ns()); });
    if (!o.sync_writes) writes_ = std::make_unique<WriteBehind>(ns, o.writer_threads, 16u << 20);
  }

  Namespace& ns() { return ns_; }
  // Write-behind (null with --sync-writes): what reads and attribute queries of a file wait for.
  WriteBehind* writes() { return writes_.get(); }
  RequestBuffers& buffers() { return *buffers_; }
  // A write's bytes for write-behind. A large write takes the request buffer it arrived in from the worker
  // (which reads its next request into another), so its bytes are copied only by the kernel on their way in.
  // Small writes are copied: a buffer is as large as the largest request, and write-behind counts the bytes
  // written, so at least half of each held buffer is data.
  WriteBytes take_write(const char* data, size_t size) {
    constexpr size_t kTakeFrom = 512u << 10;
    fuse_buf* b = t_request;
    auto at = reinterpret_cast<uintptr_t>(data);
    auto mem = b && !(b->flags & FUSE_BUF_IS_FD) ? reinterpret_cast<uintptr_t>(b->mem) : uintptr_t{0};
    if (size < kTakeFrom || !mem || at < mem || at + size > mem + b->size) return WriteBytes::copy_of(data, size);
    std::shared_ptr<const void> owner(b->mem, [pool = buffers_](const void* p) { pool->give(const_cast<void*>(p)); });
    b->mem = nullptr;
    return {std::move(owner), reinterpret_cast<const uint8_t*>(data), size};
  }
  bool wait_writes(const ObjectId& oid) { return writes_ && writes_->wait(oid); }
  const MountOptions& options() const { return opt_; }

  // Another client's change (Namespace::watch): what the kernel and the inode table hold of it goes now rather
  // than at the end of its timeout. Pages of a file changed elsewhere go too, as at its next open they would.
  void invalidate(fuse_session* se, const posix::Notice& n) {
    for (const ObjectId& o : n.inodes) {
      inodes_.stale(o);
      if (auto ino = inodes_.known(o)) fuse_lowlevel_notify_inval_inode(se, *ino, 0, 0);
    }
    for (const auto& [dir, name] : n.entries) {
      whole_.forget(dir);  // before the kernel drops the name: its next lookup asks the target
      if (auto ino = inodes_.known(dir)) fuse_lowlevel_notify_inval_entry(se, *ino, name.data(), name.size());
    }
  }

  Result<ObjectId> oid(fuse_ino_t ino) { return inodes_.oid(ino); }
  fuse_ino_t remember(const ObjectId& oid) { return inodes_.remember(oid); }
  void forget(fuse_ino_t ino, uint64_t n) { inodes_.forget(ino, n); }
  void opened(fuse_ino_t ino, int delta) { inodes_.opened(ino, delta); }
  void unlinked(const ObjectId& oid) { inodes_.unlinked(oid); }
  // The inode number stat and readdir show (Inodes::number), not the one the kernel names the inode by.
  uint64_t number(const ObjectId& oid) const { return inodes_.number(oid); }

  struct stat to_stat(const Attr& a, fuse_ino_t ino) const {
    struct stat st {};
    st.st_ino = a.oid == ObjectId{} ? ino : number(a.oid);
    st.st_mode = a.mode;
    st.st_nlink = a.nlink;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_rdev = a.rdev;
    st.st_size = static_cast<off_t>(a.size);
    st.st_blksize = 1 << 20;
    st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
    st.st_atim = {static_cast<time_t>(a.atime_ns / 1000000000), static_cast<long>(a.atime_ns % 1000000000)};
    st.st_mtim = {static_cast<time_t>(a.mtime_ns / 1000000000), static_cast<long>(a.mtime_ns % 1000000000)};
    st.st_ctim = {static_cast<time_t>(a.ctime_ns / 1000000000), static_cast<long>(a.ctime_ns % 1000000000)};
    return st;
  }

  // Attributes seen at `at` (when the request that brought them was sent): the kernel's queries within the
  // attribute timeout are answered from them.
  static uint64_t now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(steady_now().time_since_epoch()).count());
  }
  void seen(const Attr& a, uint64_t at) { inodes_.seen(a.oid, a, at); }
  // The attributes of `oid` afresh from its home target (with a small file's bytes, given `data`), kept as seen.
  // Kept only when no write of it was in flight or came meanwhile: the target may have answered before it landed.
  Result<Attr> fresh(const ObjectId& oid, std::optional<std::string>* data = nullptr) {
    uint64_t at = now_ns(), writes_then = inodes_.writes_of(oid);
    bool pending = writes_ && writes_->pending(oid);
    auto a = ns_.getattr_with_data(oid, data);
    if (a.is_ok() && !pending) inodes_.seen(a->oid, *a, at, writes_then);
    return a;
  }
  void stale(const ObjectId& oid) { inodes_.stale(oid); }
  // The directories this mount made and the names it made in them (whole_dirs.h).
  WholeDirs& whole() { return whole_; }
  void stale_all() { inodes_.stale_all(); }
  // A change of directory `dir` failed: a part of it may have been done, so its cached attributes go.
  void failed(fuse_req_t req, const ObjectId& dir, const Status& s) {
    stale(dir);
    whole_.forget(dir);
    reply_status(req, s);
  }
  uint64_t written(const ObjectId& oid, uint64_t end) { return inodes_.written(oid, end); }
  std::optional<uint64_t> times_set(const ObjectId& oid) { return inodes_.times_set(oid); }
  void times_restore(const ObjectId& oid, std::optional<uint64_t> before) { inodes_.times_restore(oid, before); }
  bool times_set_since(const ObjectId& oid, uint64_t write) { return inodes_.times_set_since(oid, write); }
  bool open_files(size_t max, std::vector<ObjectId>* out) { return inodes_.open_files(max, out); }
  uint64_t writes(fuse_ino_t ino) { return inodes_.writes(ino); }
  // The attributes last seen of `ino`, however old.
  bool last_seen(fuse_ino_t ino, Attr* a) {
    uint64_t age = 0;
    return inodes_.recent(ino, now_ns(), UINT64_MAX, a, &age);
  }
  // What was seen of `ino` within the attribute timeout, and for how much longer the kernel may keep it.
  bool recent(fuse_ino_t ino, Attr* a, double* left_s) {
    uint64_t age = 0, timeout = static_cast<uint64_t>(opt_.attr_timeout_s * 1e9);
    if (timeout == 0 || !inodes_.recent(ino, now_ns(), timeout, a, &age)) return false;
    *left_s = static_cast<double>(timeout - age) / 1e9;
    return true;
  }

  void created(const ObjectId& oid) { inodes_.created(oid, now_ns()); }
  void xattrs_changed(const ObjectId& oid) { inodes_.xattrs_changed(oid); }
  bool no_xattrs(fuse_ino_t ino) {
    return inodes_.no_xattrs(ino, now_ns(), static_cast<uint64_t>(opt_.attr_timeout_s * 1e9));
  }

  // `made`: the inode was just made here (it has no extended attributes).
  void reply_entry(fuse_req_t req, const Attr& a, uint64_t at = now_ns(), bool made = false) {
    fuse_entry_param e{};
    e.ino = remember(a.oid);
    seen(a, at);
    if (made) created(a.oid);
    e.attr = to_stat(a, e.ino);
    e.attr_timeout = opt_.attr_timeout_s;
    e.entry_timeout = opt_.entry_timeout_s;
    if (fuse_reply_entry(req, &e) != 0) forget(e.ino, 1);  // the kernel did not take it
  }

 private:
  Namespace& ns_;
  MountOptions opt_;
  std::shared_ptr<RequestBuffers> buffers_ = std::make_shared<RequestBuffers>();  // queued writes hold it too
  std::unique_ptr<WriteBehind> writes_;
  Inodes inodes_{ns_.root(), [this](const ObjectId& oid) { (void)ns_.forget(oid); }};
  WholeDirs whole_{static_cast<uint64_t>(opt_.negative_timeout_s * 1e9)};
};

Fs* fs_of(fuse_req_t req) { return static_cast<Fs*>(fuse_req_userdata(req)); }

// The caller's supplementary groups, read from /proc only when a decision needs them (posix::Cred::later): the
// read costs about 11 us, a tenth of an unlink here, and most decisions do not depend on them. The thread's own
// status, as fuse_req_getgroups reads it, by its id (the request may be answered by the time it is asked).
Cred cred_of(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  pid_t tid = ctx->pid;
  return Cred::with_groups_later(ctx->uid, ctx->gid, [tid]() -> Result<std::vector<uint32_t>> {
    std::ifstream in("/proc/" + std::to_string(tid) + "/task/" + std::to_string(tid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Groups:", 0) != 0) continue;
      std::istringstream fields(line.substr(7));
      std::vector<uint32_t> groups;
      for (uint32_t g; groups.size() < posix::kMaxGroups && fields >> g;) groups.push_back(g);
      return groups;
    }
    return error(StatusCode::kGroupsNeeded, "the caller's groups cannot be read (it is gone)");
  });
}

void reply_status(fuse_req_t req, const Status& s) { fuse_reply_err(req, s.is_ok() ? 0 : s.to_errno()); }

// An inode the kernel still names but another client removed (a file renamed over, or unlinked): ESTALE makes
// the kernel look its path up again and retry (path_openat, vfs_statx), so an open or stat of the name finds
// what is there now, as on a local file system; NFS does the same.
void reply_stale_or(fuse_req_t req, const Status& s) {
  if (s.code() == StatusCode::kNotFound) return (void)fuse_reply_err(req, ESTALE);
  reply_status(req, s);
}

// The object behind `ino`, or an ESTALE reply.
#define RFOS_FUSE_OID(var, req, ino)   \
  auto var##_r = fs_of(req)->oid(ino); \
  if (!var##_r.is_ok()) {              \
    fuse_reply_err(req, ESTALE);       \
    return;                            \
  }                                    \
  ObjectId var = *var##_r

void op_init(void* userdata, fuse_conn_info* conn) {
  auto* fs = static_cast<Fs*>(userdata);
  conn->max_write = 1u << 20;
  conn->max_readahead = fs->options().readahead_bytes;
  // Cached pages are judged at open (close-to-open, FOPEN_KEEP_CACHE), not whenever an mtime comes back: this
  // mount's own close moves the mtime, and with auto_inval_data the kernel dropped the file's pages for it.
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_AUTO_INVAL_DATA);
  // readdirplus on every page of a listing, not only the first (the kernel's "auto" mode falls back to plain
  // readdir once its cached attributes spare it the lookups, and then looks up every later name): a page costs
  // one round trip either way, and with the attributes scandir+stat and `ls -l` cost no lookup per name.
  if (conn->capable & FUSE_CAP_READDIRPLUS) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_READDIRPLUS_AUTO);
  }
  // Off by default: other clients must see a write once it returned. With it, the kernel gathers buffered
  // writes and sends them in parallel, and they reach the store at the latest on fsync and close.
  if (fs->options().writeback_cache && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
    conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  else
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_WRITEBACK_CACHE);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  RFOS_FUSE_OID(dir, req, parent);
  uint64_t at = Fs::now_ns();
  uint64_t left_ns = 0;
  if (fs_of(req)->whole().absent(dir, name, at, &left_ns)) {  // a name about to be made in a new directory
    fuse_entry_param e{};
    e.entry_timeout = static_cast<double>(left_ns) / 1e9;  // no longer than what is known lasts
    fuse_reply_entry(req, &e);
    return;
  }
  auto a = fs_of(req)->ns().lookup(dir, name, cred_of(req));
  if (a.is_ok() && fs_of(req)->wait_writes(a->oid)) {  // its size, landed
    at = Fs::now_ns();
    a = fs_of(req)->ns().getattr(a->oid);
  }
  if (a.status().code() == StatusCode::kNotFound && fs_of(req)->options().negative_timeout_s > 0) {
    // A negative entry: the kernel keeps the name's absence for the timeout (this mount's own creates and
    // renames replace it at once; another client's show within the timeout, docs/posix.md).
    fuse_entry_param e{};
    e.entry_timeout = fs_of(req)->options().negative_timeout_s;
    fuse_reply_entry(req, &e);
    return;
  }
  if (!a.is_ok()) return reply_status(req, a.status());
  fs_of(req)->reply_entry(req, *a, at);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
  fs_of(req)->forget(ino, n);
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) fs_of(req)->forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  RFOS_FUSE_OID(oid, req, ino);
  Fs* fs = fs_of(req);
  Attr a;
  double left_s = 0;
  // Within the timeout, as the kernel's own copy; writes still held need not land first (their size is in it).
  if (fs->recent(ino, &a, &left_s)) {
    struct stat st = fs->to_stat(a, ino);
    fuse_reply_attr(req, &st, left_s);
    return;
  }
  fs->wait_writes(oid);  // the target's answer then has their size
  auto got = fs->fresh(oid);
  if (!got.is_ok()) return reply_stale_or(req, got.status());
  struct stat st = fs->to_stat(*got, ino);
  fuse_reply_attr(req, &st, fs->options().attr_timeout_s);
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  RFOS_FUSE_OID(oid, req, ino);
  posix::SetAttr s;
  s.set_mode = to_set & FUSE_SET_ATTR_MODE;
  s.mode = attr->st_mode;
  s.set_uid = to_set & FUSE_SET_ATTR_UID;
  s.uid = attr->st_uid;
  s.set_gid = to_set & FUSE_SET_ATTR_GID;
  s.gid = attr->st_gid;
  s.set_size = to_set & FUSE_SET_ATTR_SIZE;
  s.size = static_cast<uint64_t>(attr->st_size);
  s.set_atime = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
  s.atime_ns =
      (to_set & FUSE_SET_ATTR_ATIME_NOW) ? wall_ns() : attr->st_atim.tv_sec * 1000000000ull + attr->st_atim.tv_nsec;
  s.set_mtime = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
  s.mtime_ns =
      (to_set & FUSE_SET_ATTR_MTIME_NOW) ? wall_ns() : attr->st_mtim.tv_sec * 1000000000ull + attr->st_mtim.tv_nsec;
  Cred cred = cred_of(req);
  uint64_t at = Fs::now_ns();
  Result<Attr> a = error(StatusCode::kInternal, "unset");
  // Earlier writes land first (a truncate is not overtaken by them); times alone go with a small write held
  // back, in one round trip (tar and cp -p set them on the file they just wrote).
  const bool times_only = (s.set_atime || s.set_mtime) && s.only_times();
  // A close racing the set does not move the mtime after it (times_set before the set is sent).
  const bool sets_mtime = s.set_mtime;
  std::optional<uint64_t> times_before;
  if (sets_mtime) times_before = fs_of(req)->times_set(oid);
  std::optional<Attr> with_write;
  if (times_only && fs_of(req)->writes())
    with_write = fs_of(req)->writes()->land_with(oid, s, cred);
  else
    fs_of(req)->wait_writes(oid);
  if (with_write) {
    a = *with_write;
  } else if (fi && s.set_size) {
    // ftruncate through a descriptor the kernel opened for writing: the size (and the times that come with
    // it) change whatever the file's mode says now; owner and mode changes still need the caller's rights.
    posix::SetAttr size_only;
    size_only.set_size = true;
    size_only.size = s.size;
    size_only.set_atime = s.set_atime;
    size_only.atime_ns = s.atime_ns;
    size_only.set_mtime = s.set_mtime;
    size_only.mtime_ns = s.mtime_ns;
    a = fs_of(req)->ns().setattr(oid, size_only, Cred{0, 0, {}});
    s.set_size = s.set_atime = s.set_mtime = false;
    if (a.is_ok() && (s.set_mode || s.set_uid || s.set_gid)) a = fs_of(req)->ns().setattr(oid, s, cred);
    s.set_size = true;
  } else {
    a = fs_of(req)->ns().setattr(oid, s, cred);
  }
  if (!a.is_ok()) {
    fs_of(req)->stale(oid);  // a part may have been done
    if (sets_mtime) fs_of(req)->times_restore(oid, times_before);
    return reply_status(req, a.status());
  }
  fs_of(req)->seen(*a, at);
  if (fi && fi->fh && s.set_size) {
    auto* h = reinterpret_cast<FileHandle*>(fi->fh);
    std::lock_guard lock(h->mu);
    h->size = s.size;
  }
  struct stat st = fs_of(req)->to_stat(*a, ino);
  fuse_reply_attr(req, &st, fs_of(req)->options().attr_timeout_s);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  RFOS_FUSE_OID(oid, req, ino);
  auto t = fs_of(req)->ns().readlink(oid);
  if (!t.is_ok()) return reply_status(req, t.status());
  fuse_reply_readlink(req, t->c_str());
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  RFOS_FUSE_OID(dir, req, parent);
  auto a = fs_of(req)->ns().mknod(dir, name, mode, rdev, cred_of(req));
  if (!a.is_ok()) return fs_of(req)->failed(req, dir, a.status());
  fs_of(req)->whole().named(dir, name);
  fs_of(req)->reply_entry(req, *a, Fs::now_ns(), true);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  RFOS_FUSE_OID(dir, req, parent);
  uint64_t at = Fs::now_ns();
  auto a = fs_of(req)->ns().mkdir(dir, name, mode, cred_of(req));
  if (!a.is_ok()) return fs_of(req)->failed(req, dir, a.status());
  fs_of(req)->whole().named(dir, name);
  fs_of(req)->whole().made(a->oid, at);  // empty: another client can have made names in it only since
  fs_of(req)->reply_entry(req, *a, Fs::now_ns(), true);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  RFOS_FUSE_OID(dir, req, parent);
  // A file nobody here has open is purged with its last name (the same operation); an open one once closed.
  std::vector<ObjectId> open;
  bool purged = false;
  auto a = fs_of(req)->open_files(posix::kMaxKeep, &open)
               ? fs_of(req)->ns().unlink(dir, name, cred_of(req), open, &purged)
               : fs_of(req)->ns().unlink(dir, name, cred_of(req));
  if (!a.is_ok()) return fs_of(req)->failed(req, dir, a.status());
  fs_of(req)->whole().unnamed(dir, name);
  fs_of(req)->stale(a->oid);
  if (a->nlink == 0 && !purged) fs_of(req)->unlinked(a->oid);
  fuse_reply_err(req, 0);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  RFOS_FUSE_OID(dir, req, parent);
  Status s = fs_of(req)->ns().rmdir(dir, name, cred_of(req));
  if (!s.is_ok()) return fs_of(req)->failed(req, dir, s);
  fs_of(req)->whole().unnamed(dir, name);
  reply_status(req, s);
}

void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  RFOS_FUSE_OID(dir, req, parent);
  auto a = fs_of(req)->ns().symlink(dir, name, link, cred_of(req));
  if (!a.is_ok()) return fs_of(req)->failed(req, dir, a.status());
  fs_of(req)->whole().named(dir, name);
  fs_of(req)->reply_entry(req, *a, Fs::now_ns(), true);
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
               unsigned int flags) {
  RFOS_FUSE_OID(from, req, parent);
  RFOS_FUSE_OID(to, req, newparent);
  unsigned f =
      (flags & RENAME_NOREPLACE ? posix::kRenameNoReplace : 0) | (flags & RENAME_EXCHANGE ? posix::kRenameExchange : 0);
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return (void)fuse_reply_err(req, EINVAL);
  // A file it replaces that loses its last name goes once nobody here holds it open (as after an unlink): a
  // reader of the old file reads on while a writer renames the new one over it.
  ObjectId left;
  Status s = fs_of(req)->ns().rename(from, name, to, newname, f, cred_of(req), &left);
  fs_of(req)->stale_all();  // the directories, the moved inode's ctime, a replaced inode's link count
  if (s.is_ok() && left != ObjectId{}) fs_of(req)->unlinked(left);
  WholeDirs& whole = fs_of(req)->whole();
  if (!s.is_ok()) {
    whole.forget(from);
    whole.forget(to);
  } else if (!(f & posix::kRenameExchange)) {  // an exchange leaves both names there
    whole.unnamed(from, name);
    whole.named(to, newname);
  }
  reply_status(req, s);
}

void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  RFOS_FUSE_OID(oid, req, ino);
  RFOS_FUSE_OID(dir, req, newparent);
  auto a = fs_of(req)->ns().link(oid, dir, newname, cred_of(req));
  fs_of(req)->stale(oid);
  if (!a.is_ok()) return fs_of(req)->failed(req, dir, a.status());
  fs_of(req)->whole().named(dir, newname);
  fs_of(req)->reply_entry(req, *a);
}

// `keep_cache`: the file is as this mount last saw it, so the kernel's cached pages of it are good.
void open_file(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, const Attr& a, bool keep_cache = false,
               std::optional<std::string> data = std::nullopt) {
  auto* h = new FileHandle;
  h->oid = a.oid;
  h->size = a.size;
  h->ino = ino;
  h->data = std::move(data);
  h->writes_at_open = fs_of(req)->writes(ino);
  fi->fh = reinterpret_cast<uint64_t>(h);
  fi->direct_io = fs_of(req)->options().direct_io;
  h->sync = (fi->flags & (O_SYNC | O_DSYNC)) != 0;
  fi->keep_cache = keep_cache && !fi->direct_io;  // else what another client wrote since is read afresh
  // A descriptor that cannot write has nothing for close to wait for: the kernel skips the flush request, and a
  // close costs the caller no crossing into the mount (the release that follows is not waited for).
  fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
  fs_of(req)->opened(ino, 1);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  RFOS_FUSE_OID(oid, req, ino);
  Fs* fs = fs_of(req);
  Attr before;
  bool known = !fs->wait_writes(oid) && fs->last_seen(ino, &before);
  std::optional<std::string> data;  // a small file's bytes come with its attributes
  // Afresh: what other clients closed before this open (close-to-open).
  auto a = fs->fresh(oid, (fi->flags & O_ACCMODE) == O_WRONLY ? nullptr : &data);
  if (!a.is_ok()) return reply_stale_or(req, a.status());
  bool unchanged = known && before.mtime_ns == a->mtime_ns && before.ctime_ns == a->ctime_ns && before.size == a->size;
  if (S_ISDIR(a->mode)) return (void)fuse_reply_err(req, EISDIR);
  // O_TRUNC comes with the open (libfuse asks the kernel for atomic_o_trunc): the file is cut here, and its
  // mtime and ctime move even when it was empty already, as POSIX says of open(O_TRUNC).
  if ((fi->flags & O_TRUNC) && S_ISREG(a->mode)) {
    fs_of(req)->wait_writes(oid);
    posix::SetAttr cut;
    cut.set_size = true;
    uint64_t at = Fs::now_ns();
    a = fs_of(req)->ns().setattr(oid, cut, cred_of(req));
    if (!a.is_ok()) {
      fs_of(req)->stale(oid);
      return reply_status(req, a.status());
    }
    fs_of(req)->seen(*a, at);
  }
  if (fi->flags & O_TRUNC) {  // the file was just cut: neither the bytes nor the pages of before are good
    data.reset();
    unchanged = false;
  }
  open_file(req, ino, fi, *a, unchanged, std::move(data));
  if (fuse_reply_open(req, fi) != 0) {
    fs_of(req)->opened(ino, -1);
    delete reinterpret_cast<FileHandle*>(fi->fh);
  }
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  RFOS_FUSE_OID(dir, req, parent);
  Fs* fs = fs_of(req);
  uint64_t at = Fs::now_ns();
  auto a = fs->ns().mknod(dir, name, S_IFREG | (mode & 07777), 0, cred_of(req));
  if (!a.is_ok()) return fs->failed(req, dir, a.status());
  fs->whole().named(dir, name);
  fuse_entry_param e{};
  e.ino = fs->remember(a->oid);
  fs->seen(*a, at);
  fs->created(a->oid);
  e.attr = fs->to_stat(*a, e.ino);
  e.attr_timeout = fs->options().attr_timeout_s;
  e.entry_timeout = fs->options().entry_timeout_s;
  open_file(req, e.ino, fi, *a);
  if (fuse_reply_create(req, &e, fi) != 0) {
    fs->opened(e.ino, -1);
    fs->forget(e.ino, 1);
    delete reinterpret_cast<FileHandle*>(fi->fh);
  }
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto* h = reinterpret_cast<FileHandle*>(fi->fh);
  Fs* fs = fs_of(req);
  uint64_t known;
  {
    std::lock_guard lock(h->mu);
    known = h->size;
  }
  fs->wait_writes(h->oid);
  if (h->data && fs->writes(h->ino) == h->writes_at_open) {  // the small file as the open read it
    // A copy: once the kernel has the reply it may release the file, and another thread delete the handle,
    // before this call returns.
    const std::string& d = *h->data;
    size_t at = std::min<size_t>(static_cast<size_t>(off), d.size());
    std::string piece = d.substr(at, std::min(size, d.size() - at));
    fuse_reply_buf(req, piece.data(), piece.size());
    return;
  }
  if (static_cast<uint64_t>(off) + size > known) {  // past what we knew: another client may have grown it
    auto a = fs->ns().getattr(h->oid);
    if (!a.is_ok()) return reply_status(req, a.status());
    std::lock_guard lock(h->mu);
    h->size = std::max(h->size, a->size);
    known = h->size;
  }
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size]);
  auto n = fs->ns().read(h->oid, static_cast<uint64_t>(off), {buf.get(), size}, known);
  if (!n.is_ok()) return reply_status(req, n.status());
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf.get()), *n);
}

void op_write(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off, fuse_file_info* fi) {
  auto* h = reinterpret_cast<FileHandle*>(fi->fh);
  Fs* fs = fs_of(req);
  // The kernel holds a FUSE file to 2^63 - 1 bytes, the store to posix::kMaxFileSize: as a local file system at
  // its limit, a write that starts there fails and one that crosses it is cut short, here, before write-behind
  // could acknowledge bytes the targets will refuse.
  if (static_cast<uint64_t>(off) >= posix::kMaxFileSize) {
    fuse_reply_err(req, EFBIG);
    return;
  }
  size = static_cast<size_t>(std::min<uint64_t>(size, posix::kMaxFileSize - static_cast<uint64_t>(off)));
  // Open files' copies of the bytes are stale from here.
  const uint64_t number = fs->written(h->oid, static_cast<uint64_t>(off) + size);
  if (fs->writes() && !h->sync) {
    fs->writes()->submit(h->oid, static_cast<uint64_t>(off), fs->take_write(data, size));
  } else {
    if (fs->writes()) fs->wait_writes(h->oid);  // what was written before goes first
    Status s = fs->ns().write(h->oid, static_cast<uint64_t>(off), {reinterpret_cast<const uint8_t*>(data), size});
    if (s.is_ok() && h->sync && !fs->options().durable) s = fs->ns().sync();
    if (!s.is_ok()) {
      fs->stale(h->oid);  // the size it grew to
      return reply_status(req, s);
    }
  }
  {
    std::lock_guard lock(h->mu);
    h->size = std::max<uint64_t>(h->size, static_cast<uint64_t>(off) + size);
    h->written = true;
    h->last_write = std::max(h->last_write, number);
  }
  fuse_reply_write(req, size);
}

// fallocate: a range made to read as zeros (FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE: Namespace::punch, after
// the floor rose to the size so that it stays) and the file grown to the range's end unless FALLOC_FL_KEEP_SIZE
// (Namespace::grow_to, which cuts nothing another client appended meanwhile); mtime and ctime move, as ext4's.
// The kernel checked the descriptor is open for writing and holds this mount's other writers of the file off. No
// space is set aside: the targets allocate as bytes are written, so a later write may still find the pool full
// (ENOSPC), as on a thinly provisioned disk. Modes that move bytes (collapse, insert) are EOPNOTSUPP, and callers
// fall back to writing.
void op_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length, fuse_file_info* fi) {
  auto* h = reinterpret_cast<FileHandle*>(fi->fh);
  Fs* fs = fs_of(req);
  if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
    fuse_reply_err(req, EOPNOTSUPP);
    return;
  }
  const auto off = static_cast<uint64_t>(offset), len = static_cast<uint64_t>(length);
  if (off > posix::kMaxFileSize || len > posix::kMaxFileSize - off) {
    fuse_reply_err(req, EFBIG);
    return;
  }
  const bool zeros = mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE);
  const bool grows = !(mode & FALLOC_FL_KEEP_SIZE);
  const Cred writer{0, 0, {}};  // as ftruncate through this descriptor
  // Open files' copies of the bytes are stale from here (and the size the file may grow to is known).
  const uint64_t number = fs->written(h->oid, grows ? off + len : 0);
  fs->wait_writes(h->oid);
  uint64_t at = Fs::now_ns();
  // The size and layout now, whoever changed them. A growth is asked for only past the size: a target that
  // predates kGrowOnly takes it for a size set (which cuts nothing, but would lower the floor).
  Result<Attr> before = fs->ns().getattr(h->oid);
  Result<Attr> a = before;
  const uint64_t size = before.is_ok() ? std::max(before->size, grows ? off + len : 0) : 0;
  // Zeros: the floor rises to the size first (the punched bytes count still), the range is cut, and only then
  // does the file grow, so a cut that fails part-way leaves the size as it was, as ext4's does.
  if (a.is_ok() && zeros) {
    a = fs->ns().grow_to(h->oid, before->size, writer);
    if (a.is_ok()) {
      Status s = fs->ns().punch(*before, off, len);
      if (!s.is_ok()) a = s;
    }
  }
  if (a.is_ok() && size > before->size)
    a = fs->ns().grow_to(h->oid, size, writer);
  else if (a.is_ok() && !zeros)
    a = fs->ns().touch_written(h->oid);
  if (a.is_ok() && h->sync && !fs->options().durable) {
    Status s = fs->ns().sync();
    if (!s.is_ok()) a = s;
  }
  if (!a.is_ok()) {
    fs->stale(h->oid);
    return reply_status(req, a.status());
  }
  fs->seen(*a, at);
  {
    std::lock_guard lock(h->mu);
    h->size = std::max(h->size, a->size);
    h->last_write = std::max(h->last_write, number);
  }
  fuse_reply_err(req, 0);
}

// flush (close) and fsync: every write of the file landed (write-behind) and the file's mtime set, so that
// whoever opens it next, on any client, sees it (close-to-open). fsync then makes it durable.
Status settle(Fs* fs, FileHandle* h) {
  std::optional<Attr> touched;  // a small held write went with the time update
  uint64_t at = Fs::now_ns();
  if (fs->writes()) {
    Status s = fs->writes()->settle(h->oid, &touched);
    if (!s.is_ok()) {
      fs->stale(h->oid);
      return s;
    }
  }
  bool written;
  uint64_t last_write;
  {
    std::lock_guard lock(h->mu);
    written = h->written;
    last_write = h->last_write;
    h->written = false;
  }
  // Not when the times were set after the last write (tar, cp -p): the writes moved them before that.
  if (written && !touched && !fs->times_set_since(h->oid, last_write)) {
    at = Fs::now_ns();
    RFOS_ASSIGN_OR_RETURN(Attr a, fs->ns().touch_written(h->oid));
    touched = a;
  }
  if (touched) fs->seen(*touched, at);
  return Status::ok();
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  reply_status(req, settle(fs_of(req), reinterpret_cast<FileHandle*>(fi->fh)));
}

// One sync of every target: the file's writes and the namespace operations before them (its name among them)
// become durable together, which fsync of the file and then of its directory would give on a local file system.
void op_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
  Status s = settle(fs_of(req), reinterpret_cast<FileHandle*>(fi->fh));
  if (s.is_ok()) s = fs_of(req)->ns().sync();
  reply_status(req, s);
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { reply_status(req, fs_of(req)->ns().sync()); }

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto* h = reinterpret_cast<FileHandle*>(fi->fh);
  Status s = settle(fs_of(req), h);
  delete h;
  fs_of(req)->opened(ino, -1);
  reply_status(req, s);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  RFOS_FUSE_OID(oid, req, ino);
  // The kernel checked the directory's permissions from attributes this mount gave it; when they are recent,
  // no round trip: a directory removed meanwhile lists empty (its page finds no entries), as on a local file
  // system for a directory removed while open.
  Attr known;
  double left_s = 0;
  if (!fs_of(req)->recent(ino, &known, &left_s)) {
    auto a = fs_of(req)->ns().getattr(oid);
    if (!a.is_ok()) return reply_status(req, a.status());
    known = *a;
  }
  if (!S_ISDIR(known.mode)) return (void)fuse_reply_err(req, ENOTDIR);
  auto* d = new DirHandle;
  d->oid = oid;
  fi->fh = reinterpret_cast<uint64_t>(d);
  if (fuse_reply_open(req, fi) != 0) delete d;
}

// Offsets: 1 after ".", 2 after "..", 3 + i after entry i of the handle's list, which only grows, so an
// offset means the same entry for the life of the handle (seekdir/telldir hold). `plus` (readdirplus): each
// entry with its attributes, so `ls -l` and scandir+stat cost no lookup per name; the kernel then holds a
// lookup of each such entry (remembered here), none of "." and "..", nor of an entry without attributes.
void read_directory(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi, bool plus) {
  auto* d = reinterpret_cast<DirHandle*>(fi->fh);
  Fs* fs = fs_of(req);
  std::vector<char> buf(size);
  size_t used = 0;
  std::vector<fuse_ino_t> handed;  // lookups this reply hands the kernel: taken back if it does not arrive
  auto add = [&](const char* name, uint32_t mode, fuse_ino_t e_ino, off_t next, const posix::Attr* a, uint64_t at) {
    if (!plus) {
      struct stat st {};
      st.st_ino = e_ino;
      st.st_mode = mode;
      size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, next);
      if (need > size - used) return false;
      used += need;
      return true;
    }
    size_t need = fuse_add_direntry_plus(req, nullptr, 0, name, nullptr, 0);
    if (need > size - used) return false;
    fuse_entry_param e{};
    e.attr.st_ino = e_ino;
    e.attr.st_mode = mode;
    if (a) {
      e.ino = fs->remember(a->oid);
      handed.push_back(e.ino);
      fs->seen(*a, at);
      e.attr = fs->to_stat(*a, e.ino);
      e.attr_timeout = fs->options().attr_timeout_s;
      e.entry_timeout = fs->options().entry_timeout_s;
    }
    used += fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, next);
    return true;
  };
  // Fills `buf` under the handle's lock, which is let go before the reply: once the kernel has the reply it may
  // release the directory, and another thread delete the handle.
  auto fill = [&]() -> Status {
    std::lock_guard lock(d->mu);
    if (off == 0 && !add(".", S_IFDIR, fs->number(d->oid), 1, nullptr, 0)) return Status::ok();
    if (off <= 1 && !add("..", S_IFDIR, fs->number(d->oid), 2, nullptr, 0)) return Status::ok();
    for (size_t i = off > 2 ? static_cast<size_t>(off - 2) : 0;; ++i) {
      while (i >= d->entries.size() && !d->done) {
        uint64_t at = Fs::now_ns();
        auto page = fs->ns().readdir_plus(d->oid, d->anchor, posix::kMaxPageEntries);
        if (page.status().code() == StatusCode::kNotFound) {  // removed since it was opened: nothing more in it
          d->done = true;
          break;
        }
        if (!page.is_ok()) return page.status();
        std::move(page->entries.begin(), page->entries.end(), std::back_inserter(d->entries));
        d->fetched_at.resize(d->entries.size(), at);
        d->anchor = std::move(page->anchor);
        d->done = page->done;
      }
      if (i >= d->entries.size()) break;
      posix::DirPlusEntry& e = d->entries[i];
      uint64_t at = d->fetched_at[i];
      if (plus && e.has_attr && fs->wait_writes(e.entry.oid)) {  // its size, with this mount's writes landed
        at = Fs::now_ns();
        auto fresh = fs->ns().getattr(e.entry.oid);
        e.has_attr = fresh.is_ok();
        if (fresh.is_ok()) e.attr = *fresh;
      }
      if (!add(e.entry.name.c_str(), e.entry.type, fs->number(e.entry.oid), static_cast<off_t>(i + 3),
               plus && e.has_attr ? &e.attr : nullptr, at))
        break;
    }
    return Status::ok();
  };
  // A page that failed after entries were added: they go now, and the next call (from after them) meets the
  // failure again and reports it.
  Status s = fill();
  if (!s.is_ok() && used == 0) return reply_status(req, s);
  if (fuse_reply_buf(req, buf.data(), used) != 0)
    for (fuse_ino_t h : handed) fs->forget(h, 1);  // the kernel did not get them
}

void op_readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  read_directory(req, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  read_directory(req, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  auto s = fs_of(req)->ns().statfs();
  if (!s.is_ok()) return reply_status(req, s.status());
  struct statvfs st {};
  st.f_bsize = st.f_frsize = s->block_size;
  st.f_blocks = s->total_bytes / s->block_size;
  st.f_bfree = st.f_bavail = s->free_bytes / s->block_size;
  st.f_files = 1ull << 40;
  st.f_ffree = st.f_favail = 1ull << 40;
  st.f_namemax = s->name_max;
  fuse_reply_statfs(req, &st);
}

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  RFOS_FUSE_OID(oid, req, ino);
  Status s = fs_of(req)->ns().setxattr(oid, name, {value, size}, flags, cred_of(req));
  if (s.is_ok()) {
    fs_of(req)->xattrs_changed(oid);  // a refused one (an ACL cp -a tries) leaves "none" known
    fs_of(req)->stale(oid);           // its ctime moved
  }
  reply_status(req, s);
}

void reply_sized(fuse_req_t req, const std::string& bytes, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, bytes.size());
  if (bytes.size() > size) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, bytes.data(), bytes.size());
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  RFOS_FUSE_OID(oid, req, ino);
  // A file this mount just made has none (the kernel asks for security.capability before each write); the
  // chunk size is layout, there for every regular file.
  if (name != posix::kChunkXattr && fs_of(req)->no_xattrs(ino)) return (void)fuse_reply_err(req, ENODATA);
  auto v = fs_of(req)->ns().getxattr(oid, name);
  if (!v.is_ok()) return reply_status(req, v.status());
  reply_sized(req, *v, size);
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  RFOS_FUSE_OID(oid, req, ino);
  auto names = fs_of(req)->ns().listxattr(oid);
  if (!names.is_ok()) return reply_status(req, names.status());
  std::string all;
  for (const std::string& n : *names) all.append(n).push_back('\0');
  reply_sized(req, all, size);
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  RFOS_FUSE_OID(oid, req, ino);
  Status s = fs_of(req)->ns().removexattr(oid, name, cred_of(req));
  if (s.is_ok()) fs_of(req)->stale(oid);  // its ctime moved
  reply_status(req, s);
}

// The kernel caps a FUSE mount's readahead at 128 KiB whatever init asks for; its bdi setting (root may write
// it) raises it, so sequential reads arrive as large requests. Best effort: without it reads still work.
// The device number comes from /proc/self/mountinfo: stat() on the mount point would ask this very process,
// whose loop is not serving yet.
void set_readahead(const MountOptions& o) {
  char real[PATH_MAX];
  if (!realpath(o.mountpoint.c_str(), real)) return;
  FILE* info = std::fopen("/proc/self/mountinfo", "r");
  if (!info) return;
  std::string dev;
  char line[4096];
  while (std::fgets(line, sizeof(line), info)) {  // "id parent MAJ:MIN root mountpoint ..."; the last one wins
    char majmin[64], root[PATH_MAX], point[PATH_MAX];
    if (std::sscanf(line, "%*u %*u %63s %4095s %4095s", majmin, root, point) == 3 && std::strcmp(point, real) == 0)
      dev = majmin;
  }
  std::fclose(info);
  if (dev.empty()) return;
  std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%u\n", o.readahead_bytes / 1024);
    std::fclose(f);
  }
}

// SIGINT, SIGTERM and SIGHUP end the loop, which then unmounts. Installed unconditionally: libfuse's own
// fuse_set_signal_handlers leaves alone a signal that already has a handler, and the client libraries install
// one for SIGTERM that exits without unmounting.
fuse_session* g_session = nullptr;
void on_signal(int) {
  if (g_session) fuse_session_exit(g_session);
}

class SignalsEndTheLoop {
 public:
  explicit SignalsEndTheLoop(fuse_session* se) {
    g_session = se;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the loop's read of /dev/fuse returns EINTR and sees the exit
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
    signal(SIGPIPE, SIG_IGN);
  }
  ~SignalsEndTheLoop() {
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_session = nullptr;
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};

// The request loop, in place of libfuse's fuse_session_loop_mt, whose workers each read every request into the
// one buffer they keep, so a write's bytes had to be copied out (into a fresh allocation) before its handler
// returned, on the path every buffered write() waits on. Each worker waits on its own epoll set
// (EPOLLEXCLUSIVE: one worker wakes per request), reads the request into a buffer from `buffers` and handles
// it; a write handed to write-behind takes that buffer along. The device is non-blocking, so a worker that
// lost the race for a request goes back to waiting, and every worker looks at the exit flag (unmount, signal)
// at least every kExitCheckMs. Returns 0, or the errno that stopped the loop.
int serve_requests(fuse_session* se, RequestBuffers& buffers, unsigned threads, const std::atomic<bool>* stop) {
  constexpr int kExitCheckMs = 200;
  int fd = fuse_session_fd(se);
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  std::atomic<int> failure{0};
  auto work = [&] {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event want{};
    want.events = EPOLLIN | EPOLLEXCLUSIVE;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &want) != 0) {
      failure = errno;
      fuse_session_exit(se);
    }
    fuse_buf buf{};
    while (!fuse_session_exited(se)) {
      if (stop && stop->load()) {
        fuse_session_exit(se);
        break;
      }
      epoll_event ready;
      if (epoll_wait(ep, &ready, 1, kExitCheckMs) <= 0) continue;  // timeout, or a signal: the exit flag
      if (!buf.mem) buf.mem = buffers.take();
      int n = fuse_session_receive_buf(se, &buf);
      if (n == -EAGAIN || n == -EINTR) continue;  // another worker took it
      if (n <= 0) {                               // 0: unmounted (libfuse set the exit flag)
        if (n < 0) {
          failure = -n;
          fuse_session_exit(se);
        }
        break;
      }
      t_request = &buf;
      fuse_session_process_buf(se, &buf);
      t_request = nullptr;
    }
    if (buf.mem) buffers.give(buf.mem);
    if (ep >= 0) close(ep);
  };
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < std::max(1u, threads); ++i) workers.emplace_back(work);
  work();
  for (auto& t : workers) t.join();
  return failure;
}

}  // namespace

Status check_mountpoint(const std::string& mountpoint) {
  struct stat st {};
  if (mountpoint.empty() || stat(mountpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return error(StatusCode::kInvalidArgument, "mount point '" + mountpoint + "' is not a directory");
  return Status::ok();
}

namespace {
// Whether the comma-separated -o list holds `name`.
bool has_option(const std::string& options, std::string_view name) {
  size_t start = 0;
  while (start <= options.size()) {
    size_t comma = options.find(',', start);
    if (std::string_view(options).substr(start, comma == std::string::npos ? std::string::npos : comma - start) == name)
      return true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return false;
}
}  // namespace

Result<bool> check_mount_options(const std::string& extra_options, uint32_t mounting_uid,
                                 const std::string& container_owner) {
  bool asked = has_option(extra_options, "suid") || has_option(extra_options, "dev");
  if (!asked) return false;
  if (mounting_uid != 0 || container_owner != "root")
    return error(StatusCode::kPermissionDenied,
                 "-o suid and -o dev are refused unless root mounts a container root owns (this container's owner: " +
                     (container_owner.empty() ? std::string("none") : container_owner) +
                     "): whoever may write into it could plant a setuid-root file or a device node");
  return true;
}

namespace {
// The -o list of a mount: what the kernel enforces (default_permissions, allow_other, nosuid and nodev unless
// allowed) and the caller's extra options.
std::string fuse_options(const MountOptions& options) {
  std::string o = "fsname=" + options.fsname + ",subtype=rfos,default_permissions";
  if (options.allow_other) o += ",allow_other";
  if (!options.extra_options.empty()) o += "," + options.extra_options;
  if (!options.allow_suid_and_devices) o += ",nosuid,nodev";  // last, so no earlier option undoes them
  return o;
}

struct FuseArgs {
  explicit FuseArgs(const std::string& o) : argv_s{"rfos", "-o", o} {
    for (auto& a : argv_s) argv.push_back(a.data());
    args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  }
  ~FuseArgs() { fuse_opt_free_args(&args); }  // libfuse may have copied and grown them
  std::vector<std::string> argv_s;
  std::vector<char*> argv;
  fuse_args args;
};
}  // namespace

Status mount_for_agent(const MountOptions& options,
                       const std::function<Status(int fuse_fd, const std::function<bool()>& ended)>& serve) {
  RFOS_RETURN_IF_ERROR(check_mountpoint(options.mountpoint));
  std::string o = fuse_options(options);
  FuseArgs args(o);
  fuse_lowlevel_ops ops{};  // this process serves no request: the agent does
  fuse_session* se = fuse_session_new(&args.args, &ops, sizeof(ops), nullptr);
  if (!se) return error(StatusCode::kInvalidArgument, "FUSE refused the options '" + o + "'");
  Status result = Status::ok();
  {
    SignalsEndTheLoop signals(se);
    if (fuse_session_mount(se, options.mountpoint.c_str()) != 0) {
      result = error(StatusCode::kIoError,
                     "cannot mount on '" + options.mountpoint + "' (is /dev/fuse there, and may this user mount?)");
    } else {
      set_readahead(options);
      result = serve(fuse_session_fd(se), [se] { return fuse_session_exited(se) != 0; });
      fuse_session_unmount(se);
    }
  }
  fuse_session_destroy(se);
  return result;
}

std::string encode_served_settings(const MountOptions& o) {
  std::ostringstream s;
  s.precision(17);
  s << "fsname=" << o.fsname << "\nattr_timeout_s=" << o.attr_timeout_s << "\nentry_timeout_s=" << o.entry_timeout_s
    << "\nnegative_timeout_s=" << o.negative_timeout_s << "\nno_notices=" << o.no_notices
    << "\ndirect_io=" << o.direct_io << "\nwriteback_cache=" << o.writeback_cache << "\nsync_writes=" << o.sync_writes
    << "\ndurable=" << o.durable << "\nwriter_threads=" << o.writer_threads << "\nrequest_threads=" << o.request_threads
    << "\n";
  return s.str();
}

Status decode_served_settings(std::string_view text, MountOptions* o) {
  auto bad = [](std::string_view line) {
    return error(StatusCode::kInvalidArgument, "mount setting '" + std::string(line.substr(0, 64)) + "'");
  };
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return bad(line);
    std::string key(line.substr(0, eq)), value(line.substr(eq + 1));
    auto number = [&](double lo, double hi, double* out) {
      char* end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != 0 || !(v >= lo && v <= hi)) return false;
      *out = v;
      return true;
    };
    auto flag = [&](bool* out) {
      if (value != "0" && value != "1") return false;
      *out = value == "1";
      return true;
    };
    double v = 0;
    auto name_ok = [&] {  // it becomes an -o option: no separator or escape of libfuse's
      return !value.empty() && value.size() < 256 && std::all_of(value.begin(), value.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr(":/._-@+", c) != nullptr;
      });
    };
    bool ok = key == "fsname"               ? (o->fsname = value, name_ok())
              : key == "attr_timeout_s"     ? number(0, 86400, &o->attr_timeout_s)
              : key == "entry_timeout_s"    ? number(0, 86400, &o->entry_timeout_s)
              : key == "negative_timeout_s" ? number(0, 86400, &o->negative_timeout_s)
              : key == "no_notices"         ? flag(&o->no_notices)
              : key == "direct_io"          ? flag(&o->direct_io)
              : key == "writeback_cache"    ? flag(&o->writeback_cache)
              : key == "sync_writes"        ? flag(&o->sync_writes)
              : key == "durable"            ? flag(&o->durable)
              : key == "writer_threads"     ? (number(1, 64, &v) && (o->writer_threads = unsigned(v), true))
              : key == "request_threads"    ? (number(1, 64, &v) && (o->request_threads = unsigned(v), true))
                                            : false;
    if (!ok) return bad(line);
  }
  return Status::ok();
}

Status run_mount(posix::Namespace& ns, const MountOptions& given) {
  bool served = given.fuse_fd >= 0;  // a mount `rfos mount --agent` made, served here in the agent
  if (!served) RFOS_RETURN_IF_ERROR(check_mountpoint(given.mountpoint));
  MountOptions options = given;
  if (has_option(options.extra_options, "sync")) options.durable = true;
  if (options.durable) options.sync_writes = true;  // a write is durable when it returns, so it is stored then
  ns.set_durable(options.durable);
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.setattr = op_setattr;
  ops.readlink = op_readlink;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.symlink = op_symlink;
  ops.rename = op_rename;
  ops.link = op_link;
  ops.open = op_open;
  ops.create = op_create;
  ops.read = op_read;
  ops.write = op_write;
  ops.fallocate = op_fallocate;
  ops.flush = op_flush;
  ops.fsync = op_fsync;
  ops.fsyncdir = op_fsyncdir;
  ops.release = op_release;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_releasedir;
  ops.statfs = op_statfs;
  ops.setxattr = op_setxattr;
  ops.getxattr = op_getxattr;
  ops.listxattr = op_listxattr;
  ops.removexattr = op_removexattr;

  // Served: the mount options were the mounting process's; only the session's matter here.
  std::string o = served ? "fsname=" + options.fsname + ",subtype=rfos" : fuse_options(options);
  FuseArgs args(o);

  Fs fs(ns, options);
  fuse_session* se = fuse_session_new(&args.args, &ops, sizeof(ops), &fs);
  if (!se) {
    if (served) close(options.fuse_fd);
    return error(StatusCode::kInvalidArgument, "FUSE refused the options '" + o + "'");
  }
  Status result = Status::ok();
  {
    // An agent serves many mounts, and its signals are its own.
    std::optional<SignalsEndTheLoop> signals;
    if (!served) signals.emplace(se);
    // libfuse takes "/dev/fd/N" as a device another process mounted (it then neither mounts nor unmounts).
    std::string point = served ? "/dev/fd/" + std::to_string(options.fuse_fd) : options.mountpoint;
    if (fuse_session_mount(se, point.c_str()) != 0) {
      if (served) close(options.fuse_fd);
      result = error(StatusCode::kIoError,
                     "cannot mount on '" + options.mountpoint + "' (is /dev/fuse there, and may this user mount?)");
    } else {
      if (!served) set_readahead(options);
      // Other clients' changes show here at once while the targets send notices of them; without (a server
      // that sends none), within the timeouts.
      auto watching = options.no_notices
                          ? Result<std::unique_ptr<Namespace::Watch>>(std::unique_ptr<Namespace::Watch>())
                          : ns.watch([&fs, se](const posix::Notice& n) { fs.invalidate(se, n); });
      if (!watching.is_ok())
        spdlog::warn("no notices of other clients' changes ({}): they show within the timeouts",
                     watching.status().to_string());
      if (options.on_mounted) options.on_mounted(Status::ok());
      if (int err = serve_requests(se, fs.buffers(), options.request_threads, options.stop.get()); err != 0)
        result = error(StatusCode::kIoError, std::string("the FUSE loop failed: ") + std::strerror(err));
      // The watcher's thread writes to the session's device: it ends before the unmount closes it.
      if (watching.is_ok()) watching->reset();
      fuse_session_unmount(se);
    }
  }
  fuse_session_destroy(se);  // closes the device, a served one too
  if (!result.is_ok() && options.on_mounted) options.on_mounted(result);
  return result;
}

}  // namespace rfos::fuse
