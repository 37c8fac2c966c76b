#include "posix/namespace.h"
#include "common/clock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "client/file_layout.h"
#include "client/named_objects.h"
#include "common/coding.h"
#include "common/ids.h"
#include "placement/placement.h"
#include "wire/data_plane.h"

namespace rfos::posix {

using client::Container;
using client::layout::chunk_key;
using client::layout::kDataAkey;
using placement::ObjectClass;
namespace layout = client::layout;

namespace {

constexpr size_t kXattrValueMax = 64 * 1024;
// Stored xattr values lead with this byte: the engine keeps no empty values, and an xattr may be empty.
constexpr char kXattrTag = 'v';

Status fail(StatusCode code, const std::string& what) { return error(code, what); }
Status denied(const std::string& what) { return fail(StatusCode::kPermissionDenied, what); }

// A namespace request: what every operation names.
DirRequest request(DirOp op, const Cred& cred = {}, const ObjectId& dir = {}, std::string_view name = {}) {
  DirRequest q;
  q.op = op;
  q.cred = cred;
  q.dir = dir;
  q.name = name;
  return q;
}

}  // namespace

bool Namespace::permits(const Attr& a, const Cred& c, int mask) { return posix::permits(a, c, mask); }

class Namespace::Impl {
 public:
  SessionFactory factory;
  SpaceQuery space;
  ObjectId root = placement::with_class({0, 1}, ObjectClass::kS1);
  uint32_t default_chunk = layout::kDefaultChunkBytes;  // the container's chunk property
  // The sessions seal file data (ContainerOptions::sealer): no file bytes go with namespace operations, which
  // travel unsealed and which the targets read (small files' first bytes, cuts inside a block).
  bool sealed = false;
  // The most bytes a namespace operation may carry with it.
  size_t max_op_data() const { return sealed ? 0 : kMaxDirData; }
  uint32_t targets = 1;                           // where placement puts an inode: its home target
  std::atomic<bool> durable{false};               // Namespace::set_durable
  std::function<void(const Attr&)> dir_observer;  // Namespace::on_directory_changed

  // Every session's namespace requests carry it, so that targets send this namespace's watch notices of the
  // other clients' changes only.
  const uint64_t tag = std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1;

  // Container sessions are single-threaded: each call borrows one and gives it back.
  std::mutex mu;
  std::vector<std::unique_ptr<Container>> idle;
  std::mt19937_64 rng = well_seeded_rng();  // object ids: 120 random bits each
  std::map<ObjectId, uint32_t> chunk_of;    // chunk sizes never change: remembered per file
  std::set<ObjectId> spanning;              // files known to be kSpans (a flag never cleared)

  class Lease {
   public:
    Lease(Impl* impl, std::unique_ptr<Container> c) : impl_(impl), c_(std::move(c)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (c_) {
        std::lock_guard lock(impl_->mu);
        impl_->idle.push_back(std::move(c_));
      }
    }
    Container* operator->() { return c_.get(); }
    Container& operator*() { return *c_; }

   private:
    Impl* impl_;
    std::unique_ptr<Container> c_;
  };

  Result<Lease> session() {
    {
      std::lock_guard lock(mu);
      if (!idle.empty()) {
        auto c = std::move(idle.back());
        idle.pop_back();
        c->set_lazy_writes(!durable);
        return Lease(this, std::move(c));
      }
    }
    RFOS_ASSIGN_OR_RETURN(auto c, factory());
    c->set_lazy_writes(!durable);
    c->set_client_tag(tag);
    return Lease(this, std::move(c));
  }

  // The target holding an inode's record (and a directory's entries): where its namespace operations go.
  uint32_t home(const ObjectId& oid) const { return placement::target_of(oid, kInodeDkey, targets); }

  // A new object id whose inode record (and, for a file, first chunk) lives on `target`: a file made in a
  // directory is made by one operation of the directory's target, first bytes included. Ids stay random; about
  // targets^2 tries.
  ObjectId new_oid_at(ObjectClass cls, uint32_t target, bool first_chunk_too) {
    const std::string chunk0 = chunk_key(0);
    for (int tries = 0;; ++tries) {
      ObjectId o = new_oid(cls);
      if (tries > 100000) return o;  // unreachable with sane placement; the operation then says so
      if (placement::target_of(o, kInodeDkey, targets) != target) continue;
      if (first_chunk_too && placement::target_of(o, chunk0, targets) != target) continue;
      return o;
    }
  }

  // Sends `q` to target `t` (wire kNamespace). When the target asks about an inode it does not hold (a hint: its
  // owner, whether a directory is empty), reads it and sends the request again.
  Result<DirReply> dir_op(Lease& c, DirRequest q, uint32_t t, const ObjectId& routed) {
    q.durable = q.durable || durable;
    bool learnt_groups = false;
    for (int round = 0; round <= 4; ++round) {
      Result<std::string> raw = c->namespace_op(t, routed, encode_dir_request(q), is_read(q.op));
      // The target needed the caller's groups, which it left out, and changed nothing: once more with them.
      if (!raw.is_ok() && raw.status().code() == StatusCode::kGroupsNeeded && !learnt_groups && groups_of(q.cred)) {
        learnt_groups = true;
        continue;
      }
      if (!raw.is_ok()) return raw.status();
      RFOS_ASSIGN_OR_RETURN(DirReply r, decode_dir_reply(*raw));
      if (r.need == ObjectId{}) {
        if (r.has_dir && dir_observer) dir_observer(r.dir);
        return r;
      }
      Hint h;
      h.oid = r.need;
      uint64_t floor = 0;
      auto a = inode(c, r.need, &floor);
      if (a.is_ok()) {
        h.uid = a->uid;
        if (S_ISDIR(a->mode)) {
          RFOS_ASSIGN_OR_RETURN(h.empty, dir_empty(c, r.need));
        }
      } else if (a.status().code() == StatusCode::kNotFound) {  // an entry a crash left without its inode
        h.uid = q.cred.uid;
        h.empty = true;
      } else {
        return a.status();
      }
      q.hints.push_back(h);
    }
    return fail(StatusCode::kInternal, "a namespace operation kept asking about inodes elsewhere");
  }

  // Many requests at once on one session (Container::namespace_ops), each reply decoded; the session is given
  // back before the caller goes on.
  std::vector<Result<DirReply>> dir_ops(const std::vector<Container::NamespaceCall>& calls, size_t depth) {
    auto c = session();
    if (!c.is_ok()) return std::vector<Result<DirReply>>(calls.size(), Result<DirReply>(c.status()));
    std::vector<Result<DirReply>> out;
    for (Result<std::string>& raw : (*c)->namespace_ops(calls, depth))
      out.push_back(raw.is_ok() ? decode_dir_reply(*raw) : Result<DirReply>(raw.status()));
    return out;
  }

  // Deletes an inode no name links any more, everywhere it has keys. Its home target first, in the order of
  // that target's log (after the removal that unlinked it); chunks on other targets only once that is durable,
  // so a crash never keeps the purge of the data and loses the removal.
  Status purge(Lease& c, const ObjectId& oid, bool* purged = nullptr) {
    DirRequest q = request(DirOp::kPurge);
    q.oid = oid;
    RFOS_ASSIGN_OR_RETURN(DirReply r, dir_op(c, q, home(oid), oid));
    if (!r.inode_done) return Status::ok();  // linked again
    if (purged) *purged = true;
    if (r.attr.oid == oid && !(r.attr.flags & kSpans)) return Status::ok();  // all its data was at home
    return drop_elsewhere(c, oid);
  }

  // A purged file's chunks on the targets other than its home, once the purge there is durable.
  // Whatever records they hold: a chunk a truncate or a punch left holding only holes has no data end, and would
  // stay if its end decided.
  Status drop_elsewhere(Lease& c, const ObjectId& oid) {
    if (targets == 1) return Status::ok();
    if (!durable) RFOS_RETURN_IF_ERROR(c->sync());
    return punch_gone(c, oid);
  }

  // An object deleted everywhere; already gone is as good.
  static Status punch_gone(Lease& c, const ObjectId& oid) {
    Status s = c->punch_object(oid);
    return s.code() == StatusCode::kNotFound ? Status::ok() : s;
  }

  // One link less on an inode that lives elsewhere than the name that went (a hard link's, a file moved in), at
  // `now`; its attributes after. Done after the durable removal of the name.
  Result<Attr> drop_remote_link(Lease& c, const ObjectId& oid) {
    uint64_t now = wall_ns();
    return update_inode(c, oid, [&](Attr& x, uint64_t&) {
      if (x.nlink > 0) --x.nlink;
      x.ctime_ns = now;
      return Status::ok();
    });
  }

  // An operation on inode q.oid, sent to its home target; a file's size completed over the other targets when
  // the home target could not know it (kSpans).
  Result<DirReply> inode_op(Lease& c, DirRequest q) {
    ObjectId oid = q.oid;
    RFOS_ASSIGN_OR_RETURN(DirReply r, dir_op(c, std::move(q), home(oid), oid));
    if (!r.size_final) RFOS_RETURN_IF_ERROR(complete_size(c, r.attr));
    return r;
  }

