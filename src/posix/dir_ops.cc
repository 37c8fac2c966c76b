#include "posix/dir_ops.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "client/file_layout.h"
#include "common/coding.h"

namespace rfos::posix {

namespace {

constexpr uint8_t kRequestVersion = 1;
constexpr uint8_t kReplyVersion = 1;
constexpr uint32_t kGroupsLater = UINT32_MAX;  // the count of a caller's groups it left out (Cred::later)
constexpr size_t kMaxHints = 8;
constexpr size_t kMaxReplyData = 1u << 20;  // a small file's bytes, or a directory page
constexpr uint8_t kNoticeVersion = 1;
constexpr uint32_t kMaxNoticeItems = 8;  // a rename names two entries and three inodes

void put_oid(std::string* s, const ObjectId& o) {
  put_le<uint64_t>(s, o.hi);
  put_le<uint64_t>(s, o.lo);
}
bool get_oid(ByteReader& r, ObjectId* o) { return r.get_le(&o->hi) && r.get_le(&o->lo); }

void put_bytes(std::string* s, std::string_view b) {
  put_le<uint32_t>(s, static_cast<uint32_t>(b.size()));
  s->append(b);
}
bool get_bytes(ByteReader& r, std::string* out, size_t max) {
  uint32_t n = 0;
  std::string_view v;
  if (!r.get_le(&n) || n > max || !r.get_bytes(n, &v)) return false;
  out->assign(v);
  return true;
}

void put_attr(std::string* s, const Attr& a) {
  put_oid(s, a.oid);
  put_le<uint32_t>(s, a.mode);
  put_le<uint32_t>(s, a.uid);
  put_le<uint32_t>(s, a.gid);
  put_le<uint32_t>(s, a.nlink);
  put_le<uint64_t>(s, a.rdev);
  put_le<uint64_t>(s, a.size);
  put_le<uint64_t>(s, a.atime_ns);
  put_le<uint64_t>(s, a.mtime_ns);
  put_le<uint64_t>(s, a.ctime_ns);
  put_le<uint32_t>(s, a.chunk);
  put_oid(s, a.parent);
  put_le<uint32_t>(s, a.flags);
}
bool get_attr(ByteReader& r, Attr* a) {
  return get_oid(r, &a->oid) && r.get_le(&a->mode) && r.get_le(&a->uid) && r.get_le(&a->gid) && r.get_le(&a->nlink) &&
         r.get_le(&a->rdev) && r.get_le(&a->size) && r.get_le(&a->atime_ns) && r.get_le(&a->mtime_ns) &&
         r.get_le(&a->ctime_ns) && r.get_le(&a->chunk) && get_oid(r, &a->parent) && r.get_le(&a->flags);
}

Status bad(const std::string& what) { return error(StatusCode::kInvalidArgument, "namespace request: " + what); }
Status groups_missing() {
  return error(StatusCode::kGroupsNeeded, "the caller's supplementary groups decide this: send them");
}

}  // namespace

std::string encode_dir_page(const DirPlusPage& p) {
  std::string s;
  put_le<uint8_t>(&s, kReplyVersion);
  put_le<uint8_t>(&s, p.done ? 1 : 0);
  put_bytes(&s, p.anchor);
  put_le<uint32_t>(&s, static_cast<uint32_t>(p.entries.size()));
  for (const DirPlusEntry& e : p.entries) {
    put_bytes(&s, e.entry.name);
    put_le<uint32_t>(&s, e.entry.type);
    put_oid(&s, e.entry.oid);
    put_le<uint8_t>(&s, (e.has_attr ? 1 : 0) | (e.size_final ? 2 : 0));
    if (e.has_attr) put_attr(&s, e.attr);
  }
  return s;
}

Result<DirPlusPage> decode_dir_page(std::string_view in) {
  ByteReader r(in);
  DirPlusPage p;
  uint8_t version = 0, done = 0;
  uint32_t n = 0;
  if (!r.get_le(&version) || version != kReplyVersion || !r.get_le(&done) || done > 1 ||
      !get_bytes(r, &p.anchor, 2 * kMaxDirData) || !r.get_le(&n) || n > kMaxPageEntries)
    return error(StatusCode::kInvalidArgument, "directory page is malformed");
  p.done = done;
  p.entries.resize(n);
  for (DirPlusEntry& e : p.entries) {
    uint8_t bits = 0;
    if (!get_bytes(r, &e.entry.name, kNameMax) || !r.get_le(&e.entry.type) || !get_oid(r, &e.entry.oid) ||
        !r.get_le(&bits) || bits > 3 || ((bits & 1) && !get_attr(r, &e.attr)))
      return error(StatusCode::kInvalidArgument, "directory page is malformed");
    e.has_attr = bits & 1;
    e.size_final = bits & 2;
  }
  if (r.remaining() != 0) return error(StatusCode::kInvalidArgument, "directory page is malformed");
  return p;
}

std::string encode_dir_request(const DirRequest& q) {
  std::string s;
  put_le<uint8_t>(&s, kRequestVersion);
  put_le<uint8_t>(&s, static_cast<uint8_t>(q.op));
  put_le<uint8_t>(&s, q.durable ? 1 : 0);
  put_le<uint32_t>(&s, q.cred.uid);
  put_le<uint32_t>(&s, q.cred.gid);
  // Left out while not learnt yet (a target that needs them says so); once learnt, sent.
  const std::vector<uint32_t>* groups = learnt_groups(q.cred);
  put_le<uint32_t>(&s, groups ? static_cast<uint32_t>(groups->size()) : kGroupsLater);
  if (groups)
    for (uint32_t g : *groups) put_le<uint32_t>(&s, g);
  put_oid(&s, q.dir);
  put_bytes(&s, q.name);
  put_oid(&s, q.dir2);
  put_bytes(&s, q.name2);
  put_le<uint32_t>(&s, q.flags);
  put_oid(&s, q.oid);
  put_le<uint32_t>(&s, q.mode);
  put_le<uint64_t>(&s, q.rdev);
  put_le<uint32_t>(&s, q.chunk);
  put_le<uint8_t>(&s, q.inode_here ? 1 : 0);
  put_bytes(&s, q.data);
  put_le<uint64_t>(&s, q.offset);
  const SetAttr& a = q.set;
  uint8_t which = (a.set_mode ? 1 : 0) | (a.set_uid ? 2 : 0) | (a.set_gid ? 4 : 0) | (a.set_size ? 8 : 0) |
                  (a.set_atime ? 16 : 0) | (a.set_mtime ? 32 : 0) | (a.touch ? 64 : 0) | (a.spans ? 128 : 0);
  put_le<uint8_t>(&s, which);
  put_le<uint32_t>(&s, a.mode);
  put_le<uint32_t>(&s, a.uid);
  put_le<uint32_t>(&s, a.gid);
  put_le<uint64_t>(&s, a.size);
  put_le<uint64_t>(&s, a.atime_ns);
  put_le<uint64_t>(&s, a.mtime_ns);
  put_le<uint8_t>(&s, static_cast<uint8_t>(q.hints.size()));
  for (const Hint& h : q.hints) {
    put_oid(&s, h.oid);
    put_le<uint32_t>(&s, h.uid);
    put_le<uint8_t>(&s, h.empty ? 1 : 0);
  }
  put_le<uint8_t>(&s, static_cast<uint8_t>(q.keep.size()));
  for (const ObjectId& o : q.keep) put_oid(&s, o);
  return s;
}

Result<DirRequest> decode_dir_request(std::string_view in) {
  ByteReader r(in);
  DirRequest q;
  uint8_t version = 0, op = 0, durable = 0, inode_here = 0, which = 0, nhints = 0;
  uint32_t ngroups = 0;
  if (!r.get_le(&version) || version != kRequestVersion) return bad("unknown version");
  if (!r.get_le(&op) || op == 0 || op > kMaxDirOp) return bad("unknown operation");
  q.op = static_cast<DirOp>(op);
  if (!r.get_le(&durable) || durable > 1 || !r.get_le(&q.cred.uid) || !r.get_le(&q.cred.gid) || !r.get_le(&ngroups) ||
      (ngroups > kMaxGroups && ngroups != kGroupsLater))
    return bad("bad credentials");
  q.durable = durable;
  if (ngroups == kGroupsLater) {  // to be asked for when a decision needs them
    q.cred.groups_known = false;
    q.cred.later = std::make_shared<LaterGroups>();
    ngroups = 0;
  }
  q.cred.groups.resize(ngroups);
  for (uint32_t& g : q.cred.groups)
    if (!r.get_le(&g)) return bad("truncated groups");
  if (!get_oid(r, &q.dir) || !get_bytes(r, &q.name, kNameMax) || !get_oid(r, &q.dir2) ||
      !get_bytes(r, &q.name2, kNameMax) || !r.get_le(&q.flags) || !get_oid(r, &q.oid) || !r.get_le(&q.mode) ||
      !r.get_le(&q.rdev) || !r.get_le(&q.chunk) || !r.get_le(&inode_here) || inode_here > 1 ||
      !get_bytes(r, &q.data, kSymlinkMax) || !r.get_le(&q.offset))
    return bad("truncated or out of range");
  q.inode_here = inode_here;
  SetAttr& a = q.set;
  if (!r.get_le(&which) || !r.get_le(&a.mode) || !r.get_le(&a.uid) || !r.get_le(&a.gid) || !r.get_le(&a.size) ||
      !r.get_le(&a.atime_ns) || !r.get_le(&a.mtime_ns))
    return bad("bad attributes");
  a.set_mode = which & 1;
  a.set_uid = which & 2;
  a.set_gid = which & 4;
  a.set_size = which & 8;
  a.set_atime = which & 16;
  a.set_mtime = which & 32;
  a.touch = which & 64;
  a.spans = which & 128;
  if (!r.get_le(&nhints) || nhints > kMaxHints) return bad("too many hints");
  q.hints.resize(nhints);
  for (Hint& h : q.hints) {
    uint8_t empty = 0;
    if (!get_oid(r, &h.oid) || !r.get_le(&h.uid) || !r.get_le(&empty) || empty > 1) return bad("bad hint");
    h.empty = empty;
  }
  uint8_t nkeep = 0;
  if (!r.get_le(&nkeep) || nkeep > kMaxKeep) return bad("too many inodes to keep");
  q.keep.resize(nkeep);
  for (ObjectId& o : q.keep)
    if (!get_oid(r, &o)) return bad("truncated");
  if (r.remaining() != 0) return bad("trailing bytes");
  return q;
}

std::string encode_dir_reply(const DirReply& r) {
  std::string s;
  put_le<uint8_t>(&s, kReplyVersion);
  put_attr(&s, r.attr);
  put_le<uint64_t>(&s, r.floor);
  put_oid(&s, r.other);
  put_le<uint32_t>(&s, r.other_type);
  put_le<uint8_t>(&s, (r.inode_done ? 1 : 0) | (r.size_final ? 2 : 0) | (r.has_data ? 4 : 0) | (r.purged ? 8 : 0) |
                          (r.has_dir ? 16 : 0));
  put_oid(&s, r.need);
  if (r.has_data) put_bytes(&s, r.data);
  if (r.has_dir) put_attr(&s, r.dir);
  return s;
}

Result<DirReply> decode_dir_reply(std::string_view in) {
  ByteReader r(in);
  DirReply out;
  uint8_t version = 0, done = 0;
  if (!r.get_le(&version) || version != kReplyVersion || !get_attr(r, &out.attr) || !r.get_le(&out.floor) ||
      !get_oid(r, &out.other) || !r.get_le(&out.other_type) || !r.get_le(&done) || done > 31 ||
      !get_oid(r, &out.need) || ((done & 4) && !get_bytes(r, &out.data, kMaxReplyData)) ||
      ((done & 16) && !get_attr(r, &out.dir)) || r.remaining() != 0)
    return error(StatusCode::kInvalidArgument, "namespace reply is malformed");
  out.inode_done = done & 1;
  out.size_final = done & 2;
  out.has_data = done & 4;
  out.purged = done & 8;
  out.has_dir = done & 16;
  return out;
}

Notice notice_of(const DirRequest& q, const DirReply& r) {
  Notice n;
  auto entry = [&](const ObjectId& dir, const std::string& name) {
    n.entries.emplace_back(dir, name);
    n.inodes.push_back(dir);  // its mtime and ctime moved
  };
  switch (q.op) {
    case DirOp::kCreate:
      entry(q.dir, q.name);
      break;
    case DirOp::kRemove:
      entry(q.dir, q.name);
      if (r.other != ObjectId{}) n.inodes.push_back(r.other);  // its link count
      break;
    case DirOp::kRename:
      entry(q.dir, q.name);
      if (q.dir2 != q.dir || q.name2 != q.name) entry(q.dir2, q.name2);
      if (r.other != ObjectId{}) n.inodes.push_back(r.other);  // the replaced (or exchanged) inode
      break;
    case DirOp::kLink:
      entry(q.dir, q.name);
      n.inodes.push_back(q.oid);
      break;
    case DirOp::kSetattr:
    case DirOp::kWrite:
      n.inodes.push_back(q.oid);
      break;
    case DirOp::kPurge:  // an inode without names: nobody can look it up
    case DirOp::kReadDir:
    case DirOp::kLookup:
    case DirOp::kGetattr:
      break;
  }
  std::sort(n.inodes.begin(), n.inodes.end());
  n.inodes.erase(std::unique(n.inodes.begin(), n.inodes.end()), n.inodes.end());
  return n;
}

std::string encode_notice(const Notice& n) {
  std::string s;
  put_le<uint8_t>(&s, kNoticeVersion);
  put_le<uint32_t>(&s, static_cast<uint32_t>(n.entries.size()));
  for (const auto& [dir, name] : n.entries) {
    put_oid(&s, dir);
    put_bytes(&s, name);
  }
  put_le<uint32_t>(&s, static_cast<uint32_t>(n.inodes.size()));
  for (const ObjectId& o : n.inodes) put_oid(&s, o);
  return s;
}

Result<Notice> decode_notice(std::string_view in) {
  ByteReader r(in);
  Notice n;
  uint8_t version = 0;
  uint32_t count = 0;
  auto malformed = [] { return error(StatusCode::kInvalidArgument, "namespace notice is malformed"); };
  if (!r.get_le(&version) || version != kNoticeVersion || !r.get_le(&count) || count > kMaxNoticeItems)
    return malformed();
  n.entries.resize(count);
  for (auto& [dir, name] : n.entries)
    if (!get_oid(r, &dir) || !get_bytes(r, &name, kNameMax)) return malformed();
  if (!r.get_le(&count) || count > kMaxNoticeItems) return malformed();
  n.inodes.resize(count);
  for (ObjectId& o : n.inodes)
    if (!get_oid(r, &o)) return malformed();
  if (r.remaining() != 0) return malformed();
  return n;
}

namespace {

// A truncate of a file whose chunk is at most this punches to the chunk's end instead of finding its data's end.
constexpr uint64_t kCutToChunkEndBytes = 4u << 20;

using client::layout::chunk_key;
using client::layout::kDataAkey;

// One operation's view: reads through the store, the batch it builds, and what it knows of remote inodes.
class Op {
 public:
  Op(const DirRequest& q, DirStore& store, uint64_t now) : q_(q), store_(store), now_(now) {}

