#include "engine/blockio/allocator.h"

namespace rfos::engine::blockio {

void ExtentAllocator::insert(Map* map, uint64_t block, uint64_t nblocks, std::vector<FreeOp>* ops) {
  uint64_t start = block, end = block + nblocks;
  auto next = map->lower_bound(block);
  if (next != map->begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      map->erase(prev);  // re-put below under the same key
    }
  }
  if (next != map->end() && next->first == end) {
    end += next->second;
    if (ops) ops->push_back({next->first, 0});
    map->erase(next);
  }
  (*map)[start] = end - start;
  if (ops) ops->push_back({start, end - start});
}

void ExtentAllocator::carve(Map* map, uint64_t block, uint64_t nblocks, std::vector<FreeOp>* ops) {
  auto it = map->upper_bound(block);
  --it;  // the entry containing block (callers guarantee one exists)
  uint64_t start = it->first, end = it->first + it->second;
  map->erase(it);
  if (ops) ops->push_back({start, 0});
  if (start < block) {
    (*map)[start] = block - start;
    if (ops) ops->push_back({start, block - start});
  }
  if (block + nblocks < end) {
    (*map)[block + nblocks] = end - block - nblocks;
    if (ops) ops->push_back({block + nblocks, end - block - nblocks});
  }
}

void ExtentAllocator::avail_insert(uint64_t block, uint64_t nblocks) {
  // Keep the size index in step with merges: drop the neighbours' entries, then index the merged run.
  auto next = avail_.lower_bound(block);
  if (next != avail_.end() && next->first == block + nblocks) index_remove(next->first, next->second);
  if (next != avail_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == block) index_remove(prev->first, prev->second);
  }
  insert(&avail_, block, nblocks, nullptr);
  auto it = avail_.upper_bound(block);
  --it;
  index_add(it->first, it->second);
  avail_blocks_ += nblocks;
}

void ExtentAllocator::avail_carve(uint64_t block, uint64_t nblocks) {
  auto it = avail_.upper_bound(block);
  --it;
  uint64_t start = it->first, len = it->second;
  index_remove(start, len);
  carve(&avail_, block, nblocks, nullptr);
  if (start < block) index_add(start, block - start);
  if (block + nblocks < start + len) index_add(block + nblocks, start + len - block - nblocks);
  avail_blocks_ -= nblocks;
}

void ExtentAllocator::load(uint64_t block, uint64_t nblocks) {
  std::lock_guard lock(mu_);
  insert(&durable_, block, nblocks, nullptr);
  durable_blocks_ += nblocks;
  avail_insert(block, nblocks);
}

Result<std::vector<Run>> ExtentAllocator::reserve(uint64_t nblocks) {
  std::lock_guard lock(mu_);
  if (nblocks == 0 || nblocks > avail_blocks_)
    return error(StatusCode::kNoSpace, "block file full: " + std::to_string(nblocks) + " blocks wanted, " +
                                           std::to_string(avail_blocks_) + " free");
  std::vector<Run> runs;
  auto fit = by_size_.lower_bound({nblocks, 0});
  if (fit != by_size_.end()) {
    uint64_t block = fit->second;
    avail_carve(block, nblocks);
    runs.push_back({block, static_cast<uint32_t>(nblocks)});
    return runs;
  }
  // Fragmented: take the largest runs until the request is met.
  uint64_t left = nblocks;
  while (left > 0) {
    auto largest = std::prev(by_size_.end());
    uint64_t block = largest->second;
    uint64_t take = std::min(left, largest->first);
    avail_carve(block, take);
    runs.push_back({block, static_cast<uint32_t>(take)});
    left -= take;
  }
  return runs;
}

void ExtentAllocator::unreserve(const std::vector<Run>& runs) {
  std::lock_guard lock(mu_);
  for (const Run& r : runs) avail_insert(r.block, r.nblocks);
}

void ExtentAllocator::commit(const std::vector<Run>& runs, std::vector<FreeOp>* ops) {
  std::lock_guard lock(mu_);
  for (const Run& r : runs) {
    carve(&durable_, r.block, r.nblocks, ops);
    durable_blocks_ -= r.nblocks;
  }
}

void ExtentAllocator::free(const std::vector<Run>& runs, std::vector<FreeOp>* ops) {
  std::lock_guard lock(mu_);
  for (const Run& r : runs) {
    insert(&durable_, r.block, r.nblocks, ops);
    durable_blocks_ += r.nblocks;
  }
}

void ExtentAllocator::release(const std::vector<Run>& runs) {
  std::lock_guard lock(mu_);
  for (const Run& r : runs) avail_insert(r.block, r.nblocks);
}

uint64_t ExtentAllocator::available_blocks() const {
  std::lock_guard lock(mu_);
  return avail_blocks_;
}

uint64_t ExtentAllocator::durable_free_blocks() const {
  std::lock_guard lock(mu_);
  return durable_blocks_;
}

std::map<uint64_t, uint64_t> ExtentAllocator::durable_map() const {
  std::lock_guard lock(mu_);
  return durable_;
}

}  // namespace rfos::engine::blockio