  // What a rename left of the inode it replaced: a name less. Done there when it lived on the same target (and
  // purged once unlinked, as the legacy path does); else here, after the durable rename.
  // What a rename replaced: a directory's object goes; a file that lost its last name is purged, or with `keep`
  // named there for the caller to purge (Namespace::rename).
  Status replaced(Lease& c, const DirReply& r, ObjectId* keep) {
    if (r.other == ObjectId{}) return Status::ok();
    if (S_ISDIR(r.other_type)) return r.inode_done ? Status::ok() : punch_gone(c, r.other);
    uint32_t nlink = r.attr.nlink;
    if (!r.inode_done) {
      auto left = drop_remote_link(c, r.other);
      if (!left.is_ok()) return left.status().code() == StatusCode::kNotFound ? Status::ok() : left.status();
      nlink = left->nlink;
    }
    if (nlink != 0) return Status::ok();
    if (keep) {
      *keep = r.other;
      return Status::ok();
    }
    return purge(c, r.other);
  }

  // An xattr of `oid` was set or removed by `cred`: its inode's ctime moves, as a local file system's does
  // (backups and rsync -X see the change by it). The xattr is stored beside the inode record, not in it, so this
  // is a second operation, and best effort: the xattr is there, and a ctime that could not move (a target gone
  // meanwhile) is no reason to report that the set failed. Sent to the home target alone: the size it answers
  // is not wanted.
  void changed_time(Lease& c, const ObjectId& oid, const Cred& cred) {
    DirRequest q = request(DirOp::kSetattr, cred);
    q.oid = oid;
    q.flags = kChangeTime;
    (void)dir_op(c, std::move(q), home(oid), oid);
  }

  // Sets kSpans on a file before data goes past its first chunk (once per file and client).
  Status mark_spans(Lease& c, const ObjectId& oid) {
    {
      std::lock_guard lock(mu);
      if (spanning.count(oid)) return Status::ok();
    }
    DirRequest q = request(DirOp::kSetattr);
    q.oid = oid;
    q.set.spans = true;
    // Durable before the data it announces (which is durable on its own when large): no crash keeps data
    // elsewhere that the inode does not know of.
    q.durable = true;
    RFOS_RETURN_IF_ERROR(dir_op(c, q, home(oid), oid).status());  // the size it answers is not wanted
    std::lock_guard lock(mu);
    if (spanning.size() > 65536) spanning.clear();
    spanning.insert(oid);
    return Status::ok();
  }

  // A regular file's size from what its home target said (max of its floor and the data there) and the data
  // end on every other target.
  Status complete_size(Lease& c, Attr& a) {
    if (!S_ISREG(a.mode) || targets == 1) return Status::ok();
    RFOS_ASSIGN_OR_RETURN(uint64_t end, c->object_end(a.oid, kDataAkey, home(a.oid)));
    a.size = std::max(a.size, end);
    return Status::ok();
  }

  ObjectId new_oid(ObjectClass cls) {
    std::lock_guard lock(mu);
    ObjectId o;
    do {
      o.hi = rng() & ((1ull << 56) - 1);
      o.lo = rng();
    } while (o.hi == 0);  // hi 0 is for fixed objects (the root)
    return placement::with_class(o, cls);
  }

  // The inode record and its size floor.
  Result<Attr> inode(Lease& c, const ObjectId& oid, uint64_t* floor) {
    auto raw = c->get_value(oid, kInodeDkey, kInodeAkey);
    if (!raw.is_ok()) {
      if (raw.status().code() == StatusCode::kNotFound) return fail(StatusCode::kNotFound, "no such inode");
      return raw.status();
    }
    return decode_inode(oid, *raw, floor);
  }

  Result<Attr> attr(Lease& c, const ObjectId& oid) {
    uint64_t floor = 0;
    RFOS_ASSIGN_OR_RETURN(Attr a, inode(c, oid, &floor));
    if (S_ISREG(a.mode)) {
      RFOS_ASSIGN_OR_RETURN(uint64_t end, c->object_end(oid, kDataAkey));  // every target at once
      a.size = std::max(floor, end);
    } else if (S_ISDIR(a.mode)) {
      a.size = 4096;
    }
    return a;
  }

  Status put_inode(Lease& c, const Attr& a, uint64_t floor) {
    return c->put_value(a.oid, kInodeDkey, kInodeAkey, encode_inode(a, floor));
  }

  // Read-modify-write of an inode record (attributes other clients may change meanwhile are taken as read).
  template <typename F>
  Result<Attr> update_inode(Lease& c, const ObjectId& oid, F change) {
    uint64_t floor = 0;
    RFOS_ASSIGN_OR_RETURN(Attr a, inode(c, oid, &floor));
    RFOS_RETURN_IF_ERROR(change(a, floor));
    RFOS_RETURN_IF_ERROR(put_inode(c, a, floor));
    return a;
  }

  Result<Attr> directory(Lease& c, const ObjectId& dir) {
    RFOS_ASSIGN_OR_RETURN(Attr d, attr(c, dir));
    if (!S_ISDIR(d.mode)) return fail(StatusCode::kNotDirectory, "not a directory");
    return d;
  }

  Result<DirEntry> entry(Lease& c, const ObjectId& dir, std::string_view name) {
    auto raw = c->get_value(dir, name, kEntryAkey);
    if (!raw.is_ok()) {
      if (raw.status().code() == StatusCode::kNotFound)
        return fail(StatusCode::kNotFound, "'" + std::string(name) + "' does not exist");
      return raw.status();
    }
    return decode_entry(name, *raw);
  }

  // A directory the caller may add entries to or remove them from.
  Result<Attr> writable_dir(Lease& c, const ObjectId& dir, const Cred& cred) {
    RFOS_ASSIGN_OR_RETURN(Attr d, directory(c, dir));
    if (!permits(d, cred, W_OK | X_OK)) return denied("no write and search permission on the directory");
    return d;
  }

  Status dir_changed(Lease& c, const ObjectId& dir, int nlink_delta) {
    uint64_t t = wall_ns();
    return update_inode(c, dir,
                        [&](Attr& d, uint64_t&) {
                          d.mtime_ns = d.ctime_ns = t;
                          d.nlink = static_cast<uint32_t>(static_cast<int64_t>(d.nlink) + nlink_delta);
                          return Status::ok();
                        })
        .status();
  }

  Result<bool> dir_empty(Lease& c, const ObjectId& dir) {
    std::string anchor;
    for (;;) {
      RFOS_ASSIGN_OR_RETURN(auto page, c->list_dkeys(dir, c->target_of(dir, {}), anchor, 16));
      for (const std::string& k : page.keys)
        if (k != kInodeDkey && k != kXattrDkey) return false;
      if (page.done) return true;
      anchor = page.anchor;
    }
  }

  // Creates an inode and its entry by one operation of the directory's target, the new inode placed there too
  // (a file's first chunk with it, and its first bytes when given): one atomic batch, so no crash leaves an
  // entry without its inode or an inode without its entry. Directories too, so a namespace lives on the target
  // of its root (its files' data beyond their first chunks spreads over all): docs/posix.md says why.
  Result<Attr> create(const ObjectId& dir, std::string_view name, uint32_t mode, uint64_t rdev, std::string_view data,
                      const Cred& cred, uint32_t chunk = 0) {
    RFOS_RETURN_IF_ERROR(check_name(name));
    RFOS_ASSIGN_OR_RETURN(Lease c, session());
    uint32_t t = home(dir);
    DirRequest q = request(DirOp::kCreate, cred, dir, name);
    q.mode = (mode & S_IFMT) | (mode & 07777);
    q.rdev = rdev;
    q.chunk = S_ISREG(mode) ? (chunk ? chunk : default_chunk) : 0;
    q.data = data;
    q.oid = new_oid_at(S_ISREG(mode) ? ObjectClass::kSX : ObjectClass::kS1, t, S_ISREG(mode));
    q.inode_here = true;
    RFOS_ASSIGN_OR_RETURN(DirReply r, dir_op(c, q, t, dir));
    return r.attr;
  }

