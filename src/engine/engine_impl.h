// Internals of the engine, shared by engine.cc (open, metadata, commit queue), engine_io.cc (update and
// fetch) and engine_scan.cc (enumeration, aggregation, check). RocksDB types stay in this folder.
//
// Locks, in acquisition order: admin_mu (aggregation, destroys) -> reclaim_mu (readers shared, reclaim
// exclusive) -> commit_mu (commit queue) -> meta_mu (pools, containers, snapshots). The allocator and the
// arena have their own leaf mutexes.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <tuple>

#include "engine/blockio/allocator.h"
#include "engine/blockio/block_device.h"
#include "engine/blockio/buffer_arena.h"
#include "engine/engine.h"
#include "engine/index/keys.h"
#include "engine/value_cache.h"

namespace rfos::engine {

using blockio::Run;

// (epoch, seq): the total order of versions. {0, 0} is "before everything".
struct Version {
  uint64_t epoch = 0;
  uint64_t seq = 0;
  auto operator<=>(const Version&) const = default;
};

struct ContState {
  Uuid pool;
  Uuid uuid;
  index::ContRecord rec;
  std::set<Epoch> snapshots;
  // What aggregation has to look at (under meta_mu): the objects (object_prefix) a commit wrote since its last
  // pass, or, after an open or a snapshot's removal, every object. A namespace of millions of files is then not
  // read whole every second for the few it changed.
  bool aggregate_all = true;
  std::set<std::string> changed;

  // Updates and punches must be above this epoch.
  Epoch write_floor() const {
    Epoch e = rec.agg_epoch;
    if (!snapshots.empty() && *snapshots.rbegin() > e) e = *snapshots.rbegin();
    return e;
  }
};

// One entry of the commit queue: index records plus allocator changes that must become durable together.
struct Writer {
  // Runs first, under meta_mu, in commit order: validates against the current metadata (container still
  // there, epoch still above the write floor) and applies in-memory metadata effects. Non-OK drops it.
  std::function<Status()> prepare;
  // Puts whose key ends in a version placeholder get the commit sequence number patched in.
  struct Put {
    std::string key;
    std::string value;
    bool versioned = false;
  };
  std::vector<Put> puts;
  std::vector<std::string> deletes;
  std::vector<std::pair<std::string, std::string>> range_deletes;
  std::vector<Run> commit_runs;  // reserved runs the puts now own
  std::vector<Run> free_runs;    // runs the deletes give back
  bool wrote_data = false;       // block file data must be synced before the index commit
  bool lazy = false;             // acknowledged without a sync (UpdateOp::lazy)
  bool lazy_data = false;        // lazy with block data: a marker names its records until a sync (Impl::lead)
  Epoch epoch = 0;               // the epoch an update, punch or snapshot carries (0: none)
  bool awaited = false;          // its data write counted in writing_data (data_write_started)

  Status status;
  bool done = false;
  bool prepared = false;  // prepare() succeeded (the allocator changes were applied)
  // Set for a writer queued by commit_async: called on the commit thread once `done` (the writer is not
  // touched by the queue afterwards).
  std::function<void()> on_done;
  // Single values this writer puts that reads at the latest epoch will see (Engine::apply): the value cache
  // takes them once the batch is written, if nothing at a later epoch was committed before it.
  struct Fill {
    uint32_t cid = 0;
    ObjectId oid;
    std::string dkey, akey, value;
  };
  std::vector<Fill> fills;
};

class Engine::Impl {
 public:
  explicit Impl(const EngineOptions& o) : opts(o) {}
  ~Impl();

  Status open();
  // Queues `w` and returns once its batch is durable (or refused). Group commit: one thread leads a group,
  // syncs the block file once and writes one RocksDB batch with one WAL sync for all of it.
  Status commit(Writer* w);
  // As commit(w) for a lazy `w` when no other writer is queued or committing (it leads a group of its own, with
  // no sync); kBusy otherwise, with `w` left out.
  Status commit_if_idle(Writer* w);
  // Queues `w` without waiting: the commit thread leads its group (unless a waiting committer gets there
  // first) and calls w->on_done.
  void commit_async(Writer* w);
  // Brackets an update's data write, so a commit leader knows whom it may wait for: writes of up to
  // group_commit_wait_bytes count (the return value says whether this one does; pass it on to
  // Writer::awaited or data_write_abandoned).
  bool data_write_started(uint64_t bytes);
  void data_write_abandoned(bool counted);

