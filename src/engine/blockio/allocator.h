// The extent allocator of a block file, in blocks.
//
// Two views of free space:
//  - durable: exactly the 'F' records in the index (what is free after a crash and restart);
//  - available: durable minus runs reserved by updates in flight, minus runs freed by a batch that is not
//    yet durable. New reservations come from here.
// An update reserves runs (available shrinks), writes its data, then commits: the carve of those runs out of
// the durable view is emitted as FreeOps into the same write batch as the index records that own them.
// A crash before that batch is durable leaves the runs free in the durable view: nothing leaks. Freed runs
// (punch + aggregation, container destroy) return to the durable view in the freeing batch, and to the
// available view only after that batch is durable and no reader can still be reading them.
//
// Thread-safety: all methods are safe from any thread (one mutex). Callers that emit FreeOps must apply
// them to the index in the order they were emitted (the engine's commit queue does).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/index/keys.h"

namespace rfos::engine::blockio {

using index::Run;

// A change to the durable free map: put 'F'block -> nblocks, or delete 'F'block when nblocks == 0.
struct FreeOp {
  uint64_t block = 0;
  uint64_t nblocks = 0;
};

class ExtentAllocator {
 public:
  // Loads one durable free run (at open).
  void load(uint64_t block, uint64_t nblocks);

  // Reserves `nblocks`, contiguous when possible (best fit), else as several runs, largest first.
  // Errors: kNoSpace when fewer than nblocks are available (nothing is reserved then).
  Result<std::vector<Run>> reserve(uint64_t nblocks);
  // Gives back a reservation that was never committed.
  void unreserve(const std::vector<Run>& runs);
  // Moves reserved runs into the durable allocated state; appends the FreeOps that do it.
  void commit(const std::vector<Run>& runs, std::vector<FreeOp>* ops);
  // Returns committed runs to the durable free map; appends the FreeOps. They stay unavailable until release.
  void free(const std::vector<Run>& runs, std::vector<FreeOp>* ops);
  // Makes runs freed by a now-durable batch available again.
  void release(const std::vector<Run>& runs);

  uint64_t available_blocks() const;
  uint64_t durable_free_blocks() const;
  // The durable free map, for consistency checks.
  std::map<uint64_t, uint64_t> durable_map() const;

 private:
  using Map = std::map<uint64_t, uint64_t>;  // block -> nblocks, non-adjacent, non-overlapping
  // Inserts a run, merging with neighbours; emits FreeOps when `ops` is non-null.
  static void insert(Map* map, uint64_t block, uint64_t nblocks, std::vector<FreeOp>* ops);
  // Removes a run that lies inside one entry; emits FreeOps when `ops` is non-null.
  static void carve(Map* map, uint64_t block, uint64_t nblocks, std::vector<FreeOp>* ops);
  void index_add(uint64_t block, uint64_t nblocks) { by_size_.insert({nblocks, block}); }
  void index_remove(uint64_t block, uint64_t nblocks) { by_size_.erase({nblocks, block}); }
  void avail_insert(uint64_t block, uint64_t nblocks);
  void avail_carve(uint64_t block, uint64_t nblocks);

  mutable std::mutex mu_;
  Map durable_;
  Map avail_;
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (nblocks, block) of avail_
  uint64_t avail_blocks_ = 0;
  uint64_t durable_blocks_ = 0;
};

}  // namespace rfos::engine::blockio
