// A simulated power cut, for tests: a media seam under a target's block file and its index (leveldb's
// FaultInjectionTestEnv and RocksDB's FaultInjectionTestFS are the same idea) that records what has been made
// durable, and after cut() leaves on disk only that.
//
// What "durable" means here is what a file system promises, no more:
//   - block file: a write is durable once a sync (fdatasync) that started after the write finished has
//     returned. Anything else (in flight, finished but unsynced, or written after the cut) is torn: its range
//     reads back as random bytes, which is what a lost or half-written device cache leaves, and stronger than
//     "the old bytes".
//   - index files: bytes written through RocksDB's file system are durable once the file was synced; past that
//     a random prefix of the rest survives, cut anywhere (a torn record). A log written ahead
//     (index/wal_file_system.h) keeps its size and fill, and each 4 KiB page of its unsynced records survives
//     or reads as the fill again, in any order, as a device writes them. A file created since its directory
//     was last synced disappears. Renames are taken as durable when made (weaker than a real file system,
//     written down in docs/engine-format.md).
//   - after cut() nothing more becomes durable: syncs stop counting, and index writes, renames and deletes go
//     nowhere (the machine is off); the engine may go on running until the test destroys it.
// So an engine that acknowledges an update before everything it needs is synced loses it here. The data-sync
// mode that relies on the index's sync flushing the device for the block file too (kAuto) is outside this
// model, and loses updates in it, which the test shows.
//
// Use: EngineOptions::power_cut = &cut; open; work; cut.cut(); destroy the engine; cut.apply(); reopen without
// it and check.
//
// Thread-safety: every method from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace rfos::engine {

namespace blockio {
class WriteLog;
}

class PowerCut {
 public:
  explicit PowerCut(uint64_t seed);
  ~PowerCut();
  PowerCut(const PowerCut&) = delete;
  PowerCut& operator=(const PowerCut&) = delete;

  void cut();
  bool is_cut() const;
  // After the engine is destroyed: leaves on disk only what was durable at the cut (see above). Returns what it
  // undid, for the test's log.
  Result<std::string> apply();

  class Impl;
  Impl* impl() { return impl_.get(); }  // for the engine's wiring (power_cut.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::engine
