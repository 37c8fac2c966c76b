#include "transport/sim/sim.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "common/coding.h"

namespace rfos::transport::sim {

class SimWorker;

// Everything below is guarded by mu: one lock for the whole fabric keeps delivery simple to reason about, and
// a test fabric carries little traffic.
class Fabric::Impl {
 public:
  explicit Impl(Knobs k) : knobs(k), rng(k.seed) {}
  std::mutex mu;
  std::condition_variable moved;  // something was queued somewhere, or a worker was signalled
  Knobs knobs;
  std::mt19937_64 rng;
  std::map<std::string, SimWorker*> workers;  // the live ones, by address
  uint64_t next_worker = 1;
  Counters counters;

  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  void kill_locked(const std::string& address);
};

namespace {

struct Message {
  std::string from;          // the sender's address
  std::string introduction;  // the sender's token when it sent (a hello's, for admit_hello)
  std::string header, payload;
  uint64_t due = 0;  // the destination's progress count from which it may be delivered
};

std::string key_bytes(uint64_t key) {
  std::string s;
  put_le<uint64_t>(&s, key);
  return s;
}

}  // namespace

class SimWorker final : public Worker {
 public:
  SimWorker(std::shared_ptr<Fabric::Impl> fabric, std::string address, const WorkerOptions& options)
      : fabric_(std::move(fabric)), address_(std::move(address)), options_(options) {}

  ~SimWorker() override {
    std::lock_guard lock(fabric_->mu);
    if (!dead_) fabric_->kill_locked(address_);  // as a process that exits: its peers see it fail
  }

  std::string address() const override { return address_; }
  void set_introduction(std::string token) override {
    std::lock_guard lock(fabric_->mu);
    introduction_ = std::move(token);
  }

  Result<EpHandle> connect(std::string_view peer) override {
    std::lock_guard lock(fabric_->mu);
    if (dead_) return error(StatusCode::kShutdown, "this worker is dead");
    if (!fabric_->workers.count(std::string(peer)))
      return error(StatusCode::kShutdown, "no worker at " + std::string(peer) + " on the simulated fabric");
    return handle_for(std::string(peer));
  }

  void disconnect(EpHandle ep) override {
    std::lock_guard lock(fabric_->mu);
    auto it = peers_.find(ep);
    if (it == peers_.end()) return;
    by_address_.erase(it->second);
    peers_.erase(it);
  }

  void on_message(std::function<void(Incoming&)> h) override { handler_ = std::move(h); }
  void on_peer_failure(std::function<void(EpHandle, const Status&)> h) override { failure_ = std::move(h); }
  uint64_t unproved_dropped() const override { return unproved_dropped_; }

  Status fetch_payload(Incoming& in, std::span<const Iov> dst, Done done) override {
    auto* m = static_cast<const Message*>(in.rndv);
    size_t total = 0;
    for (const Iov& v : dst) total += v.len;
    if (!m || total != m->payload.size())
      return error(StatusCode::kInvalidArgument, "the destination is not the payload's size");
    in.rndv_taken = true;
    size_t at = 0;
    for (const Iov& v : dst) {
      std::memcpy(v.data, m->payload.data() + at, v.len);
      at += v.len;
    }
    std::lock_guard lock(fabric_->mu);
    completions_.push_back([done = std::move(done)] { done(Status::ok()); });
    return Status::ok();
  }

  Status send(EpHandle ep, std::string_view header, std::span<const Iov> payload, Done done) override {
    std::lock_guard lock(fabric_->mu);
    RFOS_ASSIGN_OR_RETURN(SimWorker * to, peer_locked(ep));
    Message m;
    m.from = address_;
    m.introduction = introduction_;
    m.header.assign(header);
    for (const Iov& v : payload) m.payload.append(static_cast<const char*>(v.data), v.len);
    const Knobs& k = fabric_->knobs;
    if (fabric_->chance(k.drop)) {
      ++fabric_->counters.dropped;
    } else {
      int copies = fabric_->chance(k.duplicate) ? 2 : 1;
      fabric_->counters.duplicated += copies - 1;
      for (int i = 0; i < copies; ++i) {
        m.due = to->progressed_ + std::uniform_int_distribution<uint32_t>(0, k.max_delay)(fabric_->rng);
        to->inbox_.push_back(m);
      }
    }
    completions_.push_back([done = std::move(done)] { done(Status::ok()); });
    fabric_->moved.notify_all();
    return Status::ok();
  }

