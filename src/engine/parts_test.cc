// Unit tests of the engine's parts: extent painting, the allocator, key and record encodings, the block
// file's ring.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/blockio/allocator.h"
#include "engine/blockio/block_device.h"
#include "engine/blockio/buffer_arena.h"
#include "engine/engine_testing.h"
#include "engine/extent_map.h"
#include "engine/index/keys.h"

namespace rfos::engine {
namespace {

using Seg = ExtentMap::Segment;

TEST(ExtentMap, NewestAssignmentWins) {
  ExtentMap m(0, 100);
  m.assign(10, 50, 0);
  m.assign(40, 60, 1);
  m.assign(20, 30, 2);
  m.assign(90, 200, 3);  // clipped
  auto s = m.segments();
  ASSERT_EQ(s.size(), 7u);
  EXPECT_EQ(s[0].owner, -1);
  EXPECT_EQ(s[1].start, 10u);
  EXPECT_EQ(s[1].end, 20u);
  EXPECT_EQ(s[2].owner, 2);
  EXPECT_EQ(s[3].owner, 0);
  EXPECT_EQ(s[3].end, 40u);
  EXPECT_EQ(s[4].owner, 1);
  EXPECT_EQ(s[4].end, 60u);
  EXPECT_EQ(s[5].owner, -1);
  EXPECT_EQ(s[6].owner, 3);
  EXPECT_EQ(s[6].end, 100u);
}

TEST(ExtentMap, RandomAgainstBytes) {
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    ExtentMap m(0, 300);
    std::vector<int> owner(300, -1);
    for (int i = 0; i < 20; ++i) {
      uint64_t a = rng() % 320, b = a + rng() % 80;
      m.assign(a, b, i);
      for (uint64_t x = a; x < b && x < 300; ++x) owner[x] = i;
    }
    uint64_t pos = 0;
    for (const Seg& s : m.segments()) {
      ASSERT_EQ(s.start, pos);
      for (uint64_t x = s.start; x < s.end; ++x) ASSERT_EQ(owner[x], s.owner);
      pos = s.end;
    }
    ASSERT_EQ(pos, 300u);
  }
}

TEST(Allocator, ReserveCommitFreeRelease) {
  blockio::ExtentAllocator a;
  a.load(1, 99);
  auto r = a.reserve(10);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(a.available_blocks(), 89u);
  EXPECT_EQ(a.durable_free_blocks(), 99u);  // not committed yet
  std::vector<blockio::FreeOp> ops;
  a.commit(*r, &ops);
  EXPECT_EQ(a.durable_free_blocks(), 89u);
  EXPECT_FALSE(ops.empty());
  ops.clear();
  a.free(*r, &ops);
  EXPECT_EQ(a.durable_free_blocks(), 99u);
  EXPECT_EQ(a.available_blocks(), 89u);  // not until release
  a.release(*r);
  EXPECT_EQ(a.available_blocks(), 99u);
  EXPECT_EQ(a.durable_map(), (std::map<uint64_t, uint64_t>{{1, 99}}));
  EXPECT_EQ(a.reserve(100).status().code(), StatusCode::kNoSpace);
}

TEST(Allocator, FreeOpsReplayToTheSameMap) {
  // Applying the emitted FreeOps to a plain map must always reproduce the durable map.
  std::mt19937 rng(11);
  blockio::ExtentAllocator a;
  a.load(1, 1000);
  std::map<uint64_t, uint64_t> replay{{1, 1000}};
  std::vector<std::vector<index::Run>> live;
  for (int i = 0; i < 2000; ++i) {
    std::vector<blockio::FreeOp> ops;
    if (live.empty() || rng() % 2) {
      auto r = a.reserve(1 + rng() % 40);
      if (!r.is_ok()) continue;
      if (rng() % 5 == 0) {
        a.unreserve(*r);
        continue;
      }
      a.commit(*r, &ops);
      live.push_back(*r);
    } else {
      size_t k = rng() % live.size();
      a.free(live[k], &ops);
      a.release(live[k]);
      live.erase(live.begin() + k);
    }
    for (const auto& op : ops) {
      if (op.nblocks == 0)
        replay.erase(op.block);
      else
        replay[op.block] = op.nblocks;
    }
    ASSERT_EQ(replay, a.durable_map()) << "step " << i;
  }
}

TEST(BufferArena, AlignedAndRecycled) {
  auto arena = blockio::BufferArena::create(4 << 20);
  ASSERT_TRUE(arena.is_ok());
  uint8_t* a = (*arena)->alloc(100);
  uint8_t* b = (*arena)->alloc(1 << 20);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  EXPECT_EQ(static_cast<uint8_t*>((*arena)->slots()[0].iov_base) + (*arena)->slot_index(b) * (1u << 20), b);
  EXPECT_EQ((*arena)->alloc((1 << 20) + 1), nullptr);
  (*arena)->free(a, 100);
  EXPECT_EQ((*arena)->alloc(4096), a);
  std::vector<uint8_t*> all;
  while (uint8_t* p = (*arena)->alloc(1 << 20)) all.push_back(p);
  EXPECT_EQ(all.size(), 2u);  // 4 slots: one holds the 4 KiB buffer a, one was given out above
  // Once the 4 KiB slot is wholly unused, a 1 MiB request may take it over.
  (*arena)->free(a, 4096);
  uint8_t* taken = (*arena)->alloc(1 << 20);
  EXPECT_NE(taken, nullptr);
  EXPECT_EQ((*arena)->free_bytes(), 0u);
  for (uint8_t* p : all) (*arena)->free(p, 1 << 20);
  (*arena)->free(taken, 1 << 20);
  (*arena)->free(b, 1 << 20);
  EXPECT_EQ((*arena)->free_bytes(), 4u << 20);
  // And small buffers can take those slots back: 4 MiB of 64 KiB buffers.
  std::vector<uint8_t*> small;
  while (uint8_t* p = (*arena)->alloc(65536)) small.push_back(p);
  EXPECT_EQ(small.size(), 64u);
}

// Reads beyond the ring's read window wait, in order, for earlier reads to complete; writes never wait for
// it, and a read larger than the window still goes when nothing else is being read.
TEST(AsyncRing, ReadsWaitForTheReadWindowWritesDoNot) {
  testing::TempDir dir;
  auto arena = blockio::BufferArena::create(8 << 20);
  ASSERT_TRUE(arena.is_ok());
  blockio::BlockDeviceOptions o;
  o.path = dir.path() + "/blocks";
  o.bytes = 16 << 20;
  o.read_window_bytes = 128 << 10;
  auto dev = blockio::BlockDevice::open(o, arena->get());
  ASSERT_TRUE(dev.is_ok()) << dev.status().to_string();
  auto ring = (*dev)->make_async_ring();
  ASSERT_TRUE(ring.is_ok());
  blockio::AsyncRing& r = **ring;

  // Four 64 KiB blocks of distinct bytes, written first.
  constexpr uint32_t kPiece = 64 << 10;
  std::vector<uint8_t*> bufs;
  for (int i = 0; i < 4; ++i) {
    bufs.push_back((*arena)->alloc(kPiece));
    std::memset(bufs.back(), 'a' + i, kPiece);
  }
  std::vector<int> done;
  for (int i = 0; i < 4; ++i)
    r.submit({{true, bufs[i], uint64_t(i) * kPiece, kPiece}}, [&, i](Status s) {
      EXPECT_TRUE(s.is_ok()) << s.to_string();
      done.push_back(i);
    });
  EXPECT_EQ(r.reads_waiting(), 0u);
  r.drain();
  ASSERT_EQ(done.size(), 4u);

  // Read them back, plus one 256 KiB read of all four: two 64 KiB reads fill the window, the rest wait.
  for (uint8_t* b : bufs) std::memset(b, 0, kPiece);
  uint8_t* whole = (*arena)->alloc(4 * kPiece);
  ASSERT_NE(whole, nullptr);
  done.clear();
  for (int i = 0; i < 4; ++i)
    r.submit({{false, bufs[i], uint64_t(i) * kPiece, kPiece}}, [&, i](Status s) {
      EXPECT_TRUE(s.is_ok()) << s.to_string();
      done.push_back(i);
    });
  r.submit({{false, whole, 0, 4 * kPiece}}, [&](Status s) {
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    done.push_back(4);
  });
  EXPECT_EQ(r.reads_waiting(), 3u);
  // A write goes in beside them.
  uint8_t* extra = (*arena)->alloc(kPiece);
  std::memset(extra, 'z', kPiece);
  r.submit({{true, extra, 8 * kPiece, kPiece}}, [&](Status s) {
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    done.push_back(5);
  });
  EXPECT_EQ(r.reads_waiting(), 3u);
  r.drain();
  ASSERT_EQ(done.size(), 6u);
  EXPECT_EQ(r.reads_waiting(), 0u);
  // The waiting reads went in the order they came, so the whole-range read, behind 2 and 3 and larger than the
  // window, went in alone and finished last; the first read to finish was one of the two the window let in.
  // (Reads 2 and 3 may finish in either order: both can be in flight at once.)
  std::vector<int> reads;
  for (int i : done)
    if (i != 5) reads.push_back(i);
  EXPECT_EQ(reads.back(), 4);
  EXPECT_TRUE(reads.front() == 0 || reads.front() == 1) << "read " << reads.front() << " finished first";
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(bufs[i][0], 'a' + i);
    EXPECT_EQ(bufs[i][kPiece - 1], 'a' + i);
    EXPECT_EQ(whole[i * kPiece + 17], 'a' + i);
  }

