// Engine: opening and recovery, pools and containers, the commit queue, punches and snapshots.
#include <rocksdb/cache.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/fault.h"
#include "engine/engine_impl.h"
#include "engine/index/wal_file_system.h"

namespace rfos::engine {

namespace fs = std::filesystem;
using namespace index;

namespace {

// The allocator's changes to the durable free map, as index records.
void put_free_ops(rocksdb::WriteBatch* batch, const std::vector<blockio::FreeOp>& ops) {
  for (const blockio::FreeOp& op : ops) {
    if (op.nblocks == 0) {
      batch->Delete(free_key(op.block));
    } else {
      std::string v;
      put_le<uint64_t>(&v, op.nblocks);
      batch->Put(free_key(op.block), v);
    }
  }
}
constexpr uint32_t kFormatVersion = 1;
constexpr char kSuperMagic[8] = {'R', 'F', 'O', 'S', 'B', 'L', 'K', '1'};
}  // namespace

Status from_rocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::ok();
  StatusCode code = StatusCode::kIoError;
  if (s.IsNoSpace()) code = StatusCode::kNoSpace;
  if (s.IsCorruption()) code = StatusCode::kCorruption;
  if (s.IsNotFound()) code = StatusCode::kNotFound;
  return error(code, what + ": " + s.ToString());
}

std::string akey_prefix(const KeyRef& key) {
  std::string p = object_prefix(key.cont, key.oid);
  append_dkey(&p, key.dkey);
  append_akey(&p, key.akey);
  return p;
}

