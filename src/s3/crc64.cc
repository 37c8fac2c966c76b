#include "s3/crc64.h"

#include <array>
#include <cstring>

namespace rfos::s3 {

namespace {

constexpr uint64_t kReflectedPoly = kCrc64NvmePoly;  // 0xAD93D23594C93659, bits reversed

// tables[k][b]: the CRC of byte b followed by k zero bytes.
const std::array<std::array<uint64_t, 256>, 8>& tables() {
  static const auto t = [] {
    std::array<std::array<uint64_t, 256>, 8> t{};
    for (uint64_t b = 0; b < 256; ++b) {
      uint64_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kReflectedPoly : 0);
      t[0][b] = c;
    }
    for (size_t k = 1; k < 8; ++k)
      for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    return t;
  }();
  return t;
}

}  // namespace

uint64_t crc64nvme(uint64_t crc, const void* data, size_t n) {
  const auto& t = tables();
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts (x86-64, arm64 as Debian runs them)
    c ^= w;
    c = t[7][c & 0xff] ^ t[6][(c >> 8) & 0xff] ^ t[5][(c >> 16) & 0xff] ^ t[4][(c >> 24) & 0xff] ^
        t[3][(c >> 32) & 0xff] ^ t[2][(c >> 40) & 0xff] ^ t[1][(c >> 48) & 0xff] ^ t[0][c >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
  return ~c;
}

namespace {

// A linear map over GF(2) of `width`-bit vectors: column i is the image of bit i.
using Gf2Matrix = std::array<uint64_t, 64>;

uint64_t times(const Gf2Matrix& m, uint64_t v) {
  uint64_t sum = 0;
  for (int i = 0; v != 0; ++i, v >>= 1)
    if (v & 1) sum ^= m[i];
  return sum;
}

void square(Gf2Matrix* out, const Gf2Matrix& m, int width) {
  for (int i = 0; i < width; ++i) (*out)[i] = times(m, m[i]);
}

}  // namespace

uint64_t crc_combine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b, uint64_t poly, int width) {
  if (len_b == 0) return crc_a;
  Gf2Matrix odd{}, even{};
  odd[0] = poly;  // one zero bit shifted in
  for (int i = 1; i < width; ++i) odd[i] = uint64_t{1} << (i - 1);
  square(&even, odd, width);  // two zero bits
  square(&odd, even, width);  // four
  // Each step squares once more (8, 16, 32, ... zero bits) and applies the map where len_b has that bit.
  do {
    square(&even, odd, width);
    if (len_b & 1) crc_a = times(even, crc_a);
    len_b >>= 1;
    if (len_b == 0) break;
    square(&odd, even, width);
    if (len_b & 1) crc_a = times(odd, crc_a);
    len_b >>= 1;
  } while (len_b != 0);
  return crc_a ^ crc_b;
}

}  // namespace rfos::s3