  Result<Registration> register_memory(void* addr, size_t len) override {
    if (len == 0) return error(StatusCode::kInvalidArgument, "cannot register an empty range");
    std::lock_guard lock(fabric_->mu);
    uint64_t key = next_key_++;
    regions_[key] = {reinterpret_cast<uintptr_t>(addr), len};
    return Registration{reinterpret_cast<void*>(key), reinterpret_cast<uint64_t>(addr), key_bytes(key)};
  }
  void deregister_memory(const Registration& r) override {
    std::lock_guard lock(fabric_->mu);
    regions_.erase(reinterpret_cast<uint64_t>(r.handle));
  }

  Status get(EpHandle ep, uint64_t remote_addr, std::string_view rkey, std::span<const Iov> dst, Done done) override {
    return rma(false, ep, remote_addr, rkey, dst, std::move(done));
  }
  Status put(EpHandle ep, std::span<const Iov> src, uint64_t remote_addr, std::string_view rkey, Done done) override {
    return rma(true, ep, remote_addr, rkey, src, std::move(done));
  }

  int progress() override {
    std::vector<std::function<void()>> ready;
    std::vector<Message> arrived;
    std::vector<EpHandle> failed;
    {
      std::lock_guard lock(fabric_->mu);
      ++progressed_;
      ready.swap(completions_);
      failed.swap(failed_);
      // Every message due now, in a seeded order.
      std::vector<size_t> due;
      for (size_t i = 0; i < inbox_.size(); ++i)
        if (inbox_[i].due <= progressed_) due.push_back(i);
      std::shuffle(due.begin(), due.end(), fabric_->rng);
      for (size_t i : due) arrived.push_back(std::move(inbox_[i]));
      std::sort(due.begin(), due.end());
      for (size_t n = due.size(); n-- > 0;) inbox_.erase(inbox_.begin() + static_cast<std::ptrdiff_t>(due[n]));
      fabric_->counters.delivered += arrived.size();
    }
    int n = 0;
    for (auto& f : ready) {
      f();
      ++n;
    }
    for (EpHandle h : failed) {
      if (failure_) failure_(h, error(StatusCode::kShutdown, "the peer died (simulated)"));
      ++n;
    }
    for (Message& m : arrived) {
      ++n;
      Incoming in;
      {
        std::lock_guard lock(fabric_->mu);
        if (dead_) break;
        if (options_.admit_hello && !admitted_.count(m.from)) {
          if (!options_.admit_hello(m.introduction)) {  // as a UCX hello that did not pass: not heard at all
            ++unproved_dropped_;
            continue;
          }
          admitted_.insert(m.from);
        }
        in.reply_to = handle_for(m.from);
      }
      in.header = m.header;
      in.payload_bytes = m.payload.size();
      in.rndv = m.payload.empty() ? nullptr : &m;
      if (handler_) handler_(in);
    }
    return n;
  }

  void wait(int timeout_ms, const WakeSource* also) override {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::unique_lock lock(fabric_->mu);
    auto busy = [&] { return signaled_ || !inbox_.empty() || !completions_.empty() || !failed_.empty(); };
    while (!busy() && !(also && also->ready())) {
      auto now = std::chrono::steady_clock::now();
      if (now >= until) break;
      // With another event source to watch, look at it every millisecond.
      auto slice = also ? std::min(until, now + std::chrono::milliseconds(1)) : until;
      fabric_->moved.wait_until(lock, slice);
    }
    signaled_ = false;
  }

  void signal() override {
    std::lock_guard lock(fabric_->mu);
    signaled_ = true;
    fabric_->moved.notify_all();
  }

  // Fabric::kill, under the fabric's lock.
  void die_locked() {
    dead_ = true;
    inbox_.clear();
    completions_.clear();
  }
  void peer_died_locked(const std::string& address) {
    auto it = by_address_.find(address);
    if (it == by_address_.end()) return;
    failed_.push_back(it->second);
    peers_.erase(it->second);
    by_address_.erase(it);
    admitted_.erase(address);
  }

 private:
  EpHandle handle_for(const std::string& address) {
    auto it = by_address_.find(address);
    if (it != by_address_.end()) return it->second;
    EpHandle h = next_handle_++;
    by_address_[address] = h;
    peers_[h] = address;
    return h;
  }

