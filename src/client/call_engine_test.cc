// The call engine against a scripted target over the simulated fabric: retries, restamps, deadlines, replies
// from the wrong peer, duplicates and the send window, each decided by the test, not by an engine.
#include "client/call_engine.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "common/clock.h"
#include "transport/sim/sim.h"

namespace rfos::client {
namespace {

using transport::Incoming;
using transport::Iov;

// A target whose answers the test scripts: each request it hears goes to `answer`, which returns the replies
// to send (none: stay silent).
struct ScriptedTarget {
  std::unique_ptr<transport::Worker> w;
  std::vector<wire::Request> heard;
  std::vector<size_t> payloads;  // payload bytes of each request heard
  transport::EpHandle from{};    // where the last request came from
  std::function<std::vector<wire::Reply>(const wire::Request&)> answer;

  explicit ScriptedTarget(transport::sim::Fabric& f) {
    w = std::move(f.create_worker()).value();
    w->on_message([this](Incoming& in) {
      auto q = wire::decode_request(in.header);
      ASSERT_TRUE(q.is_ok());
      heard.push_back(*q);
      payloads.push_back(in.payload_bytes);
      from = in.reply_to;
      for (const wire::Reply& r : answer(*q))
        ASSERT_TRUE(w->send(in.reply_to, wire::encode_reply(r), {}, [](Status) {}).is_ok());
    });
  }
};

wire::Reply reply(const wire::Request& q, StatusCode code = StatusCode::kOk) {
  wire::Reply r;
  r.request_id = q.request_id;
  r.status = code;
  if (code != StatusCode::kOk) r.message = "scripted";
  return r;
}

class CallEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { target_ = std::make_unique<ScriptedTarget>(fabric_); }
  void TearDown() override { clock::reset(); }

  std::unique_ptr<CallEngine> engine(CallEngine::Options o = {}) {
    auto w = fabric_.create_worker();
    EXPECT_TRUE(w.is_ok());
    auto ep = (*w)->connect(target_->w->address());
    EXPECT_TRUE(ep.is_ok());
    return std::make_unique<CallEngine>(std::move(w).value(), std::vector<transport::EpHandle>{*ep}, o);
  }

  // Drives the target and the engine until `n` calls finished, for at most `limit` (the engine's deadlines and
  // backoffs are on its clock).
  std::vector<CallEngine::Finished> finish(CallEngine& e, size_t n,
                                           std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::vector<CallEngine::Finished> out;
    auto until = std::chrono::steady_clock::now() + limit;
    while (out.size() < n && std::chrono::steady_clock::now() < until) {
      target_->w->progress();
      for (auto& f : e.take(n - out.size(), 0)) out.push_back(std::move(f));
    }
    return out;
  }

  wire::Request request(wire::Op op = wire::Op::kUpdate) {
    wire::Request q;
    q.op = op;
    q.dkey = "d";
    q.akey = "a";
    return q;
  }

  transport::sim::Fabric fabric_;
  std::unique_ptr<ScriptedTarget> target_;
};

TEST_F(CallEngineTest, BusyIsSentAgainUntilItSucceeds) {
  int busy = 3;
  target_->answer = [&](const wire::Request& q) {
    return std::vector{reply(q, busy-- > 0 ? StatusCode::kBusy : StatusCode::kOk)};
  };
  auto e = engine();
  wire::Request q = request();
  auto id = e->submit(0, q, {}, {});
  ASSERT_TRUE(id.is_ok());
  auto done = finish(*e, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].done.status.is_ok()) << done[0].done.status.to_string();
  EXPECT_EQ(done[0].done.ticket, *id);
  ASSERT_EQ(target_->heard.size(), 4u);
  for (const auto& h : target_->heard) EXPECT_EQ(h.request_id, *id) << "a retry is the same request";
  EXPECT_EQ(e->in_flight(), 0u);
}

TEST_F(CallEngineTest, OnlyWritesTheTargetStampsAreRestamped) {
  int refusals = 1;
  target_->answer = [&](const wire::Request& q) {
    return std::vector{reply(q, refusals-- > 0 ? StatusCode::kEpochTooOld : StatusCode::kOk)};
  };
  auto e = engine();
  wire::Request write = request(wire::Op::kUpdate);
  ASSERT_TRUE(e->submit(0, write, {}, {}).is_ok());
  auto done = finish(*e, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].done.status.is_ok()) << "a write a snapshot overtook goes again with a newer epoch";
  EXPECT_EQ(target_->heard.size(), 2u);

  refusals = 1;
  wire::Request read = request(wire::Op::kFetch);
  read.epoch = 42;  // a snapshot's: refused as too old, it stays refused
  ASSERT_TRUE(e->submit(0, read, {}, {}).is_ok());
  done = finish(*e, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].done.status.code(), StatusCode::kEpochTooOld);
  EXPECT_EQ(target_->heard.size(), 3u);
}

