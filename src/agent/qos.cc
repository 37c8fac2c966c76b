#include "agent/qos.h"

#include <algorithm>
#include <limits>

namespace rfos::agent {

FairShare::Member FairShare::join(double weight) {
  std::lock_guard lock(mu_);
  Tenant& x = tenants_.emplace_back();
  x.weight = weight > 0 ? weight : 1;
  x.tag = vtime_;
  return &x;
}

// A tenant whose threads have not asked for kStale is not waited for, whatever its rings say (one that has just
// come is not either, until it first asks: its tag starts at the virtual time, so that ask is not held).
bool FairShare::waits(const Tenant& u, Clock::time_point now) const {
  if (now - u.last_ask > kStale) return false;
  return std::any_of(u.apps.begin(), u.apps.end(), [](const auto& a) { return a.second(); });
}

FairShare::Take FairShare::take(Member t, double cost) {
  std::lock_guard lock(mu_);
  const Clock::time_point now = now_();
  t->last_ask = now;
  double lowest = std::numeric_limits<double>::infinity();  // of the others that wait
  double weight = t->weight;                                // of the tenants that wait or have I/O in flight
  bool others = false;
  for (Tenant& u : tenants_) {
    if (&u == t) continue;
    const bool waiting = waits(u, now);
    if (waiting) {
      lowest = std::min(lowest, u.tag);
    } else {
      u.tag = std::max(u.tag, vtime_);  // no credit for what it did not ask
    }
    if (waiting || u.in_flight > 0) {
      others = true;
      weight += u.weight;
    }
  }
  if (t->tag > lowest + slack_) return Take::kNotYourTurn;
  // Within its weighted share of the depth a tenant is never held by what the others have in flight (a tenant
  // whose thread is busy elsewhere may leave its own there for long).
  if (others && in_flight_ >= depth_ && t->in_flight >= depth_ * t->weight / weight) return Take::kFull;
  vtime_ = std::max(vtime_, std::min(t->tag, lowest));
  t->tag = std::max(t->tag, vtime_) + cost / t->weight;
  t->in_flight += cost;
  in_flight_ += cost;
  if (waiters_ > 0 && std::min(t->tag, lowest) >= wake_at_) {
    wake_at_ = std::numeric_limits<double>::infinity();
    turn_.notify_all();
  }
  return Take::kTaken;
}

void FairShare::wait_turn(Member t, std::chrono::microseconds most) {
  std::unique_lock lock(mu_);
  wake_at_ = std::min(wake_at_, t->tag - slack_);
  ++waiters_;
  turn_.wait_for(lock, most);
  if (--waiters_ == 0) wake_at_ = std::numeric_limits<double>::infinity();
}

void FairShare::done(Member t, double cost) {
  std::lock_guard lock(mu_);
  done_locked(t, cost);
}

void FairShare::done_locked(Tenant* t, double cost) {
  t->in_flight -= cost;
  in_flight_ -= cost;
  if (waiters_ > 0 && in_flight_ < depth_) turn_.notify_one();
  if (t->in_flight < 1e-9) {  // sums of fractions: the last one out ends the tenant's in flight exactly
    in_flight_ -= t->in_flight;
    t->in_flight = 0;
  }
}

void FairShare::cancel(Member t, double cost) {
  std::lock_guard lock(mu_);
  done_locked(t, cost);
  t->tag -= cost / t->weight;
}

void FairShare::watch(Member t, const void* app, Waiting waiting) {
  std::lock_guard lock(mu_);
  t->apps.emplace_back(app, std::move(waiting));
}

void FairShare::unwatch(Member t, const void* app) {
  std::lock_guard lock(mu_);
  std::erase_if(t->apps, [app](const auto& a) { return a.first == app; });
}

}  // namespace rfos::agent