  Result<Attr> inode(const ObjectId& oid, uint64_t* floor) {
    auto raw = store_.get(oid, kInodeDkey, kInodeAkey);
    if (!raw.is_ok()) {
      if (raw.status().code() == StatusCode::kNotFound) return error(StatusCode::kNotFound, "no such inode");
      return raw.status();
    }
    return decode_inode(oid, *raw, floor);
  }

  // A directory of this target.
  Result<Attr> directory(const ObjectId& dir, uint64_t* floor) {
    if (!store_.owns(dir, kInodeDkey))
      return error(StatusCode::kInvalidArgument, "the directory is not on this target");
    RFOS_ASSIGN_OR_RETURN(Attr d, inode(dir, floor));
    if (!S_ISDIR(d.mode)) return error(StatusCode::kNotDirectory, "not a directory");
    return d;
  }

  // A directory of this target the caller may change entries of.
  Result<Attr> writable_dir(const ObjectId& dir, uint64_t* floor) {
    RFOS_ASSIGN_OR_RETURN(Attr d, directory(dir, floor));
    if (!permits(d, q_.cred, W_OK | X_OK))
      return error(StatusCode::kPermissionDenied, "no write and search permission on the directory");
    return d;
  }

  // kAlreadyExists when `name` is taken in `dir`.
  Status name_free(const ObjectId& dir, const std::string& name) {
    auto existing = entry(dir, name);
    if (existing.is_ok()) return error(StatusCode::kAlreadyExists, "'" + name + "' exists");
    return existing.status().code() == StatusCode::kNotFound ? Status::ok() : existing.status();
  }

