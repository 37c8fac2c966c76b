// Sealed arrays: what a client that encrypts its data before it leaves needs to know of the format, and the seam
// where a cipher plugs into a container (ContainerOptions::sealer). The agent's sealing tenants are the one user
// (agent/seal.h has the cipher, docs/agent.md "Inline encryption" the format):
//
// - The ciphertext of an array lies where its plaintext would (same object, dkey, akey, offsets), sealed per
//   4 KiB block; each block's record (nonce, tag, format, length) in a companion array under the akey with
//   kRecordsSuffix, kSealRecord bytes a block. An all-zero record is a hole.
// - A block is whole (4 KiB) but the last of its array, which may be shorter: its record says how long, and the
//   bytes of the block past that length read as zeros. So an array's sealed data ends where its plaintext does,
//   and a file's size, which the targets take from the end of its data, is the same sealed or not.
//
// This header holds no cryptography: the client library knows the layout, the cipher is the caller's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace rfos::client {

inline constexpr size_t kSealBlock = 4096;
// Per block: nonce(12) tag(16) format(1) length(2, LE; 0: a whole block) reserved(1, zero).
inline constexpr size_t kSealRecord = 32;
// The akey of an array's records: the array's akey and this.
inline constexpr std::string_view kRecordsSuffix = "#gcm";

// Where sealed bytes belong: the container, the object and the keys, spelled as each record format spells them.
struct SealPlace {
  std::string cont, oid, dkey, akey;  // oid as ObjectId::to_string gives it
  static SealPlace of(std::string_view cont, const ObjectId& oid, std::string_view dkey, std::string_view akey) {
    return {std::string(cont), oid.to_string(), std::string(dkey), std::string(akey)};
  }
  std::string aad() const;     // record format 1's: container, object, then each key with its length (be16)
  std::string legacy() const;  // format 0's: "cont/oid/dkey/akey"
};

// Blocks of arrays held by the I/O of this process: a sealed write reads the blocks it changes only in part, and
// writes ciphertext and records as two requests, so a writer holds its blocks alone (until both requests are
// done), and readers share theirs (so none meets a block between its two halves).
class BlockLocks {
  struct Held {
    uint64_t array = 0, first = 0, end = 0;
    bool shared = false;
  };

 public:
  // Blocks held (or wanted, below) until the Hold goes (or release()).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& o) noexcept { *this = std::move(o); }
    Hold& operator=(Hold&& o) noexcept;
    ~Hold() { release(); }
    void release();
    explicit operator bool() const { return locks_ != nullptr; }

   private:
    friend class BlockLocks;
    BlockLocks* locks_ = nullptr;
    std::vector<Held>* list_ = nullptr;  // the locks' held_ or wanted_
    Held held_;
  };
  // A writer's wish for blocks others hold: while it lives, no new shared hold of any of them is given, so that
  // readers coming one after another do not keep the writer out for good.
  using Want = Hold;
  // Blocks [first, end) of array `array` (sealed_array), alone or `shared` with other shared holds (and with no
  // writer wanting them), when no one holds any of them otherwise; else an empty Hold, and *seen is the count of
  // releases so far, for wait().
  Hold try_lock(uint64_t array, uint64_t first, uint64_t end, bool shared, uint64_t* seen);
  Want want(uint64_t array, uint64_t first, uint64_t end);
  // Returns after a release past `seen`, or after `timeout`.
  void wait(uint64_t seen, std::chrono::milliseconds timeout);

 private:
  // Takes `h` off `list` (held_ or wanted_): what waited for it may go.
  void drop(std::vector<Held>* list, const Held& h);
  static bool overlap(const Held& a, uint64_t array, uint64_t first, uint64_t end) {
    return a.array == array && a.first < end && first < a.end;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Held> held_;
  std::vector<Held> wanted_;
  uint64_t releases_ = 0;
};

// What BlockLocks know an array by: a hash of its place (never 0).
uint64_t sealed_array(std::string_view cont, const ObjectId& oid, std::string_view dkey, std::string_view akey);

// A cipher for sealed arrays (agent::Sealer). Thread-safe: the containers of many threads share one.
class BlockSealer {
 public:
  virtual ~BlockSealer() = default;
  // Seals plain.size() bytes from block `first_block` of `place`: whole blocks, but the last, which may be shorter
  // (its record keeps its length). `cipher` as long as `plain` (it may be `plain`: sealed in place), `records`
  // kSealRecord a block.
  virtual Status seal(std::span<const uint8_t> plain, const SealPlace& place, uint64_t first_block,
                      std::span<uint8_t> cipher, std::span<uint8_t> records) = 0;
  // Opens whole blocks (cipher.size() a multiple of kSealBlock) into `plain` (it may be `cipher`): each block as
  // long as its record says, zeros after; an all-zero record over all-zero bytes is a hole and opens as zeros.
  // kChecksumMismatch when a block does not authenticate (tampered, moved, or its record is not its own); nothing
  // of that block is left in `plain`.
  virtual Status open(std::span<const uint8_t> cipher, std::span<const uint8_t> records, const SealPlace& place,
                      uint64_t first_block, std::span<uint8_t> plain) = 0;

  BlockLocks& locks() { return locks_; }

 private:
  BlockLocks locks_;
};

// The length a record gives its block (0 for a hole).
uint32_t sealed_length(std::span<const uint8_t> record);
// A record's length field as it is stored (bytes 29-30, LE; 0: a whole block), and its setting.
inline uint16_t length_field(const uint8_t* record) { return static_cast<uint16_t>(record[29] | (record[30] << 8)); }
inline void set_length_field(uint8_t* record, uint16_t length) {
  record[29] = static_cast<uint8_t>(length);
  record[30] = static_cast<uint8_t>(length >> 8);
}

}  // namespace rfos::client
