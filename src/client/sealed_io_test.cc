// SealedIo over an in-memory array store and a stand-in cipher: writes, reads and punches at any offset and length
// against a plain model (bytes and the array's end), writes in flight over the same blocks, two handles writing
// one block at once, and blocks that do not open.
#include "client/sealed_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

namespace rfos::client {
namespace {

// Stands in for AES-GCM: each byte XORed with a key of its place and block, the record holding the block's index,
// its place's hash, its length and a sum of its plaintext, so a moved, changed or cut block does not open.
class StandInSealer : public BlockSealer {
 public:
  Status seal(std::span<const uint8_t> plain, const SealPlace& place, uint64_t first_block, std::span<uint8_t> cipher,
              std::span<uint8_t> records) override {
    const size_t blocks = (plain.size() + kSealBlock - 1) / kSealBlock;
    if (cipher.size() != plain.size() || records.size() != blocks * kSealRecord)
      return error(StatusCode::kInvalidArgument, "sizes");
    for (size_t b = 0; b < blocks; ++b) {
      const size_t n = std::min(kSealBlock, plain.size() - b * kSealBlock);
      uint8_t* rec = records.data() + b * kSealRecord;
      std::memset(rec, 0, kSealRecord);
      const uint64_t block = first_block + b, where = hash(place);
      std::memcpy(rec, &block, 8);
      std::memcpy(rec + 8, &where, 8);
      uint64_t sum = 0;
      for (size_t i = 0; i < n; ++i) {
        uint8_t p = plain[b * kSealBlock + i];
        sum = sum * 31 + p;
        cipher[b * kSealBlock + i] = p ^ key(where, block, i);
      }
      std::memcpy(rec + 16, &sum, 8);
      rec[24] = 1;  // never all zeros
      rec[28] = 1;
      if (n < kSealBlock) {
        rec[29] = static_cast<uint8_t>(n);
        rec[30] = static_cast<uint8_t>(n >> 8);
      }
    }
    ++sealed_;
    return Status::ok();
  }
  Status open(std::span<const uint8_t> cipher, std::span<const uint8_t> records, const SealPlace& place,
              uint64_t first_block, std::span<uint8_t> plain) override {
    const size_t blocks = cipher.size() / kSealBlock;
    for (size_t b = 0; b < blocks; ++b) {
      std::span<const uint8_t> rec = records.subspan(b * kSealRecord, kSealRecord);
      uint8_t* out = plain.data() + b * kSealBlock;
      const uint8_t* in = cipher.data() + b * kSealBlock;
      const size_t n = sealed_length(rec);
      if (n == 0) {
        if (std::any_of(in, in + kSealBlock, [](uint8_t x) { return x != 0; }))
          return error(StatusCode::kChecksumMismatch, "bytes without a record");
        std::memset(out, 0, kSealBlock);
        continue;
      }
      uint64_t block = 0, where = 0, sum = 0, got = 0;
      std::memcpy(&block, rec.data(), 8);
      std::memcpy(&where, rec.data() + 8, 8);
      std::memcpy(&sum, rec.data() + 16, 8);
      if (n > kSealBlock || block != first_block + b || where != hash(place))
        return error(StatusCode::kChecksumMismatch, "misplaced");
      for (size_t i = 0; i < n; ++i) {
        out[i] = in[i] ^ key(where, block, i);
        got = got * 31 + out[i];
      }
      if (got != sum) {
        std::memset(out, 0, kSealBlock);
        return error(StatusCode::kChecksumMismatch, "changed");
      }
      std::memset(out + n, 0, kSealBlock - n);
    }
    return Status::ok();
  }
  int sealed_ = 0;

