// Media faults: corrupted blocks must give checksum errors (never wrong bytes), and a full block file must
// give a clear out-of-space error, harm nothing stored, and take writes again once space is reclaimed.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <list>

#include "common/crc32c.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"

namespace rfos::engine {
namespace {

using testing::bytes;
using testing::pattern;

struct Target : testing::Target {
  explicit Target(uint64_t block_file_bytes) : testing::Target(block_file_bytes) { open(); }
  KeyRef key(const std::string& dkey) {
    keys.push_back(dkey);
    return {cid, {3, 4}, keys.back(), "a"};
  }
  Status put(const std::string& dkey, Epoch e, uint64_t off, const std::string& data) {
    return engine->update({key(dkey), e, ValueKind::kArray, off, data.size()}, testing::bytes(data),
                          make_csums(ValueKind::kArray, off, testing::bytes(data), 4096));
  }
  Result<std::string> get(const std::string& dkey, uint64_t off, uint64_t len) {
    return engine->fetch({key(dkey), kEpochLatest, ValueKind::kArray, off, len});
  }
  // Flips one byte of the block file at `pos` (bypassing the engine).
  void flip(uint64_t pos) {
    int fd = ::open((dir.path() + "/blocks").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c;
    ASSERT_EQ(pread(fd, &c, 1, pos), 1);
    c ^= 0x5a;
    ASSERT_EQ(pwrite(fd, &c, 1, pos), 1);
    fsync(fd);
    close(fd);
  }

  std::list<std::string> keys;
};

TEST(EngineMedia, CorruptBlockGivesChecksumErrorNeverWrongBytes) {
  Target t(32ull << 20);
  std::string big = pattern(1, 1 << 20), small = pattern(2, 4096), odd = pattern(3, 10000);
  ASSERT_TRUE(t.put("big", 1, 0, big).is_ok());
  ASSERT_TRUE(t.put("small", 1, 0, small).is_ok());
  ASSERT_TRUE(t.put("odd", 1, 123, odd).is_ok());
  auto where = t.engine->debug_locate(t.key("big"), 0);
  ASSERT_TRUE(where.is_ok());
  uint64_t base = (*where)[0].offset;
  t.engine.reset();              // corrupt at rest, as a bad disk would
  t.flip(base + 5 * 4096 + 17);  // inside the 6th 4 KiB chunk of "big"
  t.open();

  auto whole = t.get("big", 0, 1 << 20);
  EXPECT_EQ(whole.status().code(), StatusCode::kChecksumMismatch) << whole.status().to_string();
  auto part = t.get("big", 5 * 4096 + 100, 10);
  EXPECT_EQ(part.status().code(), StatusCode::kChecksumMismatch);
  // Chunks the corruption did not touch still read, and other objects are unharmed.
  EXPECT_EQ(*t.get("big", 0, 5 * 4096), big.substr(0, 5 * 4096));
  EXPECT_EQ(*t.get("big", 6 * 4096, 4096), big.substr(6 * 4096, 4096));
  EXPECT_EQ(*t.get("small", 0, 4096), small);
  EXPECT_EQ(*t.get("odd", 123, 10000), odd);

  // Unaligned record: corrupt its last block; a read that only needs the first chunk still succeeds.
  auto odd_where = t.engine->debug_locate(t.key("odd"), 123);
  ASSERT_TRUE(odd_where.is_ok());
  t.engine.reset();
  t.flip((*odd_where)[0].offset + 2 * 4096 + 5);
  t.open();
  EXPECT_EQ(t.get("odd", 123, 10000).status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(*t.get("odd", 200, 1000), odd.substr(77, 1000));

  // An overwrite heals the key: the newest version is read and verified, the corrupt one is shadowed.
  ASSERT_TRUE(t.put("big", 2, 0, pattern(9, 1 << 20)).is_ok());
  EXPECT_EQ(*t.get("big", 0, 1 << 20), pattern(9, 1 << 20));
  EXPECT_TRUE(t.engine->check().is_ok());
}

// A caller that verifies (the data plane's client) gets chunks returned as stored with their stored checksums,
// unverified here: the damaged chunk's checksum then disagrees with its bytes, which is how that caller finds
// it. Chunks the engine must checksum anew (a partial one) are still verified first, so it never vouches for
// damaged bytes with a checksum of its own.
TEST(EngineMedia, CallerThatVerifiesGetsStoredChecksumsOfDamagedChunks) {
  Target t(32ull << 20);
  std::string big = pattern(1, 1 << 20);
  ASSERT_TRUE(t.put("big", 1, 0, big).is_ok());
  auto where = t.engine->debug_locate(t.key("big"), 0);
  ASSERT_TRUE(where.is_ok());
  uint64_t base = (*where)[0].offset;
  t.engine.reset();
  t.flip(base + 5 * 4096 + 17);  // inside the 6th 4 KiB chunk
  t.open();

  FetchOp op{t.key("big"), kEpochLatest, ValueKind::kArray, 0, 1 << 20, true};
  std::vector<uint32_t> csums;
  auto whole = t.engine->fetch(op, &csums);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  ASSERT_EQ(csums.size(), 256u);
  std::vector<uint32_t> computed;
  chunk_crcs(0, bytes(*whole), 4096, &computed);
  for (size_t i = 0; i < csums.size(); ++i) EXPECT_EQ(csums[i] != computed[i], i == 5) << "chunk " << i;

  op.offset = 5 * 4096 + 100;  // part of the damaged chunk: checksummed anew, so verified first
  op.length = 10;
  EXPECT_EQ(t.engine->fetch(op, &csums).status().code(), StatusCode::kChecksumMismatch);
  op.offset = 6 * 4096;  // whole undamaged chunks pass
  op.length = 8192;
  auto clean = t.engine->fetch(op, &csums);
  ASSERT_TRUE(clean.is_ok());
  EXPECT_EQ(*clean, big.substr(6 * 4096, 8192));
}

TEST(EngineMedia, FullBlockFileGivesNoSpaceAndRecovers) {
  Target t(16ull << 20);  // 4095 usable blocks: fifteen 1 MiB updates fit
  auto total = t.engine->space();
  EXPECT_EQ(total.total_bytes, (16ull << 20) - 4096);
  int stored = 0;
  Status s;
  for (int i = 0; i < 100; ++i) {
    s = t.put("k" + std::to_string(i), 1, 0, pattern(i, 1 << 20));
    if (!s.is_ok()) break;
    ++stored;
  }
  ASSERT_EQ(s.code(), StatusCode::kNoSpace) << s.to_string();
  EXPECT_NE(s.message().find("full"), std::string::npos);
  EXPECT_EQ(stored, 15);
  // Nothing already stored is harmed, the failed key does not exist, small inline values still fit.
  EXPECT_EQ(t.get("k" + std::to_string(stored), 0, 1).status().code(), StatusCode::kNotFound);
  for (int i = 0; i < stored; ++i) ASSERT_EQ(*t.get("k" + std::to_string(i), 0, 1 << 20), pattern(i, 1 << 20));
  ASSERT_TRUE(t.put("tiny", 1, 0, "fits in the index").is_ok());
  EXPECT_TRUE(t.engine->check().is_ok());

  // Punch + aggregation gives the space back, and it is used again (also after a restart).
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.engine->punch_dkey(t.cid, {3, 4}, "k" + std::to_string(i), 2).is_ok());
  EXPECT_EQ(t.put("again", 3, 0, pattern(100, 1 << 20)).code(), StatusCode::kNoSpace);  // not reclaimed yet
  auto agg = t.engine->aggregate(t.cid, 3);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(agg->bytes_reclaimed, 5ull << 20);
  t.open();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.put("again" + std::to_string(i), 4, 0, pattern(100 + i, 1 << 20)).is_ok());
  EXPECT_EQ(t.put("over", 4, 0, pattern(1, 1 << 20)).code(), StatusCode::kNoSpace);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(*t.get("again" + std::to_string(i), 0, 1 << 20), pattern(100 + i, 1 << 20));
  for (int i = 5; i < stored; ++i) ASSERT_EQ(*t.get("k" + std::to_string(i), 0, 1 << 20), pattern(i, 1 << 20));
  EXPECT_TRUE(t.engine->check().is_ok());
}

TEST(EngineMedia, FragmentedFreeSpaceIsStillUsable) {
  Target t(8ull << 20);
  // Fill with 64 KiB records, free every other one: no 1 MiB contiguous run remains, but 1 MiB updates fit.
  int n = 0;
  while (t.put("f" + std::to_string(n), 1, 0, pattern(n, 65536)).is_ok()) ++n;
  for (int i = 0; i < n; i += 2) ASSERT_TRUE(t.engine->punch_dkey(t.cid, {3, 4}, "f" + std::to_string(i), 2).is_ok());
  ASSERT_TRUE(t.engine->aggregate(t.cid, 2).is_ok());
  ASSERT_TRUE(t.put("big", 3, 0, pattern(7, 1 << 20)).is_ok());
  EXPECT_EQ(*t.get("big", 0, 1 << 20), pattern(7, 1 << 20));
  auto where = t.engine->debug_locate(t.key("big"), 0);
  EXPECT_GT(where->size(), 1u);  // scattered over several runs
  for (int i = 1; i < n; i += 2) ASSERT_EQ(*t.get("f" + std::to_string(i), 0, 65536), pattern(i, 65536));
  EXPECT_TRUE(t.engine->check().is_ok());
}

}  // namespace
}  // namespace rfos::engine