  // A small read that would fit beside one in flight still waits behind the large read queued before it.
  done.clear();
  r.submit({{false, bufs[0], 0, kPiece}}, [&](Status s) { done.push_back(s.is_ok() ? 0 : -1); });
  r.submit({{false, whole, 0, 4 * kPiece}}, [&](Status s) { done.push_back(s.is_ok() ? 4 : -1); });
  r.submit({{false, bufs[1], kPiece, kPiece}}, [&](Status s) { done.push_back(s.is_ok() ? 1 : -1); });
  EXPECT_EQ(r.reads_waiting(), 2u);
  r.drain();
  EXPECT_EQ(done, (std::vector<int>{0, 4, 1}));
}

TEST(Keys, ObjectKeysParseBack) {
  std::string k = index::object_prefix(5, {1, 2});
  index::append_dkey(&k, "dk");
  index::append_akey(&k, "ak");
  index::append_extent_start(&k, 4096);
  index::append_version(&k, 9, 3);
  index::ObjectKey p;
  ASSERT_TRUE(index::parse_object_key(k, &p));
  EXPECT_EQ(p.cid, 5u);
  EXPECT_EQ(p.oid, (ObjectId{1, 2}));
  EXPECT_EQ(p.dkey, "dk");
  EXPECT_EQ(p.akey, "ak");
  EXPECT_EQ(p.kind, index::kExtentTag);
  EXPECT_EQ(p.start, 4096u);
  EXPECT_EQ(p.epoch, 9u);
  EXPECT_EQ(p.seq, 3u);
  EXPECT_FALSE(index::parse_object_key(k.substr(0, k.size() - 1), &p));
  // Newer versions sort first.
  std::string older = index::object_prefix(5, {1, 2}), newer = older;
  index::append_version(&older, 9, 3);
  index::append_version(&newer, 10, 1);
  EXPECT_LT(newer, older);
}