 private:
  static uint64_t hash(const SealPlace& p) { return std::hash<std::string>{}(p.aad()); }
  static uint8_t key(uint64_t where, uint64_t block, size_t i) {
    return static_cast<uint8_t>((where >> (i % 8 * 8)) ^ (block * 131) ^ (i * 7) ^ 0x5a) | 1;
  }
};

// Arrays in memory, as the targets keep them: holes read as zeros, a dkey never written is kNotFound, and an
// array ends after its last byte that was written and not punched. Shared by handles (a mutex).
struct Store {
  struct Array {
    std::vector<uint8_t> bytes, valid;
    uint64_t end() const {
      for (size_t i = valid.size(); i > 0; --i)
        if (valid[i - 1]) return i;
      return 0;
    }
  };
  std::mutex mu;
  std::map<std::string, Array> arrays;
  std::set<std::string> dkeys;
  int spoil_records = 0;       // record reads to come back with a bit flipped (a writer between its halves)
  int fail_record_writes = 0;  // record writes to fail (sent, not stored: a target that timed out)
  int fail_record_sends = 0;   // record writes whose send fails at once
  static std::string name(const ObjectId& oid, std::string_view dkey) {
    return oid.to_string() + "/" + std::string(dkey);
  }
  Array& at(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
    return arrays[name(oid, dkey) + "/" + std::string(akey)];
  }
};

// One handle's raw I/O over the store: a call's completion waits in a queue; with `defer`, a write lands only
// when its completion is taken (in flight until then).
class MemArrays : public RawArrays {
 public:
  MemArrays(Store& store, bool defer) : store_(store), defer_(defer) {}
  Result<uint64_t> raw_write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                             std::span<const uint8_t> data) override {
    {
      std::lock_guard lock(store_.mu);
      if (akey.ends_with(kRecordsSuffix) && store_.fail_record_sends > 0) {
        --store_.fail_record_sends;
        return error(StatusCode::kShutdown, "the endpoint is gone");
      }
    }
    std::vector<uint8_t> copy(data.begin(), data.end());
    std::string d(dkey), a(akey);
    return queue(
        [this, oid, d, a, offset, copy] {
          std::lock_guard lock(store_.mu);
          if (a.ends_with(kRecordsSuffix) && store_.fail_record_writes > 0) {
            --store_.fail_record_writes;
            return error(StatusCode::kTimeout, "the target did not answer");
          }
          Store::Array& x = store_.at(oid, d, a);
          if (x.bytes.size() < offset + copy.size()) {
            x.bytes.resize(offset + copy.size());
            x.valid.resize(offset + copy.size());
          }
          std::memcpy(x.bytes.data() + offset, copy.data(), copy.size());
          std::fill(x.valid.begin() + offset, x.valid.begin() + offset + copy.size(), 1);
          store_.dkeys.insert(Store::name(oid, d));
          return Status::ok();
        },
        !defer_);
  }
  Result<uint64_t> raw_read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                            std::span<uint8_t> out) override {
    std::lock_guard lock(store_.mu);
    if (!store_.dkeys.count(Store::name(oid, dkey))) return queue([] { return error(StatusCode::kNotFound, "no"); });
    const Store::Array& x = store_.at(oid, dkey, akey);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = offset + i < x.bytes.size() && x.valid[offset + i] ? x.bytes[offset + i] : 0;
    if (akey.ends_with(kRecordsSuffix) && store_.spoil_records > 0 && !out.empty()) {
      --store_.spoil_records;
      out[16] ^= 1;
    }
    return queue([] { return Status::ok(); });
  }
  Completion raw_wait(uint64_t id) override {
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Call& c) { return c.id == id; });
    EXPECT_NE(it, pending_.end());
    Completion c{id, it->land(), 0};
    pending_.erase(it);
    return c;
  }
  std::vector<Completion> raw_take(size_t max, int) override {
    std::vector<Completion> out;
    while (!pending_.empty() && out.size() < max) {
      out.push_back({pending_.front().id, pending_.front().land(), 0});
      pending_.pop_front();
    }
    return out;
  }
  Status raw_punch(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                   uint64_t length) override {
    std::lock_guard lock(store_.mu);
    Store::Array& x = store_.at(oid, dkey, akey);
    for (uint64_t i = offset; i < offset + length && i < x.valid.size(); ++i) x.valid[i] = 0;
    return Status::ok();
  }
  size_t in_flight() const { return pending_.size(); }

 private:
  struct Call {
    uint64_t id;
    std::function<Status()> land;
  };
  Result<uint64_t> queue(std::function<Status()> f, bool now = true) {
    if (now) {
      Status s = f();
      f = [s] { return s; };
    }
    pending_.push_back({next_++, std::move(f)});
    return pending_.back().id;
  }
  Store& store_;
  bool defer_;
  uint64_t next_ = 1000;
  std::deque<Call> pending_;
};

const ObjectId kOid{7, 9};

// A piece at a time, as the container cuts them (inside one 1 MiB-aligned range).
template <typename F>
Status each_piece(uint64_t offset, uint64_t length, F f) {
  for (uint64_t at = offset; at < offset + length;) {
    uint64_t n = std::min(offset + length - at, kMaxIoBytes - at % kMaxIoBytes);
    RFOS_RETURN_IF_ERROR(f(at, n));
    at += n;
  }
  return Status::ok();
}