  // Cuts [from, to) out of file `oid`'s data, in chunks of `chunk` bytes: a chunk wholly inside by its dkey, the
  // part of one the range starts or ends in by an extent punch. `listed`: only the chunks the file has (a listing
  // of all of them, for a range of many chunks or one without end); else each chunk the range touches, by index.
  static Status cut(Lease& c, const ObjectId& oid, uint64_t chunk, uint64_t from, uint64_t to, bool listed) {
    auto cut_one = [&](uint64_t index) -> Status {
      if (index >= kMaxFileSize / chunk + 1) return Status::ok();  // no file reaches it (nor overflows)
      // A chunk size that does not divide 2^62 has a last chunk across it, which the engine holds no bytes past.
      uint64_t start = index * chunk, lo = std::max(from, start), hi = std::min({to, start + chunk, kMaxFileSize});
      if (lo >= hi) return Status::ok();
      Status s = lo == start && hi == start + chunk ? c->punch_dkey(oid, chunk_key(index))
                                                    : c->punch_extent(oid, chunk_key(index), kDataAkey, lo, hi - lo);
      return s.code() == StatusCode::kNotFound ? Status::ok() : s;
    };
    if (!listed) {
      for (uint64_t i = from / chunk; i <= (to - 1) / chunk; ++i) RFOS_RETURN_IF_ERROR(cut_one(i));
      return Status::ok();
    }
    RFOS_ASSIGN_OR_RETURN(auto keys, c->list_dkeys(oid));
    for (const std::string& k : keys)
      if (std::optional<uint64_t> i = layout::chunk_index(k)) RFOS_RETURN_IF_ERROR(cut_one(*i));
    return Status::ok();
  }

  // Drops what lies beyond `size` of file `a` (a truncate): whole chunks punched, a partial one's tail.
  Status punch_beyond(Lease& c, const Attr& a, uint64_t size) {
    return cut(c, a.oid, a.chunk ? a.chunk : layout::kDefaultChunkBytes, size, kMaxFileSize, true);
  }

  Result<uint32_t> chunk_size(Lease& c, const ObjectId& oid) {
    {
      std::lock_guard lock(mu);
      auto it = chunk_of.find(oid);
      if (it != chunk_of.end()) return it->second;
    }
    uint64_t floor = 0;
    RFOS_ASSIGN_OR_RETURN(Attr a, inode(c, oid, &floor));
    if (S_ISDIR(a.mode)) return fail(StatusCode::kIsDirectory, "is a directory");
    if (!S_ISREG(a.mode)) return fail(StatusCode::kInvalidArgument, "not a regular file");
    std::lock_guard lock(mu);
    if (chunk_of.size() > 65536) chunk_of.clear();
    chunk_of[oid] = a.chunk ? a.chunk : layout::kDefaultChunkBytes;
    return chunk_of[oid];
  }
};

Namespace::Namespace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Namespace::~Namespace() = default;

namespace {

// Namespace::watch's thread: its own session, taking what notices came every kPollEvery, renewing the watch a
// third into its lease (or a second after a failed renewal), until the Watch goes. It polls rather than waits
// in the transport: a notice may wait a few milliseconds, and an idle mount costs no spinning (a transport
// wait spins before it naps, where the fabric gives no wake-up: 6% of a core here, counted per thread).
class Watcher final : public Namespace::Watch {
 public:
  Watcher(std::unique_ptr<Container> c, uint64_t tag, std::function<void(std::string_view)> handler)
      : c_(std::move(c)), tag_(tag), handler_(std::move(handler)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Watcher() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    stopping_.notify_all();
    thread_.join();
  }

 private:
  static constexpr auto kPollEvery = std::chrono::milliseconds(5);

  void run() {
    using Clock = std::chrono::steady_clock;
    auto renew_at = Clock::now() + std::chrono::milliseconds(wire::kWatchLeaseMs / 3);
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      c_->wait(0);
      if (Clock::now() >= renew_at) {
        Status s = c_->watch(tag_, handler_);
        renew_at =
            Clock::now() + (s.is_ok() ? std::chrono::milliseconds(wire::kWatchLeaseMs / 3) : std::chrono::seconds(1));
      }
      lock.lock();
      stopping_.wait_for(lock, kPollEvery, [this] { return stop_; });
    }
  }

  std::unique_ptr<Container> c_;
  uint64_t tag_;
  std::function<void(std::string_view)> handler_;
  std::mutex mu_;
  std::condition_variable stopping_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Namespace::Watch>> Namespace::watch(std::function<void(const Notice&)> on_notice) {
  RFOS_ASSIGN_OR_RETURN(auto c, impl_->factory());
  c->set_client_tag(impl_->tag);
  auto handler = [on_notice = std::move(on_notice)](std::string_view bytes) {
    auto n = decode_notice(bytes);
    if (n.is_ok()) on_notice(*n);
  };
  RFOS_RETURN_IF_ERROR(c->watch(impl_->tag, handler));
  return std::unique_ptr<Watch>(new Watcher(std::move(c), impl_->tag, std::move(handler)));
}
ObjectId Namespace::root() const { return impl_->root; }

Result<std::unique_ptr<Namespace>> Namespace::open(client::ControlClient& control, const std::string& pool,
                                                   const std::string& cont, const client::ContainerOptions& o) {
  client::ControlClient* ctl = &control;
  return open([ctl, pool, cont, o]() { return Container::open(*ctl, pool, cont, o); },
              [ctl, pool]() -> Result<StatFs> {
                RFOS_ASSIGN_OR_RETURN(auto info, ctl->pool_query(pool));
                StatFs s;
                s.total_bytes = info.total_bytes;
                s.free_bytes = info.free_bytes;
                return s;
              });
}

Result<std::unique_ptr<Namespace>> Namespace::open(SessionFactory open_session, SpaceQuery space, uint32_t root_mode) {
  auto impl = std::make_unique<Impl>();
  impl->factory = std::move(open_session);
  impl->space = std::move(space);
  {
    RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl->session());
    if (uint32_t chunk = c->session().cont.props.chunk_bytes; chunk) impl->default_chunk = chunk;
    impl->targets = std::max<uint32_t>(1, c->target_count());
    impl->sealed = c->sealed();
    uint64_t floor = 0;
    auto root = impl->inode(c, impl->root, &floor);
    if (!root.is_ok() && root.status().code() != StatusCode::kNotFound) return root.status();
    if (!root.is_ok()) {  // a fresh container: make the root (insert-if-absent, so racing mounts agree)
      Attr a;
      a.oid = impl->root;
      a.mode = S_IFDIR | (root_mode & 07777);
      a.nlink = 2;
      a.atime_ns = a.mtime_ns = a.ctime_ns = wall_ns();
      a.parent = impl->root;
      Status s = c->insert_value(a.oid, kInodeDkey, kInodeAkey, encode_inode(a, 0));
      if (!s.is_ok() && s.code() != StatusCode::kAlreadyExists) return s;
    } else if (!S_ISDIR(root->mode)) {
      return fail(StatusCode::kCorruption, "the container's root is not a directory");
    }
  }
  return std::unique_ptr<Namespace>(new Namespace(std::move(impl)));
}

// One read of the inode's home target, which knows the size of a file whose data all lies there (not kSpans).
Result<Attr> Namespace::getattr(const ObjectId& oid) { return getattr_with_data(oid, nullptr); }

Result<Attr> Namespace::getattr_with_data(const ObjectId& oid, std::optional<std::string>* data) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kGetattr);
  q.oid = oid;
  if (data && !impl_->sealed) q.flags = kWithData;
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->inode_op(c, q));
  if (r.has_data) *data = std::move(r.data);
  return r.attr;
}

// One read of the directory's target: the entry, and the inode when it lives there too (a file made there).
Result<Attr> Namespace::lookup(const ObjectId& dir, std::string_view name, const Cred& cred) {
  if (name.size() > kNameMax) return fail(StatusCode::kNameTooLong, "a name is at most 255 bytes");
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  if (name != "." && name != "..") {
    DirRequest q = request(DirOp::kLookup, cred, dir, name);
    RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->dir_op(c, q, impl_->home(dir), dir));
    if (!r.inode_done) {  // the inode lives elsewhere
      auto a = impl_->attr(c, r.other);
      if (a.status().code() == StatusCode::kNotFound)  // an entry whose inode a crash left behind
        return fail(StatusCode::kNotFound, "'" + std::string(name) + "' has no inode");
      return a;
    }
    if (!r.size_final) RFOS_RETURN_IF_ERROR(impl_->complete_size(c, r.attr));
    return r.attr;
  }
  RFOS_ASSIGN_OR_RETURN(Attr d, impl_->directory(c, dir));
  if (!permits(d, cred, X_OK)) return denied("no search permission on the directory");
  if (name == ".") return d;
  if (name == "..") return impl_->attr(c, d.parent);
  RFOS_ASSIGN_OR_RETURN(DirEntry e, impl_->entry(c, dir, name));
  auto a = impl_->attr(c, e.oid);
  if (!a.is_ok() && a.status().code() == StatusCode::kNotFound)  // an entry whose inode a crash left behind
    return fail(StatusCode::kNotFound, "'" + std::string(name) + "' has no inode");
  return a;
}

Result<Attr> Namespace::resolve(std::string_view path, const Cred& cred) {
  RFOS_ASSIGN_OR_RETURN(Attr cur, getattr(impl_->root));
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    std::string_view part = path.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    pos = slash == std::string_view::npos ? path.size() : slash + 1;
    if (part.empty() || part == ".") continue;
    RFOS_ASSIGN_OR_RETURN(cur, lookup(cur.oid, part, cred));
  }
  return cur;
}