Status validate_key(const KeyRef& key, bool need_akey) {
  if (key.dkey.empty() || key.dkey.size() > kKeyMaxBytes)
    return error(StatusCode::kInvalidArgument, "dkey must be 1.." + std::to_string(kKeyMaxBytes) + " bytes");
  if (key.oid.ordered_dkeys() && key.dkey.find('\0') != std::string_view::npos)
    return error(StatusCode::kInvalidArgument, "a dkey of an object of ordered dkeys may not hold a NUL byte");
  if (need_akey && (key.akey.empty() || key.akey.size() > kKeyMaxBytes))
    return error(StatusCode::kInvalidArgument, "akey must be 1.." + std::to_string(kKeyMaxBytes) + " bytes");
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------
// Open and recovery

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options) {
  fault::arm_from_env();
  auto impl = std::make_unique<Impl>(options);
  RFOS_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// A clean stop leaves nothing lazy behind (as an unmount syncs): the next open has no marker to check.
Engine::~Engine() {
  if (impl_ && impl_->db) (void)sync();
}

Engine::Impl::~Impl() {
  {
    std::lock_guard lock(commit_mu);
    committer_stop = true;
  }
  committer_cv.notify_all();
  if (committer.joinable()) committer.join();
  if (db) db->Close().PermitUncheckedError();
  db.reset();
  dev.reset();
  arena.reset();
}

Status Engine::Impl::open() {
  if (opts.dir.empty()) return error(StatusCode::kInvalidArgument, "engine directory is empty");
  if (opts.block_file.empty()) opts.block_file = opts.dir + "/blocks";
  if (opts.arena_bytes < (2u << 20)) return error(StatusCode::kInvalidArgument, "arena must be at least 2 MiB");
  std::error_code ec;
  bool had_index = fs::exists(opts.dir + "/index/CURRENT", ec);
  if (!had_index && !opts.create) return error(StatusCode::kNotFound, "no target at " + opts.dir);
  fs::create_directories(opts.dir, ec);
  if (ec) return error(StatusCode::kIoError, "create " + opts.dir + ": " + ec.message());

  rocksdb::Options ro;
  ro.create_if_missing = opts.create;
  ro.max_background_jobs = 2;
  ro.write_buffer_size = 64 << 20;
  ro.keep_log_file_num = 4;
  ro.info_log_level = rocksdb::WARN_LEVEL;
  // Recovery stops at the first bad record of the log (a torn one, or the fill written ahead of the records:
  // index/wal_file_system.h) and keeps what comes before: both the defaults, which that fill relies on.
  ro.paranoid_checks = true;
  ro.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  std::shared_ptr<rocksdb::FileSystem> index_fs;
  if (opts.power_cut) index_fs = power_cut_fs(opts.power_cut, rocksdb::FileSystem::Default());
  if (opts.prewrite_wal) index_fs = index::make_prewritten_wal_fs(index_fs);
  if (index_fs) {
    rocks_env = rocksdb::NewCompositeEnv(index_fs);
    ro.env = rocks_env.get();
  }
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(64 << 20);
  // Whole-key filters answer most point lookups of absent keys (an object's punch mark) without reading the
  // table, in the memtable too.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  ro.memtable_whole_key_filtering = true;
  ro.memtable_prefix_bloom_size_ratio = 0.02;
  ro.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  RFOS_RETURN_IF_ERROR(from_rocks(rocksdb::DB::Open(ro, opts.dir + "/index", &raw), "open index"));
  db.reset(raw);

  RFOS_ASSIGN_OR_RETURN(arena, blockio::BufferArena::create(opts.arena_bytes));
  max_io_bytes = arena->bytes() / 2;

  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), meta_key("format"), &value);
  if (!s.ok() && !s.IsNotFound()) return from_rocks(s, "read format record");
  bool formatted = s.ok();
  FormatRecord format;
  if (formatted && !decode_format(value, &format))
    return error(StatusCode::kCorruption, "format record of " + opts.dir + " is malformed");
  if (formatted && format.version != kFormatVersion)
    return error(StatusCode::kNotSupported, "target format version " + std::to_string(format.version));

  blockio::BlockDeviceOptions bo;
  bo.path = opts.block_file;
  bo.bytes = align_down(opts.block_file_bytes, kBlockBytes);
  bo.create = !formatted;  // a formatted target never silently recreates its block file
  bo.direct_io = opts.direct_io;
  bo.prezero = opts.prezero;
  bo.queue_depth = opts.io_queue_depth;
  bo.read_window_bytes = opts.read_window_bytes;
  if (opts.power_cut) bo.write_log = power_cut_block_log(opts.power_cut, opts.block_file);
  RFOS_ASSIGN_OR_RETURN(dev, blockio::BlockDevice::open(bo, arena.get()));
  block_count = dev->block_count();

  // The superblock ties the block file to this index.
  uint8_t* sb = arena->alloc(kBlockBytes);
  if (sb == nullptr) return error(StatusCode::kInternal, "no buffer for the superblock");
  Status st;
  if (!formatted) {
    format = {kFormatVersion, kBlockBytes, block_count, Uuid::random()};
    std::memset(sb, 0, kBlockBytes);
    std::memcpy(sb, kSuperMagic, 8);
    std::memcpy(sb + 8, format.uuid.bytes.data(), 16);
    std::memcpy(sb + 24, &block_count, 8);
    blockio::IoRequest req{true, sb, 0, kBlockBytes};
    st = dev->submit_and_wait({&req, 1});
    if (st.is_ok()) st = dev->sync();
    if (st.is_ok()) {
      rocksdb::WriteBatch batch;
      batch.Put(meta_key("format"), encode_format(format));
      std::string nblocks;
      put_le<uint64_t>(&nblocks, block_count - 1);
      batch.Put(free_key(1), nblocks);
      if (dev->created() && opts.prezero) batch.Put(meta_key("prezeroed"), "1");
      rocksdb::WriteOptions wo;
      wo.sync = true;
      st = from_rocks(db->Write(wo, &batch), "write format record");
    }
  } else {
    blockio::IoRequest req{false, sb, 0, kBlockBytes};
    st = dev->submit_and_wait({&req, 1});
    if (st.is_ok() && (std::memcmp(sb, kSuperMagic, 8) != 0 || std::memcmp(sb + 8, format.uuid.bytes.data(), 16) != 0))
      st = error(StatusCode::kCorruption, "block file " + opts.block_file + " does not belong to index " + opts.dir);
    if (st.is_ok() && format.block_count != block_count)
      st = error(StatusCode::kCorruption, "block file " + opts.block_file + " changed size");
  }
  arena->free(sb, kBlockBytes);
  RFOS_RETURN_IF_ERROR(st);

  // Load metadata and the durable free map.
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(std::string(1, kFreeTag)); it->Valid() && it->key()[0] == kFreeTag; it->Next()) {
    uint64_t nblocks = 0;
    if (it->key().size() != 9 || it->value().size() != 8)
      return error(StatusCode::kCorruption, "malformed free-space record");
    std::memcpy(&nblocks, it->value().data(), 8);
    uint64_t block = get_be64(it->key().data() + 1);
    if (block == 0 || nblocks == 0 || block + nblocks > block_count)
      return error(StatusCode::kCorruption, "free-space record out of range");
    alloc.load(block, nblocks);
  }
  for (it->Seek(std::string(1, kPoolTag)); it->Valid() && it->key()[0] == kPoolTag; it->Next()) {
    if (it->key().size() != 17) return error(StatusCode::kCorruption, "malformed pool record");
    Uuid u;
    std::memcpy(u.bytes.data(), it->key().data() + 1, 16);
    pools.insert(u);
  }
  for (it->Seek(std::string(1, kContTag)); it->Valid() && it->key()[0] == kContTag; it->Next()) {
    ContState c;
    if (it->key().size() != 33 || !decode_cont(it->value().ToStringView(), &c.rec))
      return error(StatusCode::kCorruption, "malformed container record");
    std::memcpy(c.pool.bytes.data(), it->key().data() + 1, 16);
    std::memcpy(c.uuid.bytes.data(), it->key().data() + 17, 16);
    cont_ids[{c.pool, c.uuid}] = c.rec.id;
    next_cid = std::max(next_cid, c.rec.id + 1);
    conts[c.rec.id] = c;
  }
  for (it->Seek(std::string(1, kSnapTag)); it->Valid() && it->key()[0] == kSnapTag; it->Next()) {
    if (it->key().size() != 13) return error(StatusCode::kCorruption, "malformed snapshot record");
    auto c = conts.find(get_be32(it->key().data() + 1));
    if (c != conts.end()) c->second.snapshots.insert(get_be64(it->key().data() + 5));
  }
  for (const char* name : {"seq", "next_cid", "epoch"}) {
    s = db->Get(rocksdb::ReadOptions(), meta_key(name), &value);
    if (s.ok() && value.size() == 8) {
      uint64_t v;
      std::memcpy(&v, value.data(), 8);
      if (std::strcmp(name, "seq") == 0)
        seq = v;
      else if (std::strcmp(name, "epoch") == 0)
        high_epoch = v;
      else
        next_cid = std::max<uint64_t>(next_cid, v);
    }
  }
  // Targets formatted before the epoch record existed: their snapshots and aggregation boundaries are epochs
  // they handed out.
  for (const auto& [id, c] : conts) high_epoch = std::max(high_epoch, c.write_floor());
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "load metadata"));
  RFOS_RETURN_IF_ERROR(recover_lazy());

  // One device flush per group commit is enough when the block file's finished writes need nothing but a device
  // cache flush to be on the media, and the WAL's fdatasync flushes the cache of the device they are on: kAuto
  // takes it only when every assumption that rests on is checked here.
  struct stat bs {
  }, is{};
  bool prezeroed = db->Get(rocksdb::ReadOptions(), meta_key("prezeroed"), &value).ok();
  bool same_dev = ::stat(opts.block_file.c_str(), &bs) == 0 && ::stat((opts.dir + "/index").c_str(), &is) == 0 &&
                  bs.st_dev == is.st_dev;
  const std::string always =
      "block data synced before every commit (fdatasync of the block file, then the index's WAL)";
  durability = always;
  if (opts.data_sync == EngineOptions::DataSync::kAuto) {
    Status layout = !dev->direct_io() ? error(StatusCode::kNotSupported, "the block file is not O_DIRECT")
                    : !prezeroed      ? error(StatusCode::kNotSupported, "the block file was not pre-zeroed")
                    : !same_dev       ? error(StatusCode::kNotSupported, "the index is on another device")
                                      : dev->check_in_place_writes();
    data_flush_by_wal = layout.is_ok();
    durability = data_flush_by_wal ? "block data flushed by the index's WAL sync (data_sync auto; checked: "
                                     "O_DIRECT on ext4/XFS, pre-zeroed, every extent written and unshared, one device)"
                                   : always + " (data_sync auto not taken: " + layout.message() + ")";
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------
// Commit queue

bool Engine::Impl::data_write_started(uint64_t bytes) {
  if (bytes > opts.group_commit_wait_bytes) return false;
  std::lock_guard lock(commit_mu);
  ++writing_data;
  return true;
}

void Engine::Impl::data_write_abandoned(bool counted) {
  if (!counted) return;
  std::lock_guard lock(commit_mu);
  --writing_data;
  commit_cv.notify_all();
}

void Engine::Impl::drop_values(const std::vector<Writer*>& group, ValueCache::Drop when) {
  auto drop = [&](std::string_view key) {
    if (key.size() < kObjectPrefixBytes || key[0] != kObjTag) return;  // not an object's record
    ObjectKey k;
    if (parse_object_key(key, &k) && k.level > 0) return values.drop_dkey(when, k.cid, k.oid, k.dkey);
    values.drop_object(when, get_be32(key.data() + 1), {get_be64(key.data() + 5), get_be64(key.data() + 13)});
  };
  for (Writer* g : group) {
    if (!g->prepared) continue;
    if (!g->range_deletes.empty()) values.drop_all(when);
    for (const Writer::Put& p : g->puts) drop(p.key);
    for (const std::string& key : g->deletes) drop(key);
  }
}

void Engine::Impl::refresh_values(const std::vector<Writer*>& group, Epoch high, bool written) {
  uint64_t commits = written ? values.committed() : 0;
  drop_values(group, ValueCache::Drop::kAfterWrite);
  if (!written) return values.clear();  // whatever the index holds now, nothing cached claims otherwise
  for (Writer* g : group) {
    if (!g->prepared) continue;
    // A value put at an epoch below one already committed may lie under a newer record: not filled.
    if (g->epoch >= high)
      for (Writer::Fill& f : g->fills) values.fill(commits, {f.cid, f.oid, f.dkey, f.akey}, std::move(f.value));
    high = std::max(high, g->epoch);
  }
}

Status Engine::Impl::commit(Writer* w) {
  std::unique_lock lock(commit_mu);
  if (w->awaited) {
    --writing_data;
    commit_cv.notify_all();  // a leader may be waiting for this writer
  }
  writers.push_back(w);
  while (!w->done && w != writers.front()) commit_cv.wait(lock);
  if (w->done) return w->status;
  lead(lock);
  return w->status;
}

Status Engine::Impl::commit_if_idle(Writer* w) {
  std::unique_lock lock(commit_mu);
  if (!writers.empty()) return error(StatusCode::kBusy, "another commit is under way");
  writers.push_back(w);
  lead(lock);
  return w->status;
}

void Engine::Impl::commit_async(Writer* w) {
  std::lock_guard lock(commit_mu);
  if (w->awaited) {
    --writing_data;
    commit_cv.notify_all();  // a leader may be waiting for this writer
  }
  writers.push_back(w);
  if (!committer.joinable()) committer = std::thread([this] { committer_loop(); });
  wake_committer();
}

void Engine::Impl::committer_loop() {
  std::unique_lock lock(commit_mu);
  for (;;) {
    // A group whose first writer waits in commit() is led by that writer's thread.
    committer_cv.wait(lock, [&] { return (!writers.empty() && writers.front()->on_done) || committer_stop; });
    if (writers.empty()) return;  // stopping, nothing left
    if (writers.front()->on_done) lead(lock);
  }
}

void Engine::Impl::lead(std::unique_lock<std::mutex>& lock) {
  // This thread leads. Updates still writing their data would otherwise each pay a sync of their own right
  // after this one: wait a little for them to join (not for a lazy writer, which pays no sync).
  if (writing_data > 0 && opts.group_commit_wait_us > 0 && opts.sync && !writers.front()->lazy) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(opts.group_commit_wait_us);
    commit_cv.wait_until(lock, deadline, [&] { return writing_data == 0; });
  }

  // This thread leads: take everything queued so far.
  std::vector<Writer*> group(writers.begin(), writers.end());
  Status sticky = failed;
  lock.unlock();

  rocksdb::WriteBatch batch;
  bool sync_data = false, lazy_data = false;
  std::vector<blockio::FreeOp> ops;
  uint64_t seq_now = 0;
  Epoch high_before = 0, high_now = 0;
  // A group of lazy writers only goes to the log without a sync; any durable writer syncs the whole group.
  bool sync_group = opts.sync && std::any_of(group.begin(), group.end(), [](Writer* g) { return !g->lazy; });
  {
    std::lock_guard meta(meta_mu);
    seq_now = seq;
    high_before = high_now = high_epoch;
    for (Writer* g : group) {
      g->status = sticky.is_ok() ? (g->prepare ? g->prepare() : Status::ok()) : sticky;
      if (!g->status.is_ok()) continue;
      g->prepared = true;
      ++seq_now;
      std::vector<std::string_view> records;  // a lazy writer's, for its marker
      for (Writer::Put& p : g->puts) {
        if (p.versioned) {
          char* tail = p.key.data() + p.key.size() - 8;
          uint64_t inv = ~seq_now;
          for (int i = 7; i >= 0; --i, inv >>= 8) tail[i] = static_cast<char>(inv & 0xff);
          if (g->lazy_data) records.push_back(p.key);
        }
        batch.Put(p.key, p.value);
        note_changed(p.key);
      }
      if (g->lazy_data && opts.sync) {
        lazy_data = true;
        if (!sync_group) {
          batch.Put(lazy_key(seq_now), encode_lazy(records));
          marker_high = seq_now;
        }
      }
      for (const std::string& k : g->deletes) batch.Delete(k);
      for (const auto& [b, e] : g->range_deletes) batch.DeleteRange(b, e);
      ops.clear();
      alloc.commit(g->commit_runs, &ops);
      alloc.free(g->free_runs, &ops);
      put_free_ops(&batch, ops);
      sync_data |= g->wrote_data;
      high_now = std::max(high_now, g->epoch);
    }
    seq = seq_now;
    high_epoch = high_now;
  }

  Status st = sticky;
  if (sync_group) {
    // This sync makes every lazy write before it durable, and the data of this group's own lazy writers
    // (written before they queued): their markers go with it, so it flushes the data itself, even when a
    // sync() running at the same moment took the unsynced_data flag and has not flushed yet.
    std::lock_guard meta(meta_mu);
    if (clear_markers(&batch, seq_now)) sync_data = true;
  }
  commit_groups.fetch_add(1, std::memory_order_relaxed);
  committed_writers.fetch_add(group.size(), std::memory_order_relaxed);
  if (st.is_ok() && batch.Count() > 0) {
    std::string seq_value;
    put_le<uint64_t>(&seq_value, seq_now);
    batch.Put(meta_key("seq"), seq_value);
    if (high_now > high_before) {
      std::string epoch_value;
      put_le<uint64_t>(&epoch_value, high_now);
      batch.Put(meta_key("epoch"), epoch_value);
    }
    if (sync_group && unsynced_data.exchange(false, std::memory_order_acq_rel)) sync_data = true;
    // Dropped before the write as well as after it (refresh_values): in between, nothing cached of what it
    // changes is found or inserted, so a reader (or a view made meanwhile) reads the index, before or after.
    drop_values(group, ValueCache::Drop::kBeforeWrite);
    if (RFOS_FAULT("engine.commit")) st = error(StatusCode::kIoError, "index write: injected fault");
    if (st.is_ok() && sync_group && sync_data && !data_flush_by_wal) st = dev->sync();
    if (st.is_ok()) {
      rocksdb::WriteOptions wo;
      wo.sync = sync_group;
      // Readers see a lazy batch before Write returns: a sync() in between syncs the log whatever the flag says.
      if (!sync_group) index_writes.fetch_add(1, std::memory_order_acq_rel);
      st = from_rocks(db->Write(wo, &batch), "index write");
      if (st.is_ok() && !sync_group && opts.sync) unsynced.store(true, std::memory_order_release);
      if (st.is_ok() && !sync_group && lazy_data) unsynced_data.store(true, std::memory_order_release);
      if (!sync_group) index_writes.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (!st.is_ok())
      st = error(StatusCode::kEngineFailed, "commit failed, the target must be reopened: " + st.to_string());
    refresh_values(group, high_before, st.is_ok());
  }

  lock.lock();
  if (!st.is_ok() && failed.is_ok()) failed = st;
  std::vector<std::function<void()>> finished;  // of async writers; each may free its writer
  for (Writer* g : group) {
    if (g->prepared && !st.is_ok()) g->status = st;
    g->done = true;
    if (g->on_done) finished.push_back(std::move(g->on_done));
    writers.pop_front();
  }
  commit_cv.notify_all();  // the writers waiting behind this group (none: no system call)
  wake_committer();
  if (finished.empty()) return;
  lock.unlock();
  for (auto& f : finished) f();
  lock.lock();
}

Result<ContState> Engine::Impl::container(uint32_t cid) const {
  std::lock_guard lock(meta_mu);
  auto it = conts.find(cid);
  if (it == conts.end())
    return error(StatusCode::kUnknownContainer, "container handle " + std::to_string(cid) + " is not on this target");
  return it->second;
}

Result<index::ContRecord> Engine::Impl::open_for_read(uint32_t cid, Epoch epoch) const {
  std::lock_guard lock(meta_mu);
  auto it = conts.find(cid);
  if (it == conts.end())
    return error(StatusCode::kUnknownContainer, "container handle " + std::to_string(cid) + " is not on this target");
  RFOS_RETURN_IF_ERROR(check_epoch_for_read(it->second, epoch));
  return it->second.rec;
}

Result<index::ContRecord> Engine::Impl::open_for_write(uint32_t cid, Epoch epoch) const {
  std::lock_guard lock(meta_mu);
  auto it = conts.find(cid);
  if (it == conts.end())
    return error(StatusCode::kUnknownContainer, "container handle " + std::to_string(cid) + " is not on this target");
  RFOS_RETURN_IF_ERROR(check_write_epoch(it->second, epoch));
  return it->second.rec;
}

Status Engine::Impl::check_epoch_for_read(const ContState& c, Epoch epoch) const {
  if (epoch == 0) return error(StatusCode::kInvalidArgument, "epoch 0 is not a valid read epoch");
  if (epoch < c.rec.agg_epoch && c.snapshots.count(epoch) == 0)
    return error(StatusCode::kEpochTooOld, "epoch " + std::to_string(epoch) + " is below the aggregation boundary " +
                                               std::to_string(c.rec.agg_epoch) + " and is not a snapshot");
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------
// Pools and containers

Status Engine::pool_create(const Uuid& pool) {
  Writer w;
  w.puts.push_back({pool_key(pool), "", false});
  w.prepare = [&] {
    if (!impl_->pools.insert(pool).second)
      return error(StatusCode::kAlreadyExists, "pool " + pool.to_string() + " already exists on this target");
    return Status::ok();
  };
  return impl_->commit(&w);
}

Status Engine::pool_destroy(const Uuid& pool) {
  {
    std::lock_guard lock(impl_->meta_mu);
    if (impl_->pools.count(pool) == 0)
      return error(StatusCode::kUnknownPool, "pool " + pool.to_string() + " is not on this target");
  }
  RFOS_ASSIGN_OR_RETURN(auto conts, cont_list(pool));
  for (const ContainerInfo& c : conts) RFOS_RETURN_IF_ERROR(cont_destroy(pool, c.uuid));
  Writer w;
  w.deletes.push_back(pool_key(pool));
  w.prepare = [&] {
    if (impl_->pools.erase(pool) == 0)
      return error(StatusCode::kUnknownPool, "pool " + pool.to_string() + " is not on this target");
    return Status::ok();
  };
  return impl_->commit(&w);
}

std::vector<Uuid> Engine::pool_list() const {
  std::lock_guard lock(impl_->meta_mu);
  return {impl_->pools.begin(), impl_->pools.end()};
}

Status Engine::cont_create(const Uuid& pool, const Uuid& cont, const ContainerProps& props) {
  uint32_t c = props.csum_chunk_bytes;
  if (c < 512 || c > (1u << 20) || (c & (c - 1)) != 0)
    return error(StatusCode::kInvalidArgument, "checksum chunk must be a power of two from 512 B to 1 MiB");
  Writer w;
  w.puts.push_back({cont_key(pool, cont), "", false});
  w.puts.push_back({meta_key("next_cid"), "", false});
  w.prepare = [&] {
    auto& im = *impl_;
    if (im.pools.count(pool) == 0)
      return error(StatusCode::kUnknownPool, "pool " + pool.to_string() + " is not on this target");
    if (im.cont_ids.count({pool, cont}))
      return error(StatusCode::kAlreadyExists, "container " + cont.to_string() + " already exists");
    ContState st;
    st.pool = pool;
    st.uuid = cont;
    st.rec = {im.next_cid++, props.csum_chunk_bytes, props.csum, 0};
    w.puts[0].value = encode_cont(st.rec);
    put_le<uint64_t>(&w.puts[1].value, im.next_cid);
    im.cont_ids[{pool, cont}] = st.rec.id;
    im.conts[st.rec.id] = st;
    return Status::ok();
  };
  return impl_->commit(&w);
}

Result<ContainerInfo> Engine::cont_open(const Uuid& pool, const Uuid& cont) const {
  std::lock_guard lock(impl_->meta_mu);
  if (impl_->pools.count(pool) == 0)
    return error(StatusCode::kUnknownPool, "pool " + pool.to_string() + " is not on this target");
  auto it = impl_->cont_ids.find({pool, cont});
  if (it == impl_->cont_ids.end())
    return error(StatusCode::kUnknownContainer, "container " + cont.to_string() + " does not exist");
  const ContState& c = impl_->conts.at(it->second);
  ContainerInfo info;
  info.pool = pool;
  info.uuid = cont;
  info.id = c.rec.id;
  info.props = {c.rec.csum_chunk_bytes, c.rec.csum};
  info.agg_epoch = c.rec.agg_epoch;
  info.snapshots.assign(c.snapshots.begin(), c.snapshots.end());
  return info;
}

Result<std::vector<ContainerInfo>> Engine::cont_list(const Uuid& pool) const {
  std::vector<Uuid> uuids;
  {
    std::lock_guard lock(impl_->meta_mu);
    if (impl_->pools.count(pool) == 0)
      return error(StatusCode::kUnknownPool, "pool " + pool.to_string() + " is not on this target");
    for (const auto& [key, id] : impl_->cont_ids)
      if (key.first == pool) uuids.push_back(key.second);
  }
  std::vector<ContainerInfo> out;
  for (const Uuid& u : uuids) {
    auto info = cont_open(pool, u);
    if (info.is_ok()) out.push_back(std::move(info).value());
  }
  return out;
}

Status Engine::cont_destroy(const Uuid& pool, const Uuid& cont) {
  std::lock_guard admin(impl_->admin_mu);
  RFOS_ASSIGN_OR_RETURN(ContainerInfo info, cont_open(pool, cont));
  Writer w;
  // Every block the container owns goes back to the free map in the same batch that drops its records.
  std::string prefix = cont_objects_prefix(info.id);
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && starts_with(it->key(), prefix); it->Next()) {
    ObjectKey k;
    ExtentRecord r;
    if (!parse_object_key(it->key().ToStringView(), &k) || k.kind != kExtentTag) continue;
    if (!decode_extent(it->value().ToStringView(), &r))
      return error(StatusCode::kCorruption, "malformed extent record in container " + cont.to_string());
    w.free_runs.insert(w.free_runs.end(), r.runs.begin(), r.runs.end());
  }
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "scan container"));
  w.range_deletes.push_back({prefix, prefix_successor(prefix)});
  w.range_deletes.push_back({snap_prefix(info.id), prefix_successor(snap_prefix(info.id))});
  w.range_deletes.push_back({mark_prefix(info.id), prefix_successor(mark_prefix(info.id))});
  w.deletes.push_back(cont_key(pool, cont));
  w.prepare = [&] {
    impl_->conts.erase(info.id);
    impl_->cont_ids.erase({pool, cont});
    return Status::ok();
  };
  RFOS_RETURN_IF_ERROR(impl_->commit(&w));
  std::unique_lock reclaim(impl_->reclaim_mu);  // waits out readers that may still read those blocks
  impl_->alloc.release(w.free_runs);
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------
// Punch and snapshots