  // Metadata lookups under meta_mu.
  Result<ContState> container(uint32_t cid) const;
  Status check_epoch_for_read(const ContState& c, Epoch epoch) const;
  // One locked look-up per I/O: the container's record once `epoch` is valid to read at / write at
  // (check_epoch_for_read / check_write_epoch), without copying its snapshot set.
  Result<index::ContRecord> open_for_read(uint32_t cid, Epoch epoch) const;
  Result<index::ContRecord> open_for_write(uint32_t cid, Epoch epoch) const;

  // ---- reads (engine_scan.cc) ----
  // The newest punch at or below `epoch` recorded at the level whose key prefix is `level_prefix`.
  static Version punch_floor(rocksdb::Iterator* it, const std::string& level_prefix, Epoch epoch);
  // The newest punch at or below `epoch` over the object, dkey and akey levels of `key`.
  static Version akey_floor(rocksdb::Iterator* it, const KeyRef& key, Epoch epoch);
  // The punch floor a read of `key` at `epoch` starts from: none where the object has no punches (may_have_punches),
  // else akey_floor's, with the object's own floor looked up once per view.
  Version read_floor(const index::ContRecord& rec, rocksdb::Iterator* it, const KeyRef& key, Epoch epoch,
                     ReadView::State* view) const;
  // Whether `oid` may hold punches: false when its container has none, or marks punched objects and has no
  // mark for this one. Asked after the caller's iterator was made, it sees every mark that iterator sees.
  bool may_have_punches(const index::ContRecord& rec, uint32_t cid, const ObjectId& oid) const;
  // The same, asked once per object of a view (null: asked now).
  bool may_have_punches(const index::ContRecord& rec, uint32_t cid, const ObjectId& oid, ReadView::State* view) const;
  // Whether anything under `prefix` (an object, dkey or akey) has a version visible at `epoch`, given the
  // punch floor inherited from the levels above the prefix.
  static bool any_visible(rocksdb::Iterator* it, const std::string& prefix, Epoch epoch, Version floor);
  // The same from where the iterator stands (at or before the first key under `prefix`), without a seek. It
  // stops on the first visible record (true), else past the prefix.
  static bool any_visible_here(rocksdb::Iterator* it, const std::string& prefix, Epoch epoch, Version floor);
  // Moves the iterator past every key under `prefix` (a dkey or an object it stands in): a few steps, and a seek
  // when they do not get there (a long history under the prefix).
  static void skip_past(rocksdb::Iterator* it, const std::string& prefix);
  // The iterator a read goes through: its view's, or a new one of the index as it is now, held in `own`.
  rocksdb::Iterator* read_iterator(ReadView::State* view, std::unique_ptr<rocksdb::Iterator>* own) const;

  struct ExtentRef {
    uint64_t start = 0;
    Version version;
    index::ExtentRecord rec;
    std::string value;  // owns the bytes rec.inline_data points into
  };
  // Visible extent records of an akey overlapping [begin, end), in ascending version order. A scan that steps
  // over more than kPiledUpRecords records, a quarter of them overlapping an earlier one or holes, sets piled_up.
  Status visible_extents(rocksdb::Iterator* it, const std::string& akey_prefix, Version floor, Epoch epoch,
                         uint64_t begin, uint64_t end, std::vector<ExtentRef>* out);
  // Small overwrites and truncates piled up in some array since the last aggregation pass: every read and size
  // of it walks them all (Engine::records_piled_up).
  std::atomic<bool> piled_up{false};

  EngineOptions opts;
  std::unique_ptr<rocksdb::Env> rocks_env;  // the index's file system; outlives db
  std::unique_ptr<rocksdb::DB> db;
  std::unique_ptr<blockio::BufferArena> arena;
  std::unique_ptr<blockio::BlockDevice> dev;
  blockio::ExtentAllocator alloc;
  uint64_t block_count = 0;
  uint64_t max_io_bytes = 0;
  bool data_flush_by_wal = false;      // see EngineOptions::DataSync::kAuto
  std::string durability;              // Engine::durability()
  Engine::LazyRecovery lazy_recovery;  // what open() found of lazy updates

