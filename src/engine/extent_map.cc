#include "engine/extent_map.h"

namespace rfos::engine {

void ExtentMap::split(uint64_t at) {
  auto it = map_.upper_bound(at);
  if (it == map_.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Value tail = it->second;
  it->second.end = at;
  map_[at] = tail;
}

void ExtentMap::assign(uint64_t start, uint64_t end, int owner) {
  uint64_t lo = map_.begin()->first, hi = std::prev(map_.end())->second.end;
  if (start < lo) start = lo;
  if (end > hi) end = hi;
  if (start >= end) return;
  split(start);
  split(end);
  auto first = map_.lower_bound(start);
  auto last = map_.lower_bound(end);
  map_.erase(first, last);
  map_[start] = {end, owner};
}

std::vector<ExtentMap::Segment> ExtentMap::segments() const {
  std::vector<Segment> out;
  for (const auto& [start, v] : map_) {
    if (!out.empty() && out.back().owner == v.owner && out.back().end == start) {
      out.back().end = v.end;
    } else {
      out.push_back({start, v.end, v.owner});
    }
  }
  return out;
}

}  // namespace rfos::engine