Status check_write_epoch(const ContState& c, Epoch epoch) {
  if (epoch == 0 || epoch == kEpochLatest)
    return error(StatusCode::kInvalidArgument, "update epoch must be in 1..2^64-2");
  if (epoch <= c.write_floor())
    return error(StatusCode::kEpochTooOld, "epoch " + std::to_string(epoch) +
                                               " is at or below the newest snapshot or aggregation boundary " +
                                               std::to_string(c.write_floor()));
  return Status::ok();
}

bool Engine::Impl::clear_markers(rocksdb::WriteBatch* batch, uint64_t upto) {
  if (marker_high <= markers_upto || upto <= markers_upto) return false;
  batch->DeleteRange(lazy_key(0), lazy_key(upto + 1));
  markers_upto = upto;
  return true;
}

Status Engine::Impl::recover_lazy() {
  const std::string first = lazy_key(0), end = prefix_successor(std::string(1, kLazyTag));
  rocksdb::WriteBatch batch;
  std::vector<Run> dropped;
  std::vector<blockio::FreeOp> ops;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  uint64_t markers = 0, updates_dropped = 0;
  for (it->Seek(first); it->Valid() && it->key().compare(end) < 0; it->Next()) {
    ++markers;
    std::vector<std::string> keys;
    if (!decode_lazy(it->value().ToStringView(), &keys)) return error(StatusCode::kCorruption, "malformed marker");
    // The update's records as they are now (gone: aggregated or destroyed since, under a durable commit), read
    // once for the check and, when it fails, the drop.
    std::vector<std::pair<std::string, std::string>> found;  // key, value
    for (std::string& key : keys) {
      std::string v;
      rocksdb::Status g = db->Get(rocksdb::ReadOptions(), key, &v);
      if (g.IsNotFound()) continue;
      RFOS_RETURN_IF_ERROR(from_rocks(g, "read a marked record"));
      found.emplace_back(std::move(key), std::move(v));
    }
    bool good = true;
    for (size_t i = 0; i < found.size() && good; ++i) {
      ObjectKey k;
      ExtentRecord r;
      if (!parse_object_key(found[i].first, &k) || k.kind != kExtentTag || !decode_extent(found[i].second, &r))
        continue;
      if (r.runs.empty() || r.csums.empty()) continue;
      uint64_t bytes = 0;
      for (const Run& run : r.runs) bytes += uint64_t{run.nblocks} * kBlockBytes;
      uint8_t* buf = arena->alloc(bytes);
      if (buf == nullptr) return error(StatusCode::kInternal, "no buffer to check a lazy update");
      std::vector<blockio::IoRequest> reads;
      run_ios(false, buf, r.runs, &reads);
      Status rs = dev->submit_and_wait(reads);
      std::vector<uint32_t> csums;
      if (rs.is_ok()) chunk_crcs(k.start, {buf + k.start % kBlockBytes, r.length}, r.csum_chunk_bytes, &csums);
      arena->free(buf, bytes);
      RFOS_RETURN_IF_ERROR(rs);
      good = csums == r.csums;
    }
    if (good) continue;
    // Its data did not all reach the media before the cut: the whole update goes, as if never acknowledged
    // (it was not synced), and what it overwrote shows again.
    ++updates_dropped;
    for (const auto& [key, v] : found) {
      ExtentRecord r;
      if (decode_extent(v, &r)) dropped.insert(dropped.end(), r.runs.begin(), r.runs.end());
      batch.Delete(key);
    }
  }
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "scan markers"));
  if (markers == 0) return Status::ok();
  alloc.free(dropped, &ops);
  put_free_ops(&batch, ops);
  batch.DeleteRange(first, end);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  RFOS_RETURN_IF_ERROR(from_rocks(db->Write(wo, &batch), "recover lazy updates"));
  alloc.release(dropped);
  lazy_recovery = {markers, updates_dropped};
  return Status::ok();
}