  std::mutex admin_mu;
  std::shared_mutex reclaim_mu;

  mutable std::mutex meta_mu;
  std::set<Uuid> pools;
  std::map<uint32_t, ContState> conts;
  std::map<std::pair<Uuid, Uuid>, uint32_t> cont_ids;
  uint32_t next_cid = 1;

  std::mutex commit_mu;
  std::condition_variable commit_cv;
  std::deque<Writer*> writers;
  int writing_data = 0;  // awaited updates between their data write and joining the queue (under commit_mu)
  // Leads groups whose first writer came through commit_async (started with the first of them). It sleeps on a
  // condition of its own, woken only when such a writer heads the queue: woken by every commit instead, it cost
  // each namespace operation two futex calls and a switch of threads.
  std::thread committer;
  std::condition_variable committer_cv;
  bool committer_stop = false;
  // Wakes the committer when an async writer heads the queue (commit_mu held).
  void wake_committer() {
    if (!writers.empty() && writers.front()->on_done) committer_cv.notify_one();
  }
  // Commits the group at the front of `writers`, whose first writer the caller owns (commit_mu held; released
  // while the batch is written).
  void lead(std::unique_lock<std::mutex>& lock);
  // A record of an object was written: aggregation's next pass looks at that object (meta_mu held).
  void note_changed(std::string_view key) {
    if (key.size() < index::kObjectPrefixBytes || key[0] != index::kObjTag) return;
    uint32_t cid = 0;
    for (int i = 1; i <= 4; ++i) cid = cid << 8 | static_cast<uint8_t>(key[i]);
    auto it = conts.find(cid);
    if (it != conts.end() && !it->second.aggregate_all)
      it->second.changed.emplace(key.substr(0, index::kObjectPrefixBytes));
  }
  void committer_loop();
  // Single values at the latest epoch (value_cache.h): lead() drops what each commit wrote and fills in what
  // a batch put; fetch() answers from it.
  ValueCache values;
  // A read at the latest epoch through `values` (fetch's single values, array_size's sizes): a hit needs only
  // the container to be there still (only a valid key was ever cached); a miss reads with `read` and inserts
  // what it found, value or none (kNotFound, answered with `none`), under the ticket taken before it. With a
  // view, answered as of the view's moment.
  template <typename Read>
  Result<std::string> read_through(const ValueCache::Key& key, const ReadView::State* view, const char* none,
                                   Read read);
  // Drops from `values` the object levels the group's writers write: before the group's index write, and
  // again after it, in refresh_values.
  void drop_values(const std::vector<Writer*>& group, ValueCache::Drop when);
  // After a group's index write: the commit counted, its levels dropped again, then, in the group's order, the
  // fills of each writer no commit before it had a later epoch than (`high`: the highest before the group).
  void refresh_values(const std::vector<Writer*>& group, Epoch high, bool written);
  uint64_t seq = 0;
  std::atomic<uint64_t> commit_groups{0}, committed_writers{0};  // Engine::commit_stats
  // A lazy commit went to the index's log since the last sync of it (Engine::sync). sync_mu makes callers that
  // come at once share one sync: the ones that waited find the flag cleared.
  std::atomic<bool> unsynced{false};
  // Commits between the start of their index write and their flag (above): what they wrote may be seen already.
  std::atomic<int> index_writes{0};
  // Lazy block data was written since the media were last flushed (a sync, or a durable commit).
  std::atomic<bool> unsynced_data{false};
  std::mutex sync_mu;
  // Lazy updates with block data each leave a marker ('L' seq) naming their records until a sync covers them:
  // after a power cut, open() checks those records' data against their checksums and drops the updates whose
  // data did not reach the media (their index records may have, ahead of it). Under meta_mu.
  uint64_t marker_high = 0;   // the highest seq a marker was written at
  uint64_t markers_upto = 0;  // markers at or below it are deleted (or being deleted by a durable write)
  // Deletes the markers up to seq `upto` in `batch` when any may exist (meta_mu held); true when it did, and the
  // batch must then not be durable before the block file's finished writes are.
  bool clear_markers(rocksdb::WriteBatch* batch, uint64_t upto);
  // At open: the lazy updates a power cut left without their data, dropped; the markers, cleared.
  Status recover_lazy();
  // The highest epoch any committed update, punch or snapshot carried (under meta_mu), kept in the index with
  // the commit that raised it: a restarted target's clock starts past it.
  Epoch high_epoch = 0;
  Status failed;  // sticky: a failed commit leaves memory and disk unknown; reopen to recover