Status write(SealedIo& io, uint64_t offset, const uint8_t* data, uint64_t length) {
  return each_piece(offset, length, [&](uint64_t at, uint64_t n) {
    RFOS_ASSIGN_OR_RETURN(Ticket t, io.submit_write(kOid, "d", "a", at, {data + (at - offset), n}));
    return io.finish(t);
  });
}

Status read(SealedIo& io, uint64_t offset, uint8_t* out, uint64_t length) {
  return each_piece(offset, length, [&](uint64_t at, uint64_t n) {
    RFOS_ASSIGN_OR_RETURN(Ticket t, io.submit_read(kOid, "d", "a", at, {out + (at - offset), n}));
    return io.finish(t);
  });
}

// Random writes, reads and punches (cuts at any byte among them) against the plain bytes they should leave: every
// read matches, the sealed array ends where the plain one does, and what is stored is never the plaintext.
TEST(SealedIo, AnyWriteReadAndPunchKeepsThePlainBytesAndTheirEnd) {
  for (bool defer : {false, true}) {
    Store store;
    MemArrays raw(store, defer);
    auto sealer = std::make_shared<StandInSealer>();
    SealedIo io(sealer, "cont", raw, 1000);
    std::mt19937_64 rng(defer ? 11 : 7);
    const uint64_t kSpace = 3 * kMaxIoBytes;
    std::vector<uint8_t> model(kSpace + kMaxIoBytes, 0), valid(model.size(), 0);
    auto model_end = [&] {
      for (size_t i = valid.size(); i > 0; --i)
        if (valid[i - 1]) return uint64_t{i};
      return uint64_t{0};
    };
    auto pick = [&](uint64_t max) -> uint64_t {
      switch (rng() % 4) {  // block-aligned, near a block's edge, or anywhere
        case 0:
          return rng() % (max / kSealBlock + 1) * kSealBlock;
        case 1:
          return std::min<uint64_t>(max, rng() % (max / kSealBlock + 1) * kSealBlock + rng() % 3);
        default:
          return rng() % (max + 1);
      }
    };
    for (int i = 0; i < 600; ++i) {
      const uint64_t offset = pick(kSpace - 1);
      const uint64_t length = 1 + std::min<uint64_t>(pick(rng() % 3 == 0 ? 2 * kMaxIoBytes : 9000), kSpace - offset);
      const int op = static_cast<int>(rng() % 10);
      if (op < 5) {
        std::vector<uint8_t> data(length);
        for (auto& b : data) b = static_cast<uint8_t>(rng() | 1);
        ASSERT_TRUE(write(io, offset, data.data(), length).is_ok()) << i;
        std::memcpy(model.data() + offset, data.data(), length);
        std::fill(valid.begin() + offset, valid.begin() + offset + length, 1);
      } else if (op < 8) {
        std::vector<uint8_t> out(length, 0xee);
        Status s = read(io, offset, out.data(), length);
        if (store.dkeys.empty()) {
          EXPECT_EQ(s.code(), StatusCode::kNotFound);
          continue;
        }
        ASSERT_TRUE(s.is_ok()) << i << ": " << s.to_string();
        std::vector<uint8_t> want(length);
        for (uint64_t k = 0; k < length; ++k) want[k] = valid[offset + k] ? model[offset + k] : 0;
        ASSERT_EQ(out, want) << "op " << i << " at " << offset << " for " << length;
      } else {
        // A punch, or a truncate (to the end of the space).
        const uint64_t len = op == 8 ? length : kSpace - offset;
        ASSERT_TRUE(io.punch_extent(kOid, "d", "a", offset, len).is_ok()) << i;
        std::fill(valid.begin() + offset, valid.begin() + offset + len, 0);
      }
      ASSERT_EQ(store.at(kOid, "d", "a").end(), model_end()) << "op " << i;
    }
    EXPECT_EQ(io.pending(), 0u);
    // The stored bytes are not the plaintext.
    const Store::Array& stored = store.at(kOid, "d", "a");
    size_t same = 0, held = 0;
    for (size_t k = 0; k < stored.bytes.size(); ++k) {
      if (!stored.valid[k] || !valid[k]) continue;
      ++held;
      same += stored.bytes[k] == model[k];
    }
    EXPECT_GT(held, 10000u);
    EXPECT_LT(same, held / 50);
  }
}

