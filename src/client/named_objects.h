// Named objects in a container, as `rfos put/get/rm/stat/ls` see them (and, later, an S3 bucket): a name maps
// to a data object laid out as every file-like object is (file_layout.h), or, for an object of up to
// kInlineBytes, to the bytes themselves, kept in its record.
//
// The name's record is an object of its own (its id a hash of the name), whose dkey "meta" holds single values:
// "name", "object" (the data object's id and size, one value so that they change together) and, while a put is
// under way, "pending" (the id of the data object it writes). A put writes a new data object, then swaps
// "object" to it in one update, then removes the old data: a reader sees the old object or the new one, never a
// mix; a put that fails leaves the old one as it was and removes what it wrote. Each put marks its data
// "pending.<id>" while it writes, so puts of one name at once never touch each other's data; the swap and the
// removal of what it replaced are one put's at a time (a lock value), so the last swap wins and nothing is
// left behind. A put that dies half-way leaves its pending data, which a remove of the name clears at once and a
// put of a data object a day later. docs/object-layout.md has the whole picture.
//
// A small object (kInlineBytes at most) has no data object (but through a handle that seals its data, which keeps
// bytes out of records): its bytes are in the record's "object" value, so
// a read costs one request, the value's, and a put writes no data to remove after a failure (it takes the swap's
// lock, reads the object it replaces, writes the record and the index, and unlocks).
//
// Beside the records, one index object (object class S1: one target, its dkeys in byte order:
// ObjectId::kOrderedDkeys) lists every name put under this layout: a dkey per name, its value the record's
// "object" value, written after the swap and removed before the record, so a listing (S3's ListObjects) is a
// request per page of names, starting where the page does and stopping at the end of its prefix, however many
// names the container holds. Names are 1..4096 bytes without a NUL byte. An index of an earlier version (its names
// by length) moves into this one at the first listing by a session that may write; until then listings merge both.
//
// Objects stored by rfos before this layout (their data under the record itself, dkeys the decimal chunk index,
// the size in "size") are still read, listed and removed; a put replaces one.
//
// Thread-safety: as the Container, one thread at a time; put() reads its input on a thread of its own.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/container.h"
#include "client/file_stream.h"

namespace rfos::client {

struct ObjectStat {
  std::string name;
  uint64_t size = 0;
  ObjectId data;           // the data object (the record itself for an object of the older layout)
  bool legacy = false;     // stored before this layout
  uint64_t mtime_ms = 0;   // when its put swapped it in (0: stored before rfos kept it)
  std::string attrs;       // what its put attached (PutOptions::attrs; an S3 object's metadata); "" for none
  bool composite = false;  // an object of parts (put_parts): `data` is its manifest
  // Stored in its record (kInlineBytes at most): `bytes` are all of it, and `data` names no object (it is the
  // put's id: the object's identity, as `rfos put` shows it).
  bool inlined = false;
  std::string bytes;
};

struct PutOptions {
  // Called once the bytes are durable, before the object replaces the old one: the attributes to keep with it
  // (it is given the size), or an error, which abandons the put (the old object stays as it was).
  std::function<Result<std::string>(uint64_t size)> attrs;
};

class NamedObjects {
 public:
  using Source = StreamSource;
  using Sink = StreamSink;
  using Progress = StreamProgress;
  // The largest object put() keeps in its record.
  static constexpr uint64_t kInlineBytes = 16u << 10;

  // `depth`: pieces in flight at once (each at most one engine piece, 1 MiB).
  explicit NamedObjects(Container& c, uint32_t depth = 16) : c_(c), depth_(depth ? depth : 1) {}

  // Stores what `source` gives as `name`, replacing any object of that name once all of it is durable.
  // Errors: the source's, the container's (kNoSpace, ...); the object of that name, if any, is unchanged then.
  Status put(std::string_view name, const Source& source, const Progress& progress = {},
             const PutOptions& options = {});
  // Gives the object's bytes to `sink`, each piece verified. kNotFound: no object of that name.
  Status get(std::string_view name, const Sink& sink, const Progress& progress = {});
  // The same for an object stat() already found (no second look at its name).
  Status read(const ObjectStat& st, const Sink& sink, const Progress& progress = {});
  // Its bytes [offset, offset + length), which lie inside it (not for objects of the older layout).
  Status read_range(const ObjectStat& st, uint64_t offset, uint64_t length, const Sink& sink,
                    const Progress& progress = {});
  // ... each piece handed over with its buffer (client/file_stream.h), which the sink may keep.
  Status read_range_pieces(const ObjectStat& st, uint64_t offset, uint64_t length, const PieceSink& sink,
                           const Progress& progress = {});

