// The storage engine of one target: a versioned object store that owns its media.
//
// Object model (the shape of DAOS's VOS): pool shard -> container -> object (128-bit id) -> dkey -> akey ->
// either a single value or a byte array addressed by extents. Every update and punch carries an epoch;
// reads see the newest version at or below their epoch. Overlapping array extents resolve newest-wins
// (by epoch, then by commit order within one epoch); holes read as zeros. Snapshots pin epochs, and
// aggregation reclaims versions that no snapshot and no reader can see.
//
// Media: the index and small values live in RocksDB; array data of at least `inline_max_bytes` lives in a
// preallocated block file driven by io_uring with O_DIRECT and registered buffers. See docs/engine-format.md.
//
// Zero copy: update_begin hands out engine-owned, aligned, registered buffers for the caller (later an RDMA
// transport) to fill; update_end verifies the caller's checksums, writes, makes the update durable and
// commits it (group commit), or abort drops it. fetch_begin reads and verifies into engine buffers that the
// caller reads until fetch_end.
//
// Thread-safety: an Engine is safe to use from many threads at once. UpdateTx/FetchTx objects belong to
// one thread at a time. All engine buffers stay valid until their Tx ends or is destroyed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace rfos::engine {

using Epoch = uint64_t;
// Read at "latest": every committed version.
inline constexpr Epoch kEpochLatest = UINT64_MAX;

// Engine constants. Array extents are split at kGrainBytes boundaries of their logical offset; each piece is
// one index record and one buffer.
inline constexpr uint32_t kBlockBytes = 4096;
inline constexpr uint32_t kGrainBytes = 1u << 20;
inline constexpr uint32_t kKeyMaxBytes = 4096;
inline constexpr uint32_t kSingleValueMaxBytes = 1u << 20;
inline constexpr uint64_t kArrayOffsetMax = 1ull << 62;

enum class ValueKind : uint8_t { kSingle = 1, kArray = 2 };

class PowerCut;

struct EngineOptions {
  std::string dir;                         // RocksDB index lives in dir/index
  std::string block_file;                  // default: dir/blocks
  uint64_t block_file_bytes = 1ull << 30;  // size when the file is created; fixed afterwards
  uint64_t arena_bytes = 64ull << 20;      // registered buffer arena (multiple of 1 MiB)
  uint32_t inline_max_bytes = 4095;        // array pieces up to this size stay in the index
  bool direct_io = true;                   // O_DIRECT when the file system allows it
  bool prezero = true;                     // write zeros over a new block file (no unwritten extents)
  bool sync = true;                        // durability before acknowledgement (false: benchmarks only)
  // How block file data becomes durable before its index records commit:
  //  kAlways (the default): an fdatasync of the block file, then the WAL sync.
  //  kAuto: the index's WAL sync alone, which flushes the device cache for the block file's finished writes
  //         too, when those writes need nothing else to reach the media: checked at open (the block file is on
  //         ext4 or XFS, opened O_DIRECT, pre-zeroed, every extent written, none shared or copy-on-write, no
  //         holes, the same device as the index). When a check fails the engine runs as kAlways and
  //         durability() says why. One device flush per group commit instead of two.
  enum class DataSync { kAuto, kAlways };
  DataSync data_sync = DataSync::kAlways;
  // Tests only: the media seam that simulates losing power (engine/power_cut.h).
  PowerCut* power_cut = nullptr;
  // Write the index's WAL ahead (with fill), so its synced writes do not grow the file and commit the file
  // system's journal (engine/index/wal_file_system.h). false: RocksDB's appending WAL (benchmarks only).
  bool prewrite_wal = true;
  bool create = true;            // create (format) a missing target
  uint32_t io_queue_depth = 64;  // io_uring entries per ring
  // Bytes of reads a target's ring keeps at the device at once; more wait their turn (0: no limit). See
  // blockio::AsyncRing::submit for why, and docs/BENCHMARKS.md for the measurement.
  uint32_t read_window_bytes = 1u << 20;
  // Group commit: a leader waits up to this long for updates whose data is still being written, so they
  // share its index sync (PostgreSQL's commit_delay, but only when such updates exist). 0 disables.
  uint32_t group_commit_wait_us = 300;
  // ... but only for data writes up to this size: a larger one would not finish within the wait, and waiting
  // for it only delays the leader (measured: 1 MiB updates at depth 4 spent 300 us of their ~1.2 ms commit so).
  uint32_t group_commit_wait_bytes = 256u << 10;
};

struct ContainerProps {
  uint32_t csum_chunk_bytes = 4096;  // power of two in [512, 1 MiB]
  bool csum = true;                  // false: caller sends no checksums; the engine makes its own
};

