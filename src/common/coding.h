// Fixed-width big-endian encoding for keys (so byte order is numeric order) and little-endian for values.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rfos {

inline void put_be64(std::string* dst, uint64_t v) {
  char b[8];
  for (int i = 7; i >= 0; --i, v >>= 8) b[i] = static_cast<char>(v & 0xff);
  dst->append(b, 8);
}
inline void put_be32(std::string* dst, uint32_t v) {
  char b[4];
  for (int i = 3; i >= 0; --i, v >>= 8) b[i] = static_cast<char>(v & 0xff);
  dst->append(b, 4);
}
inline void put_be16(std::string* dst, uint16_t v) {
  dst->push_back(static_cast<char>(v >> 8));
  dst->push_back(static_cast<char>(v & 0xff));
}
inline uint64_t get_be64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline uint32_t get_be32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline uint16_t get_be16(const char* p) {
  return static_cast<uint16_t>((static_cast<uint8_t>(p[0]) << 8) | static_cast<uint8_t>(p[1]));
}

template <typename T>
inline void put_le(std::string* dst, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  dst->append(reinterpret_cast<const char*>(&v), sizeof(T));  // x86-64 and arm64 are little-endian
}

// Bounds-checked reader over bytes from disk or the wire: every get fails (returns false) instead of
// reading past the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  template <typename T>
  bool get_le(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool get_bytes(size_t n, std::string_view* out) {
    if (in_.size() < n) return false;
    *out = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  size_t remaining() const { return in_.size(); }

 private:
  std::string_view in_;
};

// The smallest string greater than every string with this prefix ("" when there is none: all 0xff bytes).
inline std::string prefix_successor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(s.back());
    if (c != 0xff) {
      ++c;
      return s;
    }
    s.pop_back();
  }
  return s;
}

}  // namespace rfos