// Writes in flight at once over the same blocks (the first not landed when the next comes) land as if one after
// the other: each later one reads its blocks only once the one before is in.
TEST(SealedIo, OverlappingWritesInFlightTakeTurns) {
  Store store;
  MemArrays raw(store, /*defer=*/true);
  SealedIo io(std::make_shared<StandInSealer>(), "cont", raw, 1000);
  std::vector<uint8_t> model(3 * kSealBlock, 0);
  std::vector<Ticket> tickets;
  const std::pair<uint64_t, uint64_t> writes[] = {{100, 5000}, {4000, 300}, {50, 60}, {8000, 100}, {0, 4096}};
  uint8_t fill = 1;
  for (auto [offset, length] : writes) {
    std::vector<uint8_t> data(length, fill++);
    auto t = io.submit_write(kOid, "d", "a", offset, data);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tickets.push_back(*t);
    std::memcpy(model.data() + offset, data.data(), length);
  }
  std::set<Ticket> left(tickets.begin(), tickets.end());
  while (!left.empty())
    for (const Completion& c : io.poll(8, 10)) {
      EXPECT_TRUE(c.status.is_ok());
      EXPECT_TRUE(left.erase(c.ticket));
    }
  std::vector<uint8_t> out(8100);
  ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());
  model.resize(8100);
  EXPECT_EQ(out, model);
}

// Two handles of one sealer (two threads of a mount) writing bytes of the same blocks at once: each one's bytes
// land; none is lost to the other's read-modify-write.
TEST(SealedIo, TwoHandlesWritingOneBlockLoseNothing) {
  Store store;
  auto sealer = std::make_shared<StandInSealer>();
  constexpr int kSlots = 256;  // 16 bytes each, over one block
  auto writer = [&](int parity) {
    MemArrays raw(store, false);
    SealedIo io(sealer, "cont", raw, 10000);
    for (int slot = parity; slot < kSlots; slot += 2) {
      std::vector<uint8_t> data(16, static_cast<uint8_t>(slot));
      ASSERT_TRUE(write(io, slot * 16, data.data(), 16).is_ok());
    }
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  MemArrays raw(store, false);
  SealedIo io(sealer, "cont", raw, 1000);
  std::vector<uint8_t> out(kSlots * 16);
  ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());
  for (int slot = 0; slot < kSlots; ++slot)
    for (int k = 0; k < 16; ++k) ASSERT_EQ(out[slot * 16 + k], slot) << "slot " << slot;
}

// A write whose records fail to land is sent again while it holds its blocks, so the block stays whole; one that
// fails for good is an error, and its block an error to read, never wrong bytes.
TEST(SealedIo, AHalfOfAWriteThatFailsIsSentAgain) {
  Store store;
  MemArrays raw(store, false);
  SealedIo io(std::make_shared<StandInSealer>(), "cont", raw, 1000);
  std::vector<uint8_t> data(6000, 4), patch(10, 9), out(6000);
  ASSERT_TRUE(write(io, 0, data.data(), data.size()).is_ok());
  store.fail_record_writes = SealedIo::kWriteAttempts - 1;
  ASSERT_TRUE(write(io, 100, patch.data(), patch.size()).is_ok());
  std::copy(patch.begin(), patch.end(), data.begin() + 100);
  ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());
  EXPECT_EQ(out, data);
  store.fail_record_writes = SealedIo::kWriteAttempts;
  EXPECT_EQ(write(io, 200, patch.data(), patch.size()).code(), StatusCode::kTimeout);
  EXPECT_EQ(read(io, 0, out.data(), out.size()).code(), StatusCode::kChecksumMismatch);
  // Written again whole, it is whole.
  ASSERT_TRUE(write(io, 0, data.data(), kSealBlock).is_ok());
  ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());
  EXPECT_EQ(out, data);
  // Records whose send fails at once go when the ciphertext's call has ended; never sent, the write fails.
  store.fail_record_sends = 1;
  ASSERT_TRUE(write(io, 300, patch.data(), patch.size()).is_ok());
  std::copy(patch.begin(), patch.end(), data.begin() + 300);
  ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());
  EXPECT_EQ(out, data);
  store.fail_record_sends = SealedIo::kWriteAttempts;
  EXPECT_EQ(write(io, 400, patch.data(), patch.size()).code(), StatusCode::kShutdown);
}