Result<Attr> Namespace::mkdir(const ObjectId& dir, std::string_view name, uint32_t mode, const Cred& cred) {
  return impl_->create(dir, name, S_IFDIR | (mode & 07777), 0, {}, cred);
}

Result<Attr> Namespace::mknod(const ObjectId& dir, std::string_view name, uint32_t mode, uint64_t rdev,
                              const Cred& cred, uint32_t chunk) {
  uint32_t type = mode & S_IFMT;
  if (type == 0) type = S_IFREG;
  if (type == S_IFDIR || type == S_IFLNK) return fail(StatusCode::kInvalidArgument, "mknod makes no dirs or links");
  if ((type == S_IFCHR || type == S_IFBLK) && cred.uid != 0)
    return fail(StatusCode::kNotPermitted, "only root makes device nodes");
  if (chunk && (chunk < kMinChunk || chunk > kMaxChunk || chunk % kMinChunk))
    return fail(StatusCode::kInvalidArgument, "a chunk size is a multiple of 4 KiB, 4 KiB .. 1 GiB");
  return impl_->create(dir, name, type | (mode & 07777), rdev, {}, cred, chunk);
}

Result<Attr> Namespace::symlink(const ObjectId& dir, std::string_view name, std::string_view target, const Cred& cred) {
  if (target.empty()) return fail(StatusCode::kNotFound, "a symlink needs a target");
  if (target.size() > kSymlinkMax) return fail(StatusCode::kNameTooLong, "a symlink target is at most 4095 bytes");
  return impl_->create(dir, name, S_IFLNK | 0777, 0, target, cred);
}

Result<std::string> Namespace::readlink(const ObjectId& oid) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  uint64_t floor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr a, impl_->inode(c, oid, &floor));
  if (!S_ISLNK(a.mode)) return fail(StatusCode::kInvalidArgument, "not a symlink");
  return c->get_value(oid, kInodeDkey, kLinkAkey);
}

Result<Attr> Namespace::link(const ObjectId& oid, const ObjectId& dir, std::string_view name, const Cred& cred) {
  RFOS_RETURN_IF_ERROR(check_name(name));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  uint32_t t = impl_->home(dir);
  DirRequest q = request(DirOp::kLink, cred, dir, name);
  q.oid = oid;
  if (impl_->home(oid) == t) {  // the inode gains its link in the same batch
    RFOS_RETURN_IF_ERROR(impl_->dir_op(c, q, t, dir).status());
    return impl_->attr(c, oid);
  }
  // The inode is elsewhere: its link count first, durably, so that no crash leaves a name it does not count.
  uint64_t now = wall_ns();
  RFOS_ASSIGN_OR_RETURN(Attr a, impl_->update_inode(c, oid, [&](Attr& x, uint64_t&) -> Status {
    if (S_ISDIR(x.mode)) return fail(StatusCode::kNotPermitted, "directories cannot be hard-linked");
    if (x.nlink == 0) return fail(StatusCode::kNotFound, "the inode was removed");
    if (x.nlink >= 65000) return fail(StatusCode::kTooManyLinks, "too many links");
    ++x.nlink;
    x.ctime_ns = now;
    return Status::ok();
  }));
  q.inode_here = true;
  q.mode = a.mode;
  Status s = impl_->dir_op(c, q, t, dir).status();
  if (!s.is_ok()) {
    (void)impl_->update_inode(c, oid, [&](Attr& x, uint64_t&) {
      if (x.nlink > 0) --x.nlink;
      return Status::ok();
    });
    return s;
  }
  return impl_->attr(c, oid);
}

Result<Attr> Namespace::unlink(const ObjectId& dir, std::string_view name, const Cred& cred) {
  return unlink(dir, name, cred, {}, nullptr);
}

Result<Attr> Namespace::unlink(const ObjectId& dir, std::string_view name, const Cred& cred,
                               std::span<const ObjectId> open, bool* purged) {
  RFOS_RETURN_IF_ERROR(check_name(name));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kRemove, cred, dir, name);
  if (purged && open.size() <= kMaxKeep) {
    q.flags = kPurgeUnlinked;
    q.keep.assign(open.begin(), open.end());
  }
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->dir_op(c, q, impl_->home(dir), dir));
  if (purged) *purged = r.purged;
  if (r.purged && (r.attr.flags & kSpans)) RFOS_RETURN_IF_ERROR(impl_->drop_elsewhere(c, r.other));
  if (r.inode_done) {
    r.attr.oid = r.other;
    return r.attr;
  }
  auto a = impl_->drop_remote_link(c, r.other);  // the inode is elsewhere
  if (a.status().code() == StatusCode::kNotFound) {
    Attr gone;
    gone.oid = r.other;
    return gone;
  }
  return a;
}

Status Namespace::forget(const ObjectId& oid) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->chunk_of.erase(oid);
    impl_->spanning.erase(oid);
  }
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  return impl_->purge(c, oid);
}

Status Namespace::rmdir(const ObjectId& dir, std::string_view name, const Cred& cred) {
  RFOS_RETURN_IF_ERROR(check_name(name));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kRemove, cred, dir, name);
  q.flags = kRemoveDir;
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->dir_op(c, q, impl_->home(dir), dir));
  // The directory's object elsewhere (the removal is durable by now).
  return r.inode_done ? Status::ok() : Impl::punch_gone(c, r.other);
}

Status Namespace::sync() {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  return c->sync();
}

void Namespace::set_durable(bool durable) { impl_->durable = durable; }

void Namespace::on_directory_changed(std::function<void(const Attr&)> observer) {
  impl_->dir_observer = std::move(observer);
}

