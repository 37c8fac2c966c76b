// Write-behind for the mount, as NFS's unstable writes: write() returns once its bytes are copied and queued;
// a few writer threads store them (durably) in parallel. fsync and close (flush) wait until every write of the
// file has landed and report the first that failed; reads, attribute queries, truncates and removals wait too,
// so nothing ever sees the file without its own earlier writes. Overlapping writes of one file never run at the
// same time (the later waits), so the last write wins as the application issued them.
//
// Why: the kernel serializes writes to one file and sends each as one FUSE request; storing each before
// answering would leave one request in flight per file, a fraction of what the data plane moves.
//
// Small files: a write of up to 4095 bytes to a file with nothing else in flight is held back, with the
// contiguous small writes after it, until the file is waited for or settled; settle() then stores it together
// with the file's time update, as one operation of the file's home target (Namespace::write_and_touch), so
// writing a small file and closing it costs one round trip instead of two.
//
// Thread-safety: every member may be called from any FUSE thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/worker_pool.h"
#include "posix/namespace.h"

namespace rfos::fuse {

// A write's bytes and what keeps them alive: a copy, or the FUSE request buffer they arrived in.
struct WriteBytes {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;

  static WriteBytes copy_of(const char* data, size_t size);
};

class WriteBehind {
 public:
  // max_bytes: bytes of one file in flight before write() waits.
  WriteBehind(posix::Namespace& ns, unsigned threads, uint64_t max_bytes);
  ~WriteBehind();  // lets queued writes land first

  void submit(const ObjectId& oid, uint64_t offset, WriteBytes bytes);
  // Waits until no write of `oid` is in flight (a held one is sent). settle() also returns, and forgets, the first
  // failure since the last settle (fsync and close report it); wait() leaves it for them. Returns whether there
  // was anything to wait for.
  bool wait(const ObjectId& oid);
  // Whether a write of `oid` is in flight or held.
  bool pending(const ObjectId& oid);
  // `touched` (may be null): the file's attributes when a held write went with its time update, which then
  // needs no other.
  Status settle(const ObjectId& oid, std::optional<posix::Attr>* touched = nullptr);
  // wait(), for a setattr of `times` alone (atime, mtime) by `cred`: a held write goes with them, as one
  // operation (Namespace::write_and_touch), and the file's attributes after both are returned; nullopt when
  // nothing was held, or the times were not set with it (refused, or no target for it): the caller sets them.
  std::optional<posix::Attr> land_with(const ObjectId& oid, const posix::SetAttr& times, const posix::Cred& cred);
  static constexpr size_t kHoldBytes = 4095;

 private:
  struct File {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) of writes in flight
    uint64_t bytes = 0;
    Status failed = Status::ok();
    bool holding = false;  // a small write held back (see above): `held` at `held_at`
    uint64_t held_at = 0;
    std::string held;
  };
  void land(const ObjectId& oid, uint64_t offset, const WriteBytes& bytes, File& file);
  // Under mu_: a write of [offset, offset+size) is over (`s`); the held write taken out, its range in flight
  // from now on; the held write sent as any other.
  void landed_locked(File& f, uint64_t offset, uint64_t size, const Status& s);
  std::pair<uint64_t, std::string> take_held_locked(File& f);
  // The held write of `f`, with nothing else of it in flight, stored from this thread with the file's time update
  // and `times` (lock let go meanwhile); the file's attributes after it when that went as one operation.
  std::optional<posix::Attr> store_held(std::unique_lock<std::mutex>& lock, const ObjectId& oid, File& f,
                                        const posix::SetAttr& times, const posix::Cred& cred);
  // Every write of `f` landed: its held write by store_held where nothing else is in flight, else sent as any
  // other; returns store_held's answer (settle and land_with).
  std::optional<posix::Attr> land_all(std::unique_lock<std::mutex>& lock, const ObjectId& oid,
                                      const std::shared_ptr<File>& f, const posix::SetAttr& times,
                                      const posix::Cred& cred);
  void release_locked(const ObjectId& oid, const std::shared_ptr<File>& f);
  std::shared_ptr<File> file_locked(const ObjectId& oid);

  posix::Namespace& ns_;
  const uint64_t max_bytes_;
  std::mutex mu_;
  std::condition_variable landed_;  // a write landed: room, overlaps and waits for a file may have changed
  std::map<ObjectId, std::shared_ptr<File>> files_;
  WorkerPool writers_;  // last: it goes first, letting queued writes land while the rest still exists
};

}  // namespace rfos::fuse