  // The sticky bit of `dir` against the caller, for an entry whose inode `owner` owns.
  Status sticky(const Attr& dir, uint32_t owner) const {
    Attr victim;
    victim.uid = owner;
    return sticky_ok(dir, victim, q_.cred);
  }

  Result<DirEntry> entry(const ObjectId& dir, std::string_view name) {
    auto raw = store_.get(dir, name, kEntryAkey);
    if (!raw.is_ok()) {
      if (raw.status().code() == StatusCode::kNotFound)
        return error(StatusCode::kNotFound, "'" + std::string(name) + "' does not exist");
      return raw.status();
    }
    return decode_entry(name, *raw);
  }

  bool local(const ObjectId& oid) const { return store_.owns(oid, kInodeDkey); }

  const Hint* hint(const ObjectId& oid) const {
    for (const Hint& h : q_.hints)
      if (h.oid == oid) return &h;
    return nullptr;
  }

  // The owner of an inode and (directories) whether it is empty, from here or from a hint; nullopt when
  // neither knows (the client is asked for a hint).
  struct Known {
    uint32_t uid = 0;
    bool empty = false;
    bool local = false;
    Attr attr;  // when local
    uint64_t floor = 0;
  };
  Result<std::optional<Known>> know(const ObjectId& oid, bool is_dir) {
    Known k;
    if (local(oid)) {
      RFOS_ASSIGN_OR_RETURN(k.attr, inode(oid, &k.floor));
      k.local = true;
      k.uid = k.attr.uid;
      if (is_dir) {
        RFOS_ASSIGN_OR_RETURN(bool any, store_.has_entries(oid));
        k.empty = !any;
      }
      return std::optional<Known>(k);
    }
    const Hint* h = hint(oid);
    if (!h) return std::optional<Known>();
    k.uid = h->uid;
    k.empty = h->empty;
    return std::optional<Known>(k);
  }

