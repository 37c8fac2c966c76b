// The client's call engine: requests in flight from one container handle to its targets. It owns the
// transport worker and one endpoint per target, gives every request a random id and a deadline, matches replies
// (only from the endpoint the request went to), sends a request again when its target answers Busy (growing
// backoff) or EpochTooOld on a write it stamps (restamp), keeps at most `send_limit` large payloads moving at a
// time (the rest wait in order), keeps the bytes its requests ask of each target within the session's share of
// that target's buffers (`target_window_bytes`; the rest wait in order), and hands out finished calls.
//
// It knows nothing of objects, checksums or registrations: the container builds each request; the engine
// carries it.
//
// Thread-safety: one thread (the container's).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "client/container.h"
#include "common/ids.h"
#include "transport/transport.h"
#include "wire/data_plane.h"

namespace rfos::client {

// Where a call's bytes lie, so the container can tell which memory is still in use.
struct CallMemory {
  uintptr_t region = 0;  // explicit path: the registered region the target reads or writes
  uintptr_t held = 0;    // fabric memory the bytes lie in, on any path
};

class CallEngine {
 public:
  struct Options {
    uint32_t timeout_ms = 30000;  // per request, retries included
    uint32_t send_limit = 0;      // large payloads (> transport::kLargePayloadBytes) moving at once; 0: no limit
    // The lengths of updates and fetches in flight to one target, at most: the session's share of the target's
    // buffers (wire PoolMap.session_buffer_bytes), past which the target answers Busy. One request goes
    // whatever its length when nothing else is in flight there, as the target lets it. 0: no limit.
    uint64_t target_window_bytes = 0;
  };
  // A finished call, with the reply it got.
  struct Finished {
    Completion done;
    wire::Reply reply;
  };
  using Memory = CallMemory;

  CallEngine(std::unique_ptr<transport::Worker> worker, std::vector<transport::EpHandle> eps, Options options);
  ~CallEngine();
  CallEngine(const CallEngine&) = delete;
  CallEngine& operator=(const CallEngine&) = delete;

  // Called for the memory of a call that timed out: the target may still hold its descriptor.
  void on_deadline(std::function<void(const Memory&)> f) { on_deadline_ = std::move(f); }
  // Called with the payload of each notice a target sends (a message with request id 0, wire kWatch), inside
  // progress; notices from anyone but this engine's targets, or over kMaxNoticeBytes, are dropped.
  void on_notice(std::function<void(std::string_view)> f) { on_notice_ = std::move(f); }
  static constexpr size_t kMaxNoticeBytes = 64 * 1024;
  // Progresses for up to timeout_ms, or until an event came (a watcher waiting for notices); 0: what is there.
  void wait(int timeout_ms);

  // Sends `q` (its request_id set here) to target `t`; its completion comes out of wait_for / take. A fetch's
  // payload lands in `into`, or in `sized` resized to what arrives. `payload` and `into` must stay valid until
  // the call finished.
  Result<uint64_t> submit(uint32_t t, wire::Request& q, std::span<const transport::Iov> payload,
                          std::span<uint8_t> into, std::string* sized = nullptr, Memory memory = {});
  // Progresses until call `id` finished.
  Finished wait_for(uint64_t id);
  // Progresses for up to timeout_ms, until something finished or nothing is in flight; then hands out up to
  // `max` finished calls, oldest first.
  std::vector<Finished> take(size_t max, int timeout_ms);

  // Points the engine at `eps`, one per target, where the server's targets listen now (a server that restarted):
  // every call in flight ends with kShutdown, since the old targets will not answer it, and the old endpoints
  // are abandoned (transport::Worker::abandon).
  void retarget(std::vector<transport::EpHandle> eps);
  void set_target_window(uint64_t bytes) { options_.target_window_bytes = bytes; }  // for requests sent from now
  // Called (inside wait_for, take and wait) when a call's target has not answered it at all for `after`, and
  // again each `after` while it stays silent: long before the call's deadline, the container can look whether the
  // server restarted, its targets elsewhere.
  void on_silence(std::chrono::milliseconds after, std::function<void()> f) {
    silence_ = after;
    on_silence_ = std::move(f);
  }
  // How many calls so far ended with no answer from their target: the deadline passed in silence, or the fabric
  // failed their send. The container looks for a restarted server when it grows.
  uint64_t unanswered() const { return unanswered_; }

