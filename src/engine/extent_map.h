// Newest-wins painting of array extents: the visible owner of every byte of a range.
//
// Records are assigned in ascending version order; each assignment overwrites whatever an older one left
// on its range. Owner -1 is "nothing written" (reads as zeros).
//
// Thread-safety: a value type; not shared.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace rfos::engine {

class ExtentMap {
 public:
  struct Segment {
    uint64_t start = 0;
    uint64_t end = 0;
    int owner = -1;
  };

  // Covers [start, end) with owner -1.
  ExtentMap(uint64_t start, uint64_t end) { map_[start] = {end, -1}; }

  // Gives [start, end) (clipped to the map's range) to `owner`.
  void assign(uint64_t start, uint64_t end, int owner);
  // The segments in order, adjacent segments of one owner merged.
  std::vector<Segment> segments() const;

 private:
  struct Value {
    uint64_t end;
    int owner;
  };
  // Splits the segment containing `at` so that a segment starts exactly at `at` (when inside the range).
  void split(uint64_t at);
  std::map<uint64_t, Value> map_;
};

}  // namespace rfos::engine