  void put(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::string value) {
    changes_.push_back({Change::Kind::kPut, oid, std::string(dkey), std::string(akey), std::move(value)});
  }
  void punch(const ObjectId& oid, std::string_view dkey) {
    changes_.push_back({Change::Kind::kPunch, oid, std::string(dkey), {}, {}});
  }
  void dir_changed(Attr& d, uint64_t floor, int nlink_delta) {
    d.mtime_ns = d.ctime_ns = now_;
    d.nlink = static_cast<uint32_t>(static_cast<int64_t>(d.nlink) + nlink_delta);
    put(d.oid, kInodeDkey, kInodeAkey, encode_inode(d, floor));
    dirs_changed_.push_back(d);
    dirs_changed_.back().size = 4096;
  }
  std::vector<Attr> dirs_changed_;
  // A removed or replaced inode of this target: one link less, or gone (a directory).
  void drop_link(const Known& k, bool is_dir, Attr* after) {
    if (is_dir) {
      punch(k.attr.oid, kInodeDkey);
      punch(k.attr.oid, kXattrDkey);
      *after = k.attr;
      after->nlink = 0;
      return;
    }
    Attr a = k.attr;
    if (a.nlink > 0) --a.nlink;
    a.ctime_ns = now_;
    put(a.oid, kInodeDkey, kInodeAkey, encode_inode(a, k.floor));
    *after = a;
  }

  // An inode's size as this target knows it: a file's floor or the end of its data here, whichever is greater
  // (final unless its data may lie elsewhere, kSpans); a directory's 4096.
  Status size(Attr& a, uint64_t floor, bool* final) {
    *final = true;
    if (S_ISDIR(a.mode)) {
      a.size = 4096;
    } else if (S_ISREG(a.mode)) {
      // All of the data in the first chunk: one look there, instead of a walk over the object's chunks.
      auto end_of =
          (a.flags & kSpans) || !store_.owns(a.oid, chunk_key(0)) ? &DirStore::data_end : &DirStore::first_chunk_end;
      RFOS_ASSIGN_OR_RETURN(uint64_t end, (store_.*end_of)(a.oid));
      a.size = std::max(floor, end);
      *final = !(a.flags & kSpans);
      data_end_ = end;
    } else if (S_ISLNK(a.mode) && a.size == 0) {  // made before its size was kept (a target is never empty)
      auto target = store_.get(a.oid, kInodeDkey, kLinkAkey);
      if (target.is_ok()) a.size = target->size();
    }
    return Status::ok();
  }

  Status commit(bool durable) {
    if (groups_needed(q_.cred)) return groups_missing();  // what was decided may be wrong: nothing is applied
    return changes_.empty() ? Status::ok() : store_.apply(changes_, durable);
  }
  uint64_t data_end_ = 0;  // of the file size() last sized: on this target (all of it when final)

