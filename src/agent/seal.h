// Inline encryption of a tenant's array data in the agent (docs/agent.md, "Inline encryption"): AES-256-GCM
// (OpenSSL EVP, AES-NI where the CPU has it) per 4 KiB block. The ciphertext is stored where the plaintext would
// be (GCM keeps lengths), and each block's nonce, tag and length in a companion array at 32 bytes a block
// (client/sealing.h has the layout; client/sealed_io.h seals arrays at any offset with this cipher).
//
// - Nonces: 4 bytes of agent id, then a 64-bit counter that never repeats for a key: it is taken from ranges
//   reserved in a state file (written and synced before any nonce of a range is used), so a restart, or a crash,
//   continues above everything handed out before. Counter 0 is never used: an all-zero record is a hole.
// - The additional data binds a block to its place: container, object, dkey, akey and block index. A block
//   moved elsewhere, or tampered with, or a tag that does not belong to it, fails to open: an error, never bytes.
// - A single value is sealed whole: its record, then its ciphertext (seal_value), bound to its place as a block
//   of index kValueBlock.
//
// Thread-safety: seal and open from any thread (the counter is atomic; reservations are serialized).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "client/sealing.h"
#include "common/ids.h"
#include "common/status.h"

struct evp_cipher_ctx_st;  // OpenSSL's EVP_CIPHER_CTX

namespace rfos::agent {

using client::kRecordsSuffix;
using client::kSealBlock;
using client::kSealRecord;
using client::SealPlace;

// The record's format byte: 1, the place in the additional data with each key's length (and the data's tag
// "rfos-gcm-v2"); 0, as one string "cont/oid/dkey/akey" ("rfos-gcm-v1"; blocks sealed before 1, which open as they
// were; ambiguous where keys hold '/'). The tags keep a record whose format byte was changed from opening.
inline constexpr uint8_t kSealFormat = 1;
// The block index a single value is sealed under (no array block has it).
inline constexpr uint64_t kValueBlock = ~0ull;

class Sealer : public client::BlockSealer {
 public:
  // `key`: 32 bytes. `state_file`: where the nonce counter's reservations live (made 0600 if missing).
  static Result<std::unique_ptr<Sealer>> open(std::string_view key, const std::string& state_file, uint32_t agent_id);
  ~Sealer() override;

  // Seals blocks from `first_block` of `place` (the array: container, object, dkey, akey): whole ones but the
  // last, which may be shorter (its record keeps its length); `cipher` as long as `plain` (or `plain` itself),
  // `records` kSealRecord a block.
  Status seal(std::span<const uint8_t> plain, const SealPlace& place, uint64_t first_block, std::span<uint8_t> cipher,
              std::span<uint8_t> records) override;
  // Opens whole blocks that seal made into `plain` (or in place), each as long as its record says and zeros after;
  // an all-zero record is a hole and opens as zeros. kChecksumMismatch when a block does not authenticate
  // (tampered, moved, or its record is not its own).
  Status open(std::span<const uint8_t> cipher, std::span<const uint8_t> records, const SealPlace& place,
              uint64_t first_block, std::span<uint8_t> plain) override;
  // A single value, sealed: its record and its ciphertext (kSealRecord bytes longer than `plain`).
  Result<std::string> seal_value(std::string_view plain, const SealPlace& place);
  // The value seal_value made. kChecksumMismatch when it does not authenticate (or is too short to be one).
  Result<std::string> open_value(std::string_view sealed, const SealPlace& place);

  uint64_t next_counter() const { return next_.load(); }  // for tests

 private:
  Sealer() = default;
  Result<uint64_t> take_counter();
  Result<evp_cipher_ctx_st*> context(bool encrypt);  // the calling thread's, keyed with key_
  Status reserve(uint64_t above);

  std::string key_;
  std::string state_file_;
  uint32_t agent_id_ = 0;
  uint64_t id_ = 0;  // this sealer's, unique in the process: whose key a thread's contexts hold
  std::atomic<uint64_t> next_{1};
  std::mutex mu_;
  std::atomic<uint64_t> reserved_{0};  // counters below this may be handed out
};

// The key a tenant key file holds: 32 raw bytes, or 64 hexadecimal digits (a trailing newline allowed).
// kInvalidArgument otherwise; kPermissionDenied when others than its owner may read it.
Result<std::string> load_key_file(const std::string& path);

}  // namespace rfos::agent
