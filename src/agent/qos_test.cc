// The agent's sharing between tenants by weight against a model of a target: one queue served in turn, apps
// of several tenants with queues of their own. (The limits' buckets: common/rate_limit_test.cc.)
#include "agent/qos.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace rfos::agent {
namespace {

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