Status Namespace::rename(const ObjectId& src_dir, std::string_view src, const ObjectId& dst_dir, std::string_view dst,
                         unsigned flags, const Cred& cred, ObjectId* left) {
  RFOS_RETURN_IF_ERROR(check_name(src));
  RFOS_RETURN_IF_ERROR(check_name(dst));
  if ((flags & kRenameNoReplace) && (flags & kRenameExchange))
    return fail(StatusCode::kInvalidArgument, "RENAME_NOREPLACE and RENAME_EXCHANGE exclude each other");
  if (flags & ~(kRenameNoReplace | kRenameExchange)) return fail(StatusCode::kInvalidArgument, "unknown flags");
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  if (uint32_t t = impl_->home(src_dir); impl_->home(dst_dir) == t) {  // one operation of their target
    DirRequest q = request(DirOp::kRename, cred, src_dir, src);
    q.dir2 = dst_dir;
    q.name2 = dst;
    q.flags = flags;
    auto r = impl_->dir_op(c, q, t, src_dir);
    if (r.is_ok()) return impl_->replaced(c, *r, left);
    if (r.status().code() != StatusCode::kNotSupported) return r.status();
  }
  // A directory moving between directories, or directories on different targets: step by step from here.
  RFOS_ASSIGN_OR_RETURN(Attr sd, impl_->writable_dir(c, src_dir, cred));
  RFOS_ASSIGN_OR_RETURN(Attr dd, impl_->writable_dir(c, dst_dir, cred));
  RFOS_ASSIGN_OR_RETURN(DirEntry se, impl_->entry(c, src_dir, src));
  uint64_t floor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr sa, impl_->inode(c, se.oid, &floor));
  RFOS_RETURN_IF_ERROR(sticky_ok(sd, sa, cred));
  if (src_dir == dst_dir && src == dst) return Status::ok();
  bool moving_dir = S_ISDIR(se.type);

  // A directory may not move below itself: walk up from the destination.
  if (moving_dir && src_dir != dst_dir) {
    int depth = 0;
    for (ObjectId at = dst_dir; at != impl_->root;) {
      if (at == se.oid) return fail(StatusCode::kInvalidArgument, "a directory cannot move into itself");
      if (++depth > 4096) return fail(StatusCode::kLoop, "the parent links of the destination form a loop");
      RFOS_ASSIGN_OR_RETURN(Attr up, impl_->inode(c, at, &floor));
      if (up.parent == at) break;
      at = up.parent;
    }
  }
  auto de = impl_->entry(c, dst_dir, dst);
  if (!de.is_ok() && de.status().code() != StatusCode::kNotFound) return de.status();
  uint64_t t = wall_ns();

  if (flags & kRenameExchange) {
    if (!de.is_ok()) return de.status();
    RFOS_RETURN_IF_ERROR(c->put_value(dst_dir, dst, kEntryAkey, encode_entry(se.oid, se.type)));
    RFOS_RETURN_IF_ERROR(c->put_value(src_dir, src, kEntryAkey, encode_entry(de->oid, de->type)));
    if (src_dir != dst_dir) {
      int delta = (moving_dir ? 1 : 0) - (S_ISDIR(de->type) ? 1 : 0);
      auto reparent = [&](const ObjectId& oid, const ObjectId& parent) {
        return impl_->update_inode(c, oid, [&](Attr& x, uint64_t&) {
          x.parent = parent;
          x.ctime_ns = t;
          return Status::ok();
        });
      };
      if (moving_dir) RFOS_RETURN_IF_ERROR(reparent(se.oid, dst_dir).status());
      if (S_ISDIR(de->type)) RFOS_RETURN_IF_ERROR(reparent(de->oid, src_dir).status());
      RFOS_RETURN_IF_ERROR(impl_->dir_changed(c, src_dir, -delta));
      RFOS_RETURN_IF_ERROR(impl_->dir_changed(c, dst_dir, delta));
    } else {
      RFOS_RETURN_IF_ERROR(impl_->dir_changed(c, src_dir, 0));
    }
    return Status::ok();
  }

  ObjectId replaced;
  bool replaced_dir = false;
  if (de.is_ok()) {
    if (flags & kRenameNoReplace) return fail(StatusCode::kAlreadyExists, "'" + std::string(dst) + "' exists");
    if (de->oid == se.oid) return Status::ok();  // two links of one inode: nothing to do
    if (moving_dir && !S_ISDIR(de->type))
      return fail(StatusCode::kNotDirectory, "'" + std::string(dst) + "' is not a directory");
    if (!moving_dir && S_ISDIR(de->type))
      return fail(StatusCode::kIsDirectory, "'" + std::string(dst) + "' is a directory");
    auto da = impl_->inode(c, de->oid, &floor);
    if (da.is_ok()) RFOS_RETURN_IF_ERROR(sticky_ok(dd, *da, cred));
    if (S_ISDIR(de->type)) {
      RFOS_ASSIGN_OR_RETURN(bool empty, impl_->dir_empty(c, de->oid));
      if (!empty) return fail(StatusCode::kNotEmpty, "'" + std::string(dst) + "' is not empty");
    }
    RFOS_RETURN_IF_ERROR(c->put_value(dst_dir, dst, kEntryAkey, encode_entry(se.oid, se.type)));
    replaced = de->oid;
    replaced_dir = S_ISDIR(de->type);
  } else {
    Status s = c->insert_value(dst_dir, dst, kEntryAkey, encode_entry(se.oid, se.type));
    if (s.code() == StatusCode::kAlreadyExists) return fail(StatusCode::kBusy, "the destination appeared meanwhile");
    RFOS_RETURN_IF_ERROR(s);
  }
  RFOS_RETURN_IF_ERROR(c->punch_dkey(src_dir, src));

  if (moving_dir && src_dir != dst_dir)
    RFOS_RETURN_IF_ERROR(impl_
                             ->update_inode(c, se.oid,
                                            [&](Attr& x, uint64_t&) {
                                              x.parent = dst_dir;
                                              x.ctime_ns = t;
                                              return Status::ok();
                                            })
                             .status());
  if (src_dir == dst_dir) {
    RFOS_RETURN_IF_ERROR(impl_->dir_changed(c, src_dir, replaced_dir ? -1 : 0));
  } else {
    RFOS_RETURN_IF_ERROR(impl_->dir_changed(c, src_dir, moving_dir ? -1 : 0));
    RFOS_RETURN_IF_ERROR(impl_->dir_changed(c, dst_dir, (moving_dir ? 1 : 0) - (replaced_dir ? 1 : 0)));
  }
  if (replaced != ObjectId{}) {
    if (replaced_dir) {
      (void)c->punch_object(replaced);
    } else {
      auto after = impl_->update_inode(c, replaced, [&](Attr& x, uint64_t&) {
        if (x.nlink > 0) --x.nlink;
        x.ctime_ns = t;
        return Status::ok();
      });
      if (after.is_ok() && after->nlink == 0) {
        if (left)
          *left = replaced;
        else
          (void)c->punch_object(replaced);
      }
    }
  }
  return Status::ok();
}

Result<Attr> Namespace::setattr(const ObjectId& oid, const SetAttr& set, const Cred& cred) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  if (set.set_size) {
    // One request when the whole file lies on its home target: it cuts and moves the floor in one batch (not
    // where the data is sealed: a cut inside a block seals that block again, which only this side can do).
    if (!impl_->sealed) {
      DirRequest q = request(DirOp::kSetattr, cred);
      q.oid = oid;
      q.set = set;
      q.flags = kCutHere;
      RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->inode_op(c, q));
      if (r.inode_done) return r.attr;
    }
    // Else what lies beyond the new end, on every target, goes first; the home target then moves the floor.
    RFOS_ASSIGN_OR_RETURN(Attr cur, impl_->attr(c, oid));
    RFOS_RETURN_IF_ERROR(check_setattr(cur, set, cred));
    if (set.size < cur.size) RFOS_RETURN_IF_ERROR(impl_->punch_beyond(c, cur, set.size));
  }
  DirRequest q = request(DirOp::kSetattr, cred);
  q.oid = oid;
  q.set = set;
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->inode_op(c, q));
  return r.attr;
}

Result<size_t> Namespace::read(const ObjectId& oid, uint64_t offset, std::span<uint8_t> out) {
  RFOS_ASSIGN_OR_RETURN(Attr a, getattr(oid));
  return read(oid, offset, out, a.size);
}

Result<size_t> Namespace::read(const ObjectId& oid, uint64_t offset, std::span<uint8_t> out, uint64_t size) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  RFOS_ASSIGN_OR_RETURN(uint32_t chunk, impl_->chunk_size(c, oid));
  if (offset >= size) return size_t{0};
  size_t n = static_cast<size_t>(std::min<uint64_t>(out.size(), size - offset));
  for (size_t pos = 0; pos < n;) {
    uint64_t at = offset + pos;
    uint64_t index = at / chunk;
    size_t len = static_cast<size_t>(std::min<uint64_t>(n - pos, (index + 1) * uint64_t{chunk} - at));
    Status s = c->read(oid, chunk_key(index), kDataAkey, at, out.subspan(pos, len));
    if (s.code() == StatusCode::kNotFound)
      std::memset(out.data() + pos, 0, len);  // a chunk never written: a hole
    else
      RFOS_RETURN_IF_ERROR(s);
    pos += len;
  }
  return n;
}

Status Namespace::write(const ObjectId& oid, uint64_t offset, std::span<const uint8_t> data) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  RFOS_ASSIGN_OR_RETURN(uint32_t chunk, impl_->chunk_size(c, oid));
  if (offset > kMaxFileSize || data.size() > kMaxFileSize - offset)
    return fail(StatusCode::kTooLarge, "beyond the largest file size (2^62 bytes)");
  if (offset + data.size() > chunk) RFOS_RETURN_IF_ERROR(impl_->mark_spans(c, oid));
  for (size_t pos = 0; pos < data.size();) {
    uint64_t at = offset + pos;
    uint64_t index = at / chunk;
    size_t len = static_cast<size_t>(std::min<uint64_t>(data.size() - pos, (index + 1) * uint64_t{chunk} - at));
    RFOS_RETURN_IF_ERROR(c->write(oid, chunk_key(index), kDataAkey, at, data.subspan(pos, len)));
    pos += len;
  }
  return Status::ok();
}

Result<Attr> Namespace::grow_to(const ObjectId& oid, uint64_t size, const Cred& cred) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kSetattr, cred);
  q.oid = oid;
  q.set.set_size = true;
  q.set.size = size;
  q.flags = kGrowOnly;
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->inode_op(c, q));
  return r.attr;
}

Status Namespace::punch(const Attr& f, uint64_t offset, uint64_t length) {
  if (offset > kMaxFileSize || length > kMaxFileSize - offset)
    return fail(StatusCode::kTooLarge, "beyond the largest file size (2^62 bytes)");
  if (!S_ISREG(f.mode)) return fail(StatusCode::kInvalidArgument, "not a regular file");
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  RFOS_ASSIGN_OR_RETURN(uint32_t chunk, impl_->chunk_size(c, f.oid));
  uint64_t end = std::min(f.size, offset + length);
  // A file wholly in its first chunk has nothing beyond it: a punch there would leave records on other targets
  // that its purge, which looks only at home for such a file, never drops.
  if (!(f.flags & kSpans)) end = std::min<uint64_t>(end, chunk);
  if (offset >= end) return Status::ok();
  // The caller raised the size floor on the home target (so the punched bytes past the data's end still count);
  // the cut goes to other targets too, whose logs are not the home target's: the floor is made durable first,
  // or a crash could keep a punched tail and lose the floor, and the file would come back shorter.
  if ((f.flags & kSpans) && !impl_->durable) RFOS_RETURN_IF_ERROR(c->sync());
  // A range of a few chunks is cut chunk by chunk; a larger one (a sparse file's, up to 2^62 bytes) only where
  // the file has chunks, which costs a listing of all of them.
  constexpr uint64_t kByIndex = 64;
  return Impl::cut(c, f.oid, chunk, offset, end, (end - 1) / chunk - offset / chunk >= kByIndex);
}

