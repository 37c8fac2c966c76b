// Sealing a tenant's blocks: round trip, holes, tampering and misplacement refused, nonces never repeated (across
// a restart too), key files.
#include "agent/seal.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
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

// Object `object` of container "cont", (dkey, akey).
SealPlace at(uint64_t object, std::string_view dkey = "d", std::string_view akey = "a") {
  return SealPlace::of("cont", ObjectId{1, object}, dkey, akey);
}

Sealed seal(Sealer& s, const std::vector<uint8_t>& plain, const SealPlace& place, uint64_t block) {
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
  Sealed x = seal(*s, plain, at(1), 10);
  EXPECT_NE(std::memcmp(x.cipher.data(), plain.data(), plain.size()), 0);
  std::vector<uint8_t> back(plain.size());
  ASSERT_TRUE(s->open(x.cipher, x.records, at(1), 10, back).is_ok());
  EXPECT_EQ(back, plain);
  // What was never written (zeros, a zero record) opens as zeros.
  std::vector<uint8_t> zeros(kSealBlock), zrec(kSealRecord), out(kSealBlock, 1);
  ASSERT_TRUE(s->open(zeros, zrec, at(1), 0, out).is_ok());
  EXPECT_EQ(out, zeros);
  // Bytes without a record are not a hole.
  zeros[5] = 1;
  EXPECT_EQ(s->open(zeros, zrec, at(1), 0, out).code(), StatusCode::kChecksumMismatch);
  // A record for each block, or nothing is sealed.
  std::vector<uint8_t> part(5000), prec(kSealRecord);
  EXPECT_EQ(s->seal(part, at(3), 0, part, prec).code(), StatusCode::kInvalidArgument);
}

// The last block of an array may be shorter than whole: its record keeps its length, it opens as long as that
// and zeros after (whatever lies there), and a record whose length was changed does not open.
TEST_F(SealTest, AShortLastBlockKeepsItsLength) {
  auto s = open();
  std::vector<uint8_t> plain = pattern(2, 9);
  plain.resize(kSealBlock + 904);
  std::vector<uint8_t> cipher(plain.size()), records(2 * kSealRecord);
  ASSERT_TRUE(s->seal(plain, at(1), 3, cipher, records).is_ok());
  EXPECT_EQ(client::sealed_length({records.data(), kSealRecord}), kSealBlock);
  EXPECT_EQ(client::sealed_length({records.data() + kSealRecord, kSealRecord}), 904u);
  EXPECT_EQ(records[29] | (records[30] << 8), 0);  // a whole block's length is 0: as records before lengths
  {
    std::vector<uint8_t> r = records;  // and 4096 is not another way to say it
    r[30] = 0x10;
    std::vector<uint8_t> whole(cipher.begin(), cipher.begin() + kSealBlock), out(kSealBlock);
    EXPECT_EQ(s->open(whole, {r.data(), kSealRecord}, at(1), 3, out).code(), StatusCode::kChecksumMismatch);
  }
  // Read back as whole blocks, with other bytes past the short one's end: they open as zeros.
  std::vector<uint8_t> stored(2 * kSealBlock, 0x77), back(2 * kSealBlock, 1);
  std::memcpy(stored.data(), cipher.data(), cipher.size());
  ASSERT_TRUE(s->open(stored, records, at(1), 3, back).is_ok());
  std::vector<uint8_t> want = plain;
  want.resize(2 * kSealBlock);
  EXPECT_EQ(back, want);
  // Sealed in place.
  std::vector<uint8_t> inplace = plain;
  ASSERT_TRUE(s->seal(inplace, at(1), 3, inplace, records).is_ok());
  inplace.resize(2 * kSealBlock);
  ASSERT_TRUE(s->open(inplace, records, at(1), 3, inplace).is_ok());
  EXPECT_EQ(inplace, want);
  // A length changed, longer or shorter, or past a block, does not open.
  for (uint16_t len : {uint16_t{905}, uint16_t{903}, uint16_t{0}, uint16_t{4096}, uint16_t{4097}}) {
    std::vector<uint8_t> r = records;
    r[kSealRecord + 29] = static_cast<uint8_t>(len);
    r[kSealRecord + 30] = static_cast<uint8_t>(len >> 8);
    EXPECT_EQ(s->open(stored, r, at(1), 3, back).code(), StatusCode::kChecksumMismatch) << len;
  }
}

