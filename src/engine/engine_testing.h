// Test helpers for the engine: a temporary target directory and small-footprint options.
// Used by the engine's unit, model, crash and media tests.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "engine/engine.h"

// For a test that must act as root (to give a file to another user, or to run as one). CI runs as root: there a
// test that cannot run fails, loudly; on a developer's machine it is skipped, saying why.
#define RFOS_REQUIRE_ROOT(why)                                                  \
  do {                                                                          \
    if (geteuid() != 0) {                                                       \
      if (std::getenv("CI")) FAIL() << "needs root (CI runs as root): " << why; \
      GTEST_SKIP() << "needs root: " << why;                                    \
    }                                                                           \
  } while (0)

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

// One target in a temporary directory with one pool and one container, reopenable (the pool and container
// are created on the first open only).
struct Target {
  explicit Target(uint64_t block_file_bytes = 64ull << 20) : block_file_bytes(block_file_bytes) {}

  // Opens (or reopens) the engine; use with ASSERT_NO_FATAL_FAILURE.
  void open() {
    engine.reset();
    auto e = Engine::open(small_options(dir.path(), block_file_bytes));
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    engine = std::move(e).value();
    if (cid == 0) {
      ASSERT_TRUE(engine->pool_create(pool).is_ok());
      ASSERT_TRUE(engine->cont_create(pool, cont, {}).is_ok());
    }
    auto info = engine->cont_open(pool, cont);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    cid = info->id;
  }

  uint64_t block_file_bytes;
  TempDir dir;
  std::unique_ptr<Engine> engine;
  Uuid pool = Uuid::random();
  Uuid cont = Uuid::random();
  uint32_t cid = 0;
};

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
