#include "client/call_engine.h"

#include <algorithm>

#include "common/clock.h"

namespace rfos::client {

using transport::Iov;

CallEngine::CallEngine(std::unique_ptr<transport::Worker> worker, std::vector<transport::EpHandle> eps, Options options)
    : options_(options), worker_(std::move(worker)), eps_(std::move(eps)) {
  worker_->on_message([this](transport::Incoming& in) { on_message(in); });
  window_used_.assign(eps_.size(), 0);
  window_queue_.assign(eps_.size(), {});
}

CallEngine::~CallEngine() {
  // The worker goes first: sends still in flight complete (cancelled) as it closes the endpoints, and their
  // callbacks look up calls, which must still exist then; nothing queued may be sent by them.
  send_queue_.clear();
  for (auto& q : window_queue_) q.clear();
  worker_.reset();
}

// Request ids are random, and a reply counts only from the endpoint its request went to: a peer on the fabric
// cannot answer for a target by guessing ids, and a stale reply cannot match a later request.
uint64_t CallEngine::new_id() {
  for (;;) {
    uint64_t id = ids_();
    if (id != 0 && !calls_.count(id)) return id;
  }
}

void CallEngine::on_message(transport::Incoming& in) {
  auto r = wire::decode_reply(in.header);
  if (!r.is_ok()) return;
  if (r->request_id == 0) return notice(in);
  auto it = calls_.find(r->request_id);
  if (it == calls_.end() || it->second.replied) return;  // stale (timed out), duplicate or foreign: dropped
  if (in.reply_to != eps_[it->second.target]) return;    // not from the target it asked
  Call& call = it->second;
  uint64_t id = it->first;
  touched_.push_back(id);
  call.heard = true;
  call.reply = std::move(r).value();
  uncharge(call);  // the target is done with it (a Busy too: sent again, it is admitted again)
  if (call.reply.status == StatusCode::kBusy && call.reply.length > 0) {
    // Held to its tenant's limits: the target said when to ask again; the call's deadline bounds the waits.
    return retry_at(call, steady_now() + std::chrono::microseconds(std::min<uint64_t>(call.reply.length, 1000000)));
  }
  if (call.reply.status == StatusCode::kBusy && call.busy_replies < kMaxBusyRetries) {
    // About a second of growing backoff, then the Busy is the caller's: a target whose buffers others hold, a
    // full watcher table or a key held by a conditional insert is not waited out for the whole deadline (a
    // session's own share of the buffers is kept to by the window, which draws no Busy).
    ++call.busy_replies;
    return retry_at(call, steady_now() + std::chrono::microseconds(200 * std::min(call.busy_replies, 25)));
  }
  // Refused as too old: a snapshot overtook the write in flight; sent again, it gets a newer epoch.
  if (call.reply.status == StatusCode::kEpochTooOld && call.restamp && call.restamps < kMaxRestamps) {
    ++call.restamps;
    return retry_at(call, steady_now());
  }
  if (call.reply.status != StatusCode::kOk) {
    call.status = error(call.reply.status, call.reply.message);
    call.replied = true;
    return;
  }
  if (in.payload_bytes == 0) {
    // On the explicit path a fetch's bytes are already in place: the target wrote them before it answered.
    if (call.memory.region && !call.into.empty() && call.reply.length != call.into.size())
      call.status = error(StatusCode::kInternal, "the server wrote " + std::to_string(call.reply.length) +
                                                     " bytes for a read of " + std::to_string(call.into.size()));
    call.replied = true;
    return;
  }
  if (call.sized_by_reply) {
    call.sized_by_reply->resize(in.payload_bytes);
    call.into = {reinterpret_cast<uint8_t*>(call.sized_by_reply->data()), call.sized_by_reply->size()};
  }
  if (in.payload_bytes != call.into.size() || call.reply.length != in.payload_bytes) {
    call.status = error(StatusCode::kInternal, "the server sent " + std::to_string(in.payload_bytes) +
                                                   " bytes for a read of " + std::to_string(call.into.size()));
    call.replied = true;
    return;
  }
  Iov dst{call.into.data(), call.into.size()};
  Status s = worker_->fetch_payload(in, {&dst, 1}, [this, id](Status got) {
    auto c = calls_.find(id);
    if (c == calls_.end()) return;
    touched_.push_back(id);
    c->second.status = got;
    c->second.replied = true;
  });
  if (!s.is_ok()) {
    call.status = s;
    call.replied = true;
  }
}

void CallEngine::retry_at(Call& call, Clock::time_point when) {
  call.retry_at = when;
  next_timer_ = std::min(next_timer_, when);
}

void CallEngine::notice(transport::Incoming& in) {
  if (!on_notice_ || in.payload_bytes == 0 || in.payload_bytes > kMaxNoticeBytes) return;
  if (std::find(eps_.begin(), eps_.end(), in.reply_to) == eps_.end()) return;  // not from a target of ours
  auto bytes = std::make_shared<std::string>(in.payload_bytes, '\0');
  Iov dst{bytes->data(), bytes->size()};
  Status s = worker_->fetch_payload(in, {&dst, 1}, [this, bytes](Status got) {
    if (got.is_ok() && on_notice_) on_notice_(*bytes);
  });
  (void)s;  // a notice that could not land is lost; the caches it was for expire by their timeouts
}

void CallEngine::wait(int timeout_ms) {
  if (worker_->progress() == 0 && timeout_ms > 0) {
    worker_->wait(timeout_ms, nullptr);
    worker_->progress();
  }
  reap();
}

Result<uint64_t> CallEngine::submit(uint32_t t, wire::Request& q, std::span<const Iov> payload, std::span<uint8_t> into,
                                    std::string* sized, Memory memory) {
  if (t >= eps_.size()) return error(StatusCode::kInvalidArgument, "no target " + std::to_string(t));
  RFOS_RETURN_IF_ERROR(wire::check_lengths(q));
  uint64_t id = new_id();
  q.request_id = id;
  Call& call = calls_[id];
  call.target = t;
  call.memory = memory;
  call.into = into;
  call.sized_by_reply = sized;
  call.restamp = wire::is_write(q.op) && q.epoch == 0;
  call.charge = q.op == wire::Op::kUpdate || q.op == wire::Op::kFetch ? q.length : 0;
  const Clock::time_point now = steady_now();
  call.deadline = now + std::chrono::milliseconds(options_.timeout_ms);
  next_timer_ = std::min(next_timer_, call.deadline);
  call.header = wire::encode_request(q);
  call.payload.assign(payload.begin(), payload.end());
  Status s = send(id, call, now);
  if (!s.is_ok()) {
    calls_.erase(id);
    return s;
  }
  return id;
}

Status CallEngine::send(uint64_t id, Call& call, Clock::time_point now, bool from_window) {
  call.sent = false;
  if (!admit(id, call, from_window)) return Status::ok();
  size_t bytes = 0;
  for (const Iov& v : call.payload) bytes += v.len;
  bool large = options_.send_limit > 0 && bytes > transport::kLargePayloadBytes;
  if (large && large_sending_ >= options_.send_limit) {
    send_queue_.push_back(id);
    return Status::ok();
  }
  if (large) ++large_sending_;
  // Silence counts from the hand-over to the fabric, not from a wait in the send window.
  if (on_silence_ && !call.heard && silence_ < std::chrono::milliseconds(options_.timeout_ms)) {
    call.quiet_at = now + silence_;
    next_timer_ = std::min(next_timer_, *call.quiet_at);
  }
  Status s = worker_->send(eps_[call.target], call.header, call.payload,
                           [this, id, large, generation = generation_](Status st) {
                             if (generation != generation_) return;  // the call ended at the retarget
                             if (large) send_done();
                             auto c = calls_.find(id);
                             if (c == calls_.end()) return;
                             touched_.push_back(id);
                             c->second.sent = true;
                             if (!st.is_ok() && !c->second.replied) {
                               c->second.status = st;
                               c->second.replied = true;
                               ++unanswered_;
                               uncharge(c->second);
                             }
                           });
  if (!s.is_ok()) {
    if (large) send_done();
    ++unanswered_;
    uncharge(call);
  }
  return s;
}

bool CallEngine::admit(uint64_t id, Call& call, bool from_window) {
  if (options_.target_window_bytes == 0 || call.charge == 0 || call.charged) return true;
  // In order: nothing overtakes a call that waits (a stream of small requests would keep a large one out),
  // but the one uncharge() takes from the queue.
  if ((!from_window && first_waiting(call.target) != calls_.end()) || !fits(call.target, call.charge)) {
    window_queue_[call.target].push_back(id);
    return false;
  }
  window_used_[call.target] += call.charge;
  call.charged = true;
  return true;
}

std::map<uint64_t, CallEngine::Call>::iterator CallEngine::first_waiting(uint32_t t) {
  auto& queue = window_queue_[t];
  while (!queue.empty()) {
    auto c = calls_.find(queue.front());
    if (c != calls_.end() && !c->second.done() && !c->second.charged) return c;
    queue.pop_front();  // it ended while it waited
  }
  return calls_.end();
}

bool CallEngine::fits(uint32_t t, uint64_t charge) const {
  uint64_t window = options_.target_window_bytes, used = window_used_[t];
  return window == 0 || used == 0 || (used <= window && charge <= window - used);
}

void CallEngine::fail_unsent(uint64_t id, Call& call, Status s) {
  call.status = std::move(s);
  call.replied = call.sent = true;
  touched_.push_back(id);
}

void CallEngine::uncharge(Call& call) {
  if (!call.charged) return;
  call.charged = false;
  window_used_[call.target] -= call.charge;
  // The next waiting calls to that target, in order, while they fit (send admits them).
  for (auto c = first_waiting(call.target); c != calls_.end() && fits(call.target, c->second.charge);
       c = first_waiting(call.target)) {
    window_queue_[call.target].pop_front();
    Status s = send(c->first, c->second, steady_now(), true);
    if (!s.is_ok()) fail_unsent(c->first, c->second, std::move(s));
  }
}

// A large payload finished sending (or failed): the next queued one goes, skipping calls that ended while they
// waited (timed out).
void CallEngine::send_done() {
  --large_sending_;
  while (!send_queue_.empty() && large_sending_ < options_.send_limit) {
    auto c = calls_.find(send_queue_.front());
    send_queue_.pop_front();
    if (c == calls_.end() || c->second.sent) continue;
    Status s = send(c->first, c->second, steady_now());
    if (!s.is_ok()) fail_unsent(c->first, c->second, std::move(s));
  }
}

// Moves finished calls to `completed_`: those something happened to since the last time, and, once the clock
// passed the earliest backoff or deadline, sends what waited out its backoff and ends what timed out (a scan of
// every call, which would otherwise cost each poll of a spinning worker O(calls in flight)).
void CallEngine::reap() {
  auto now = steady_now();
  if (now < next_timer_) {
    for (uint64_t id : touched_) {
      auto it = calls_.find(id);
      if (it == calls_.end()) continue;
      if (!it->second.done()) {
        // A backoff set before the call's own send completed starts counting now (the scan skips unsent calls).
        if (it->second.retry_at && it->second.sent) next_timer_ = std::min(next_timer_, *it->second.retry_at);
        continue;
      }
      completed_.push_back({{it->first, it->second.status, it->second.reply.length}, std::move(it->second.reply)});
      calls_.erase(it);
    }
    touched_.clear();
    return;
  }
  touched_.clear();
  next_timer_ = Clock::time_point::max();
  bool silent = false;
  for (auto it = calls_.begin(); it != calls_.end();) {
    Call& c = it->second;
    if (c.quiet_at && (c.heard || c.replied)) c.quiet_at.reset();
    if (c.quiet_at && now >= *c.quiet_at) {
      c.quiet_at = now + silence_;  // and again while it stays silent: a look may find no server yet
      silent = true;
    }
    if (c.retry_at && c.sent && now >= *c.retry_at && now <= c.deadline) {
      c.retry_at.reset();
      Status s = send(it->first, c, now);
      if (!s.is_ok()) {
        c.status = s;
        c.replied = c.sent = true;
      }
    }
    if (!c.done() && now > c.deadline) {
      std::string ms = std::to_string(options_.timeout_ms);
      c.status = c.retry_at ? error(StatusCode::kBusy, "target " + std::to_string(c.target) + " stayed busy for " + ms +
                                                           " ms: " + c.reply.message)
                            : error(StatusCode::kTimeout,
                                    "target " + std::to_string(c.target) + " did not answer within " + ms + " ms");
      if (!c.retry_at) ++unanswered_;
      c.replied = c.sent = true;  // a late reply or send completion finds nothing and is dropped
      uncharge(c);
      if (on_deadline_) on_deadline_(c.memory);
    }
    if (c.done()) {
      completed_.push_back({{it->first, c.status, c.reply.length}, std::move(c.reply)});
      it = calls_.erase(it);
    } else {
      next_timer_ = std::min(next_timer_, c.retry_at && c.sent ? std::min(*c.retry_at, c.deadline) : c.deadline);
      if (c.quiet_at) next_timer_ = std::min(next_timer_, *c.quiet_at);
      ++it;
    }
  }
  // Last: the callback may retarget, which ends every call in flight.
  if (silent && on_silence_) on_silence_();
}

CallEngine::Finished CallEngine::wait_for(uint64_t id) {
  for (;;) {
    for (auto it = completed_.begin(); it != completed_.end(); ++it) {
      if (it->done.ticket == id) {
        Finished c = std::move(*it);
        completed_.erase(it);
        return c;
      }
    }
    if (worker_->progress() == 0) worker_->wait(1);
    reap();
  }
}

std::vector<CallEngine::Finished> CallEngine::take(size_t max, int timeout_ms) {
  // The clock only when there is a time to wait: a spinning caller polls with 0, and a clock read costs what a
  // poll does on some virtual machines.
  Clock::time_point until = timeout_ms > 0 ? Clock::now() + std::chrono::milliseconds(timeout_ms) : Clock::time_point();
  for (;;) {
    worker_->progress();
    reap();
    if (!completed_.empty() || calls_.empty() || timeout_ms <= 0 || Clock::now() >= until) break;
    worker_->wait(1);
  }
  std::vector<Finished> out;
  while (!completed_.empty() && out.size() < max) {
    out.push_back(std::move(completed_.front()));
    completed_.pop_front();
  }
  return out;
}

void CallEngine::retarget(std::vector<transport::EpHandle> eps) {
  ++generation_;
  // A call its target answered keeps the answer (its reply came before the restart was found). The others
  // end; their memory is no one's to touch (the old targets are gone with their process), so it stays
  // registered.
  for (auto& [id, c] : calls_) {
    if (!c.replied)
      c.status = error(StatusCode::kShutdown,
                       "target " + std::to_string(c.target) + " went away (the server restarted) before it answered");
    completed_.push_back({{id, c.status, c.replied ? c.reply.length : 0}, std::move(c.reply)});
  }
  calls_.clear();
  touched_.clear();
  send_queue_.clear();
  large_sending_ = 0;
  window_used_.assign(eps.size(), 0);
  window_queue_.assign(eps.size(), {});
  next_timer_ = Clock::time_point::max();
  for (transport::EpHandle ep : eps_) worker_->abandon(ep);
  eps_ = std::move(eps);
}

bool CallEngine::in_use(uintptr_t region) const {
  for (const auto& [id, call] : calls_)
    if (call.memory.region == region || call.memory.held == region) return true;
  return false;
}

}  // namespace rfos::client
