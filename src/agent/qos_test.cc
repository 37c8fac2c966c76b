// The agent's per-tenant limits on a clock the test drives: the rate held over a simulated second, bursts, the
// two buckets together, large requests. Its sharing by weight against a model of a target: one queue served in
// turn, apps of several tenants with queues of their own.
#include "agent/qos.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace rfos::agent {
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

// A model of apps sharing a target through the agent: each app keeps `depth` requests submitted (in its ring
// until the agent takes them, then in flight); the target serves what it was sent in turn, `per_tick` cost
// units a tick. Returns the requests each tenant had served over `ticks` after a warm-up.
struct ModelApp {
  int tenant;
  int depth;
  uint64_t bytes = 4096;
  int in_ring = 0;
};

std::vector<double> served(FairShare& share, const std::vector<FairShare::Member>& members, std::vector<ModelApp> apps,
                           double per_tick, int ticks) {
  struct InFlight {
    size_t app;
    double cost;
  };
  std::deque<InFlight> target;
  std::vector<double> done(members.size(), 0);
  double budget = 0;
  for (ModelApp& a : apps) a.in_ring = a.depth;
  for (int tick = 0; tick < ticks + 1000; ++tick) {
    // Each app's thread takes what its share allows, starting with a different app every tick.
    for (size_t k = 0; k < apps.size(); ++k) {
      size_t i = (k + static_cast<size_t>(tick)) % apps.size();
      ModelApp& a = apps[i];
      double cost = FairShare::cost_of(a.bytes);
      while (a.in_ring > 0 && share.take(members[static_cast<size_t>(a.tenant)], cost)) {
        --a.in_ring;
        target.push_back({i, cost});
      }
    }
    for (budget += per_tick; !target.empty() && budget >= target.front().cost;) {
      InFlight f = target.front();
      target.pop_front();
      budget -= f.cost;
      ModelApp& a = apps[f.app];
      share.done(members[static_cast<size_t>(a.tenant)], f.cost);
      ++a.in_ring;  // the app submits its next at once
      if (tick >= 1000) done[static_cast<size_t>(a.tenant)] += 1;
    }
    if (target.empty()) budget = 0;
  }
  return done;
}

TEST(FairShare, TwoTenantsOfEqualWeightGetHalfEachWhateverTheirAppsAndDepths) {
  FairShare share(64);
  std::vector<FairShare::Member> m = {share.join(1), share.join(1)};
  // Tenant 0: four apps at depth 64; tenant 1: one app at depth 32 (its share of the agent's 64).
  auto d = served(share, m, {{0, 64}, {0, 64}, {0, 64}, {0, 64}, {1, 32}}, 4.0, 20000);
  double total = d[0] + d[1];
  EXPECT_GT(total, 4.0 * 20000 / 1.0625 * 0.99);  // the target was kept busy
  EXPECT_NEAR(d[1] / total, 0.5, 0.05) << d[0] << " against " << d[1];
}

TEST(FairShare, WeightsSetTheShares) {
  FairShare share(64);
  std::vector<FairShare::Member> m = {share.join(3), share.join(1)};
  auto d = served(share, m, {{0, 64}, {1, 64}, {1, 64}}, 4.0, 20000);
  EXPECT_NEAR(d[0] / (d[0] + d[1]), 0.75, 0.075) << d[0] << " against " << d[1];
  // In bytes too: a tenant of 1 MiB requests against one of 4 KiB, equal weights, get equal cost units.
  FairShare bytes(128);
  std::vector<FairShare::Member> n = {bytes.join(1), bytes.join(1)};
  ModelApp large{0, 8, 1 << 20};
  auto e = served(bytes, n, {large, {1, 128}}, 2.0, 100000);
  double large_units = e[0] * FairShare::cost_of(1 << 20), small_units = e[1] * FairShare::cost_of(4096);
  EXPECT_NEAR(large_units / (large_units + small_units), 0.5, 0.05) << e[0] << " against " << e[1];
}

TEST(FairShare, ATenantAloneOrBesideOneThatAsksLittleIsNotHeld) {
  FairShare share(16);
  std::vector<FairShare::Member> m = {share.join(1), share.join(1)};
  FairShare::Member a = m[0];
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(share.take(a, 1)) << i;  // alone: far past the depth
  for (int i = 0; i < 1000; ++i) share.done(a, 1);
  // Beside a tenant with one request in flight, the other may fill what the agent has room for.
  ASSERT_TRUE(share.take(m[1], 1));
  int took = 0;
  while (share.take(a, 1)) ++took;
  EXPECT_EQ(took, 15);
  // And the small one may always fill its own share.
  for (int i = 1; i < 8; ++i) EXPECT_TRUE(share.take(m[1], 1)) << i;
  EXPECT_FALSE(share.take(m[1], 1));
  // When it is done, its weight no longer counts.
  for (int i = 0; i < 8; ++i) share.done(m[1], 1);
  EXPECT_TRUE(share.take(a, 1));
}

}  // namespace
}  // namespace rfos::agent