TEST(Keys, RecordsRoundTripAndRejectDamage) {
  index::ExtentRecord r;
  r.length = 8192;
  r.csum_chunk_bytes = 4096;
  r.csums = {1, 2};
  r.runs = {{10, 1}, {20, 1}};
  std::string v = index::encode_extent(r);
  index::ExtentRecord d;
  ASSERT_TRUE(index::decode_extent(v, &d));
  EXPECT_EQ(d.runs, r.runs);
  EXPECT_EQ(d.csums, r.csums);
  for (size_t cut = 0; cut < v.size(); ++cut) EXPECT_FALSE(index::decode_extent(v.substr(0, cut), &d));
  index::ContRecord c{3, 4096, true, 7}, c2;
  std::string cv = index::encode_cont(c);
  ASSERT_TRUE(index::decode_cont(cv, &c2));
  EXPECT_EQ(c2.agg_epoch, 7u);
  EXPECT_FALSE(c2.has_punches);
  // A record from before the punch flag (one byte shorter) may hold punches: it decodes as having them.
  ASSERT_TRUE(index::decode_cont(cv.substr(0, cv.size() - 1), &c2));
  EXPECT_TRUE(c2.has_punches);
  EXPECT_FALSE(index::decode_cont(cv.substr(0, cv.size() - 2), &c2));
  EXPECT_FALSE(index::decode_cont(cv + "x", &c2));
  cv.back() = 2;  // marks without punches
  EXPECT_FALSE(index::decode_cont(cv, &c2));
  cv.back() = 4;
  EXPECT_FALSE(index::decode_cont(cv, &c2));
  // A record from before the marks: punches, and no marks to trust.
  cv.back() = 1;
  ASSERT_TRUE(index::decode_cont(cv, &c2));
  EXPECT_TRUE(c2.has_punches);
  EXPECT_FALSE(c2.punch_marks);
  c.has_punches = c.punch_marks = true;
  ASSERT_TRUE(index::decode_cont(index::encode_cont(c), &c2));
  EXPECT_TRUE(c2.has_punches && c2.punch_marks);
  index::SingleRecord s;
  std::string sv = index::encode_single(5, "abc");  // s.data points into it
  ASSERT_TRUE(index::decode_single(sv, &s));
  EXPECT_EQ(s.data, "abc");
  EXPECT_FALSE(index::decode_single(index::encode_single(5, "abc") + "x", &s));
}

}  // namespace
}  // namespace rfos::engine
