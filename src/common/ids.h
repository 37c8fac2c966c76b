// Identifiers: 128-bit UUIDs for pools and containers, 128-bit object ids.
//
// Thread-safety: values.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace rfos {

// A generator seeded with 256 bits from the system (eight std::random_device words), for ids that must not repeat
// across processes. `std::mt19937_64 rng{std::random_device{}()}` takes one 32-bit word, so processes draw from
// one of 2^32 streams, and two of many could make the same object ids (a file's inode written over another's).
// Not for secrets: its output reveals its state (those take RAND_bytes).
std::mt19937_64 well_seeded_rng();

struct Uuid {
  std::array<uint8_t, 16> bytes{};

  static Uuid random();
  // Parses the canonical 8-4-4-4-12 hex form; nullopt when malformed.
  static std::optional<Uuid> parse(std::string_view text);
  std::string to_string() const;
  bool is_nil() const;
  auto operator<=>(const Uuid&) const = default;
};

// An object id: 128 bits; the top 8 bits of `hi` name the object class (placement and protection), of which the
// highest says how the engine keeps the object's dkeys (kOrderedDkeys).
struct ObjectId {
  // The object's dkeys are kept in byte order, so a listing of them comes sorted and may start at any key and stop
  // at the end of a prefix (a name index); such dkeys may not hold a NUL byte. Other objects' dkeys are ordered by
  // length first. Part of the id, so fixed for the object's life.
  static constexpr uint64_t kOrderedDkeys = 1ull << 63;

  uint64_t hi = 0;
  uint64_t lo = 0;
  auto operator<=>(const ObjectId&) const = default;
  std::string to_string() const;  // "hi.lo" in hex
  bool ordered_dkeys() const { return (hi & kOrderedDkeys) != 0; }
};

}  // namespace rfos