Status add_hole(Writer* w, const std::string& akey_prefix, uint32_t csum_chunk_bytes, Epoch epoch, uint64_t offset,
                uint64_t length) {
  if (length == 0 || offset >= kArrayOffsetMax || length > kArrayOffsetMax - offset)
    return error(StatusCode::kInvalidArgument, "extent must be non-empty and below 2^62");
  for (uint64_t pos = offset; pos < offset + length;) {
    uint64_t end = std::min(offset + length, align_down(pos, kGrainBytes) + kGrainBytes);
    ExtentRecord r;
    r.flags = ExtentRecord::kHole;
    r.length = static_cast<uint32_t>(end - pos);
    r.csum_chunk_bytes = csum_chunk_bytes;
    std::string k = akey_prefix;
    append_extent_start(&k, pos);
    append_version(&k, epoch, 0);
    w->puts.push_back({std::move(k), encode_extent(r), true});
    pos = end;
  }
  return Status::ok();
}

void make_versioned_writer(Engine::Impl* impl, Writer* w, uint32_t cid, Epoch epoch) {
  w->epoch = epoch;
  w->prepare = [impl, cid, epoch] {
    auto it = impl->conts.find(cid);
    if (it == impl->conts.end())
      return error(StatusCode::kUnknownContainer, "container handle " + std::to_string(cid) + " was destroyed");
    return check_write_epoch(it->second, epoch);
  };
}