struct ContainerInfo {
  Uuid pool;
  Uuid uuid;
  uint32_t id = 0;  // the target-local handle used by object calls
  ContainerProps props;
  Epoch agg_epoch = 0;  // highest epoch aggregated
  std::vector<Epoch> snapshots;
};

// Where an object call points. Keys are opaque bytes, 1..kKeyMaxBytes long.
struct KeyRef {
  uint32_t cont = 0;
  ObjectId oid;
  std::string_view dkey;
  std::string_view akey;
};

struct UpdateOp {
  KeyRef key;
  Epoch epoch = 0;  // 1 .. kEpochLatest-1; above the newest snapshot and the aggregation boundary
  ValueKind kind = ValueKind::kArray;
  uint64_t offset = 0;  // array only
  uint64_t length = 0;  // bytes; > 0
  // Acknowledge once the index holds it, without waiting for the media: durable at the next sync() (or the next
  // durable commit), and until then lost by a power cut but not by the death of the process. One whose block data
  // had not reached the media when the power went is dropped whole at the next open (its records name the data
  // with their checksums; a marker names its records until a sync), so what it overwrote shows again, as a
  // local file system loses unsynced writes.
  bool lazy = false;
  // The caller has no checksums of the bytes (a target read them from memory another session lent it): the engine
  // takes its own from the buffers, as for a container without end-to-end checksums, and takes none from the
  // caller, so damage at rest is still caught on every later read.
  bool checksum_here = false;
};

// One change of an atomic batch (Engine::apply): all of a batch's changes become visible and durable together.
struct Mutation {
  enum class Kind : uint8_t {
    kPutSingle,    // the single value `value` at (dkey, akey)
    kPutArray,     // `value` into the array (dkey, akey) at `offset`: up to inline_max_bytes, within one 1 MiB grain
    kPunchDkey,    // the dkey and everything under it
    kPunchObject,  // the whole object (dkey and akey unused)
    kPunchArray    // `length` bytes of the array (dkey, akey) from `offset`: a hole, as punch_extent makes
  };
  Kind kind = Kind::kPutSingle;
  ObjectId oid;
  std::string dkey;
  std::string akey;
  std::string value;
  uint64_t offset = 0;
  uint64_t length = 0;  // kPunchArray
};
inline constexpr size_t kMutationValueMaxBytes = 64 * 1024;
inline constexpr size_t kPiledUpRecords = 64;                          // see Engine::records_piled_up
inline constexpr uint64_t kMutationPunchMaxBytes = uint64_t{1} << 30;  // kPunchArray: at most 1024 hole records

class ReadView;

struct FetchOp {
  KeyRef key;
  Epoch epoch = kEpochLatest;
  ValueKind kind = ValueKind::kArray;
  uint64_t offset = 0;  // array only
  uint64_t length = 0;  // array: bytes (> 0); single value: ignored (the whole value)
  // Set by a caller that checks every returned checksum against the returned bytes itself (the data plane's
  // client, end to end, as DAOS's does): a chunk returned exactly as stored goes out with its stored checksum
  // without being verified here, and damage at rest then shows as a mismatch at that caller. Chunks the engine
  // checksums anew (partial pieces, merges of records, holes) are verified here first either way.
  bool caller_verifies = false;
  // Read through this view (may be null: the index as it is now). fetch and fetch_begin only (fetch_submit
  // refuses it): the view keeps the blocks it names in place, so it must outlive the reads.
  ReadView* view = nullptr;
};

// A piece of an engine buffer. `data` points into registered memory owned by the engine.
struct IoBuf {
  uint8_t* data = nullptr;
  size_t len = 0;
};

struct Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
  auto operator<=>(const Extent&) const = default;
};

// Resumable enumeration position. Start with a default Anchor; pass it back until `done`.
struct Anchor {
  std::string position;
  bool done = false;
};

struct SpaceInfo {
  uint64_t total_bytes = 0;  // usable block file bytes
  uint64_t free_bytes = 0;   // not allocated, committed or reserved
};

struct AggregateStats {
  uint64_t records_removed = 0;
  uint64_t bytes_reclaimed = 0;  // block file bytes given back
  uint64_t grains_merged = 0;    // grains whose visible bytes were rewritten as one record
};

class Engine;
struct UpdateState;
struct FetchState;
struct FetchPlan;
struct AggRecord;
struct Writer;
namespace blockio {
class AsyncRing;
}

