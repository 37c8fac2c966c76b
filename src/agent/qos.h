// Per-tenant QoS in the agent (docs/agent.md, "QoS"): limits (common/rate_limit.h, shared by every app of the
// tenant) and weights (FairShare: what the limits leave is shared between the busy tenants in proportion to
// their weights). Each app's thread asks both before it takes a submission from its ring.
//
// Thread-safety: TenantQos and FairShare from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#include "common/rate_limit.h"

namespace rfos::agent {

using ::rfos::QosLimits;
using ::rfos::TenantQos;

// Weighted sharing between tenants: start-time fair queuing with a bound on depth (SFQ(D)). Each tenant has a
// start tag, moved on by cost / weight for every request it sends (cost_of: small and large I/O in one unit).
//  - While other tenants have submissions waiting (in their apps' rings: `watch`), a tenant may send only while
//    its tag is at most `slack` past the lowest of theirs: tenants that keep requests waiting are sent them at
//    rates in proportion to their weights, whatever serves them (the targets, the fabric, the agent's own cores)
//    and however many apps and how deep a queue each has.
//  - While others wait or have I/O in flight, a tenant that has its weighted share of `depth` in flight (among
//    the tenants that wait or have I/O in flight) may send more only while the agent has less than `depth` in
//    flight, so that requests wait here, in the order of their tags, rather than at the targets (which is what
//    keeps tenants waiting, and so their tags in force); below its share it is never held by what another leaves
//    in flight. In flight are at most `depth` and what the tenants below their shares add.
//  - A tenant with nothing waiting has its tag brought up to the agent's virtual time: it banks no credit while
//    idle. A tenant alone, or beside tenants that neither wait nor have I/O in flight, is held by nothing.
//
// Why rates and not shares of what is in flight (as before): a target serves its senders in turn (UCX polls each
// peer's queue), so four apps of one tenant got more of it per request in flight than one app of another, and a
// tenant's completions freed room that the other tenant's threads took before its own thread ran, so weights of
// 1:3 split 4 KiB reads far from 1:3 (docs/BENCHMARKS.md).
//
// What an app's ring says is the app's to write, so an app waits only while its thread in the agent would take
// from its ring now (not while it serves the app's socket, waits for the app to take completions, for blocks
// or for its limits: the agent's `Waiting`), and a tenant whose threads have not asked to take anything for
// kStale is not waited for. A tenant's tag moves on with every request its threads take, so its apps cannot
// hold the others back but by sending requests, at its weight's rate.
class FairShare {
  struct Tenant;

 public:
  using Member = Tenant*;  // a tenant's place: valid as long as the FairShare
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kStale{20};

  // `slack`: how far ahead (in cost units over weight) a tenant may go of those that wait; a wider one wakes held
  // threads less often, for the same split (docs/BENCHMARKS.md). `now`: the clock kStale is measured by (tests
  // give their own).
  explicit FairShare(double depth, double slack = 32, std::function<Clock::time_point()> now = Clock::now)
      : depth_(depth), slack_(slack), now_(std::move(now)) {}
  Member join(double weight);  // weight > 0
  // Takes a request of `cost` for the tenant if its turn allows it now. Else: kFull, the agent has `depth` in
  // flight; kNotYourTurn, others that wait are behind. Either way, wait_turn.
  enum class Take { kTaken, kFull, kNotYourTurn };
  Take take(Member t, double cost);
  // After a refusal: sleeps until the tenants behind have caught up enough that its turn may have come, or
  // another thread's completion leaves the agent less than `depth` in flight (one waiter is woken), or `most`
  // passes: a tenant may stop waiting, which nothing announces, and the caller's own completions wait for it.
  void wait_turn(Member t, std::chrono::microseconds most);
  void done(Member t, double cost);
  // A request taken and then not sent (the tenant's limits held it): as if it had never been taken, but for the
  // time of its take.
  void cancel(Member t, double cost);

  // Whether one of a tenant's apps has submissions waiting for its thread (called under the FairShare's lock,
  // from other apps' threads: it must only read). Watched from the ring's set-up until unwatch(t, app).
  using Waiting = std::function<bool()>;
  void watch(Member t, const void* app, Waiting waiting);
  void unwatch(Member t, const void* app);

  // The cost of one I/O of `bytes`: 1 per request and 1 per 64 KiB, so IOPS-bound and bandwidth-bound tenants
  // are weighed in one unit.
  static double cost_of(uint64_t bytes) { return 1.0 + double(bytes) / 65536.0; }

 private:
  struct Tenant {
    double weight = 1;
    double in_flight = 0;
    double tag = 0;                                     // the start tag of its next request
    Clock::time_point last_ask;                         // when its threads last asked to take one
    std::vector<std::pair<const void*, Waiting>> apps;  // watched
  };
  bool waits(const Tenant& u, Clock::time_point now) const;
  void done_locked(Tenant* t, double cost);
  const double depth_;
  const double slack_;
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  std::condition_variable turn_;
  int waiters_ = 0;                                           // in wait_turn
  double wake_at_ = std::numeric_limits<double>::infinity();  // the lowest waiting tag that may let one of them go
  double in_flight_ = 0;
  double vtime_ = 0;            // the lowest start tag among the tenants that wait, as of the last take
  std::deque<Tenant> tenants_;  // a deque: joining never moves a tenant
};

}  // namespace rfos::agent