  const DirRequest& q_;
  DirStore& store_;
  uint64_t now_;
  std::vector<Change> changes_;
};

Result<DirReply> create(Op& op) {
  const DirRequest& q = op.q_;
  RFOS_RETURN_IF_ERROR(check_name(q.name));
  uint64_t dfloor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr d, op.writable_dir(q.dir, &dfloor));
  RFOS_RETURN_IF_ERROR(op.name_free(q.dir, q.name));
  uint32_t type = q.mode & S_IFMT;
  if (type == 0 || (q.oid.hi == 0 && q.oid.lo == 0)) return error(StatusCode::kInvalidArgument, "no type or inode");
  DirReply r;
  r.attr = new_inode(d, q.oid, q.mode, q.rdev, q.chunk, q.cred, op.now_);
  if (q.inode_here) {
    if (!op.local(q.oid)) return error(StatusCode::kInvalidArgument, "the new inode is not on this target");
    if (S_ISLNK(type)) {
      if (q.data.empty()) return error(StatusCode::kNotFound, "a symlink needs a target");
      op.put(q.oid, kInodeDkey, kLinkAkey, q.data);
      r.attr.size = q.data.size();
    }
    // A symlink's size (its target's length) is kept as its floor: it has no data to take a size from.
    op.put(q.oid, kInodeDkey, kInodeAkey, encode_inode(r.attr, S_ISLNK(type) ? r.attr.size : 0));
    if (S_ISREG(type) && !q.data.empty()) {
      if (q.data.size() > kMaxDirData || !op.store_.owns(q.oid, chunk_key(0)))
        return error(StatusCode::kInvalidArgument, "first bytes go with a create only into a chunk of this target");
      op.changes_.push_back({Change::Kind::kPutData, q.oid, chunk_key(0), std::string(kDataAkey), q.data});
      r.attr.size = q.data.size();
    }
  } else if (!q.data.empty()) {
    return error(StatusCode::kInvalidArgument, "data goes with a create only with its inode");
  }
  op.put(q.dir, q.name, kEntryAkey, encode_entry(q.oid, type));
  op.dir_changed(d, dfloor, S_ISDIR(type) ? 1 : 0);
  RFOS_RETURN_IF_ERROR(op.commit(q.durable));
  return r;
}

Result<DirReply> remove(Op& op) {
  const DirRequest& q = op.q_;
  RFOS_RETURN_IF_ERROR(check_name(q.name));
  bool rmdir = q.flags & kRemoveDir;
  uint64_t dfloor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr d, op.writable_dir(q.dir, &dfloor));
  RFOS_ASSIGN_OR_RETURN(DirEntry e, op.entry(q.dir, q.name));
  bool is_dir = S_ISDIR(e.type);
  if (!rmdir && is_dir) return error(StatusCode::kIsDirectory, "'" + q.name + "' is a directory");
  if (rmdir && !is_dir) return error(StatusCode::kNotDirectory, "'" + q.name + "' is not a directory");
  DirReply r;
  r.other = e.oid;
  r.other_type = e.type;
  auto known = op.know(e.oid, is_dir);
  bool lost_inode = known.status().code() == StatusCode::kNotFound;  // an entry a crash left without its inode
  if (!known.is_ok() && !lost_inode) return known.status();
  const Op::Known* k = known.is_ok() && known->has_value() ? &**known : nullptr;
  if (!k && !lost_inode && (is_dir || (d.mode & S_ISVTX))) {  // its owner or emptiness decides: ask the client
    r.need = e.oid;
    return r;
  }
  if (k) {
    RFOS_RETURN_IF_ERROR(op.sticky(d, k->uid));
    if (is_dir && !k->empty) return error(StatusCode::kNotEmpty, "'" + q.name + "' is not empty");
  }
  op.punch(q.dir, q.name);
  op.dir_changed(d, dfloor, is_dir ? -1 : 0);
  r.inode_done = lost_inode || (k && k->local);
  bool last_link = k && k->local && !is_dir && k->attr.nlink <= 1;
  if (last_link && (q.flags & kPurgeUnlinked) && std::find(q.keep.begin(), q.keep.end(), e.oid) == q.keep.end()) {
    op.changes_.push_back({Change::Kind::kPunchObject, e.oid, {}, {}, {}});  // the whole object, not a link less
    r.attr = k->attr;
    r.attr.nlink = 0;
    r.attr.ctime_ns = op.now_;
    r.purged = true;
  } else if (k && k->local) {
    op.drop_link(*k, is_dir, &r.attr);
  }
  if (lost_inode) r.attr.oid = e.oid;
  // The client changes the inode next: this batch must not be lost while that change stays.
  RFOS_RETURN_IF_ERROR(op.commit(q.durable || !r.inode_done));
  return r;
}