// The media ring of a thread that runs its own event loop (a target's), for fetch_submit and update_submit:
// the thread polls it beside its other event sources, and finished operations call back from poll() on that
// thread. The reads and writes the operations need go to the kernel at the next poll(), all at once, so the
// thread must poll while in_flight() is not zero (ready() is true until it has). Never shared between threads.
// Destroying it waits for the I/O and commits in flight and drops their callbacks.
class IoRing {
 public:
  ~IoRing();
  int poll();                // runs the callbacks of finished operations; returns how many
  void drain();              // blocks until every submitted operation has called back
  bool ready() const;        // poll() would find work (no system call)
  int event_fd() const;      // readable once completions came since arm() (for poll(2) with other sources)
  bool arm();                // before sleeping on event_fd(): clears it, then returns ready()
  size_t in_flight() const;  // operations submitted and not called back

 private:
  friend class Engine;
  struct Commits;  // index commits the engine's commit thread finished for this ring
  std::unique_ptr<blockio::AsyncRing> ring_;
  std::shared_ptr<Commits> commits_;
  size_t committing_ = 0;  // updates waiting for their index commit
};

// An update between begin and end. Move-only; destroying one that was not ended aborts it.
class UpdateTx {
 public:
  UpdateTx();
  UpdateTx(UpdateTx&&) noexcept;
  UpdateTx& operator=(UpdateTx&&) noexcept;
  ~UpdateTx();

  // The buffers to fill, in logical order; their concatenation is the payload (op.length bytes).
  std::span<const IoBuf> buffers() const;
  // How many checksums update_end expects (one per checksum chunk the extent touches; 1 for a single
  // value; 0 when the container has checksums off).
  size_t csum_count() const;
  uint32_t csum_chunk_bytes() const;
  bool active() const { return state_ != nullptr; }

 private:
  friend class Engine;
  std::unique_ptr<UpdateState> state_;
};

// A fetch between begin and end. Move-only; destroying one ends it.
class FetchTx {
 public:
  FetchTx();
  FetchTx(FetchTx&&) noexcept;
  FetchTx& operator=(FetchTx&&) noexcept;
  ~FetchTx();

  // The fetched bytes in logical order (holes as zeros); valid until the FetchTx ends.
  std::span<const IoBuf> buffers() const;
  // Checksums of the fetched bytes, laid out per checksum chunk (see common/crc32c.h); one for a single value.
  std::span<const uint32_t> csums() const;
  uint32_t csum_chunk_bytes() const;
  uint64_t length() const;
  // Copies the fetched bytes out (for tests and the copying API).
  std::string to_string() const;

 private:
  friend class Engine;
  friend struct FetchPlan;
  std::unique_ptr<FetchState> state_;
};

// The index as it was at one moment, for several reads in a row from one thread (one namespace operation's
// lookups of an entry, its inode and its file's size): a read through it costs no new index iterator, a read
// just after the last one in key order (an inode, then its file's first chunk) steps there instead of
// searching the whole index again, and which objects have punches is looked up once. It keeps the blocks its
// records name from being reused while it lives (as a fetch does): hold one only for the reads of one
// operation. Move-only; Engine::read_view makes one.
class ReadView {
 public:
  ReadView();
  ReadView(ReadView&&) noexcept;
  ReadView& operator=(ReadView&&) noexcept;
  ~ReadView();
  struct State;  // the engine's (engine_impl.h)

 private:
  friend class Engine;
  std::unique_ptr<State> state_;
};

class Engine {
 public:
  // Opens (and with options.create, formats) the target at options.dir. Errors: kInvalidArgument (bad
  // options), kNotFound (missing and !create), kCorruption (block file and index disagree), kIoError.
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- pool shards and containers (durable on return) ----
  Status pool_create(const Uuid& pool);   // kAlreadyExists
  Status pool_destroy(const Uuid& pool);  // kUnknownPool; destroys its containers
  std::vector<Uuid> pool_list() const;
  Status cont_create(const Uuid& pool, const Uuid& cont, const ContainerProps& props);  // kUnknownPool, kAlreadyExists
  Status cont_destroy(const Uuid& pool, const Uuid& cont);                    // kUnknownContainer; frees its space
  Result<ContainerInfo> cont_open(const Uuid& pool, const Uuid& cont) const;  // kUnknownPool, kUnknownContainer
  Result<std::vector<ContainerInfo>> cont_list(const Uuid& pool) const;

