// Rate limits on a clock the test drives: the rate held over a simulated second, bursts, the two buckets
// together, large requests.
#include "common/rate_limit.h"

#include <gtest/gtest.h>

namespace rfos {
namespace {

constexpr uint64_t kSecond = 1000000000;

// Admitted I/Os of `bytes` over `seconds` of an app that always has one more to send, asking again when told.
uint64_t run(TenantQos& q, uint64_t bytes, double seconds, uint64_t start = 0) {
  uint64_t now = start, end = start + static_cast<uint64_t>(seconds * kSecond), n = 0;
  while (now < end) {
    uint64_t wait = q.admit(bytes, now);
    if (wait == 0)
      ++n;
    else
      now += wait;
  }
  return n;
}

TEST(Qos, AnIopsLimitHoldsOverTimeAfterItsBurst) {
  QosLimits l;
  l.iops = 1000;
  l.burst_ios = 10;
  TenantQos q(l, 0);
  uint64_t n = run(q, 4096, 5.0);
  EXPECT_GE(n, 5000u);
  EXPECT_LE(n, 5000u + 10 + 1);  // the rate, and the burst once
}

TEST(Qos, AByteLimitHoldsWhateverTheRequestSize) {
  QosLimits l;
  l.bytes_per_s = 100 << 20;  // 100 MiB/s
  TenantQos q(l, 0);
  uint64_t n = run(q, 1 << 20, 4.0);
  EXPECT_GE(n, 400u);
  EXPECT_LE(n, 400u + 10 + 1);  // the default burst: a tenth of a second's worth
  TenantQos small(l, 0);
  uint64_t m = run(small, 4096, 1.0);
  EXPECT_NEAR(double(m), (100 << 20) / 4096.0 * 1.1, 2.0);  // a second's worth and the burst
}

TEST(Qos, TheTighterOfTheTwoLimitsBinds) {
  QosLimits l;
  l.iops = 100;
  l.bytes_per_s = 1 << 30;
  TenantQos q(l, 0);
  EXPECT_LE(run(q, 4096, 2.0), 200u + 10 + 1);
  QosLimits b;
  b.iops = 1e6;
  b.bytes_per_s = 10 << 20;
  TenantQos r(b, 0);
  EXPECT_LE(run(r, 1 << 20, 2.0), 20u + 1 + 1);
}

TEST(Qos, ARequestLargerThanTheBurstGoesWhenTheBucketIsFullAndIsPaidForAfter) {
  QosLimits l;
  l.bytes_per_s = 1 << 20;
  l.burst_bytes = 64 << 10;
  TenantQos q(l, 0);
  EXPECT_EQ(q.admit(1 << 20, 0), 0u);  // the bucket is full: it goes, leaving a debt of 960 KiB
  uint64_t wait = q.admit(4096, 0);
  EXPECT_GT(wait, kSecond * 9 / 10);  // about a second before anything more
  EXPECT_EQ(q.admit(4096, wait + kSecond / 10), 0u);
}

TEST(Qos, NoLimitsAdmitEverything) {
  TenantQos q(QosLimits{}, 0);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(q.admit(1 << 20, 0), 0u);
}

}  // namespace
}  // namespace rfos