  // Whether a call in flight uses memory starting at `region` (as its region or its fabric memory).
  bool in_use(uintptr_t region) const;
  // Calls submitted and not yet handed out by take(): finished ones that a take with a small `max` left count
  // too, or a caller that polls only while this is not zero would leave them (and their callers) waiting forever.
  size_t in_flight() const { return calls_.size() + completed_.size(); }
  uint32_t targets() const { return static_cast<uint32_t>(eps_.size()); }
  transport::Worker& worker() { return *worker_; }

 private:
  // Deadlines and backoffs run on steady_now() (common/clock.h), which tests move; waits on the real clock.
  using Clock = std::chrono::steady_clock;
  // One request in flight: done when its reply (and reply payload) arrived and its own send completed.
  struct Call {
    uint32_t target = 0;
    bool replied = false;
    bool sent = false;
    Status status;
    wire::Reply reply;
    std::span<uint8_t> into;
    std::string* sized_by_reply = nullptr;
    Clock::time_point deadline;
    Memory memory;
    std::string header;
    std::vector<transport::Iov> payload;
    int busy_replies = 0;
    int restamps = 0;
    std::optional<Clock::time_point> retry_at;
    bool restamp = false;                       // an update or punch the target stamps
    bool heard = false;                         // its target answered it (a Busy too)
    std::optional<Clock::time_point> quiet_at;  // on_silence is called for it then, unless heard before
    uint64_t charge = 0;                        // what the target charges it to the session (the request's length)
    bool charged = false;                       // counted in its target's window now
    bool done() const { return replied && sent; }
  };
  static constexpr int kMaxBusyRetries = 200;
  static constexpr int kMaxRestamps = 16;

  uint64_t new_id();
  void on_message(transport::Incoming& in);
  // `now`: the caller's clock read; `from_window`: taken from its target's window queue by uncharge().
  Status send(uint64_t id, Call& call, Clock::time_point now, bool from_window = false);
  void send_done();
  bool admit(uint64_t id, Call& call, bool from_window);  // into its target's window, or queued (false)
  void uncharge(Call& call);  // out of it (its target answered, or it ended): the next queued go
  std::map<uint64_t, Call>::iterator first_waiting(uint32_t t);  // in t's window queue, dropping ended ones
  bool fits(uint32_t t, uint64_t charge) const;                  // in t's window beside what is in it
  void fail_unsent(uint64_t id, Call& call, Status s);           // a queued call whose send failed ends
  void reap();
  void retry_at(Call& call, Clock::time_point when);

  Options options_;
  std::unique_ptr<transport::Worker> worker_;
  std::vector<transport::EpHandle> eps_;
  std::function<void(const Memory&)> on_deadline_;
  std::function<void(std::string_view)> on_notice_;
  std::function<void()> on_silence_;
  std::chrono::milliseconds silence_{0};
  void notice(transport::Incoming& in);
  std::mt19937_64 ids_ = well_seeded_rng();
  std::map<uint64_t, Call> calls_;
  std::deque<Finished> completed_;  // finished, not yet handed out
  std::vector<uint64_t> touched_;   // calls a reply, a send completion or an error came for since the last reap
  Clock::time_point next_timer_ = Clock::time_point::max();  // no backoff ends and no deadline passes before
  uint32_t large_sending_ = 0;
  std::deque<uint64_t> send_queue_;
  std::vector<uint64_t> window_used_;               // per target: charges of the calls admitted and not answered
  std::vector<std::deque<uint64_t>> window_queue_;  // per target: calls waiting for room, in order
  uint64_t unanswered_ = 0;
  uint64_t generation_ = 0;  // retargets so far: a send completion of an older one leaves the send window alone
};

}  // namespace rfos::client