  // Records aggregation removed since the index was last compacted (under admin_mu).
  uint64_t tombstones = 0;
};

inline constexpr uint64_t kCompactAfterTombstones = 1024;

// Key prefix of an akey: object_prefix + dkey + akey.
std::string akey_prefix(const KeyRef& key);
Status validate_key(const KeyRef& key, bool need_akey);
// A ReadView's state (engine.h). Its iterator's Seek steps forward with Next when the target lies a few keys
// ahead in the object the iterator stands in: a seek searches the memtable and every table from the top, dozens
// of steps' work, while an inode, its extended attributes and its file's first chunk lie side by side.
struct ReadView::State {
  std::shared_lock<std::shared_mutex> reclaim;  // taken before the iterator, as a fetch takes it
  ValueCache::Moment moment;                    // taken before the iterator too
  std::unique_ptr<rocksdb::Iterator> it;
  std::map<std::pair<uint32_t, ObjectId>, bool> punches;                   // may_have_punches, per object
  std::map<std::tuple<uint32_t, ObjectId, Epoch>, Version> object_floors;  // an object's own punch floor
};
std::unique_ptr<rocksdb::Iterator> stepping_iterator(std::unique_ptr<rocksdb::Iterator> base);

template <typename Read>
Result<std::string> Engine::Impl::read_through(const ValueCache::Key& key, const ReadView::State* view,
                                               const char* none, Read read) {
  std::optional<std::string> cached;
  if (values.find(key, view ? view->moment.commits : ValueCache::kNow, &cached)) {
    RFOS_RETURN_IF_ERROR(open_for_read(key.cid, kEpochLatest).status());
    if (!cached) return error(StatusCode::kNotFound, none);
    return std::move(*cached);
  }
  ValueCache::Ticket ticket = view ? values.ticket(view->moment, key.cid, key.oid) : values.ticket(key.cid, key.oid);
  Result<std::string> got = read();
  if (got.is_ok()) {
    values.insert(ticket, key, *got);
  } else if (got.status().code() == StatusCode::kNotFound) {
    values.insert(ticket, key, std::nullopt);
  }
  return got;
}

// Updates and punches: epoch in 1..2^64-2 and above the container's write floor.
Status check_write_epoch(const ContState& c, Epoch epoch);
// Hole records for `length` bytes of the array under `akey_prefix` from `offset`, at `epoch`, into w: one per
// grain (a punched range can be any size; it holds no data).
Status add_hole(Writer* w, const std::string& akey_prefix, uint32_t csum_chunk_bytes, Epoch epoch, uint64_t offset,
                uint64_t length);
// Sets w->prepare to re-check, in commit order, that the container exists and `epoch` is still writable.
void make_versioned_writer(Engine::Impl* impl, Writer* w, uint32_t cid, Epoch epoch);
// After make_versioned_writer, for a writer that punches: the container's first punch marks its record in the
// same batch (ContRecord::has_punches), so reads know to look for punches.
void marks_punches(Engine::Impl* impl, Writer* w, uint32_t cid, std::vector<ObjectId> objects);
// The I/O of `buf` laid over `runs` in order (a record's blocks, as its data lies in them), appended to `out`.
inline void run_ios(bool write, uint8_t* buf, const std::vector<Run>& runs, std::vector<blockio::IoRequest>* out) {
  for (const Run& run : runs) {
    out->push_back({write, buf, run.block * kBlockBytes, run.nblocks * kBlockBytes});
    buf += static_cast<size_t>(run.nblocks) * kBlockBytes;
  }
}
inline uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline bool starts_with(const rocksdb::Slice& s, const std::string& prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}
Status from_rocks(const rocksdb::Status& s, const std::string& what);

// The power-cut seam's hooks (power_cut.cc): the block file's write log, and RocksDB's file system over `base`.
blockio::WriteLog* power_cut_block_log(PowerCut* cut, const std::string& block_file);
std::shared_ptr<rocksdb::FileSystem> power_cut_fs(PowerCut* cut, std::shared_ptr<rocksdb::FileSystem> base);

}  // namespace rfos::engine