void marks_punches(Engine::Impl* impl, Writer* w, uint32_t cid, std::vector<ObjectId> objects) {
  w->prepare = [impl, cid, w, objects = std::move(objects), check = std::move(w->prepare)] {
    RFOS_RETURN_IF_ERROR(check());
    ContState& c = impl->conts.at(cid);  // check() found it
    if (!c.rec.has_punches) {
      c.rec.has_punches = true;
      c.rec.punch_marks = true;  // no object has a punch yet: every one from here on is marked
      w->puts.push_back({cont_key(c.pool, c.uuid), encode_cont(c.rec), false});
    }
    if (c.rec.punch_marks)
      for (const ObjectId& oid : objects) w->puts.push_back({mark_key(cid, oid), "", false});
    return Status::ok();
  };
}

bool Engine::Impl::may_have_punches(const index::ContRecord& rec, uint32_t cid, const ObjectId& oid) const {
  if (!rec.has_punches) return false;
  if (!rec.punch_marks) return true;
  std::string v;
  return !db->Get(rocksdb::ReadOptions(), mark_key(cid, oid), &v).IsNotFound();  // an error: look
}

bool Engine::Impl::may_have_punches(const index::ContRecord& rec, uint32_t cid, const ObjectId& oid,
                                    ReadView::State* view) const {
  if (view == nullptr) return may_have_punches(rec, cid, oid);
  auto [it, fresh] = view->punches.try_emplace({cid, oid}, false);
  if (fresh) it->second = may_have_punches(rec, cid, oid);
  return it->second;
}