  Result<SimWorker*> peer_locked(EpHandle ep) {
    if (dead_) return error(StatusCode::kShutdown, "this worker is dead");
    auto it = peers_.find(ep);
    if (it == peers_.end()) return error(StatusCode::kShutdown, "the peer is gone (or never known)");
    auto w = fabric_->workers.find(it->second);
    if (w == fabric_->workers.end()) return error(StatusCode::kShutdown, "the peer is gone");
    return w->second;
  }

  // A one-sided read or write, checked as a NIC checks a remote key, done at once and reported from progress().
  Status rma(bool put, EpHandle ep, uint64_t remote_addr, std::string_view rkey, std::span<const Iov> local,
             Done done) {
    std::lock_guard lock(fabric_->mu);
    RFOS_ASSIGN_OR_RETURN(SimWorker * peer, peer_locked(ep));
    if (rkey.size() != 8) return error(StatusCode::kInvalidArgument, "malformed remote key");
    uint64_t key = 0;
    std::memcpy(&key, rkey.data(), 8);
    size_t total = 0;
    for (const Iov& v : local) total += v.len;
    auto region = peer->regions_.find(key);
    Status s = Status::ok();
    if (region == peer->regions_.end() || remote_addr < region->second.first || total > region->second.second ||
        remote_addr - region->second.first > region->second.second - total) {
      s = error(StatusCode::kPermissionDenied, "the remote key does not cover the range (simulated NIC)");
    } else {
      char* remote = reinterpret_cast<char*>(remote_addr);
      for (const Iov& v : local) {
        if (put)
          std::memcpy(remote, v.data, v.len);
        else
          std::memcpy(v.data, remote, v.len);
        remote += v.len;
      }
    }
    completions_.push_back([done = std::move(done), s] { done(s); });
    fabric_->moved.notify_all();
    return Status::ok();
  }

  friend class Fabric::Impl;
  std::shared_ptr<Fabric::Impl> fabric_;
  std::string address_;
  WorkerOptions options_;
  std::function<void(Incoming&)> handler_;
  std::function<void(EpHandle, const Status&)> failure_;
  // Guarded by the fabric's mu:
  std::string introduction_;
  std::deque<Message> inbox_;
  std::vector<std::function<void()>> completions_;
  std::vector<EpHandle> failed_;
  std::map<std::string, EpHandle> by_address_;
  std::map<EpHandle, std::string> peers_;
  std::set<std::string> admitted_;
  std::map<uint64_t, std::pair<uintptr_t, size_t>> regions_;
  EpHandle next_handle_ = 1;
  uint64_t next_key_ = 1;
  uint64_t progressed_ = 0;
  bool dead_ = false;
  bool signaled_ = false;
  uint64_t unproved_dropped_ = 0;
};

void Fabric::Impl::kill_locked(const std::string& address) {
  auto it = workers.find(address);
  if (it == workers.end()) return;
  it->second->die_locked();
  workers.erase(it);
  for (auto& [addr, w] : workers) w->peer_died_locked(address);
  moved.notify_all();
}

Fabric::Fabric(Knobs knobs) : impl_(std::make_shared<Impl>(knobs)) {}
Fabric::~Fabric() = default;

Fabric& Fabric::process() {
  static Fabric* fabric = new Fabric();  // never destroyed: workers may outlive static destruction order
  return *fabric;
}

void Fabric::set_knobs(const Knobs& knobs) {
  std::lock_guard lock(impl_->mu);
  impl_->knobs = knobs;
  impl_->rng.seed(knobs.seed);
}

Result<std::unique_ptr<Worker>> Fabric::create_worker(const WorkerOptions& options) {
  std::lock_guard lock(impl_->mu);
  std::string address = "sim:" + std::to_string(impl_->next_worker++);
  auto w = std::make_unique<SimWorker>(impl_, address, options);
  impl_->workers[address] = w.get();
  return std::unique_ptr<Worker>(std::move(w));
}

void Fabric::kill(const std::string& address) {
  std::lock_guard lock(impl_->mu);
  impl_->kill_locked(address);
}

std::vector<std::string> Fabric::addresses() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [addr, w] : impl_->workers) out.push_back(addr);
  return out;
}

Fabric::Counters Fabric::counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counters;
}

}  // namespace rfos::transport::sim