  // ---- updates: two-phase ----
  // Reserves buffers and block file space. Errors: kUnknownContainer, kInvalidArgument (empty or oversized
  // keys, zero length, offset overflow), kTooLarge (over the arena or kSingleValueMaxBytes), kEpochTooOld,
  // kNoSpace, kBusy (arena exhausted: retry later).
  Result<UpdateTx> update_begin(const UpdateOp& op);
  // Verifies `csums` (layout of common/crc32c.h) against the buffers, writes, syncs and commits. On any error
  // nothing is stored and the reservation is released. Errors: kChecksumMismatch, kEpochTooOld (a snapshot or
  // aggregation overtook it), kIoError, kEngineFailed.
  Status update_end(UpdateTx& tx, std::span<const uint32_t> csums);
  void update_abort(UpdateTx& tx);
  // update_end without blocking the caller on the media: the checksums are verified now, on the caller's
  // thread; the data writes go to `ring`, the index commit to the engine's commit thread (one group commit
  // with every other update in flight), and `done` gets what update_end would have returned, from ring.poll()
  // on the ring's thread (or right here when the update is refused before any I/O).
  void update_submit(IoRing& ring, UpdateTx tx, std::vector<uint32_t> csums, std::function<void(Status)> done);
  // Copying convenience: begin, copy `data`, end.
  Status update(const UpdateOp& op, std::span<const uint8_t> data, std::span<const uint32_t> csums);

  // ---- atomic batches ----
  // The mutations, all at `epoch`, in one index commit: after a crash either all of them are there or none.
  // Index-only (no block data), for the small records of a namespace operation. The caller checks whatever
  // must hold first (a name being free, a key being there). `lazy`: as UpdateOp::lazy. Errors:
  // kUnknownContainer, kInvalidArgument (bad keys, a value over kMutationValueMaxBytes, an array piece that
  // does not stay inline), kEpochTooOld, kEngineFailed.
  Status apply(uint32_t cont, Epoch epoch, std::span<const Mutation> mutations, bool lazy);
  // A lazy apply for a thread that must never wait for the media (a target's network thread): it commits only
  // when no other commit is queued or under way, so it neither waits behind another's sync nor leads a group
  // that syncs. Otherwise kBusy, and nothing changed.
  Status apply_if_idle(uint32_t cont, Epoch epoch, std::span<const Mutation> mutations);
  // Makes every commit acknowledged so far durable (the lazy ones): one sync of the index's log, shared by
  // callers that come at once; nothing to do when every commit was durable already.
  Status sync();

  // ---- fetches: two-phase ----
  // Errors: kUnknownContainer, kNotFound (no visible value at this epoch), kWrongValueKind,
  // kInvalidArgument, kTooLarge, kEpochTooOld (below the aggregation boundary and not a snapshot),
  // kChecksumMismatch (stored data is corrupt: never wrong bytes), kIoError, kBusy.
  Result<FetchTx> fetch_begin(const FetchOp& op);
  void fetch_end(FetchTx& tx);
  Result<std::string> fetch(const FetchOp& op, std::vector<uint32_t>* csums = nullptr);
  // fetch_begin without blocking the caller on the media: the index work runs now, on the caller's thread;
  // the block reads go to `ring`, and `done` gets what fetch_begin would have returned, from ring.poll()
  // (or right here when nothing needed reading).
  void fetch_submit(IoRing& ring, const FetchOp& op, std::function<void(Result<FetchTx>)> done);
  Result<std::unique_ptr<IoRing>> make_io_ring();  // Errors: kIoError

  // ---- punch (durable on return) ----
  Status punch_object(uint32_t cont, const ObjectId& oid, Epoch epoch);
  Status punch_dkey(uint32_t cont, const ObjectId& oid, std::string_view dkey, Epoch epoch);
  Status punch_akey(const KeyRef& key, Epoch epoch);
  // Punches [offset, offset+length) of an array: it reads as a hole and no longer counts toward its size.
  Status punch_extent(const KeyRef& key, Epoch epoch, uint64_t offset, uint64_t length);