// Punches the level under `prefix`: refused with kNotFound when nothing there is visible at `epoch`.
static Status punch_level(Engine::Impl* impl, uint32_t cid, const ObjectId& oid, std::string prefix, Version inherited,
                          Epoch epoch, const std::string& what) {
  RFOS_RETURN_IF_ERROR(impl->open_for_write(cid, epoch).status());
  {
    std::unique_ptr<rocksdb::Iterator> it(impl->db->NewIterator(rocksdb::ReadOptions()));
    if (!Engine::Impl::any_visible(it.get(), prefix, epoch, inherited))
      return error(StatusCode::kNotFound, what + " has nothing visible at epoch " + std::to_string(epoch));
  }
  Writer w;
  prefix.push_back(kPunchTag);
  append_version(&prefix, epoch, 0);
  w.puts.push_back({std::move(prefix), "", true});
  make_versioned_writer(impl, &w, cid, epoch);
  marks_punches(impl, &w, cid, {oid});
  return impl->commit(&w);
}

Status Engine::punch_object(uint32_t cont, const ObjectId& oid, Epoch epoch) {
  return punch_level(impl_.get(), cont, oid, object_prefix(cont, oid), {}, epoch, "object " + oid.to_string());
}

Status Engine::punch_dkey(uint32_t cont, const ObjectId& oid, std::string_view dkey, Epoch epoch) {
  RFOS_RETURN_IF_ERROR(validate_key({cont, oid, dkey, {}}, false));
  std::string obj = object_prefix(cont, oid);
  Version floor;
  {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
    floor = Impl::punch_floor(it.get(), obj, epoch);
  }
  std::string prefix = obj;
  append_dkey(&prefix, dkey);
  return punch_level(impl_.get(), cont, oid, prefix, floor, epoch, "dkey");
}