TEST_F(CallEngineTest, SilenceEndsAtTheDeadlineAndHandsTheMemoryBack) {
  target_->answer = [](const wire::Request&) { return std::vector<wire::Reply>{}; };
  auto e = engine();  // 30 s deadlines
  std::vector<uintptr_t> revoked;
  e->on_deadline([&](const CallEngine::Memory& m) { revoked.push_back(m.region); });
  wire::Request q = request();
  ASSERT_TRUE(e->submit(0, q, {}, {}, nullptr, {0x1000, 0}).is_ok());
  EXPECT_TRUE(e->in_use(0x1000));
  EXPECT_TRUE(finish(*e, 1, std::chrono::milliseconds(50)).empty()) << "the deadline is 30 s away";
  clock::advance(std::chrono::seconds(31));  // the target never answers: time passes instead
  auto done = e->take(1, 0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].done.status.code(), StatusCode::kTimeout);
  EXPECT_EQ(revoked, std::vector<uintptr_t>{0x1000});
  EXPECT_FALSE(e->in_use(0x1000));
}

// A server that restarted: calls to its old targets end at once with kShutdown (their memory handed back), a
// late reply from an old target finds nothing, and the next calls go to the new targets. Only calls that went
// unanswered count towards a look for a restart.
TEST_F(CallEngineTest, RetargetEndsCallsInFlightAndSendsToTheNewTargets) {
  std::vector<wire::Request> unanswered;
  target_->answer = [&](const wire::Request& q) {
    unanswered.push_back(q);
    return std::vector<wire::Reply>{};
  };
  auto e = engine();
  std::vector<uintptr_t> revoked;
  e->on_deadline([&](const CallEngine::Memory& m) { revoked.push_back(m.region); });
  wire::Request q = request();
  auto first = e->submit(0, q, {}, {}, nullptr, {0x2000, 0});
  ASSERT_TRUE(first.is_ok());
  clock::advance(std::chrono::seconds(31));
  auto done = finish(*e, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].done.status.code(), StatusCode::kTimeout);
  EXPECT_EQ(e->unanswered(), 1u) << "a call its target never answered";
  clock::reset();

  wire::Request q2 = request();
  auto second = e->submit(0, q2, {}, {}, nullptr, {0x3000, 0});
  ASSERT_TRUE(second.is_ok());
  for (int i = 0; i < 100 && unanswered.size() < 2; ++i) target_->w->progress(), e->take(1, 0);
  ASSERT_EQ(unanswered.size(), 2u);

  ScriptedTarget restarted(fabric_);
  restarted.answer = [](const wire::Request& r) { return std::vector{reply(r)}; };
  auto ep = e->worker().connect(restarted.w->address());
  ASSERT_TRUE(ep.is_ok());
  e->retarget({*ep});
  done = e->take(1, 0);
  ASSERT_EQ(done.size(), 1u) << "the call in flight ends at the retarget, not at its deadline";
  EXPECT_EQ(done[0].done.ticket, *second);
  EXPECT_EQ(done[0].done.status.code(), StatusCode::kShutdown) << done[0].done.status.to_string();
  EXPECT_FALSE(e->in_use(0x3000));
  EXPECT_EQ(revoked, std::vector<uintptr_t>{0x2000})
      << "the old targets are gone: nothing to take the memory back from";
  EXPECT_EQ(e->unanswered(), 1u) << "the calls the retarget ended do not ask for another look";

  // The old target answers late: nothing takes it.
  ASSERT_TRUE(target_->w
                  ->send(target_->w->connect(e->worker().address()).value(), wire::encode_reply(reply(unanswered[1])),
                         {}, [](Status) {})
                  .is_ok());
  wire::Request q3 = request();
  auto third = e->submit(0, q3, {}, {});
  ASSERT_TRUE(third.is_ok());
  done.clear();
  for (int i = 0; i < 1000 && done.empty(); ++i) {
    restarted.w->progress();
    target_->w->progress();
    for (auto& f : e->take(1, 0)) done.push_back(std::move(f));
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].done.ticket, *third);
  EXPECT_TRUE(done[0].done.status.is_ok()) << done[0].done.status.to_string();
  EXPECT_EQ(restarted.heard.size(), 1u);
  EXPECT_EQ(unanswered.size(), 2u) << "nothing more went to the old target";
}