TEST_F(SealTest, TamperedOrMisplacedBlocksGiveAnErrorNeverBytes) {
  auto s = open();
  auto plain = pattern(2, 2);
  Sealed x = seal(*s, plain, at(1), 4);
  std::vector<uint8_t> back(plain.size());
  auto fails = [&](const Sealed& y, const SealPlace& place, uint64_t block) {
    std::fill(back.begin(), back.end(), 0xee);
    Status st = s->open(y.cipher, y.records, place, block, back);
    // The block that failed is not handed out.
    EXPECT_TRUE(std::all_of(back.begin() + kSealBlock, back.end(), [](uint8_t b) { return b == 0xee || b == 0; }));
    return st.code() == StatusCode::kChecksumMismatch;
  };
  Sealed flipped = x;
  flipped.cipher[kSealBlock + 100] ^= 1;  // one bit of the second block
  EXPECT_TRUE(fails(flipped, at(1), 4));
  Sealed badtag = x;
  badtag.records[kSealRecord + 20] ^= 1;
  EXPECT_TRUE(fails(badtag, at(1), 4));
  EXPECT_TRUE(fails(x, at(1), 5));  // moved to another block
  EXPECT_TRUE(fails(x, at(2), 4));  // or another object
  Sealed swapped = x;               // the two blocks' records swapped
  std::swap_ranges(swapped.records.begin(), swapped.records.begin() + kSealRecord,
                   swapped.records.begin() + kSealRecord);
  EXPECT_TRUE(fails(swapped, at(1), 4));
  // And the untouched one still opens.
  ASSERT_TRUE(s->open(x.cipher, x.records, at(1), 4, back).is_ok());
  EXPECT_EQ(back, plain);
}