Status Engine::punch_akey(const KeyRef& key, Epoch epoch) {
  RFOS_RETURN_IF_ERROR(validate_key(key, true));
  std::string obj = object_prefix(key.cont, key.oid);
  std::string dk = obj;
  append_dkey(&dk, key.dkey);
  Version floor;
  {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
    floor = std::max(Impl::punch_floor(it.get(), obj, epoch), Impl::punch_floor(it.get(), dk, epoch));
  }
  return punch_level(impl_.get(), key.cont, key.oid, akey_prefix(key), floor, epoch, "akey");
}

Status Engine::punch_extent(const KeyRef& key, Epoch epoch, uint64_t offset, uint64_t length) {
  RFOS_RETURN_IF_ERROR(validate_key(key, true));
  RFOS_ASSIGN_OR_RETURN(index::ContRecord rec, impl_->open_for_write(key.cont, epoch));
  Writer w;
  RFOS_RETURN_IF_ERROR(add_hole(&w, akey_prefix(key), rec.csum_chunk_bytes, epoch, offset, length));
  make_versioned_writer(impl_.get(), &w, key.cont, epoch);
  return impl_->commit(&w);
}

Status Engine::snapshot_create(uint32_t cont, Epoch epoch) {
  if (epoch == 0 || epoch == kEpochLatest) return error(StatusCode::kInvalidArgument, "snapshot epoch out of range");
  Writer w;
  w.epoch = epoch;
  w.puts.push_back({snap_key(cont, epoch), "", false});
  w.prepare = [&] {
    auto it = impl_->conts.find(cont);
    if (it == impl_->conts.end())
      return error(StatusCode::kUnknownContainer,
                   "container handle " + std::to_string(cont) + " is not on this target");
    if (epoch < it->second.rec.agg_epoch)
      return error(StatusCode::kEpochTooOld, "snapshot epoch is below the aggregation boundary");
    if (!it->second.snapshots.insert(epoch).second)
      return error(StatusCode::kAlreadyExists, "snapshot at epoch " + std::to_string(epoch) + " exists");
    return Status::ok();
  };
  return impl_->commit(&w);
}