// A call whose target says nothing calls out after the silence and again each silence after (the container's cue
// to look for a restarted server), long before its deadline; once the target answered, never again.
TEST_F(CallEngineTest, SilenceCallsOutBeforeTheDeadlineWhileItLasts) {
  std::vector<wire::Request> heard;
  target_->answer = [&](const wire::Request& q) {
    heard.push_back(q);
    return std::vector<wire::Reply>{};
  };
  auto e = engine();  // 30 s deadlines
  int silences = 0;
  e->on_silence(std::chrono::seconds(2), [&] { ++silences; });
  wire::Request q = request();
  ASSERT_TRUE(e->submit(0, q, {}, {}).is_ok());
  for (int i = 0; i < 100 && heard.empty(); ++i) target_->w->progress(), e->take(1, 0);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(silences, 0);
  clock::advance(std::chrono::milliseconds(2100));
  EXPECT_TRUE(e->take(1, 0).empty());
  EXPECT_EQ(silences, 1);
  EXPECT_TRUE(e->take(1, 0).empty());
  EXPECT_EQ(silences, 1) << "once per silence, not per poll";
  clock::advance(std::chrono::milliseconds(2100));
  EXPECT_TRUE(e->take(1, 0).empty());
  EXPECT_EQ(silences, 2);
  ASSERT_TRUE(target_->w
                  ->send(target_->w->connect(e->worker().address()).value(),
                         wire::encode_reply(reply(heard[0], StatusCode::kBusy)), {}, [](Status) {})
                  .is_ok());
  for (int i = 0; i < 100 && silences == 2; ++i) {
    e->take(1, 0);
    clock::advance(std::chrono::milliseconds(2100));
  }
  EXPECT_EQ(silences, 2) << "a target that answered Busy is not silent";
}

TEST_F(CallEngineTest, BusyPastTheDeadlineSaysBusy) {
  target_->answer = [](const wire::Request& q) { return std::vector{reply(q, StatusCode::kBusy)}; };
  auto e = engine();
  wire::Request q = request();
  ASSERT_TRUE(e->submit(0, q, {}, {}).is_ok());
  for (int i = 0; i < 100 && target_->heard.empty(); ++i) target_->w->progress(), e->take(1, 0);
  ASSERT_FALSE(target_->heard.empty());
  clock::advance(std::chrono::seconds(31));
  auto done = finish(*e, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].done.status.code(), StatusCode::kBusy) << done[0].done.status.to_string();
}

TEST_F(CallEngineTest, RepliesFromAnotherPeerAndDuplicatesAreDropped) {
  std::vector<wire::Request> pending;
  target_->answer = [&](const wire::Request& q) {
    pending.push_back(q);
    return std::vector<wire::Reply>{};
  };
  auto e = engine();
  wire::Request q = request();
  auto id = e->submit(0, q, {}, {});
  ASSERT_TRUE(id.is_ok());
  for (int i = 0; i < 100 && pending.empty(); ++i) target_->w->progress(), e->take(1, 0);
  ASSERT_EQ(pending.size(), 1u);

  // A rogue peer that learned the id answers first, with a failure: not from the target asked, so not taken.
  auto rogue = std::move(fabric_.create_worker()).value();
  rogue->on_message([](Incoming&) {});
  auto to_client = rogue->connect(e->worker().address());
  ASSERT_TRUE(to_client.is_ok());
  ASSERT_TRUE(
      rogue->send(*to_client, wire::encode_reply(reply(pending[0], StatusCode::kNotFound)), {}, [](Status) {}).is_ok());
  for (int i = 0; i < 100; ++i) rogue->progress(), e->take(1, 0);
  EXPECT_EQ(e->in_flight(), 1u) << "a reply from another peer finished the call";

  // The target's answer, twice: the first finishes the call, the second finds nothing.
  wire::Request second = request();
  target_->answer = [&](const wire::Request& q2) {
    wire::Reply ok = reply(pending[0]);
    std::vector<wire::Reply> out{ok, ok, reply(q2)};
    return out;
  };
  ASSERT_TRUE(e->submit(0, second, {}, {}).is_ok());
  auto done = finish(*e, 2);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& f : done) EXPECT_TRUE(f.done.status.is_ok()) << f.done.status.to_string();
  EXPECT_EQ(e->in_flight(), 0u);
}