Result<DirReply> rename(Op& op) {
  const DirRequest& q = op.q_;
  RFOS_RETURN_IF_ERROR(check_name(q.name));
  RFOS_RETURN_IF_ERROR(check_name(q.name2));
  if ((q.flags & kRenameNoReplace) && (q.flags & kRenameExchange))
    return error(StatusCode::kInvalidArgument, "RENAME_NOREPLACE and RENAME_EXCHANGE exclude each other");
  if (q.flags & ~(kRenameNoReplace | kRenameExchange)) return error(StatusCode::kInvalidArgument, "unknown flags");
  bool same_dir = q.dir == q.dir2;
  uint64_t sfloor = 0, dfloor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr sd, op.writable_dir(q.dir, &sfloor));
  Attr dd = sd;
  if (!same_dir) {
    RFOS_ASSIGN_OR_RETURN(dd, op.writable_dir(q.dir2, &dfloor));
  }
  RFOS_ASSIGN_OR_RETURN(DirEntry se, op.entry(q.dir, q.name));
  bool moving_dir = S_ISDIR(se.type);
  auto de = op.entry(q.dir2, q.name2);
  if (!de.is_ok() && de.status().code() != StatusCode::kNotFound) return de.status();
  // Directories exchanged between directories: the client's steps (posix/namespace.cc).
  if (!same_dir && (q.flags & kRenameExchange) && (moving_dir || (de.is_ok() && S_ISDIR(de->type))))
    return error(StatusCode::kNotSupported, "directories exchanged between directories are renamed by the client");
  DirReply r;
  auto need = [&](const ObjectId& oid) {
    r.need = oid;
    return r;
  };
  auto known_src = op.know(se.oid, false);
  if (!known_src.is_ok() && known_src.status().code() != StatusCode::kNotFound) return known_src.status();
  const Op::Known* ks = known_src.is_ok() && known_src->has_value() ? &**known_src : nullptr;
  if (ks) {
    RFOS_RETURN_IF_ERROR(op.sticky(sd, ks->uid));
  } else if (known_src.is_ok() && (sd.mode & S_ISVTX)) {
    return need(se.oid);
  }
  if (same_dir && q.name == q.name2) return r;
  // A directory moved to another directory may not go below itself: walk up from the destination (every
  // directory on the way lives here; else the client walks, step by step).
  bool reparent = moving_dir && !same_dir;
  if (reparent) {
    if (!ks || !ks->local) return error(StatusCode::kNotSupported, "the directory lives on another target");
    int depth = 0;
    for (ObjectId at = q.dir2;;) {
      if (at == se.oid) return error(StatusCode::kInvalidArgument, "a directory cannot move into itself");
      if (++depth > 4096) return error(StatusCode::kLoop, "the parent links of the destination form a loop");
      if (!op.local(at)) return error(StatusCode::kNotSupported, "a parent lives on another target");
      uint64_t f = 0;
      RFOS_ASSIGN_OR_RETURN(Attr up, op.inode(at, &f));
      if (up.parent == at || up.parent == ObjectId{}) break;  // the root
      at = up.parent;
    }
  }

  if (q.flags & kRenameExchange) {
    if (!de.is_ok()) return de.status();
    op.put(q.dir2, q.name2, kEntryAkey, encode_entry(se.oid, se.type));
    op.put(q.dir, q.name, kEntryAkey, encode_entry(de->oid, de->type));
    op.dir_changed(sd, sfloor, 0);
    if (!same_dir) op.dir_changed(dd, dfloor, 0);
    RFOS_RETURN_IF_ERROR(op.commit(q.durable));
    return r;
  }
  bool replaced_dir = false;
  Op::Known replaced;
  bool replaced_known = false;
  bool replaced_lost = false;  // an entry a crash left without its inode: no link to drop anywhere
  if (de.is_ok()) {
    if (q.flags & kRenameNoReplace) return error(StatusCode::kAlreadyExists, "'" + q.name2 + "' exists");
    if (de->oid == se.oid) return r;  // two links of one inode: nothing to do
    replaced_dir = S_ISDIR(de->type);
    if (moving_dir && !replaced_dir) return error(StatusCode::kNotDirectory, "'" + q.name2 + "' is not a directory");
    if (!moving_dir && replaced_dir) return error(StatusCode::kIsDirectory, "'" + q.name2 + "' is a directory");
    auto kd = op.know(de->oid, replaced_dir);
    if (!kd.is_ok() && kd.status().code() != StatusCode::kNotFound) return kd.status();
    replaced_lost = !kd.is_ok();
    if (kd.is_ok() && kd->has_value()) {
      RFOS_RETURN_IF_ERROR(op.sticky(dd, (*kd)->uid));
      if (replaced_dir && !(*kd)->empty) return error(StatusCode::kNotEmpty, "'" + q.name2 + "' is not empty");
      replaced = **kd;
      replaced_known = true;
    } else if (kd.is_ok() && (replaced_dir || (dd.mode & S_ISVTX))) {
      return need(de->oid);
    }
    r.other = de->oid;
    r.other_type = de->type;
  }
  op.put(q.dir2, q.name2, kEntryAkey, encode_entry(se.oid, se.type));
  op.punch(q.dir, q.name);
  if (same_dir) {
    op.dir_changed(sd, sfloor, replaced_dir ? -1 : 0);
  } else {
    op.dir_changed(sd, sfloor, reparent ? -1 : 0);
    op.dir_changed(dd, dfloor, (reparent ? 1 : 0) - (replaced_dir ? 1 : 0));
  }
  if (ks && ks->local) {  // the moved inode's ctime, as Linux keeps it, and a directory's new parent
    Attr moved = ks->attr;
    moved.ctime_ns = op.now_;
    if (reparent) moved.parent = q.dir2;
    op.put(moved.oid, kInodeDkey, kInodeAkey, encode_inode(moved, ks->floor));
  }
  // As remove's: a replaced inode elsewhere (known from a hint, or not) has its link dropped by the client.
  r.inode_done = r.other == ObjectId{} || replaced_lost || (replaced_known && replaced.local);
  if (replaced_known && replaced.local) op.drop_link(replaced, replaced_dir, &r.attr);
  RFOS_RETURN_IF_ERROR(op.commit(q.durable || !r.inode_done));
  return r;
}

Result<DirReply> link(Op& op) {
  const DirRequest& q = op.q_;
  RFOS_RETURN_IF_ERROR(check_name(q.name));
  uint64_t dfloor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr d, op.writable_dir(q.dir, &dfloor));
  RFOS_RETURN_IF_ERROR(op.name_free(q.dir, q.name));
  DirReply r;
  uint32_t type = q.mode & S_IFMT;
  if (!q.inode_here) {  // the inode is here: it gains its link in this batch
    if (!op.local(q.oid)) return error(StatusCode::kInvalidArgument, "the inode is not on this target");
    uint64_t floor = 0;
    RFOS_ASSIGN_OR_RETURN(Attr a, op.inode(q.oid, &floor));
    if (S_ISDIR(a.mode)) return error(StatusCode::kNotPermitted, "directories cannot be hard-linked");
    if (a.nlink == 0) return error(StatusCode::kNotFound, "the inode was removed");
    if (a.nlink >= 65000) return error(StatusCode::kTooManyLinks, "too many links");
    ++a.nlink;
    a.ctime_ns = op.now_;
    op.put(q.oid, kInodeDkey, kInodeAkey, encode_inode(a, floor));
    type = a.mode & S_IFMT;
    r.attr = a;
    r.floor = floor;
  } else if (type == 0 || S_ISDIR(type)) {
    return error(StatusCode::kInvalidArgument, "a link names the type of a non-directory inode");
  }
  op.put(q.dir, q.name, kEntryAkey, encode_entry(q.oid, type));
  op.dir_changed(d, dfloor, 0);
  RFOS_RETURN_IF_ERROR(op.commit(q.durable));
  return r;
}