  // The RDMA path (an S3 request with a token, docs/s3.md): the bytes move between the targets and memory another
  // session granted (Container::grant_memory), never through this process. put_granted stores `size` bytes of
  // the grant from its start as put() does; read_granted writes [offset, offset + length) of the object into the
  // grant at `at`; write_granted writes `size` bytes of the grant into the data object `data` (a part's).
  // put_granted gives the id of the data object it stored.
  Result<ObjectId> put_granted(std::string_view name, uint64_t size, const GrantRef& grant,
                               const PutOptions& options = {});
  Status read_granted(const ObjectStat& st, uint64_t offset, uint64_t length, const GrantRef& grant, uint64_t at);
  Status write_granted(const ObjectId& data, uint64_t size, const GrantRef& grant);

  // A data object laid out as a file (file_layout.h), written by other means (an S3 multipart upload's part).
  struct Part {
    ObjectId data;
    uint64_t size = 0;
  };
  // Makes `parts`, in their order, one object named `name`, replacing any object of that name as put() does;
  // its manifest (the parts' ids and sizes) is a small object of its own. From the swap on the parts are the
  // object's: replacing or removing it removes them (but parts the replacing object also lists).
  Status put_parts(std::string_view name, std::span<const Part> parts, const PutOptions& options = {});
  // A fresh id for a data object (class SX), as put() takes for its own.
  static ObjectId fresh_data_object();

  // Multipart uploads (S3's): parts written as data objects of their own and recorded under an upload until
  // put_parts makes some of them one object, or the upload is dropped. An upload is an object of its own (class
  // S1, its id a hash of the upload id): dkey "u" its name, attributes and start, dkey "p" a record per part;
  // an index object lists the container's uploads.
  struct Upload {
    std::string id;
    std::string name;
    std::string attrs;
    uint64_t started_ms = 0;
  };
  struct StagedPart {
    Part part;
    std::string etag;
  };
  Status begin_upload(const Upload& upload);
  // kNotFound: no such upload.
  Result<Upload> upload(std::string_view id);
  // A part's data object is recorded as being written (owned by the upload, dropped with it) before its bytes
  // go in; abandon_part removes it when the writing failed.
  Status begin_part(std::string_view id, const ObjectId& data);
  Status abandon_part(std::string_view id, const ObjectId& data);
  // Records part `number` (its bytes already in p.data); the part recorded before under that number goes.
  Status add_part(std::string_view id, uint32_t number, const Part& p, std::string_view etag);
  Result<std::map<uint32_t, StagedPart>> parts(std::string_view id);
  // Removes the upload and its parts' data, but those in `keep` (the parts a completed object took).
  Status drop_upload(std::string_view id, const std::set<ObjectId>& keep);
  // The uploads whose names start with `prefix`, by name (then id).
  Result<std::vector<Upload>> uploads(std::string_view prefix);
  Result<ObjectStat> stat(std::string_view name);
  // Removes the object and its name. kNotFound: no object of that name.
  Status remove(std::string_view name);
  // Every named object, and the ids of objects no name refers to (written by other means: the bench, the API).
  struct Listing {
    std::vector<ObjectStat> named;
    std::vector<ObjectId> other;
    // Every object this layout accounts for: records, data, manifests and parts, pending data, the name index,
    // uploads and their parts (what `rfos fs check` must not take for leaked file data).
    std::set<ObjectId> owned;
    std::vector<Upload> uploads;  // uploads(""): those under way
  };
  Result<Listing> list();
  // A page of the names in the index that start with `prefix`, in byte order, from `from` on (inclusive: "" for
  // the first page, after(name) to leave `name` out, or any name, such as prefix_successor(p) (common/coding.h)
  // to skip every name under p), each with
  // its stat (attrs included, never an inline object's bytes: stat() the name to read it): at most `max` names
  // and a request per 1024 of them, plus, at the first call on this NamedObjects, one that looks for an index of
  // an earlier version. Objects stored before the index existed are not in it until put again.
  struct IndexPage {
    std::vector<ObjectStat> names;
    bool done = false;
    std::string next;  // where the next page starts, when not done
  };
  Result<IndexPage> list_index(std::string_view prefix, std::string_view from, size_t max);
  // Moves the names an index of an earlier version holds into the index, and removes it: a request that finds
  // none, where none is left. A gateway calls it as it opens a bucket to write, so that read-only listings need
  // not merge the two. kPermissionDenied on a read-only handle.
  Status settle_index();
  // The least name after `name` (any string): names hold no NUL, so `name` up to its first NUL and a 0x01 byte.
  static std::string after(std::string_view name) { return std::string(name.substr(0, name.find('\0'))) + '\x01'; }

