#include "client/scatter_gather.h"

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "client/file_layout.h"

namespace rfos::client {

Status add_buffer_bytes(uint64_t* total, uint64_t len) {
  if (len > kArrayEnd - *total)
    return error(StatusCode::kInvalidArgument, "the buffers hold more than 2^62 bytes together");
  *total += len;
  return Status::ok();
}

Status check_extents(std::span<const Extent> extents, uint64_t have) {
  uint64_t want = 0;
  for (const Extent& e : extents) {
    if (e.length == 0 || e.offset >= kArrayEnd || e.length > kArrayEnd - e.offset)
      return error(StatusCode::kInvalidArgument, "an extent is empty or reaches past 2^62");
    // Bounded, so that extents whose lengths wrap around cannot match a small buffer.
    if (e.length > kArrayEnd - want)
      return error(StatusCode::kInvalidArgument, "the extents hold more than 2^62 bytes together");
    want += e.length;
  }
  if (want != have)
    return error(StatusCode::kInvalidArgument,
                 "the extents hold " + std::to_string(want) + " bytes, the buffers " + std::to_string(have));
  return Status::ok();
}

Status scatter_gather(bool write, std::span<const Extent> extents, std::span<const std::span<uint8_t>> sgl,
                      size_t window, const PieceIo& io) {
  uint64_t have = 0;
  for (const auto& b : sgl) RFOS_RETURN_IF_ERROR(add_buffer_bytes(&have, b.size()));
  RFOS_RETURN_IF_ERROR(check_extents(extents, have));
  struct InFlight {
    uint64_t ticket = 0;
    std::vector<uint8_t> bounce;
    std::vector<std::span<uint8_t>> parts;  // where the bounce's bytes belong, in order
  };
  std::deque<InFlight> in_flight;
  Status first;
  auto finish_oldest = [&] {
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    Status s = io.finish(f.ticket);
    if (s.is_ok() && !write) {
      size_t at = 0;
      for (std::span<uint8_t> part : f.parts) {
        std::memcpy(part.data(), f.bounce.data() + at, part.size());
        at += part.size();
      }
    }
    if (first.is_ok() && !s.is_ok()) first = s;
  };
  size_t bi = 0, bpos = 0;  // the sgl cursor
  for (const Extent& e : extents) {
    for (uint64_t done = 0, n = 0; done < e.length && first.is_ok(); done += n) {
      uint64_t at = e.offset + done;
      n = layout::piece_length(kMaxIoBytes, at, e.length - done);
      while (bpos == sgl[bi].size()) bi++, bpos = 0;
      InFlight f;
      std::span<uint8_t> mem;
      if (sgl[bi].size() - bpos >= n) {
        mem = sgl[bi].subspan(bpos, n);
        bpos += n;
      } else {
        f.bounce.resize(n);
        for (size_t got = 0; got < n;) {
          while (bpos == sgl[bi].size()) bi++, bpos = 0;
          size_t take = std::min<size_t>(n - got, sgl[bi].size() - bpos);
          f.parts.push_back(sgl[bi].subspan(bpos, take));
          if (write) std::memcpy(f.bounce.data() + got, sgl[bi].data() + bpos, take);
          got += take;
          bpos += take;
        }
        mem = f.bounce;
      }
      auto t = io.submit(at, mem);
      if (!t.is_ok()) {
        first = t.status();
        break;
      }
      f.ticket = *t;
      in_flight.push_back(std::move(f));
      if (in_flight.size() >= window) finish_oldest();
    }
    if (!first.is_ok()) break;
  }
  while (!in_flight.empty()) finish_oldest();
  return first;
}

}  // namespace rfos::client
