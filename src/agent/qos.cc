#include "agent/qos.h"

#include <algorithm>

namespace rfos::agent {

FairShare::Member FairShare::join(double weight) {
  std::lock_guard lock(mu_);
  Tenant& x = tenants_.emplace_back();
  x.weight = weight > 0 ? weight : 1;
  return &x;
}

bool FairShare::take(Member t, double cost) {
  std::lock_guard lock(mu_);
  bool idle = t->in_flight <= 0;
  double weight = busy_weight_ + (idle ? t->weight : 0);
  bool ok = weight <= t->weight                            // alone
            || t->in_flight < depth_ * t->weight / weight  // within its share
            || in_flight_ < depth_;                        // beyond it, while the agent has room
  if (!ok) return false;
  if (idle) busy_weight_ += t->weight;
  t->in_flight += cost;
  in_flight_ += cost;
  return true;
}

void FairShare::done(Member t, double cost) {
  std::lock_guard lock(mu_);
  t->in_flight -= cost;
  in_flight_ -= cost;
  if (t->in_flight < 1e-9) {  // sums of fractions: the last one out ends the tenant's turn exactly
    in_flight_ -= t->in_flight;
    t->in_flight = 0;
    busy_weight_ -= t->weight;
  }
}

}  // namespace rfos::agent
