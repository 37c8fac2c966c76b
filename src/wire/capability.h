// Capability tokens: what a session may do, signed by the server (HMAC-SHA256 with the server's secret).
//
// The control plane hands one out at connect; every data-plane request carries it and the target verifies it
// (signature, expiry, pool, container, rights) before touching anything. Layout (90 bytes, see
// docs/wire-format.md): version u8 | rights u8 | session 16 | pool 16 | cont 16 | expires_unix_ms u64 LE | hmac 32.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/ids.h"
#include "common/status.h"

namespace rfos::wire {

struct Capability {
  static constexpr uint8_t kVersion = 1;
  static constexpr uint8_t kRead = 1;
  static constexpr uint8_t kWrite = 2;
  static constexpr size_t kEncodedBytes = 90;

  Uuid session;
  Uuid pool;
  Uuid cont;
  uint8_t rights = kRead;
  uint64_t expires_unix_ms = 0;
};

// Signs and encodes. `key` is the server secret (any length; 32 bytes recommended).
std::string encode_capability(const Capability& cap, std::span<const uint8_t> key);
// Decodes without checking the signature or expiry (for logs and fuzzing). kInvalidArgument when malformed.
Result<Capability> decode_capability(std::string_view token);
// Decodes and verifies signature and expiry. Errors: kInvalidArgument (malformed), kPermissionDenied (bad
// signature, unknown version, expired at `now_unix_ms`).
Result<Capability> verify_capability(std::string_view token, std::span<const uint8_t> key, uint64_t now_unix_ms);

}  // namespace rfos::wire