bool Engine::has_snapshot(uint32_t cont, Epoch epoch) const {
  std::lock_guard lock(impl_->meta_mu);
  auto it = impl_->conts.find(cont);
  return it != impl_->conts.end() && it->second.snapshots.count(epoch) != 0;
}

Epoch Engine::high_epoch() const {
  std::lock_guard lock(impl_->meta_mu);
  return impl_->high_epoch;
}

Status Engine::snapshot_destroy(uint32_t cont, Epoch epoch) {
  Writer w;
  w.deletes.push_back(snap_key(cont, epoch));
  w.prepare = [&] {
    auto it = impl_->conts.find(cont);
    if (it == impl_->conts.end())
      return error(StatusCode::kUnknownContainer,
                   "container handle " + std::to_string(cont) + " is not on this target");
    if (it->second.snapshots.erase(epoch) == 0)
      return error(StatusCode::kNotFound, "no snapshot at epoch " + std::to_string(epoch));
    it->second.aggregate_all = true;  // what it pinned may go now, in any object
    return Status::ok();
  };
  return impl_->commit(&w);
}

// ---------------------------------------------------------------------------------------------------------

SpaceInfo Engine::space() const {
  return {(impl_->block_count - 1) * kBlockBytes, impl_->alloc.available_blocks() * kBlockBytes};
}

bool Engine::direct_io() const { return impl_->dev->direct_io(); }
bool Engine::data_flushed_with_index() const { return impl_->data_flush_by_wal; }
std::string Engine::durability() const { return impl_->durability; }
Engine::LazyRecovery Engine::lazy_recovery() const { return impl_->lazy_recovery; }
Engine::CommitStats Engine::commit_stats() const {
  return {impl_->commit_groups.load(std::memory_order_relaxed),
          impl_->committed_writers.load(std::memory_order_relaxed)};
}
uint64_t Engine::cached_reads() const { return impl_->values.hits(); }
Engine::BufferUse Engine::buffers() const {
  uint64_t total = impl_->arena->bytes();
  return {total, total - impl_->arena->free_bytes()};
}

}  // namespace rfos::engine
