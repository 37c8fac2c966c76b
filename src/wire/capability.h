// Capability tokens: what a session may do, signed by the server (HMAC-SHA256 with the server's secret).
//
// The control plane hands one out at connect; every data-plane request carries it and the target verifies it
// (signature, expiry, pool, container, rights) before touching anything. Layout (see docs/wire-format.md):
// version u8 | rights u8 | session 16 | pool 16 | cont 16 | expires_unix_ms u64 LE | [qos 40] | hmac 32; version 1
// (90 bytes) without QoS, version 2 (130 bytes) with the limits of the tenant a trusted agent opened it for:
// qos key 16 | iops u32 | burst_ios u32 | bytes_per_s u64 | burst_bytes u64 (LE; 0: no limit / the default burst).
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

// A tenant's limits, which every target enforces on the requests of every session that carries the same key
// (whichever agent opened it): the paper's QoS tokens.
struct CapabilityQos {
  Uuid key;  // the tenant's, as the agent named it (qos_key_of)
  uint32_t iops = 0;
  uint32_t burst_ios = 0;
  uint64_t bytes_per_s = 0;
  uint64_t burst_bytes = 0;
  bool limited() const { return iops > 0 || bytes_per_s > 0; }
  bool operator==(const CapabilityQos&) const = default;
};

// The key of a tenant's limits: its name hashed, so every agent that names the tenant the same way shares them.
Uuid qos_key_of(std::string_view tenant);

struct Capability {
  static constexpr uint8_t kVersion = 1;
  static constexpr uint8_t kVersionWithQos = 2;
  static constexpr uint8_t kRead = 1;
  static constexpr uint8_t kWrite = 2;
  static constexpr size_t kEncodedBytes = 90;
  static constexpr size_t kEncodedBytesWithQos = 130;

  Uuid session;
  Uuid pool;
  Uuid cont;
  uint8_t rights = kRead;
  uint64_t expires_unix_ms = 0;
  CapabilityQos qos;  // encoded only when limited()
};

// Signs and encodes. `key` is the server secret (any length; 32 bytes recommended).
std::string encode_capability(const Capability& cap, std::span<const uint8_t> key);
// Decodes without checking the signature or expiry (for logs and fuzzing). kInvalidArgument when malformed.
Result<Capability> decode_capability(std::string_view token);
// Decodes and verifies signature and expiry. Errors: kInvalidArgument (malformed), kPermissionDenied (bad
// signature, unknown version, expired at `now_unix_ms`).
Result<Capability> verify_capability(std::string_view token, std::span<const uint8_t> key, uint64_t now_unix_ms);

}  // namespace rfos::wire
