// Scatter-gather cut into pieces, with the pieces moved by a fake: which pieces, which buffers, which bounces.
#include "client/scatter_gather.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace rfos::client {
namespace {

// An array in memory; pieces are stored or read when they finish, and the test may fail one.
struct FakeArray {
  std::string bytes;
  std::map<uint64_t, std::pair<uint64_t, std::span<uint8_t>>> pending;  // ticket -> offset, memory
  std::vector<std::pair<uint64_t, size_t>> pieces;                      // offset, length of each submitted
  size_t most_in_flight = 0;
  uint64_t next = 1;
  uint64_t fail_at = UINT64_MAX;  // the piece at this offset fails

  PieceIo io(bool write) {
    PieceIo io;
    io.submit = [this](uint64_t at, std::span<uint8_t> mem) -> Result<uint64_t> {
      pieces.emplace_back(at, mem.size());
      pending[next] = {at, mem};
      most_in_flight = std::max(most_in_flight, pending.size());
      return next++;
    };
    io.finish = [this, write](uint64_t t) {
      auto [at, mem] = pending.at(t);
      pending.erase(t);
      if (at == fail_at) return error(StatusCode::kIoError, "injected");
      if (bytes.size() < at + mem.size()) bytes.resize(at + mem.size(), '\0');
      if (write)
        bytes.replace(at, mem.size(), reinterpret_cast<const char*>(mem.data()), mem.size());
      else
        std::memcpy(mem.data(), bytes.data() + at, mem.size());
      return Status::ok();
    };
    return io;
  }
};

std::span<uint8_t> span(std::string& s) { return {reinterpret_cast<uint8_t*>(s.data()), s.size()}; }

TEST(ScatterGather, PiecesAreCutAtAlignedBoundariesAndBuffersStraddleThroughBounces) {
  const uint64_t M = kMaxIoBytes;
  // Three buffers whose seams fall inside pieces, for two extents, the first crossing an aligned boundary.
  std::string a(M / 2 + 10, 'a'), b(M, 'b'), c(M / 2 - 10 + 100, 'c');
  std::vector<std::span<uint8_t>> sgl{span(a), span(b), span(c)};
  std::vector<Extent> extents{{M - 100, M + 100}, {5 * M, M - 100 + 100}};
  FakeArray arr;
  ASSERT_TRUE(scatter_gather(true, extents, sgl, 3, arr.io(true)).is_ok());
  std::vector<std::pair<uint64_t, size_t>> want{{M - 100, 100}, {M, M}, {5 * M, M}};
  EXPECT_EQ(arr.pieces, want);
  EXPECT_LE(arr.most_in_flight, 3u);
  std::string all = a + b + c;
  EXPECT_EQ(arr.bytes.substr(M - 100, M + 100), all.substr(0, M + 100));
  EXPECT_EQ(arr.bytes.substr(5 * M, M), all.substr(M + 100));

  // And back, into differently cut buffers.
  std::string x(7, '\0'), y(all.size() - 7, '\0');
  std::vector<std::span<uint8_t>> back{span(x), span(y)};
  ASSERT_TRUE(scatter_gather(false, extents, back, 2, arr.io(false)).is_ok());
  EXPECT_EQ(x + y, all);
}

TEST(ScatterGather, TheFirstFailureIsReturnedOnceNothingIsInFlight) {
  const uint64_t M = kMaxIoBytes;
  std::string data(4 * M, 'z');
  std::vector<std::span<uint8_t>> sgl{span(data)};
  Extent e{0, 4 * M};
  FakeArray arr;
  arr.fail_at = M;
  Status s = scatter_gather(true, {&e, 1}, sgl, 1, arr.io(true));
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_TRUE(arr.pending.empty());
  EXPECT_EQ(arr.pieces.size(), 2u) << "pieces after a failure are not started";
}

TEST(ScatterGather, BadExtentsMoveNothing) {
  std::string data(10, 'z');
  std::vector<std::span<uint8_t>> sgl{span(data)};
  FakeArray arr;
  Extent empty{0, 0}, too_far{(1ull << 62) - 5, 10}, short_one{0, 9};
  for (const Extent& e : {empty, too_far, short_one})
    EXPECT_EQ(scatter_gather(true, {&e, 1}, sgl, 4, arr.io(true)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(arr.pieces.empty());
  // Lengths that wrap around 2^64 together: they must not pass for the 10 bytes they would add up to.
  std::vector<Extent> wrapping(4, Extent{0, 1ull << 62});
  wrapping.push_back({0, 10});
  EXPECT_EQ(check_extents(wrapping, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(scatter_gather(false, wrapping, sgl, 4, arr.io(false)).code(), StatusCode::kInvalidArgument);
  // Buffers that wrap around together: the same.
  std::vector<std::span<uint8_t>> huge(4, std::span<uint8_t>(reinterpret_cast<uint8_t*>(data.data()), 1ull << 62));
  huge.push_back(span(data));
  Extent ten{0, 10};
  EXPECT_EQ(scatter_gather(true, {&ten, 1}, huge, 4, arr.io(true)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(arr.pieces.empty());
}

}  // namespace
}  // namespace rfos::client
