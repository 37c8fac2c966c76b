// Per-tenant QoS in the agent (docs/agent.md, "QoS"): limits (common/rate_limit.h, shared by every app of the
// tenant) and weights (FairShare: what the limits leave is shared between the busy tenants in proportion to
// their weights). Each app's thread asks both before it takes a submission from its ring.
//
// Thread-safety: TenantQos and FairShare from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>

#include "common/rate_limit.h"

namespace rfos::agent {

using ::rfos::QosLimits;
using ::rfos::TenantQos;

// Weighted sharing of what the targets can do, by what each tenant keeps in flight (the agent cannot see the
// targets' capacity, but a target serves what it is sent in turn, so each tenant's throughput follows its share
// of the requests in flight). While more than one tenant has I/O in flight, the agent's `depth` (in cost units,
// cost_of) is divided between them by weight: a tenant may always fill its share; beyond it, only while the
// agent as a whole has less than `depth` in flight. So two tenants that each keep at least their share in
// flight get service in proportion to their weights however many apps and how deep a queue each has, and a
// tenant alone, or one beside a tenant that asks for little, is held by nothing. (SFQ(D)'s bound on depth,
// with shares of it in place of start tags.)
class FairShare {
  struct Tenant;

 public:
  using Member = Tenant*;  // a tenant's place: valid as long as the FairShare

  explicit FairShare(double depth) : depth_(depth) {}
  Member join(double weight);  // weight > 0
  // Takes a request of `cost` for the tenant if its share allows it now; false: it must wait for completions.
  bool take(Member t, double cost);
  void done(Member t, double cost);

  // The cost of one I/O of `bytes`: 1 per request and 1 per 64 KiB, so IOPS-bound and bandwidth-bound tenants
  // are weighed in one unit.
  static double cost_of(uint64_t bytes) { return 1.0 + double(bytes) / 65536.0; }

 private:
  struct Tenant {
    double weight = 1;
    double in_flight = 0;
  };
  const double depth_;
  std::mutex mu_;
  double in_flight_ = 0;
  double busy_weight_ = 0;      // of the tenants with I/O in flight
  std::deque<Tenant> tenants_;  // a deque: joining never moves a tenant
};

}  // namespace rfos::agent