  // ---- enumeration, at an epoch, resumable ----
  Result<std::vector<ObjectId>> list_objects(uint32_t cont, Epoch epoch, Anchor* anchor, size_t max);
  // An object's dkeys: by length first, or in byte order for an object of ordered dkeys
  // (ObjectId::kOrderedDkeys), whose anchor's position is also where a listing may start (the first dkey at or
  // after it; the next page's is the last dkey given and a 0x01 byte).
  Result<std::vector<std::string>> list_dkeys(uint32_t cont, const ObjectId& oid, Epoch epoch, Anchor* anchor,
                                              size_t max);
  // The same, only dkeys that start with `prefix` (an object of ordered dkeys: the scan starts at the prefix and
  // ends where it does), and for each dkey the single value of `value_akey` that a fetch at `epoch` would return,
  // where the scan that found the dkey met it first (a directory's entries: one akey per dkey); nullopt where it
  // did not (another akey first, an array, a checksum to look into): fetch that one. `values` may be null.
  Result<std::vector<std::string>> list_dkeys(uint32_t cont, const ObjectId& oid, Epoch epoch, Anchor* anchor,
                                              size_t max, std::string_view prefix, std::string_view value_akey,
                                              std::vector<std::optional<std::string>>* values);
  Result<std::vector<std::string>> list_akeys(uint32_t cont, const ObjectId& oid, std::string_view dkey, Epoch epoch,
                                              Anchor* anchor, size_t max);
  // Visible data extents (after newest-wins, without holes), in offset order, coalesced.
  Result<std::vector<Extent>> list_extents(const KeyRef& key, Epoch epoch, Anchor* anchor, size_t max);
  // End of the highest visible data extent; kNotFound when the akey has no visible array.
  Result<uint64_t> array_size(const KeyRef& key, Epoch epoch, ReadView* view = nullptr);
  // A view of the index as it is now (see ReadView).
  ReadView read_view();

  // ---- snapshots and aggregation ----
  Status snapshot_create(uint32_t cont, Epoch epoch);   // updates at or below it are refused afterwards
  Status snapshot_destroy(uint32_t cont, Epoch epoch);  // kNotFound
  // Whether `epoch` is a snapshot of container handle `cont` (false for an unknown handle).
  bool has_snapshot(uint32_t cont, Epoch epoch) const;
  // The highest epoch any committed update, punch or snapshot of this target carried (0 on a new target). It is
  // durable with the commit that raised it, so a clock restarted past it never stamps below recorded data.
  Epoch high_epoch() const;
  // Removes every version at or below `upto` that neither a snapshot nor a read at epoch >= upto can see,
  // and returns its block space. Afterwards updates at or below `upto` are refused, and so are reads below it
  // at epochs that are not snapshots.
  Result<AggregateStats> aggregate(uint32_t cont, Epoch upto);
  // Whether a read or size walked more than kPiledUpRecords records of one array, a quarter of them overlapping an
  // earlier one or holes (what a pass can take away), since the last aggregation pass began: the caller may want
  // the next pass sooner than its usual period.
  bool records_piled_up() const;

  // ---- introspection ----
  SpaceInfo space() const;
  // Consistency check (fsck): every block is either free or owned by exactly one record, and the allocator's
  // persistent state matches its in-memory state. OK or kCorruption with the first problem found.
  Status check();
  bool direct_io() const;
  // Whether the index's WAL sync also makes block data durable (see EngineOptions::data_sync).
  bool data_flushed_with_index() const;
  // The durability mode in words, with the reason kAuto was not taken when it was asked for.
  std::string durability() const;
  // What open() found of lazy updates an unclean stop left unsynced: how many it checked, and how many it dropped
  // because their data had not reached the media.
  struct LazyRecovery {
    uint64_t checked = 0, dropped = 0;
  };
  LazyRecovery lazy_recovery() const;
  // Group commit at work: index batches written, and the writers (updates, punches, ...) they carried.
  struct CommitStats {
    uint64_t groups = 0;
    uint64_t writers = 0;
  };
  CommitStats commit_stats() const;
  // Single-value fetches at the latest epoch answered from the value cache (value_cache.h), not the index.
  uint64_t cached_reads() const;
  // The buffer arena: its size, and what is handed out (to updates and fetches in flight). Safe from any thread.
  struct BufferUse {
    uint64_t total_bytes = 0;
    uint64_t in_use_bytes = 0;
  };
  BufferUse buffers() const;
  // Test hook: the block file byte ranges holding one array piece's data at `offset` (empty when inline).
  Result<std::vector<Extent>> debug_locate(const KeyRef& key, uint64_t offset);

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  // fetch_begin's halves: the index work and buffers, then (after the reads) verification and checksums.
  Status plan_fetch(const FetchOp& op, FetchPlan* plan);
  Result<FetchTx> finish_fetch(FetchPlan& plan, Status read_status);
  // aggregate()'s rewrite of grains spread over many records (engine_scan.cc).
  void merge_grains(std::vector<AggRecord>& group, Epoch upto, uint32_t csum_chunk_bytes, Writer* w,
                    AggregateStats* stats, size_t* records_left);
  std::unique_ptr<Impl> impl_;
};

// Checksums for a payload the way update_end expects them (convenience for callers and tests).
std::vector<uint32_t> make_csums(ValueKind kind, uint64_t offset, std::span<const uint8_t> data,
                                 uint32_t csum_chunk_bytes);

}  // namespace rfos::engine