Result<DirReply> setattr(Op& op) {
  const DirRequest& q = op.q_;
  if (!op.local(q.oid)) return error(StatusCode::kInvalidArgument, "the inode is not on this target");
  DirReply r;
  RFOS_ASSIGN_OR_RETURN(Attr a, op.inode(q.oid, &r.floor));
  bool cut = q.set.set_size && (q.flags & kCutHere);
  if (cut && q.set.spans) return error(StatusCode::kInvalidArgument, "a cut comes without a layout change");
  if (q.flags & ~(kCutHere | kChangeTime | kGrowOnly)) return error(StatusCode::kInvalidArgument, "unknown flags");
  const bool grow = q.flags & kGrowOnly;
  if (grow && (!q.set.set_size || cut || q.set.spans))
    return error(StatusCode::kInvalidArgument, "a growth sets a size and cuts nothing");
  if (cut && (!S_ISREG(a.mode) || (a.flags & kSpans) || !op.store_.owns(q.oid, chunk_key(0)))) {
    r.inode_done = false;  // the client cuts the other targets' chunks first
    r.size_final = true;
    return r;
  }
  // A cut sets the size whatever the data's end was. Finding that end walks every record of the chunk (small
  // overwrites may have left hundreds), so a cut of a chunk of a few grains punches to the chunk's end instead,
  // a hole record per grain; a larger chunk's cut punches only to the data's end.
  uint64_t chunk = a.chunk ? a.chunk : client::layout::kDefaultChunkBytes;
  bool to_chunk_end = cut && chunk <= kCutToChunkEndBytes;
  if (!to_chunk_end) RFOS_RETURN_IF_ERROR(op.size(a, r.floor, &r.size_final));
  if (q.set.spans) {  // layout, not an attribute: no check, no ctime
    if (!S_ISREG(a.mode)) return error(StatusCode::kInvalidArgument, "not a regular file");
    if (a.flags & kSpans) {
      r.attr = a;
      return r;
    }
    a.flags |= kSpans;
    r.size_final = false;
  }
  SetAttr rest = q.set;
  rest.spans = false;
  if (rest.set_mode || rest.set_uid || rest.set_gid || rest.set_size || rest.set_atime || rest.set_mtime ||
      rest.touch || (q.flags & kChangeTime)) {
    RFOS_RETURN_IF_ERROR(check_setattr(a, rest, q.cred));
    uint64_t end = to_chunk_end ? chunk : op.data_end_;
    if (cut && rest.size < end)  // all of the file's data is in its first chunk
      op.changes_.push_back(
          {Change::Kind::kPunchData, q.oid, chunk_key(0), std::string(kDataAkey), {}, rest.size, end - rest.size});
    if (grow) {
      SetAttr times = rest;
      times.set_size = false;
      times.touch = true;
      apply_setattr(a, r.floor, times, q.cred, op.now_);
      r.floor = std::max(r.floor, rest.size);
      a.size = std::max(a.size, rest.size);  // the size found here (all of it, unless kSpans), or the new floor
    } else {
      apply_setattr(a, r.floor, rest, q.cred, op.now_);
      if (rest.set_size) r.size_final = true;  // the size is what was set (what lay beyond is cut)
    }
  }
  op.put(q.oid, kInodeDkey, kInodeAkey, encode_inode(a, r.floor));
  RFOS_RETURN_IF_ERROR(op.commit(q.durable));
  r.attr = a;
  return r;
}

Result<DirReply> write(Op& op) {
  const DirRequest& q = op.q_;
  if (!op.local(q.oid)) return error(StatusCode::kInvalidArgument, "the inode is not on this target");
  DirReply r;
  RFOS_ASSIGN_OR_RETURN(Attr a, op.inode(q.oid, &r.floor));
  if (!S_ISREG(a.mode)) return error(StatusCode::kInvalidArgument, "not a regular file");
  uint64_t chunk = a.chunk ? a.chunk : client::layout::kDefaultChunkBytes;
  if (q.data.empty() || q.data.size() > kMaxDirData || q.offset > chunk || q.data.size() > chunk - q.offset ||
      !op.store_.owns(q.oid, chunk_key(0)))
    return error(StatusCode::kInvalidArgument, "a namespace write is small and inside a first chunk held here");
  // Times set after the write (Namespace::write_and_touch): checked before anything changes.
  const SetAttr& times = q.set;
  if (!times.only_times()) return error(StatusCode::kInvalidArgument, "a write sets times only");
  if (times.set_atime || times.set_mtime) RFOS_RETURN_IF_ERROR(check_setattr(a, times, q.cred));
  op.changes_.push_back({Change::Kind::kPutData, q.oid, chunk_key(0), std::string(kDataAkey), q.data, q.offset});
  a.mtime_ns = a.ctime_ns = op.now_;
  if (times.set_atime || times.set_mtime) apply_setattr(a, r.floor, times, q.cred, op.now_);
  op.put(q.oid, kInodeDkey, kInodeAkey, encode_inode(a, r.floor));
  RFOS_RETURN_IF_ERROR(op.commit(q.durable));
  RFOS_RETURN_IF_ERROR(op.size(a, r.floor, &r.size_final));
  r.attr = a;
  return r;
}