namespace {
// The hidden name put_file writes a file under: "." NAME kHiddenPutTag and 16 lowercase hex digits, or, where
// that would be longer than a name may be, kHiddenPutTag and the digits alone.
constexpr std::string_view kHiddenPutTag = ".rfos-put-";
bool is_hidden_put(std::string_view name) {
  constexpr std::string_view kTag = kHiddenPutTag;
  constexpr size_t kHex = 16;
  if (name.size() < kTag.size() + kHex) return false;
  std::string_view tail = name.substr(name.size() - kHex);
  bool hex =
      std::all_of(tail.begin(), tail.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  bool tagged = name.substr(name.size() - kHex - kTag.size(), kTag.size()) == kTag;
  return hex && tagged &&
         (name.size() == kTag.size() + kHex || (name.size() >= 2 + kTag.size() + kHex && name[0] == '.'));
}
}  // namespace

Status Namespace::repair(const CheckReport& found, bool punch_leaked, RepairReport* out) {
  const Cred root{0, 0, {}};
  auto note = [&](const std::string& what, const Status& s) {
    if (s.is_ok())
      ++out->repaired;
    else if (s.code() == StatusCode::kAlreadyExists)  // not what the check saw any more, or left on purpose
      out->left.push_back(what + ": " + s.message());
    else
      out->failed.push_back(what + ": " + s.to_string());
  };
  auto leave = [](const std::string& why) { return fail(StatusCode::kAlreadyExists, why); };
  // The directory and the last name of a path the check reported.
  auto place_of = [&](const std::string& path) -> Result<std::pair<Attr, std::string>> {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) return fail(StatusCode::kInvalidArgument, "not a path");
    RFOS_ASSIGN_OR_RETURN(Attr dir, resolve(slash == 0 ? "/" : path.substr(0, slash), root));
    return std::make_pair(dir, path.substr(slash + 1));
  };
  // A dangling entry, dropped if it still names no inode. Only the name goes (no purge): should a file have
  // taken the name meanwhile, it loses a link and stays. An entry of a directory is left: the directory's object
  // may still hold entries, the only names its children have.
  auto drop_dangling = [&](const std::string& path) -> Status {
    RFOS_ASSIGN_OR_RETURN(auto place, place_of(path));
    auto now = lookup(place.first.oid, place.second, root);
    if (now.is_ok()) return leave("changed since the check");
    if (now.status().code() != StatusCode::kNotFound) return now.status();
    auto gone = unlink(place.first.oid, place.second, root);
    if (gone.status().code() == StatusCode::kNotFound) return leave("gone since the check");
    if (gone.status().code() == StatusCode::kIsDirectory)
      return leave("a directory's entry: left, as its object may still name entries (rfos fs ls it)");
    return gone.status();
  };
  // An unfinished put, dropped if it is still the same regular file; its inode goes with its last link.
  auto drop_put = [&](const std::string& path, const ObjectId& put) -> Status {
    RFOS_ASSIGN_OR_RETURN(auto place, place_of(path));
    auto now = lookup(place.first.oid, place.second, root);
    if (!now.is_ok() || now->oid != put || !S_ISREG(now->mode)) return leave("changed since the check");
    bool purged = false;
    auto gone = unlink(place.first.oid, place.second, root, {}, &purged);
    if (gone.status().code() == StatusCode::kNotFound) return leave("gone since the check");
    RFOS_RETURN_IF_ERROR(gone.status());
    if (!purged && gone->nlink == 0) RFOS_RETURN_IF_ERROR(forget(gone->oid));  // its inode lives elsewhere
    return Status::ok();
  };
  for (const std::string& p : found.dangling) note(p, drop_dangling(p));
  for (size_t i = 0; i < found.unfinished_puts.size() && i < found.unfinished_put_inodes.size(); ++i)
    note(found.unfinished_puts[i], drop_put(found.unfinished_puts[i], found.unfinished_put_inodes[i]));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  for (const ObjectId& o : found.unlinked) {
    bool purged = false;
    Status s = impl_->purge(c, o, &purged);  // kPurge: left alone if it was linked again meanwhile
    if (s.is_ok() && !purged) s = leave("linked again since the check");
    note(o.to_string(), s.code() == StatusCode::kNotFound ? leave("gone since the check") : s);
  }
  // Leaked data is punched only when asked (rfos bench's objects and the raw API's may look the same), and then
  // only where it looks like what a purge that reached the home target alone leaves: a striped object of nothing
  // but chunk keys, none of them placed on its home target (the purge there took them all) and so not its first.
  for (const ObjectId& o : found.leaked) {
    if (!punch_leaked) {
      note(o.to_string(), leave("leaked data: punched only with --punch-leaked"));
      continue;
    }
    auto keys = c->list_dkeys(o);
    if (!keys.is_ok()) {
      note(o.to_string(), keys.status());
      continue;
    }
    const uint32_t home = impl_->home(o);
    bool remains = placement::object_class(o) == ObjectClass::kSX && !keys->empty() &&
                   std::all_of(keys->begin(), keys->end(), [&](const std::string& k) {
                     auto i = layout::chunk_index(k);
                     return i && *i != 0 && placement::target_of(o, k, impl_->targets) != home;
                   });
    if (!remains) {
      note(o.to_string(), leave("not what a purge leaves (keys on its home target, or not chunks); left"));
      continue;
    }
    Status s = c->punch_object(o);
    note(o.to_string(), s.code() == StatusCode::kNotFound ? leave("gone since the check") : s);
  }
  return Status::ok();
}

std::string Namespace::CheckReport::describe() const {
  std::string out = std::to_string(directories) + " directories, " + std::to_string(files) + " files\n";
  auto line = [&](const char* what, const std::string& x) { out += std::string(what) + ": " + x + "\n"; };
  for (const auto& p : dangling) line("dangling entry (its inode is gone)", p);
  for (const auto& o : orphans) line("orphan inode (no entry names it)", o.to_string());
  for (const auto& p : wrong_links) line("link count / names differ", p);
  for (const auto& o : unlinked) line("unlinked inode not purged (open somewhere, or its client died)", o.to_string());
  for (const auto& p : unfinished_puts) line("unfinished put (rm it)", p);
  for (const auto& o : leaked)
    line("file data no file or name claims (a removal that did not finish; punch it)", o.to_string());
  return out + (consistent() ? "consistent\n" : "INCONSISTENT\n");
}

Result<Namespace::CheckReport> Namespace::check() {
  CheckReport r;
  struct Named {
    uint32_t nlink = 0;  // as its inode says
    uint32_t names = 0;  // as the walk found
    std::string first_path;
  };
  std::map<ObjectId, Named> named;  // non-directory inodes
  std::set<ObjectId> reached{root()};
  std::vector<std::pair<ObjectId, std::string>> dirs{{root(), ""}};
  ++r.directories;
  while (!dirs.empty()) {
    auto [dir, path] = dirs.back();
    dirs.pop_back();
    std::string anchor;
    for (bool done = false; !done;) {
      RFOS_ASSIGN_OR_RETURN(DirPage page, readdir(dir, anchor, 1024));
      for (const DirEntry& e : page.entries) {
        std::string p = path + "/" + e.name;
        auto a = getattr(e.oid);
        if (a.status().code() == StatusCode::kNotFound) {
          r.dangling.push_back(p);
          continue;
        }
        RFOS_RETURN_IF_ERROR(a.status());
        if (S_ISREG(a->mode) && is_hidden_put(e.name)) {
          r.unfinished_puts.push_back(p);
          r.unfinished_put_inodes.push_back(e.oid);
        }
        reached.insert(e.oid);
        if (S_ISDIR(a->mode)) {
          ++r.directories;
          dirs.emplace_back(e.oid, p);
        } else {
          Named& n = named[e.oid];
          if (n.names++ == 0) {
            ++r.files;
            n.nlink = a->nlink;
            n.first_path = p;
          }
        }
      }
      anchor = page.anchor;
      done = page.done;
    }
  }
  for (const auto& [oid, n] : named)
    if (n.nlink != n.names)
      r.wrong_links.push_back(n.first_path + " " + std::to_string(n.nlink) + "/" + std::to_string(n.names));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  RFOS_ASSIGN_OR_RETURN(std::vector<ObjectId> all, c->list_objects());
  // What the named objects' layout owns: records, data, parts, pending data, its indexes, uploads.
  std::set<ObjectId> claimed;
  {
    RFOS_ASSIGN_OR_RETURN(auto named_objects, client::NamedObjects(*c).list());
    claimed = std::move(named_objects.owned);
  }
  for (const ObjectId& oid : all) {
    if (reached.count(oid)) continue;
    RFOS_ASSIGN_OR_RETURN(bool inode, holds_inode(*c, oid));
    if (!inode) {
      if (claimed.count(oid)) continue;
      RFOS_ASSIGN_OR_RETURN(std::vector<std::string> dkeys, c->list_dkeys(oid));
      if (std::any_of(dkeys.begin(), dkeys.end(), [](const std::string& k) { return k.size() == 8; }))
        r.leaked.push_back(oid);  // file chunks (dkey: an 8-byte chunk index) of no file
      continue;
    }
    auto a = impl_->attr(c, oid);
    if (!a.is_ok()) continue;  // removed meanwhile
    (a->nlink == 0 ? r.unlinked : r.orphans).push_back(oid);
  }
  return r;
}