// Keys that join to the same string ("a/b" + "c", "a" + "b/c") are different places; a block sealed before the
// record had a format byte (its place one string) still opens, and only at its place.
TEST_F(SealTest, PlacesAreUnambiguousAndBlocksOfTheFirstFormatStillOpen) {
  auto s = open();
  auto plain = pattern(1, 4);
  Sealed x = seal(*s, plain, at(1, "a/b", "c"), 0);
  EXPECT_EQ(x.records[28], kSealFormat);
  std::vector<uint8_t> back(plain.size());
  EXPECT_EQ(s->open(x.cipher, x.records, at(1, "a", "b/c"), 0, back).code(), StatusCode::kChecksumMismatch);
  ASSERT_TRUE(s->open(x.cipher, x.records, at(1, "a/b", "c"), 0, back).is_ok());
  // Format 0, as the agent sealed before: AAD "rfos-gcm-v1" len(4 BE) "cont/oid/dkey/akey" block(8 BE), a zero
  // format byte.
  const SealPlace place = at(1, "d", "a");
  std::string aad = "rfos-gcm-v1";
  for (int i = 3; i >= 0; --i) aad.push_back(static_cast<char>(place.legacy().size() >> (8 * i)));
  aad += place.legacy() + std::string(7, '\0') + '\x05';
  Sealed old{std::vector<uint8_t>(kSealBlock), std::vector<uint8_t>(kSealRecord)};
  old.records[0] = 9;  // agent 9, counter 1
  old.records[4] = 1;
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  ASSERT_TRUE(EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, reinterpret_cast<const uint8_t*>(kKey.data()),
                                 old.records.data()) == 1 &&
              EVP_EncryptUpdate(ctx, nullptr, &len, reinterpret_cast<const uint8_t*>(aad.data()),
                                static_cast<int>(aad.size())) == 1 &&
              EVP_EncryptUpdate(ctx, old.cipher.data(), &len, plain.data(), static_cast<int>(kSealBlock)) == 1 &&
              EVP_EncryptFinal_ex(ctx, old.cipher.data() + len, &len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, old.records.data() + 12) == 1);
  EVP_CIPHER_CTX_free(ctx);
  std::fill(back.begin(), back.end(), 0);
  ASSERT_TRUE(s->open(old.cipher, old.records, place, 5, back).is_ok());
  EXPECT_EQ(back, plain);
  EXPECT_EQ(s->open(old.cipher, old.records, place, 6, back).code(), StatusCode::kChecksumMismatch);
  old.records[28] = kSealFormat;  // read as the other format: its place does not match
  EXPECT_EQ(s->open(old.cipher, old.records, place, 5, back).code(), StatusCode::kChecksumMismatch);
  old.records[28] = kSealFormat + 1;  // a format this agent does not know
  EXPECT_EQ(s->open(old.cipher, old.records, place, 5, back).code(), StatusCode::kChecksumMismatch);
  // The format byte is not under the tag: a block sealed now whose byte is set to 0 does not open at a place whose
  // format-0 string spells the same bytes as its own (dkey "x/y" akey "z" against dkey "\0\3x" akey "y\0\1z").
  const SealPlace p = at(1, "x/y", "z"), q = at(1, std::string("\0\3x", 3), std::string("y\0\1z", 4));
  ASSERT_EQ(q.legacy(), p.aad());
  Sealed now = seal(*s, plain, p, 0);
  now.records[28] = 0;
  EXPECT_EQ(s->open(now.cipher, now.records, q, 0, back).code(), StatusCode::kChecksumMismatch);
  auto value = s->seal_value("v", p);
  ASSERT_TRUE(value.is_ok());
  (*value)[28] = 0;
  EXPECT_EQ(s->open_value(*value, q).status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(s->open_value(*value, p).status().code(), StatusCode::kChecksumMismatch);
}

// A single value is sealed whole: it round-trips (empty too), hides its bytes, and a flipped bit, another place,
// a cut or an array block's place give an error, never bytes.
TEST_F(SealTest, ValuesRoundTripAndRefuseTamperingAndMisplacement) {
  auto s = open();
  const std::string plain = "a single value, in the clear";
  auto sealed = s->seal_value(plain, at(1));
  ASSERT_TRUE(sealed.is_ok()) << sealed.status().to_string();
  EXPECT_EQ(sealed->size(), plain.size() + kSealRecord);
  EXPECT_EQ(sealed->find("single value"), std::string::npos);
  EXPECT_EQ(*s->open_value(*sealed, at(1)), plain);
  EXPECT_EQ(*s->open_value(*s->seal_value("", at(1)), at(1)), "");
  EXPECT_NE(*s->seal_value(plain, at(1)), *sealed) << "the same value again takes a new nonce";
  std::string flipped = *sealed;
  flipped[kSealRecord + 3] ^= 1;
  EXPECT_EQ(s->open_value(flipped, at(1)).status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(s->open_value(*sealed, at(2)).status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(s->open_value(*sealed, at(1, "d", "b")).status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(s->open_value(sealed->substr(0, sealed->size() - 1), at(1)).status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(s->open_value(sealed->substr(0, 10), at(1)).status().code(), StatusCode::kChecksumMismatch);
  // A block's record and ciphertext do not open as a value of its place, nor a value's as a block.
  Sealed block = seal(*s, pattern(1, 5), at(1), 0);
  std::string as_value(block.records.begin(), block.records.end());
  as_value.append(block.cipher.begin(), block.cipher.end());
  EXPECT_EQ(s->open_value(as_value, at(1)).status().code(), StatusCode::kChecksumMismatch);
}

TEST_F(SealTest, NoncesNeverRepeatOverwritesAndRestartsIncluded) {
  std::set<std::string> nonces;
  auto take = [&](Sealer& s) {
    Sealed x = seal(s, pattern(4, 3), at(3), 0);  // the same bytes at the same place, four blocks
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
