#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/fault.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/proc_stat.h"
#include "common/status.h"
#include "common/worker_pool.h"

namespace rfos {
namespace {

TEST(Crc32c, MatchesStandardCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string a = "hello, ", b = "world";
  EXPECT_EQ(crc32c_extend(crc32c(a.data(), a.size()), b.data(), b.size()), crc32c("hello, world", 12));
}

TEST(Crc32c, ChunkLayout) {
  std::vector<uint8_t> data(10000, 7);
  std::vector<uint32_t> crcs;
  chunk_crcs(4000, data, 4096, &crcs);  // [4000, 14000): chunks 0..3
  ASSERT_EQ(crcs.size(), 4u);
  EXPECT_EQ(chunk_count(4000, 10000, 4096), 4u);
  EXPECT_EQ(crcs[0], crc32c(data.data(), 96));
  EXPECT_EQ(crcs[1], crc32c(data.data() + 96, 4096));
  EXPECT_EQ(crcs[3], crc32c(data.data(), 14000 - 12288));
  EXPECT_EQ(chunk_count(0, 0, 4096), 0u);
  EXPECT_EQ(chunk_count(4096, 4096, 4096), 1u);
}

// The prefetch is a hint: the crc is the plain one whatever the limit (behind, at, or far past the end).
TEST(Crc32c, AheadIsThePlainCrc) {
  std::vector<uint8_t> data(3 * 4096 + 5);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  const uint8_t* p = data.data();
  uint32_t want = crc32c(p + 100, 4096);
  EXPECT_EQ(crc32c_ahead(p + 100, 4096, p), want);
  EXPECT_EQ(crc32c_ahead(p + 100, 4096, p + 100 + 4096), want);
  EXPECT_EQ(crc32c_ahead(p + 100, 4096, p + data.size()), want);
  EXPECT_EQ(crc32c_ahead(p, 0, p + data.size()), 0u);
}

TEST(Status, CodesAndMessages) {
  Status ok;
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.to_string(), "OK");
  Status s = error(StatusCode::kNoSpace, "block file full");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.to_string(), "NoSpace: block file full");
  EXPECT_EQ(s.to_errno(), ENOSPC);
  EXPECT_EQ(status_code_name(StatusCode::kChecksumMismatch), "ChecksumMismatch");
}

Result<int> half(int v) {
  if (v % 2) return error(StatusCode::kInvalidArgument, "odd");
  return v / 2;
}
Status use_half(int v, int* out) {
  RFOS_ASSIGN_OR_RETURN(*out, half(v));
  return Status::ok();
}

TEST(Result, ValueOrStatus) {
  int out = 0;
  EXPECT_TRUE(use_half(8, &out).is_ok());
  EXPECT_EQ(out, 4);
  Status s = use_half(3, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(Uuid, RoundTrip) {
  Uuid u = Uuid::random();
  auto parsed = Uuid::parse(u.to_string());
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, u);
  EXPECT_FALSE(Uuid::parse("not-a-uuid").has_value());
  EXPECT_FALSE(Uuid::parse("0123456789abcdef0123456789abcdef0123").has_value());
}

TEST(Coding, BigEndianOrdersNumerically) {
  std::string a, b;
  put_be64(&a, 255);
  put_be64(&b, 256);
  EXPECT_LT(a, b);
  EXPECT_EQ(get_be64(b.data()), 256u);
  ByteReader r(std::string_view("\x01\x00", 2));
  uint32_t v;
  EXPECT_FALSE(r.get_le(&v));
}

TEST(Coding, PrefixSuccessorIsPastEveryStringWithThePrefix) {
  EXPECT_EQ(prefix_successor("a/"), "a0");
  EXPECT_EQ(prefix_successor("a\xff\xff"), "b");
  EXPECT_EQ(prefix_successor("\xff"), "");
}

TEST(Fault, FiresOnNthHitOnce) {
  fault::arm("test.point", 2);
  EXPECT_FALSE(RFOS_FAULT("test.point"));
  EXPECT_TRUE(RFOS_FAULT("test.point"));
  EXPECT_FALSE(RFOS_FAULT("test.point"));
  EXPECT_FALSE(RFOS_FAULT("other"));
  fault::disarm_all();
}

TEST(Log, LevelsByName) {
  for (const char* l : {"trace", "debug", "info", "warn", "error", "off"}) EXPECT_TRUE(log::set_level(l).is_ok()) << l;
  EXPECT_EQ(log::set_level("loud").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(log::set_level("info").is_ok());
}

TEST(WorkerPool, RunsEveryJobAndDrainsBeforeItGoes) {
  std::atomic<int> ran{0};
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  {
    WorkerPool pool(2);
    // Both threads block until released, so the rest queue up; the destructor still runs all of them.
    for (int i = 0; i < 2; ++i)
      pool.post([&] {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return release; });
        ++ran;
      });
    for (int i = 0; i < 100; ++i) pool.post([&] { ++ran; });
    {
      std::lock_guard lock(mu);
      release = true;
    }
    cv.notify_all();
  }
  EXPECT_EQ(ran.load(), 102);
}

}  // namespace
}  // namespace rfos

TEST(ProcStat, FieldsOfALiveProcessAndNoneOfAGoneOne) {
  // This process's start time (22) does not change between reads; its CPU ticks (14, 15) only grow.
  auto first = rfos::proc_stat_fields(getpid(), {22, 14, 15});
  ASSERT_EQ(first.size(), 3u);
  EXPECT_GT(first[0], 0u);
  volatile uint64_t spin = 0;
  for (int i = 0; i < 20000000; ++i) spin = spin + i;
  auto second = rfos::proc_stat_fields(getpid(), {22, 14, 15});
  ASSERT_EQ(second.size(), 3u);
  EXPECT_EQ(second[0], first[0]);
  EXPECT_GE(second[1] + second[2], first[1] + first[2]);
  EXPECT_TRUE(rfos::proc_stat_fields(0x7fffffff, {22}).empty());  // above pid_max: no such process
  EXPECT_TRUE(rfos::proc_stat_fields(getpid(), {999}).empty());   // no such field
}
