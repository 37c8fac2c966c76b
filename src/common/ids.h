// Identifiers: 128-bit UUIDs for pools and containers, 128-bit object ids.
//
// Thread-safety: values.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rfos {

struct Uuid {
  std::array<uint8_t, 16> bytes{};

  static Uuid random();
  // Parses the canonical 8-4-4-4-12 hex form; nullopt when malformed.
  static std::optional<Uuid> parse(std::string_view text);
  std::string to_string() const;
  bool is_nil() const;
  auto operator<=>(const Uuid&) const = default;
};

// An object id: 128 bits; the top 8 bits of `hi` name the object class (placement and protection).
struct ObjectId {
  uint64_t hi = 0;
  uint64_t lo = 0;
  auto operator<=>(const ObjectId&) const = default;
  std::string to_string() const;  // "hi.lo" in hex
};

}  // namespace rfos
