// Namespace operations carried out by the target that holds the directory entry, in one round trip and one atomic
// commit (the data plane's kNamespace, docs/wire-format.md): create, remove, rename, link and setattr. The client
// (posix/namespace.cc) sends a DirRequest to that target; the target runs execute() over its engine through a
// DirStore, one operation at a time, and answers a DirReply.
//
// What a target cannot see: an inode that lives on another target (a hard link's, a file renamed in from a
// directory elsewhere, a subdirectory). execute() asks for what it needs of it (`need`: the reply names the inode,
// nothing is changed) and the client sends the request again with a Hint (the inode's owner, whether a directory
// is empty); an inode it could not change in the batch is left to the client (`inode_done` false), which then
// changes it itself, and the batch is made durable first so that no crash keeps the later step without this one.
//
// Thread-safety: pure functions; execute() must not run twice at once over one store.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "posix/records.h"

namespace rfos::posix {

enum class DirOp : uint8_t {
  kCreate = 1,    // dir/name: a new inode `oid` (written here when inode_here), mode, rdev, chunk, data
  kRemove = 2,    // dir/name: unlink, or rmdir with kRemoveDir
  kRename = 3,    // dir/name -> dir2/name2, flags kRenameNoReplace / kRenameExchange; both directories here
  kLink = 4,      // dir/name: another name for inode `oid`
  kSetattr = 5,   // inode `oid`, as `set` says
  kPurge = 6,     // inode `oid`, if no name links it any more: its object's keys on this target
  kWrite = 9,     // `data` into file `oid` at `offset`, inside its first chunk (here), and mtime and ctime moved;
                  // then the times in `set` (atime, mtime; nothing else), if any, as kSetattr sets them for `cred`
  kReadDir = 10,  // a page of directory `dir` from anchor `data`, up to `offset` entries, each with its inode when
                  // it lives here (readdirplus); the reply's data is an encoded DirPlusPage
  // Reads (wire kNamespaceRead: no batch, a read-only session may ask):
  kLookup = 7,   // dir/name: the entry, and its inode when it lives here
  kGetattr = 8,  // inode `oid`; with kWithData, a small file's bytes too (all of it, up to kMaxDirData)
};
inline constexpr uint8_t kMaxDirOp = 10;
constexpr bool is_read(DirOp op) { return op == DirOp::kLookup || op == DirOp::kGetattr || op == DirOp::kReadDir; }
inline constexpr size_t kMaxPageEntries = 256;  // kReadDir

inline constexpr unsigned kRenameNoReplace = 1;  // RENAME_NOREPLACE
inline constexpr unsigned kRenameExchange = 2;   // RENAME_EXCHANGE
inline constexpr unsigned kRemoveDir = 4;        // kRemove: rmdir
inline constexpr unsigned kWithData = 8;  // kGetattr, and kLookup where the caller may read it: a small file's bytes
// kRemove: an inode of this target left without links is purged in the same batch, unless it is in `keep` (files
// the client has open)
inline constexpr unsigned kPurgeUnlinked = 16;
inline constexpr size_t kMaxKeep = 64;
inline constexpr size_t kMaxGroups = 1024;  // supplementary groups a request carries at most
// kSetattr of the size: the client cut nothing; the target cuts what lies beyond the new size in the same batch
// when the whole file lies here (not kSpans, its first chunk here). When it does not, nothing is done and the
// reply's inode_done is false: the client cuts the other targets' chunks and sends the setattr again without it.
inline constexpr unsigned kCutHere = 32;
// kSetattr: the inode changed otherwise (an xattr was set or removed): its ctime moves, nothing else (a target
// that predates it changes nothing).
inline constexpr unsigned kChangeTime = 64;
// kSetattr of the size: a growth. The size becomes at least set.size (the floor rises to it) and nothing is cut,
// so what another client appended meanwhile stays (fallocate; a size set would cut it). mtime and ctime move.
inline constexpr unsigned kGrowOnly = 128;

// What the client read of an inode on another target.
struct Hint {
  ObjectId oid;
  uint32_t uid = 0;
  bool empty = false;  // a directory with no entries
  bool operator==(const Hint&) const = default;
};

struct DirRequest {
  DirOp op = DirOp::kCreate;
  Cred cred;
  bool durable = false;  // acknowledged once on the media (-o sync, O_SYNC); otherwise at the next sync
  ObjectId dir;
  std::string name;
  ObjectId dir2;
  std::string name2;
  unsigned flags = 0;
  ObjectId oid;
  uint32_t mode = 0;  // kCreate: with the S_IFMT bits
  uint64_t rdev = 0;
  uint32_t chunk = 0;
  bool inode_here = false;  // kCreate: the inode record goes into this batch (else the client wrote it before);
                            // kLink: the client raised the link count itself (the inode is elsewhere)
  std::string data;         // kCreate: a symlink's target, or a regular file's first bytes (chunk 0, offset 0);
                            // kWrite: the bytes
  uint64_t offset = 0;      // kWrite
  SetAttr set;
  std::vector<Hint> hints;
  std::vector<ObjectId> keep;  // kRemove with kPurgeUnlinked
};
inline constexpr size_t kMaxDirData = 4095;  // first bytes that travel with a create (one inline piece)

struct DirReply {
  Attr attr;                // kCreate, kLink, kSetattr: the inode after; kRemove: the removed inode after
                            // (nlink 0: gone once nobody holds it), when inode_done; kPurge: the inode
  uint64_t floor = 0;       // kSetattr, kPurge: the size floor (attr.size is max(floor, this target's data end))
  ObjectId other;           // kRemove: the removed inode; kRename: the replaced one (zero: none); kLookup: the
                            // entry's inode (attr holds it when inode_done)
  uint32_t other_type = 0;  // its S_IFMT bits
  bool inode_done = true;   // `other` (kRemove, kRename) was updated here; false: the client updates it.
                            // kPurge: false when the inode is linked again (nothing was purged); kSetattr
                            // with kCutHere: false when the file does not lie wholly here (nothing was done)
  ObjectId need;            // nonzero: nothing was done; send again with a Hint about this inode
  // attr.size is the file's size; false: only what this target holds (kSpans), ask the others too
  bool size_final = true;
  bool has_data = false;  // kGetattr with kWithData: `data` is the whole file
  bool purged = false;    // kRemove with kPurgeUnlinked: the inode's keys here are gone
  // The directory's attributes after the change (kCreate, kRemove, kLink; kRename within one directory), so a
  // client's cached copy stays good: every change moves its ctime.
  bool has_dir = false;
  Attr dir;
  std::string data;
};

// A page of a directory with the attributes of the entries whose inodes live on its target (kReadDir).
struct DirPlusEntry {
  DirEntry entry;
  bool has_attr = false;
  bool size_final = true;  // as DirReply::size_final
  Attr attr;
};
struct DirPlusPage {
  std::vector<DirPlusEntry> entries;
  std::string anchor;  // pass back to continue
  bool done = false;
};
std::string encode_dir_page(const DirPlusPage& p);
Result<DirPlusPage> decode_dir_page(std::string_view in);  // kInvalidArgument when malformed (fuzzed)

std::string encode_dir_request(const DirRequest& q);
// kInvalidArgument for anything malformed (bytes from a client: fuzzed).
Result<DirRequest> decode_dir_request(std::string_view in);
std::string encode_dir_reply(const DirReply& r);
Result<DirReply> decode_dir_reply(std::string_view in);

// What a namespace change leaves stale in other clients' caches: the names it made, removed or replaced, and the
// inodes whose attributes it moved. A target sends it to the watchers of the container (wire kWatch) once the
// change committed, so a mount can drop what its kernel holds at once instead of at the end of a timeout.
struct Notice {
  std::vector<std::pair<ObjectId, std::string>> entries;  // (directory, name)
  std::vector<ObjectId> inodes;
  bool empty() const { return entries.empty() && inodes.empty(); }
};
// The notice of a change `q` that committed with reply `r` (empty for reads and purges).
Notice notice_of(const DirRequest& q, const DirReply& r);
std::string encode_notice(const Notice& n);
Result<Notice> decode_notice(std::string_view in);  // kInvalidArgument when malformed (bytes from a server: fuzzed)

// One change of an operation's batch.
struct Change {
  enum class Kind : uint8_t { kPut, kPutData, kPunch, kPunchObject, kPunchData };
  Kind kind = Kind::kPut;
  ObjectId oid;
  std::string dkey;
  std::string akey;
  std::string value;  // kPut: a single value; kPutData: array bytes at `offset`
  uint64_t offset = 0;
  uint64_t length = 0;  // kPunchData: a hole of `length` bytes at `offset` in the array (dkey, akey)
};                      // kPunch: the dkey; kPunchObject: every key of the object on this target

// A target's engine as the operations see it: the latest state, and one atomic batch at the end.
class DirStore {
 public:
  virtual ~DirStore() = default;
  // Whether this target holds (oid, dkey).
  virtual bool owns(const ObjectId& oid, std::string_view dkey) const = 0;
  // A single value; kNotFound when none.
  virtual Result<std::string> get(const ObjectId& oid, std::string_view dkey, std::string_view akey) = 0;
  // Whether a directory object has entries (dkeys other than the inode's and the xattrs').
  virtual Result<bool> has_entries(const ObjectId& dir) = 0;
  // The end of a file's data on this target (0: none here).
  virtual Result<uint64_t> data_end(const ObjectId& oid) = 0;
  // The end of a file's data in its first chunk (0: none): its size when nothing lies beyond (not kSpans).
  virtual Result<uint64_t> first_chunk_end(const ObjectId& oid) = 0;
  // `len` bytes of a file's first chunk from offset 0 (holes as zeros).
  virtual Result<std::string> read_data(const ObjectId& oid, uint64_t len) = 0;
  // Up to `max` dkeys of `dir` after `anchor` ("" to start), each with its value under akey "e" ("" where
  // none); *anchor moves on, *done at the end.
  virtual Result<std::vector<std::pair<std::string, std::string>>> list(const ObjectId& dir, std::string* anchor,
                                                                        size_t max, bool* done) = 0;
  virtual Status apply(const std::vector<Change>& changes, bool durable) = 0;
};

// Carries out `q` over `store` at time now_ns, with the errors a Linux file system gives (docs/posix.md).
Result<DirReply> execute(const DirRequest& q, DirStore& store, uint64_t now_ns);

}  // namespace rfos::posix