// A notice (request id 0) from a target reaches on_notice whole; one from a peer that is not a target, or an
// empty or oversized one, does not.
TEST_F(CallEngineTest, NoticesCountOnlyFromTheTargets) {
  std::vector<wire::Request> watches;
  target_->answer = [&](const wire::Request& q) {
    watches.push_back(q);
    return std::vector{reply(q)};
  };
  auto e = engine();
  std::vector<std::string> heard;
  e->on_notice([&](std::string_view bytes) { heard.emplace_back(bytes); });
  wire::Request q = request(wire::Op::kWatch);
  ASSERT_TRUE(e->submit(0, q, {}, {}).is_ok());
  ASSERT_EQ(finish(*e, 1).size(), 1u);
  ASSERT_EQ(watches.size(), 1u);

  auto send_notice = [&](transport::Worker& from, transport::EpHandle to, std::string bytes) {
    wire::Reply r;  // request id 0
    r.length = bytes.size();
    Iov v{bytes.data(), bytes.size()};
    ASSERT_TRUE(
        from.send(to, wire::encode_reply(r), bytes.empty() ? std::span<const Iov>() : std::span(&v, 1), [](Status) {})
            .is_ok());
  };
  auto rogue = std::move(fabric_.create_worker()).value();
  rogue->on_message([](Incoming&) {});
  auto rogue_to_client = rogue->connect(e->worker().address());
  ASSERT_TRUE(rogue_to_client.is_ok());
  send_notice(*rogue, *rogue_to_client, "from a stranger");
  // The target answers on the endpoint its watch came from.
  transport::EpHandle target_to_client = 0;
  target_->answer = [&](const wire::Request& r) { return std::vector{reply(r)}; };
  target_->w->on_message([&](Incoming& in) {
    target_to_client = in.reply_to;
    ASSERT_TRUE(
        target_->w->send(in.reply_to, wire::encode_reply(reply(*wire::decode_request(in.header))), {}, [](Status) {})
            .is_ok());
  });
  wire::Request again = request(wire::Op::kWatch);
  ASSERT_TRUE(e->submit(0, again, {}, {}).is_ok());
  ASSERT_EQ(finish(*e, 1).size(), 1u);
  ASSERT_NE(target_to_client, 0u);
  send_notice(*target_->w, target_to_client, "");
  send_notice(*target_->w, target_to_client, std::string(CallEngine::kMaxNoticeBytes + 1, 'x'));
  send_notice(*target_->w, target_to_client, "from the target");
  for (int i = 0; i < 200 && heard.empty(); ++i) rogue->progress(), target_->w->progress(), e->wait(0);
  for (int i = 0; i < 50; ++i) rogue->progress(), target_->w->progress(), e->wait(0);
  EXPECT_EQ(heard, std::vector<std::string>{"from the target"});
  EXPECT_EQ(e->in_flight(), 0u) << "a notice is nobody's reply";
}

TEST_F(CallEngineTest, LargePayloadsWaitForTheSendWindow) {
  target_->answer = [](const wire::Request& q) { return std::vector{reply(q)}; };
  std::vector<char> big(transport::kLargePayloadBytes + 1, 'x');
  Iov v{big.data(), big.size()};
  std::vector<wire::Request> qs(4, request());
  // The window decides how many reach the target before the engine learns a send completed (sim: from the
  // sender's next progress).
  for (uint32_t limit : {0u, 1u}) {
    target_->heard.clear();
    CallEngine::Options o;
    o.send_limit = limit;
    auto e = engine(o);
    for (auto& q : qs) ASSERT_TRUE(e->submit(0, q, {&v, 1}, {}).is_ok());
    for (int i = 0; i < 10; ++i) target_->w->progress();
    EXPECT_EQ(target_->heard.size(), limit ? limit : qs.size()) << "send limit " << limit;
    EXPECT_EQ(finish(*e, qs.size()).size(), qs.size());
  }
  target_->payloads.clear();
  CallEngine::Options o;
  o.send_limit = 1;
  auto e = engine(o);
  for (auto& q : qs) ASSERT_TRUE(e->submit(0, q, {&v, 1}, {}).is_ok());
  auto done = finish(*e, qs.size());
  ASSERT_EQ(done.size(), qs.size());
  for (const auto& f : done) EXPECT_TRUE(f.done.status.is_ok()) << f.done.status.to_string();
  ASSERT_EQ(target_->payloads.size(), qs.size());
  for (size_t n : target_->payloads) EXPECT_EQ(n, big.size());
}