Result<bool> Namespace::holds_inode(client::Container& c, const ObjectId& oid) {
  auto raw = c.get_value(oid, kInodeDkey, kInodeAkey);
  if (raw.status().code() == StatusCode::kNotFound) return false;
  RFOS_RETURN_IF_ERROR(raw.status());
  return true;
}

Result<uint64_t> Namespace::write_file(const Attr& f, const client::StreamSource& source, uint32_t depth,
                                       const client::StreamProgress& progress) {
  if (!S_ISREG(f.mode)) return fail(StatusCode::kInvalidArgument, "not a regular file");
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  uint64_t size = 0, chunk = f.chunk ? f.chunk : layout::kDefaultChunkBytes, read = 0;
  // Past the first chunk only once the inode says so (kSpans): the source's bytes go out after it returns them.
  client::StreamSource marking = [&](std::span<uint8_t> buf) -> Result<size_t> {
    RFOS_ASSIGN_OR_RETURN(size_t n, source(buf));
    if (read <= chunk && read + n > chunk) {
      RFOS_ASSIGN_OR_RETURN(Impl::Lease own, impl_->session());  // the source may run on a thread of its own
      RFOS_RETURN_IF_ERROR(impl_->mark_spans(own, f.oid));
    }
    read += n;
    return n;
  };
  RFOS_RETURN_IF_ERROR(client::write_file_object(*c, f.oid, chunk, marking, depth, progress, &size));
  RFOS_RETURN_IF_ERROR(touch_written(f.oid).status());
  return size;
}

Result<Attr> Namespace::put_file(const ObjectId& dir, std::string_view name, uint32_t mode,
                                 const client::StreamSource& source, const Cred& cred, uint32_t depth,
                                 const client::StreamProgress& progress) {
  RFOS_RETURN_IF_ERROR(check_name(name));
  static thread_local std::mt19937_64 rng = well_seeded_rng();
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), "%.*s%016llx", static_cast<int>(kHiddenPutTag.size()), kHiddenPutTag.data(),
                static_cast<unsigned long long>(rng()));
  std::string hidden = "." + std::string(name) + suffix;
  if (hidden.size() > kNameMax) hidden = suffix;
  RFOS_ASSIGN_OR_RETURN(Attr f, mknod(dir, hidden, S_IFREG | (mode & 07777), 0, cred));
  Status s = write_file(f, source, depth, progress).status();
  if (s.is_ok()) s = rename(dir, hidden, dir, name, 0, cred);
  if (!s.is_ok()) {
    auto gone = unlink(dir, hidden, cred);
    if (gone.is_ok() && gone->nlink == 0) (void)forget(f.oid);
    return s;
  }
  return getattr(f.oid);
}

Status Namespace::get_file(const Attr& a, const client::StreamSink& sink, uint32_t depth,
                           const client::StreamProgress& progress) {
  if (S_ISDIR(a.mode)) return fail(StatusCode::kIsDirectory, "is a directory");
  if (!S_ISREG(a.mode)) return fail(StatusCode::kInvalidArgument, "not a regular file");
  {
    RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
    RFOS_RETURN_IF_ERROR(client::read_file_object(*c, a.oid, a.chunk ? a.chunk : layout::kDefaultChunkBytes, a.size,
                                                  sink, depth, progress, true));
  }
  // Chunks not there read as holes: a file removed or replaced while it was read would read as zeros. It must
  // still be there once all of it was read.
  return getattr(a.oid).status();
}

std::vector<Result<Attr>> Namespace::put_files(const ObjectId& dir, std::span<const NewFile> files, const Cred& cred,
                                               size_t depth) {
  std::vector<Result<Attr>> out(files.size(), Result<Attr>(Attr{}));
  std::vector<Container::NamespaceCall> calls;
  std::vector<size_t> which;  // the file of each call
  uint32_t t = impl_->home(dir);
  for (size_t i = 0; i < files.size(); ++i) {
    const NewFile& f = files[i];
    if (Status s = check_name(f.name); !s.is_ok()) {
      out[i] = s;
      continue;
    }
    DirRequest q = request(DirOp::kCreate, cred, dir, f.name);
    q.durable = impl_->durable;
    q.mode = S_IFREG | (f.mode & 07777);
    q.chunk = impl_->default_chunk;
    if (f.data.size() <= impl_->max_op_data()) q.data = f.data;
    q.oid = impl_->new_oid_at(ObjectClass::kSX, t, true);
    q.inode_here = true;
    calls.push_back({t, dir, encode_dir_request(q), false});
    which.push_back(i);
  }
  std::vector<Result<DirReply>> replies = impl_->dir_ops(calls, depth);
  for (size_t k = 0; k < which.size(); ++k) {
    const NewFile& f = files[which[k]];
    Result<Attr>& r = out[which[k]];
    Result<DirReply>& reply = replies[k];
    if (!reply.is_ok()) {
      r = reply.status();
      continue;
    }
    if (reply->need != ObjectId{}) {  // nothing was done: the step-by-step path, which answers what it asks
      r = impl_->create(dir, f.name, S_IFREG | (f.mode & 07777), 0, f.data.size() <= impl_->max_op_data() ? f.data : "",
                        cred);
    } else {
      if (reply->has_dir && impl_->dir_observer) impl_->dir_observer(reply->dir);
      r = reply->attr;
    }
    if (r.is_ok() && f.data.size() > impl_->max_op_data()) {
      Status s = write(r->oid, 0, {reinterpret_cast<const uint8_t*>(f.data.data()), f.data.size()});
      r = s.is_ok() ? touch_written(r->oid) : Result<Attr>(s);
    }
  }
  return out;
}

std::vector<Result<std::string>> Namespace::get_files(const ObjectId& dir, std::span<const std::string> names,
                                                      const Cred& cred, size_t depth) {
  std::vector<Result<std::string>> out(names.size(), Result<std::string>(std::string()));
  std::vector<Container::NamespaceCall> calls;
  std::vector<size_t> which;
  uint32_t t = impl_->home(dir);
  for (size_t i = 0; i < names.size(); ++i) {
    if (Status s = check_name(names[i]); !s.is_ok()) {
      out[i] = s;
      continue;
    }
    DirRequest q = request(DirOp::kLookup, cred, dir, names[i]);
    q.flags = impl_->sealed ? 0 : kWithData;
    calls.push_back({t, dir, encode_dir_request(q), true});
    which.push_back(i);
  }
  std::vector<Result<DirReply>> replies = impl_->dir_ops(calls, depth);
  for (size_t k = 0; k < which.size(); ++k) {
    Result<std::string>& r = out[which[k]];
    Result<DirReply>& reply = replies[k];
    if (!reply.is_ok()) {
      r = reply.status();
      continue;
    }
    if (reply->has_data) {
      r = std::move(reply->data);
      continue;
    }
    // Not one for a single round trip (larger, held elsewhere, or not to be read by this caller): as open and
    // read would do it.
    auto a = reply->need == ObjectId{} && reply->inode_done && reply->size_final ? Result<Attr>(reply->attr)
                                                                                 : lookup(dir, names[which[k]], cred);
    if (!a.is_ok()) {
      r = a.status();
    } else if (S_ISDIR(a->mode)) {
      r = fail(StatusCode::kIsDirectory, "is a directory");
    } else if (!permits(*a, cred, R_OK)) {
      r = denied("no read permission");
    } else {
      std::string bytes;
      Status s = get_file(*a, [&](std::span<const uint8_t> b) {
        bytes.append(reinterpret_cast<const char*>(b.data()), b.size());
        return Status::ok();
      });
      r = s.is_ok() ? Result<std::string>(std::move(bytes)) : Result<std::string>(s);
    }
  }
  return out;
}

Result<std::optional<Attr>> Namespace::write_and_touch(const ObjectId& oid, uint64_t offset,
                                                       std::span<const uint8_t> data, const SetAttr& times,
                                                       const Cred& cred) {
  if (!times.only_times()) return fail(StatusCode::kInvalidArgument, "a write sets times only");
  if (data.empty() || data.size() > impl_->max_op_data()) return std::optional<Attr>();
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kWrite, cred);
  q.oid = oid;
  q.offset = offset;
  q.data.assign(reinterpret_cast<const char*>(data.data()), data.size());
  q.set = times;
  auto r = impl_->inode_op(c, q);
  if (r.status().code() == StatusCode::kInvalidArgument) return std::optional<Attr>();  // not one for here
  RFOS_RETURN_IF_ERROR(r.status());
  // A target that predates times with a write stored the bytes and moved the mtime to its own clock: the times
  // are set as setattr sets them.
  if ((times.set_mtime && r->attr.mtime_ns != times.mtime_ns) ||
      (times.set_atime && r->attr.atime_ns != times.atime_ns)) {
    RFOS_ASSIGN_OR_RETURN(Attr a, setattr(oid, times, cred));
    return std::optional<Attr>(a);
  }
  return std::optional<Attr>(r->attr);
}

