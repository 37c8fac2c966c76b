// Test helpers for the engine: a temporary target directory and small-footprint options.
// Used by the engine's unit, model, crash and space tests and by the benchmark's self-check.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/engine.h"

namespace rfos::engine::testing {

// A fresh directory under $TMPDIR (default /tmp... but the build tree's file system is preferred, since
// tmpfs has no O_DIRECT); removed on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("RFOS_TEST_DIR");
    std::string tmpl = std::string(base ? base : "/var/tmp") + "/rfos-test-XXXXXX";
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline EngineOptions small_options(const std::string& dir, uint64_t block_file_bytes = 64ull << 20) {
  EngineOptions o;
  o.dir = dir;
  o.block_file_bytes = block_file_bytes;
  o.arena_bytes = 32ull << 20;
  o.io_queue_depth = 32;
  return o;
}

inline std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Deterministic content for (tag, length): the same inputs always give the same bytes.
inline std::string pattern(uint64_t tag, size_t len) {
  std::string s(len, '\0');
  uint64_t x = tag * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < len; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

}  // namespace rfos::engine::testing