Result<DirReply> purge(Op& op) {
  const DirRequest& q = op.q_;
  if (!op.local(q.oid)) return error(StatusCode::kInvalidArgument, "the inode is not on this target");
  DirReply r;
  auto a = op.inode(q.oid, &r.floor);
  if (a.status().code() == StatusCode::kNotFound) return r;  // purged already
  RFOS_RETURN_IF_ERROR(a.status());
  r.attr = *a;
  if (a->nlink > 0) {  // linked again meanwhile
    r.inode_done = false;
    return r;
  }
  RFOS_ASSIGN_OR_RETURN(uint64_t end, op.store_.data_end(q.oid));
  r.attr.size = std::max(r.floor, end);
  op.changes_.push_back({Change::Kind::kPunchObject, q.oid, {}, {}, {}});
  RFOS_RETURN_IF_ERROR(op.commit(q.durable));
  return r;
}

// The whole of a small file held here, read with its attributes (r.attr, sized).
Status small_data(Op& op, const ObjectId& oid, DirReply* r) {
  if (!S_ISREG(r->attr.mode) || !r->size_final || r->attr.size > kMaxDirData || !op.store_.owns(oid, chunk_key(0)))
    return Status::ok();
  RFOS_ASSIGN_OR_RETURN(r->data, op.store_.read_data(oid, r->attr.size));
  r->has_data = true;
  return Status::ok();
}

Result<DirReply> lookup(Op& op) {
  const DirRequest& q = op.q_;
  if (q.name.size() > kNameMax) return error(StatusCode::kNameTooLong, "a name is at most 255 bytes");
  uint64_t floor = 0;
  RFOS_ASSIGN_OR_RETURN(Attr d, op.directory(q.dir, &floor));
  if (!permits(d, q.cred, X_OK)) return error(StatusCode::kPermissionDenied, "no search permission on the directory");
  RFOS_ASSIGN_OR_RETURN(DirEntry e, op.entry(q.dir, q.name));
  DirReply r;
  r.other = e.oid;
  r.other_type = e.type;
  r.inode_done = op.local(e.oid);
  if (!r.inode_done) return r;
  auto a = op.inode(e.oid, &r.floor);
  if (a.status().code() == StatusCode::kNotFound)  // an entry whose inode a crash left behind
    return error(StatusCode::kNotFound, "'" + q.name + "' has no inode");
  RFOS_RETURN_IF_ERROR(a.status());
  r.attr = *a;
  RFOS_RETURN_IF_ERROR(op.size(r.attr, r.floor, &r.size_final));
  // With kWithData, a small file's bytes when the caller may read them (a batched read of many files).
  if ((q.flags & kWithData) && permits(r.attr, q.cred, R_OK)) RFOS_RETURN_IF_ERROR(small_data(op, e.oid, &r));
  return r;
}

Result<DirReply> getattr(Op& op) {
  const DirRequest& q = op.q_;
  if (!op.local(q.oid)) return error(StatusCode::kInvalidArgument, "the inode is not on this target");
  DirReply r;
  RFOS_ASSIGN_OR_RETURN(r.attr, op.inode(q.oid, &r.floor));
  RFOS_RETURN_IF_ERROR(op.size(r.attr, r.floor, &r.size_final));
  if (q.flags & kWithData) RFOS_RETURN_IF_ERROR(small_data(op, q.oid, &r));
  return r;
}

// Entries with their inodes where those live here: `ls -l` and scandir+stat cost one request per page.
Result<DirReply> readdir(Op& op) {
  const DirRequest& q = op.q_;
  uint64_t floor = 0;
  RFOS_RETURN_IF_ERROR(op.directory(q.dir, &floor).status());
  DirPlusPage page;
  page.anchor = q.data;
  size_t max = std::clamp<uint64_t>(q.offset, 1, kMaxPageEntries);
  while (!page.done && page.entries.size() < max) {
    std::string before = page.anchor;
    RFOS_ASSIGN_OR_RETURN(auto keys, op.store_.list(q.dir, &page.anchor, max - page.entries.size(), &page.done));
    for (auto& [name, value] : keys) {
      if (name == kInodeDkey || name == kXattrDkey || value.empty()) continue;
      auto e = decode_entry(name, value);
      if (!e.is_ok()) continue;
      DirPlusEntry pe;
      pe.entry = std::move(e).value();
      if (op.local(pe.entry.oid)) {
        uint64_t f = 0;
        auto a = op.inode(pe.entry.oid, &f);
        if (a.is_ok()) {
          pe.attr = *a;
          RFOS_RETURN_IF_ERROR(op.size(pe.attr, f, &pe.size_final));
          pe.has_attr = true;
        }
      }
      page.entries.push_back(std::move(pe));
    }
    if (!page.done && page.anchor == before) return error(StatusCode::kInternal, "listing made no progress");
  }
  DirReply r;
  r.has_data = true;
  r.data = encode_dir_page(page);
  return r;
}

Result<DirReply> run(Op& op) {
  const DirRequest& q = op.q_;
  switch (q.op) {
    case DirOp::kCreate:
      return create(op);
    case DirOp::kRemove:
      return remove(op);
    case DirOp::kRename:
      return rename(op);
    case DirOp::kLink:
      return link(op);
    case DirOp::kSetattr:
      return setattr(op);
    case DirOp::kPurge:
      return purge(op);
    case DirOp::kLookup:
      return lookup(op);
    case DirOp::kGetattr:
      return getattr(op);
    case DirOp::kWrite:
      return write(op);
    case DirOp::kReadDir:
      return readdir(op);
  }
  return error(StatusCode::kInvalidArgument, "unknown namespace operation");
}
}  // namespace

Result<DirReply> execute(const DirRequest& q, DirStore& store, uint64_t now_ns) {
  Op op(q, store, now_ns);
  auto r = run(op);
  if (groups_needed(q.cred)) return groups_missing();
  if (r.is_ok() && op.dirs_changed_.size() == 1) {  // one directory changed: its attributes go back
    r->has_dir = true;
    r->dir = op.dirs_changed_.front();
  }
  return r;
}

}  // namespace rfos::posix