Result<Attr> Namespace::touch_written(const ObjectId& oid) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kSetattr);
  q.oid = oid;  // the writer had the file open for writing: root's credentials, as the kernel's own update
  q.set.touch = true;
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->inode_op(c, q));
  return r.attr;
}

Result<DirPlusPage> Namespace::readdir_plus(const ObjectId& dir, const std::string& anchor, size_t max) {
  if (anchor.size() > kMaxDirData) return fail(StatusCode::kInvalidArgument, "anchor too long");
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirRequest q = request(DirOp::kReadDir, {}, dir);
  q.data = anchor;
  q.offset = std::min(max, kMaxPageEntries);
  RFOS_ASSIGN_OR_RETURN(DirReply r, impl_->dir_op(c, q, impl_->home(dir), dir));
  RFOS_ASSIGN_OR_RETURN(DirPlusPage page, decode_dir_page(r.data));
  for (DirPlusEntry& e : page.entries)
    if (e.has_attr && !e.size_final) RFOS_RETURN_IF_ERROR(impl_->complete_size(c, e.attr));
  return page;
}

Result<DirPlusPage> Namespace::list(const ObjectId& dir, const std::string& anchor, size_t max) {
  RFOS_ASSIGN_OR_RETURN(DirPlusPage page, readdir_plus(dir, anchor, max));
  std::erase_if(page.entries, [&](DirPlusEntry& e) {
    if (e.has_attr) return false;
    auto a = getattr(e.entry.oid);
    if (!a.is_ok()) return true;
    e.attr = *a;
    e.has_attr = true;
    return false;
  });
  return page;
}

Result<DirPage> Namespace::readdir(const ObjectId& dir, const std::string& anchor, size_t max) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  DirPage out;
  out.anchor = anchor;
  while (!out.done && out.entries.size() < max) {
    RFOS_ASSIGN_OR_RETURN(auto page, c->list_dkeys(dir, c->target_of(dir, {}), out.anchor,
                                                   std::max<size_t>(max - out.entries.size(), 1), kEntryAkey));
    for (size_t i = 0; i < page.keys.size(); ++i) {
      if (page.keys[i] == kInodeDkey || page.keys[i] == kXattrDkey || page.values[i].empty()) continue;
      auto e = decode_entry(page.keys[i], page.values[i]);
      if (e.is_ok()) out.entries.push_back(std::move(e).value());
    }
    if (!page.done && page.anchor == out.anchor) return fail(StatusCode::kInternal, "listing made no progress");
    out.anchor = std::move(page.anchor);
    out.done = page.done;
  }
  return out;
}

namespace {
Status check_xattr_name(std::string_view name) {
  if (name.empty() || name.size() > kNameMax) return fail(StatusCode::kRange, "xattr names are 1..255 bytes");
  for (std::string_view ns : {"user.", "trusted.", "security.", "system."})
    if (name.substr(0, ns.size()) == ns && name.size() > ns.size()) return Status::ok();
  return fail(StatusCode::kNotSupported, "xattr names start with user., trusted., security. or system.");
}

// system.* names are a file system's own: POSIX ACLs (system.posix_acl_access, _default), which rfos does not keep
// (the mode bits are the permissions). They are refused, as a file system mounted without ACLs refuses them;
// stored as plain xattrs they were a lie: `cp -a` sets a file's mode with an ACL and, told it worked, never
// calls chmod. Ones stored before may still be removed.
Status refuse_system_xattr(std::string_view name) {
  if (name.substr(0, 7) != "system.") return Status::ok();
  return fail(StatusCode::kNotSupported,
              "no POSIX ACLs or other system.* xattrs here: the mode bits are the permissions");
}
}  // namespace

Status Namespace::setxattr(const ObjectId& oid, std::string_view name, std::string_view value, int flags,
                           const Cred& cred) {
  RFOS_RETURN_IF_ERROR(check_xattr_name(name));
  RFOS_RETURN_IF_ERROR(refuse_system_xattr(name));
  if (value.size() > kXattrValueMax) return fail(StatusCode::kTooLarge, "xattr values are at most 64 KiB");
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  RFOS_ASSIGN_OR_RETURN(Attr a, impl_->attr(c, oid));
  if (name.substr(0, 8) == "trusted." && cred.uid != 0) return fail(StatusCode::kNotPermitted, "trusted.* is root's");
  if (!permits(a, cred, W_OK) && cred.uid != a.uid) return denied("no write permission");
  if (name == kChunkXattr) {  // the file's layout, not a stored xattr: only while it holds no data
    uint64_t chunk = 0;
    for (char ch : value) chunk = (ch >= '0' && ch <= '9' && chunk < kMaxChunk) ? chunk * 10 + (ch - '0') : ~0ull;
    if (value.empty() || chunk < kMinChunk || chunk > kMaxChunk || chunk % kMinChunk)
      return fail(StatusCode::kInvalidArgument, "a chunk size is a multiple of 4 KiB, 4 KiB .. 1 GiB");
    if (!S_ISREG(a.mode) || a.size != 0)
      return fail(StatusCode::kInvalidArgument, "the chunk size is set on an empty regular file");
    RFOS_RETURN_IF_ERROR(impl_
                             ->update_inode(c, oid,
                                            [&](Attr& x, uint64_t&) {
                                              x.chunk = static_cast<uint32_t>(chunk);
                                              return Status::ok();
                                            })
                             .status());
    std::lock_guard lock(impl_->mu);
    impl_->chunk_of.erase(oid);
    return Status::ok();
  }
  constexpr int kCreate = 1, kReplace = 2;  // XATTR_CREATE, XATTR_REPLACE
  std::string stored = kXattrTag + std::string(value);
  if (flags & kCreate) {
    Status s = c->insert_value(oid, kXattrDkey, name, stored);
    if (s.code() == StatusCode::kAlreadyExists) return fail(StatusCode::kAlreadyExists, "the xattr exists");
    RFOS_RETURN_IF_ERROR(s);
    impl_->changed_time(c, oid, cred);
    return Status::ok();
  }
  if (flags & kReplace) {
    auto old = c->get_value(oid, kXattrDkey, name);
    if (!old.is_ok())
      return old.status().code() == StatusCode::kNotFound ? fail(StatusCode::kNoData, "no such xattr") : old.status();
  }
  RFOS_RETURN_IF_ERROR(c->put_value(oid, kXattrDkey, name, stored));
  impl_->changed_time(c, oid, cred);
  return Status::ok();
}

Result<std::string> Namespace::getxattr(const ObjectId& oid, std::string_view name) {
  RFOS_RETURN_IF_ERROR(check_xattr_name(name));
  RFOS_RETURN_IF_ERROR(refuse_system_xattr(name));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  if (name == kChunkXattr) {
    uint64_t floor = 0;
    RFOS_ASSIGN_OR_RETURN(Attr a, impl_->inode(c, oid, &floor));
    if (!S_ISREG(a.mode)) return fail(StatusCode::kNoData, "only regular files have a chunk size");
    return std::to_string(a.chunk ? a.chunk : layout::kDefaultChunkBytes);
  }
  auto v = c->get_value(oid, kXattrDkey, name);
  if (!v.is_ok() && v.status().code() == StatusCode::kNotFound) return fail(StatusCode::kNoData, "no such xattr");
  RFOS_RETURN_IF_ERROR(v.status());
  if (v->empty() || (*v)[0] != kXattrTag) return fail(StatusCode::kCorruption, "xattr value is damaged");
  return v->substr(1);
}

Result<std::vector<std::string>> Namespace::listxattr(const ObjectId& oid) {
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  auto names = c->list_akeys(oid, kXattrDkey);
  if (!names.is_ok() && names.status().code() == StatusCode::kNotFound) return std::vector<std::string>();
  if (names.is_ok()) std::erase_if(*names, [](const std::string& n) { return !refuse_system_xattr(n).is_ok(); });
  return names;
}

Status Namespace::removexattr(const ObjectId& oid, std::string_view name, const Cred& cred) {
  RFOS_RETURN_IF_ERROR(check_xattr_name(name));
  RFOS_ASSIGN_OR_RETURN(Impl::Lease c, impl_->session());
  RFOS_ASSIGN_OR_RETURN(Attr a, impl_->attr(c, oid));
  if (!permits(a, cred, W_OK) && cred.uid != a.uid) return denied("no write permission");
  Status s = c->punch_akey(oid, kXattrDkey, name);
  if (s.code() == StatusCode::kNotFound) return fail(StatusCode::kNoData, "no such xattr");
  RFOS_RETURN_IF_ERROR(s);
  impl_->changed_time(c, oid, cred);
  return Status::ok();
}

Result<StatFs> Namespace::statfs() { return impl_->space(); }

}  // namespace rfos::posix