TEST_F(CallEngineTest, FinishedCallsNotYetTakenStayInFlight) {
  target_->answer = [&](const wire::Request& q) { return std::vector{reply(q)}; };
  auto e = engine();
  constexpr size_t kCalls = 5;
  for (size_t i = 0; i < kCalls; ++i) {
    wire::Request q = request();
    ASSERT_TRUE(e->submit(0, q, {}, {}).is_ok());
  }
  for (int i = 0; i < 100; ++i) target_->w->progress(), e->worker().progress();
  // All five are answered; a caller taking one at a time (the agent polls each container only while it has
  // I/O in flight) must still see the rest.
  size_t taken = 0;
  for (int i = 0; i < 1000 && taken < kCalls; ++i) {
    target_->w->progress();
    auto got = e->take(1, 0);
    taken += got.size();
    if (!got.empty()) EXPECT_EQ(e->in_flight(), kCalls - taken);
  }
  EXPECT_EQ(taken, kCalls);
  EXPECT_EQ(e->in_flight(), 0u);
}

// The lengths in flight to a target stay within the window (the session's share of its buffers), so that a
// deep queue waits in the client rather than draw Busy answers (each of which moves the whole payload again on
// libfabric); one request goes whatever its length when nothing else is in flight there.
TEST_F(CallEngineTest, RequestsWaitForRoomInTheirTargetsWindow) {
  target_->answer = [](const wire::Request&) { return std::vector<wire::Reply>{}; };  // answered by hand below
  CallEngine::Options o;
  o.target_window_bytes = 3000;
  auto e = engine(o);
  auto drive = [&] {
    for (int i = 0; i < 200; ++i) target_->w->progress(), e->take(0, 0);
  };
  auto fetch = [&](uint64_t length) {
    wire::Request q = request(wire::Op::kFetch);
    q.length = length;
    auto id = e->submit(0, q, {}, {});
    EXPECT_TRUE(id.is_ok()) << id.status().to_string();
  };
  for (int i = 0; i < 5; ++i) fetch(1000);
  drive();
  ASSERT_EQ(target_->heard.size(), 3u) << "three of 1000 bytes fill a window of 3000";
  auto answer = [&](size_t i, StatusCode code = StatusCode::kOk) {
    ASSERT_TRUE(
        target_->w->send(target_->from, wire::encode_reply(reply(target_->heard[i], code)), {}, [](Status) {}).is_ok());
    drive();
  };
  answer(0);
  EXPECT_EQ(target_->heard.size(), 4u) << "one answer makes room for one";
  answer(1, StatusCode::kBusy);  // a Busy frees its room too; it waits its backoff, then for room again
  EXPECT_EQ(target_->heard.size(), 5u);
  for (size_t i = 2; i < 5; ++i) answer(i);
  clock::advance(std::chrono::milliseconds(10));  // the Busy one's backoff passes
  drive();
  ASSERT_EQ(target_->heard.size(), 6u);
  EXPECT_EQ(target_->heard[5].request_id, target_->heard[1].request_id) << "the Busy one, sent again";
  answer(5);
  auto done = e->take(10, 0);
  ASSERT_EQ(done.size(), 5u);
  for (const auto& f : done) EXPECT_TRUE(f.done.status.is_ok()) << f.done.status.to_string();
  EXPECT_EQ(e->in_flight(), 0u);
  // Nothing overtakes a call that waits: with 2000 of 3000 in flight, a 2000 waits, and a 1000 behind it that
  // would fit waits too.
  fetch(1000);
  fetch(1000);
  fetch(2000);
  fetch(1000);
  drive();
  ASSERT_EQ(target_->heard.size(), 8u);
  answer(6);
  ASSERT_EQ(target_->heard.size(), 9u);
  EXPECT_EQ(target_->heard[8].length, 2000u) << "the waiting 2000 first";
  answer(7);
  ASSERT_EQ(target_->heard.size(), 10u);
  EXPECT_EQ(target_->heard[9].length, 1000u);
  answer(8);
  answer(9);
  EXPECT_EQ(e->take(10, 0).size(), 4u);
  // A request larger than the window goes alone.
  fetch(5000);
  fetch(1);
  drive();
  ASSERT_EQ(target_->heard.size(), 11u);
  answer(10);
  EXPECT_EQ(target_->heard.size(), 12u);
}

TEST_F(CallEngineTest, NoSuchTargetIsRefused) {
  auto e = engine();
  wire::Request q = request();
  EXPECT_EQ(e->submit(1, q, {}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->in_flight(), 0u);
}

}  // namespace
}  // namespace rfos::client
