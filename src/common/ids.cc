#include "common/ids.h"

#include <cstdio>
#include <random>

namespace rfos {

std::mt19937_64 well_seeded_rng() {
  std::random_device dev;
  std::seed_seq seed{dev(), dev(), dev(), dev(), dev(), dev(), dev(), dev()};
  return std::mt19937_64(seed);
}

Uuid Uuid::random() {
  static thread_local std::mt19937_64 rng = well_seeded_rng();
  Uuid u;
  for (int i = 0; i < 16; i += 8) {
    uint64_t r = rng();
    for (int j = 0; j < 8; ++j) u.bytes[i + j] = static_cast<uint8_t>(r >> (8 * j));
  }
  u.bytes[6] = static_cast<uint8_t>((u.bytes[6] & 0x0f) | 0x40);  // version 4
  u.bytes[8] = static_cast<uint8_t>((u.bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  return u;
}

std::optional<Uuid> Uuid::parse(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  Uuid u;
  int nibble = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return std::nullopt;
      continue;
    }
    int v;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'f')
      v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      v = c - 'A' + 10;
    else
      return std::nullopt;
    u.bytes[nibble / 2] = static_cast<uint8_t>(u.bytes[nibble / 2] | (v << (nibble % 2 ? 0 : 4)));
    ++nibble;
  }
  return u;
}

std::string Uuid::to_string() const {
  char buf[37];
  std::snprintf(buf, sizeof(buf), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return buf;
}

bool Uuid::is_nil() const {
  for (uint8_t b : bytes)
    if (b != 0) return false;
  return true;
}

std::string ObjectId::to_string() const {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx.%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

}  // namespace rfos