// Blocks another I/O of this process holds: a writer waits for them (its own completions moving meanwhile), up to
// its timeout, then Busy; readers share them with readers; a closing handle's writes land before it lets go.
TEST(SealedIo, HeldBlocksWaitReadersShareAndACloseDrains) {
  Store store;
  auto sealer = std::make_shared<StandInSealer>();
  MemArrays raw(store, /*defer=*/true);
  SealedIo io(sealer, "cont", raw, 50);
  std::vector<uint8_t> data(kSealBlock, 5), out(kSealBlock);
  ASSERT_TRUE(write(io, 0, data.data(), data.size()).is_ok());
  uint64_t seen = 0;
  const uint64_t array = sealed_array("cont", kOid, "d", "a");
  {
    BlockLocks::Hold reader = sealer->locks().try_lock(array, 0, 1, true, &seen);
    ASSERT_TRUE(reader);
    EXPECT_EQ(write(io, 10, data.data(), 5).code(), StatusCode::kBusy);
    ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());  // beside another reader
    EXPECT_EQ(out, data);
    EXPECT_FALSE(sealer->locks().try_lock(array, 0, 1, false, &seen));
    // A writer kept out keeps new readers out, so that readers one after another cannot keep it out for good.
    BlockLocks::Want want = sealer->locks().want(array, 0, 1);
    EXPECT_FALSE(sealer->locks().try_lock(array, 0, 1, true, &seen));
    EXPECT_TRUE(sealer->locks().try_lock(array, 1, 2, true, &seen));  // other blocks: as before
    want.release();
    EXPECT_TRUE(sealer->locks().try_lock(array, 0, 1, true, &seen));
  }
  // Writes in flight when the handle closes land before it is gone (deferred: they land as taken).
  std::vector<uint8_t> other(kSealBlock, 6);
  {
    SealedIo closing(sealer, "cont", raw, 1000);
    ASSERT_TRUE(closing.submit_write(kOid, "d", "a", kSealBlock, other).is_ok());
    closing.drain(1000);
  }
  EXPECT_EQ(raw.in_flight(), 0u);
  std::vector<uint8_t> both(2 * kSealBlock);
  ASSERT_TRUE(read(io, 0, both.data(), both.size()).is_ok());
  EXPECT_TRUE(std::equal(other.begin(), other.end(), both.begin() + kSealBlock));
  EXPECT_TRUE(sealer->locks().try_lock(array, 0, 2, false, &seen));
}

// A block that does not open is read again (a writer between its halves), and then, still not opening, an error:
// never its bytes.
TEST(SealedIo, ABlockThatDoesNotOpenIsReadAgainThenAnError) {
  Store store;
  MemArrays raw(store, false);
  SealedIo io(std::make_shared<StandInSealer>(), "cont", raw, 1000);
  std::vector<uint8_t> data(10000, 3), out(10000);
  ASSERT_TRUE(write(io, 0, data.data(), data.size()).is_ok());
  store.spoil_records = SealedIo::kReadAttempts - 1;  // the last attempt opens
  ASSERT_TRUE(read(io, 0, out.data(), out.size()).is_ok());
  EXPECT_EQ(out, data);
  store.spoil_records = SealedIo::kReadAttempts;
  std::fill(out.begin(), out.end(), 0);
  EXPECT_EQ(read(io, 0, out.data(), out.size()).code(), StatusCode::kChecksumMismatch);
  // A write that changes such a block only in part cannot keep its other bytes: an error, nothing written.
  store.spoil_records = SealedIo::kReadAttempts;
  const uint64_t end = store.at(kOid, "d", "a").end();
  EXPECT_EQ(write(io, 10, data.data(), 5).code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(store.at(kOid, "d", "a").end(), end);
  // A block moved to another place does not open there.
  Store::Array& a = store.at(kOid, "d", "a");
  Store::Array& r = store.at(kOid, "d", std::string("a") + std::string(kRecordsSuffix));
  std::copy(a.bytes.begin(), a.bytes.begin() + kSealBlock, a.bytes.begin() + kSealBlock);
  std::copy(r.bytes.begin(), r.bytes.begin() + kSealRecord, r.bytes.begin() + kSealRecord);
  EXPECT_EQ(read(io, kSealBlock, out.data(), 10).code(), StatusCode::kChecksumMismatch);
  ASSERT_TRUE(read(io, 0, out.data(), 10).is_ok());
}

}  // namespace
}  // namespace rfos::client
