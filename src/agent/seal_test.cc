// Sealing a tenant's blocks: round trip, holes, tampering and misplacement refused, nonces never repeated (across
// a restart too), key files.
#include "agent/seal.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <set>

#include "engine/engine_testing.h"

namespace rfos::agent {
namespace {

const std::string kKey(32, '\x42');

struct Sealed {
  std::vector<uint8_t> cipher, records;
};

Sealed seal(Sealer& s, const std::vector<uint8_t>& plain, std::string_view place, uint64_t block) {
  Sealed out{std::vector<uint8_t>(plain.size()), std::vector<uint8_t>(plain.size() / kSealBlock * kSealRecord)};
  EXPECT_TRUE(s.seal(plain, place, block, out.cipher, out.records).is_ok());
  return out;
}

std::vector<uint8_t> pattern(size_t blocks, uint8_t seed) {
  std::vector<uint8_t> v(blocks * kSealBlock);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

class SealTest : public ::testing::Test {
 protected:
  std::unique_ptr<Sealer> open() { return Sealer::open(kKey, dir_.path() + "/t.nonce", 7).value(); }
  engine::testing::TempDir dir_;
};

TEST_F(SealTest, BlocksRoundTripAndHideTheirBytes) {
  auto s = open();
  auto plain = pattern(3, 1);
  Sealed x = seal(*s, plain, "cont/obj/d/a", 10);
  EXPECT_NE(std::memcmp(x.cipher.data(), plain.data(), plain.size()), 0);
  std::vector<uint8_t> back(plain.size());
  ASSERT_TRUE(s->open(x.cipher, x.records, "cont/obj/d/a", 10, back).is_ok());
  EXPECT_EQ(back, plain);
  // What was never written (zeros, a zero record) opens as zeros.
  std::vector<uint8_t> zeros(kSealBlock), zrec(kSealRecord), out(kSealBlock, 1);
  ASSERT_TRUE(s->open(zeros, zrec, "cont/obj/d/a", 0, out).is_ok());
  EXPECT_EQ(out, zeros);
  // Bytes without a record are not a hole.
  zeros[5] = 1;
  EXPECT_EQ(s->open(zeros, zrec, "cont/obj/d/a", 0, out).code(), StatusCode::kChecksumMismatch);
  // Partial blocks are refused.
  std::vector<uint8_t> part(100), prec(kSealRecord);
  EXPECT_EQ(s->seal(part, "p", 0, part, prec).code(), StatusCode::kInvalidArgument);
}

TEST_F(SealTest, TamperedOrMisplacedBlocksGiveAnErrorNeverBytes) {
  auto s = open();
  auto plain = pattern(2, 2);
  Sealed x = seal(*s, plain, "cont/obj/d/a", 4);
  std::vector<uint8_t> back(plain.size());
  auto fails = [&](const Sealed& y, std::string_view place, uint64_t block) {
    std::fill(back.begin(), back.end(), 0xee);
    Status st = s->open(y.cipher, y.records, place, block, back);
    // The block that failed is not handed out.
    EXPECT_TRUE(std::all_of(back.begin() + kSealBlock, back.end(), [](uint8_t b) { return b == 0xee || b == 0; }));
    return st.code() == StatusCode::kChecksumMismatch;
  };
  Sealed flipped = x;
  flipped.cipher[kSealBlock + 100] ^= 1;  // one bit of the second block
  EXPECT_TRUE(fails(flipped, "cont/obj/d/a", 4));
  Sealed badtag = x;
  badtag.records[kSealRecord + 20] ^= 1;
  EXPECT_TRUE(fails(badtag, "cont/obj/d/a", 4));
  EXPECT_TRUE(fails(x, "cont/obj/d/a", 5));   // moved to another block
  EXPECT_TRUE(fails(x, "cont/obj2/d/a", 4));  // or another object
  Sealed swapped = x;                         // the two blocks' records swapped
  std::swap_ranges(swapped.records.begin(), swapped.records.begin() + kSealRecord,
                   swapped.records.begin() + kSealRecord);
  EXPECT_TRUE(fails(swapped, "cont/obj/d/a", 4));
  // And the untouched one still opens.
  ASSERT_TRUE(s->open(x.cipher, x.records, "cont/obj/d/a", 4, back).is_ok());
  EXPECT_EQ(back, plain);
}

TEST_F(SealTest, NoncesNeverRepeatOverwritesAndRestartsIncluded) {
  std::set<std::string> nonces;
  auto take = [&](Sealer& s) {
    Sealed x = seal(s, pattern(4, 3), "p", 0);  // the same bytes at the same place, four blocks
    for (size_t b = 0; b < 4; ++b) {
      std::string n(reinterpret_cast<const char*>(x.records.data() + b * kSealRecord), 12);
      EXPECT_TRUE(nonces.insert(n).second) << "a nonce used twice";
    }
  };
  uint64_t first_next;
  {
    auto s = open();
    first_next = s->next_counter();
    for (int i = 0; i < 5; ++i) take(*s);
  }
  {
    auto s = open();  // a restart: above everything the last run reserved, not only what it used
    EXPECT_GE(s->next_counter(), first_next + (1u << 20));
    take(*s);
  }
  EXPECT_EQ(nonces.size(), 24u);
  // A state file that does not hold a counter is refused rather than restarted from 1.
  std::ofstream(dir_.path() + "/t.nonce") << "garbage";
  EXPECT_EQ(Sealer::open(kKey, dir_.path() + "/t.nonce", 7).status().code(), StatusCode::kCorruption);
}

TEST_F(SealTest, KeyFilesAreReadAndGuarded) {
  std::string hex = dir_.path() + "/hex.key";
  std::ofstream(hex) << std::string(64, 'a') << "\n";
  chmod(hex.c_str(), 0600);
  auto k = load_key_file(hex);
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  EXPECT_EQ(*k, std::string(32, '\xaa'));
  chmod(hex.c_str(), 0644);
  EXPECT_EQ(load_key_file(hex).status().code(), StatusCode::kPermissionDenied);
  std::string bad = dir_.path() + "/bad.key";
  std::ofstream(bad) << "short";
  chmod(bad.c_str(), 0600);
  EXPECT_EQ(load_key_file(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Sealer::open("short", dir_.path() + "/x", 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rfos::agent