  // The record object of `name`.
  static ObjectId record_of(std::string_view name);
  // The index object.
  static ObjectId index_object();
  static constexpr size_t kNameMaxBytes = 4096;

 private:
  // Removes the data of puts pending since before `started_before_ms` (and the older layout's pending), and what
  // replaced data is marked; with `spare_live`, none of the data the record names (a put's: the object stays),
  // without (a remove's: all goes). The akeys the record's "meta" held when listed (none: no record).
  Result<std::vector<std::string>> clear_pending(const ObjectId& record, uint64_t started_before_ms, bool spare_live);
  Status lock_swap(const ObjectId& record, const ObjectId& data);
  // Writes `data` (write gives the size), then swaps it in under `name` (put and put_parts).
  Status store(std::string_view name, const ObjectId& data, bool composite, const PutOptions& options,
               const std::function<Status(uint64_t*)>& write);
  // A put of `bytes` (kInlineBytes at most) into the record itself.
  Status store_inline(std::string_view name, std::string_view bytes, const PutOptions& options);
  // The swap's second half, once the record names the new object (`object` its value, `listed` its index
  // entry's) and `old` was read under the lock: lists it, removes the data it replaced, unlocks, and clears
  // the older layout's data; `pending`, the put's own pending entry, goes with the listing, before the lock (""
  // where it made none).
  // What listing the name gave.
  Status after_swap(const ObjectId& record, std::string_view name, const ObjectId& data, bool composite,
                    const Result<std::string>& old, std::string_view listed, bool legacy, std::string_view pending);
  Result<std::vector<Part>> parts_of(const ObjectId& manifest);
  // Calls `piece` for each data object's share of [offset, offset + length) of the object, in order (the one data
  // object, or each part's): the data object, where the share starts in it, its length, and the bytes of the range
  // before it. kNotSupported for an object of the older layout, kInvalidArgument for a range past the end.
  Status each_piece(const ObjectStat& st, uint64_t offset, uint64_t length,
                    const std::function<Status(const ObjectId&, uint64_t, uint64_t, uint64_t)>& piece);
  static ObjectId upload_object(std::string_view id);
  Result<std::vector<ObjectId>> parts_in_writing(std::string_view id);
  static ObjectId uploads_index();
  // Removes a data object, or an object of parts with its parts but those in `keep`.
  Status remove_data(const ObjectId& data, bool composite, const std::set<ObjectId>& keep);
  Result<ObjectStat> stat_of(const ObjectId& record, std::string_view name);
  // The index of an earlier version, whose dkeys are in length order, and whether it holds a name.
  static ObjectId legacy_index_object();
  Result<bool> legacy_index_left();
  // Calls `f` with the stat of each name with `prefix` the earlier index lists whose record still names an object.
  Status each_legacy_entry(std::string_view prefix, const std::function<Status(const ObjectStat&)>& f);
  // Moves the earlier index's names into the index and removes it. kPermissionDenied on a read-only handle.
  Status move_legacy_index();
  // list_index's page from the index alone, and from both (a read-only handle, before the move).
  Result<IndexPage> index_page(std::string_view prefix, std::string_view from, size_t max);
  Result<IndexPage> merged_index_page(std::string_view prefix, std::string_view from, size_t max);

  Container& c_;
  uint32_t depth_;
  bool index_settled_ = false;  // no index of an earlier version is left (list_index looked)
};

}  // namespace rfos::client
