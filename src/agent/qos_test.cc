// The agent's sharing between tenants by weight against a model of a target: one queue served in turn, apps
// of several tenants with queues of their own. (The limits' buckets: common/rate_limit_test.cc.)
#include "agent/qos.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <functional>
#include <vector>

namespace rfos::agent {
namespace {

// A model of apps sharing a target through the agent: each app keeps `depth` requests submitted (in its ring
// until its thread in the agent takes them, then in flight); the target serves `per_tick` cost units a tick,
// what it was sent in turn (kFifo) or its senders in turn, one request of each app at a time (kSenders: UCX
// polls each peer's queue). An app's thread takes what FairShare allows on the ticks it runs (every
// `every`-th: a thread short of CPU). Returns the requests each tenant had served over `ticks` after a warm-up.
struct ModelApp {
  int tenant;
  int depth;
  uint64_t bytes = 4096;
  int every = 1;
  int in_ring = 0;
  std::deque<double> sent{};  // its requests at the target (kSenders)
};
enum class Service { kFifo, kSenders };

// A clock for FairShare that moves only when told: the model's ticks take no time.
struct ModelClock {
  FairShare::Clock::time_point now = FairShare::Clock::time_point{} + std::chrono::hours(1);
  std::function<FairShare::Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

std::vector<double> served(FairShare& share, const std::vector<FairShare::Member>& members, std::vector<ModelApp> apps,
                           double per_tick, int ticks, Service service = Service::kFifo) {
  struct InFlight {
    size_t app;
    double cost;
  };
  std::deque<InFlight> target;
  std::vector<double> done(members.size(), 0);
  double budget = 0;
  for (ModelApp& a : apps) {
    a.in_ring = a.depth;
    share.watch(members[static_cast<size_t>(a.tenant)], &a, [&a] { return a.in_ring > 0; });
  }
  size_t next_sender = 0;
  auto complete = [&](size_t i, double cost, int tick) {
    ModelApp& a = apps[i];
    share.done(members[static_cast<size_t>(a.tenant)], cost);
    ++a.in_ring;  // the app submits its next at once
    if (tick >= 1000) done[static_cast<size_t>(a.tenant)] += 1;
  };
  for (int tick = 0; tick < ticks + 1000; ++tick) {
    // Each app's thread that runs this tick takes what its turn allows, starting with a different app each tick.
    for (size_t k = 0; k < apps.size(); ++k) {
      size_t i = (k + static_cast<size_t>(tick)) % apps.size();
      ModelApp& a = apps[i];
      if (tick % a.every != 0) continue;
      double cost = FairShare::cost_of(a.bytes);
      while (a.in_ring > 0 && share.take(members[static_cast<size_t>(a.tenant)], cost) == FairShare::Take::kTaken) {
        --a.in_ring;
        if (service == Service::kFifo)
          target.push_back({i, cost});
        else
          a.sent.push_back(cost);
      }
    }
    budget += per_tick;
    if (service == Service::kFifo) {
      while (!target.empty() && budget >= target.front().cost) {
        InFlight f = target.front();
        target.pop_front();
        budget -= f.cost;
        complete(f.app, f.cost, tick);
      }
      if (target.empty()) budget = 0;
    } else {
      size_t idle = 0;
      while (idle < apps.size()) {
        size_t i = next_sender++ % apps.size();
        if (apps[i].sent.empty()) {
          ++idle;
          continue;
        }
        if (budget < apps[i].sent.front()) break;
        idle = 0;
        double cost = apps[i].sent.front();
        apps[i].sent.pop_front();
        budget -= cost;
        complete(i, cost, tick);
      }
      if (idle == apps.size()) budget = 0;
    }
  }
  for (ModelApp& a : apps) share.unwatch(members[static_cast<size_t>(a.tenant)], &a);
  return done;
}

// Takes requests of cost 1 for `t` until refused, or `most` were taken: how many it took.
int take_all(FairShare& share, FairShare::Member t, int most = 10000) {
  int took = 0;
  while (took < most && share.take(t, 1) == FairShare::Take::kTaken) ++took;
  return took;
}

// Two tenants of weight 1 (a and b) on a FairShare of `depth` and slack 8 with a model clock; b's one app has
// submissions waiting while b_waits > 0.
struct TwoTenants {
  explicit TwoTenants(double depth) : share(depth, 8, clock.fn()), a(share.join(1)), b(share.join(1)) {
    share.watch(b, &b_waits, [this] { return b_waits > 0; });
  }
  ~TwoTenants() { share.unwatch(b, &b_waits); }
  ModelClock clock;
  FairShare share;
  FairShare::Member a, b;
  int b_waits = 0;
};

TEST(FairShare, TwoTenantsOfEqualWeightGetHalfEachWhateverTheirAppsAndDepths) {
  ModelClock share_clock;  // no real time passes between the model's ticks
  FairShare share(64, 32, share_clock.fn());
  std::vector<FairShare::Member> m = {share.join(1), share.join(1)};
  // Tenant 0: four apps at depth 64; tenant 1: one app at depth 32 (its half of the agent's 64).
  auto d = served(share, m, {{0, 64}, {0, 64}, {0, 64}, {0, 64}, {1, 32}}, 4.0, 20000);
  double total = d[0] + d[1];
  EXPECT_GT(total, 4.0 * 20000 / 1.0625 * 0.99);  // the target was kept busy
  EXPECT_NEAR(d[1] / total, 0.5, 0.05) << d[0] << " against " << d[1];
}

TEST(FairShare, WeightsSetTheShares) {
  ModelClock share_clock;  // no real time passes between the model's ticks
  FairShare share(64, 32, share_clock.fn());
  std::vector<FairShare::Member> m = {share.join(3), share.join(1)};
  auto d = served(share, m, {{0, 64}, {1, 64}, {1, 64}}, 4.0, 20000);
  EXPECT_NEAR(d[0] / (d[0] + d[1]), 0.75, 0.075) << d[0] << " against " << d[1];
  // In bytes too: a tenant of 1 MiB requests against one of 4 KiB, equal weights, get equal cost units.
  ModelClock bytes_clock;  // no real time passes between the model's ticks
  FairShare bytes(128, 32, bytes_clock.fn());
  std::vector<FairShare::Member> n = {bytes.join(1), bytes.join(1)};
  ModelApp large{0, 8, 1 << 20};
  auto e = served(bytes, n, {large, {1, 128}}, 2.0, 100000);
  double large_units = e[0] * FairShare::cost_of(1 << 20), small_units = e[1] * FairShare::cost_of(4096);
  EXPECT_NEAR(large_units / (large_units + small_units), 0.5, 0.05) << e[0] << " against " << e[1];
}

// What a share of the requests in flight could not hold (docs/BENCHMARKS.md): a target that serves its senders
// in turn, where one tenant has four apps and the other one, and a thread short of CPU.
TEST(FairShare, WeightsHoldWhenTheTargetServesSendersInTurnOrAThreadIsSlow) {
  for (int every : {1, 3}) {
    ModelClock share_clock;  // no real time passes between the model's ticks
    FairShare share(128, 32, share_clock.fn());
    std::vector<FairShare::Member> m = {share.join(1), share.join(3)};
    ModelApp one{1, 256};
    one.every = every;
    auto d = served(share, m, {{0, 64}, {0, 64}, {0, 64}, {0, 64}, one}, 8.0, 20000, Service::kSenders);
    EXPECT_NEAR(d[0] / (d[0] + d[1]), 0.25, 0.025) << "every " << every << ": " << d[0] << " against " << d[1];
    EXPECT_GT(d[0] + d[1], 8.0 * 20000 / 1.0625 * 0.9);  // and the target was kept busy
  }
}

TEST(FairShare, ATenantAloneOrBesideOneThatAsksLittleIsNotHeld) {
  TwoTenants t(16);
  FairShare& share = t.share;
  FairShare::Member a = t.a, b = t.b;
  int& b_waits = t.b_waits;
  EXPECT_EQ(take_all(share, a, 1000), 1000);  // alone: no bound
  for (int i = 0; i < 1000; ++i) share.done(a, 1);
  // Beside a tenant with I/O in flight and nothing waiting, the other may fill the agent's depth.
  ASSERT_EQ(share.take(b, 1), FairShare::Take::kTaken);
  EXPECT_EQ(take_all(share, a), 15);
  EXPECT_EQ(share.take(a, 1), FairShare::Take::kFull);
  for (int i = 0; i < 15; ++i) share.done(a, 1);
  // Once the other has submissions waiting, the one ahead goes about the slack (8) past it ...
  b_waits = 1;
  int took = take_all(share, a);
  EXPECT_GE(took, 7);
  EXPECT_LE(took, 9);
  EXPECT_EQ(share.take(a, 1), FairShare::Take::kNotYourTurn);
  for (int i = 0; i < took; ++i) share.done(a, 1);  // (so that the depth holds nothing below)
  // ... then one more for each of the other's (equal weights).
  ASSERT_EQ(share.take(b, 1), FairShare::Take::kTaken);
  took = take_all(share, a);
  EXPECT_GE(took, 1);
  EXPECT_LE(took, 2);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(share.take(b, 1), FairShare::Take::kTaken);
    EXPECT_EQ(take_all(share, a), 1) << i;
  }
  for (int i = 0; i < took + 3; ++i) share.done(a, 1);
  for (int i = 0; i < 5; ++i) share.done(b, 1);
  // A tenant that stops waiting banks no credit: while it is idle its tag comes up with the other's, so when it
  // waits again the other still goes about the slack past it, not nothing.
  b_waits = 0;
  EXPECT_EQ(take_all(share, a, 100), 100);
  for (int i = 0; i < 100; ++i) share.done(a, 1);
  b_waits = 1;
  ASSERT_EQ(share.take(b, 1), FairShare::Take::kTaken);
  took = take_all(share, a);
  EXPECT_GE(took, 8);
  EXPECT_LE(took, 10);
}

// The depth holds a tenant only beyond its weighted share of it: one whose I/O sits in flight (its thread busy
// elsewhere) cannot keep another from its share, and no tenant goes past the depth and its own share.
TEST(FairShare, TheDepthHoldsATenantOnlyBeyondItsShare) {
  TwoTenants t(4);
  FairShare& share = t.share;
  FairShare::Member x = t.a, y = t.b;
  EXPECT_EQ(take_all(share, x, 100), 100);  // alone: no bound
  for (int i = 0; i < 96; ++i) share.done(x, 1);
  // x has the depth in flight and asks for no more; y, once it waits, still gets its half of it ...
  t.b_waits = 1;
  EXPECT_EQ(take_all(share, y), 2);
  EXPECT_EQ(share.take(y, 1), FairShare::Take::kFull);
  // ... and x, past its share, is held.
  EXPECT_EQ(share.take(x, 1), FairShare::Take::kFull);
  // Both waiting: each fills what the depth leaves, then its share, no more.
  int x_waits = 1;
  share.watch(x, &x_waits, [&x_waits] { return x_waits > 0; });
  for (int i = 0; i < 4; ++i) share.done(x, 1);
  for (int i = 0; i < 2; ++i) share.done(y, 1);
  EXPECT_EQ(take_all(share, x), 4);
  EXPECT_EQ(take_all(share, y), 2);
  EXPECT_EQ(share.take(x, 1), FairShare::Take::kFull);
  share.unwatch(x, &x_waits);
}

// A tenant whose rings say they wait while its threads take nothing (a hostile app, or a thread busy elsewhere)
// holds the others back for kStale at most; a request its limits held costs it nothing.
TEST(FairShare, RingsThatSayTheyWaitHoldTheOthersForLittleAndACancelCostsNothing) {
  {
    TwoTenants t(64);
    t.b_waits = 1;
    ASSERT_EQ(t.share.take(t.b, 1), FairShare::Take::kTaken);  // b takes once, then nothing, its ring still "full"
    t.share.done(t.b, 1);
    EXPECT_EQ(take_all(t.share, t.a), 10);  // its tag from b's start tag (0) to 1 + 8 + 1 past it
    t.clock.now += FairShare::kStale + std::chrono::milliseconds(1);
    EXPECT_EQ(take_all(t.share, t.a, 100), 100);
  }
  // A take its limits then held back (cancel) leaves its tag as it was.
  TwoTenants t(64);
  t.b_waits = 1;
  ASSERT_EQ(t.share.take(t.b, 1), FairShare::Take::kTaken);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(t.share.take(t.a, 1), FairShare::Take::kTaken) << i;
    t.share.cancel(t.a, 1);
  }
  EXPECT_EQ(take_all(t.share, t.a), 10);
}

}  // namespace
}  // namespace rfos::agent
