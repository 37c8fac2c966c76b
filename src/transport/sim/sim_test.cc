// The simulated fabric does what the real ones do, and what they do wrong on demand.
#include "transport/sim/sim.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

namespace rfos::transport::sim {
namespace {

struct Peer {
  std::unique_ptr<Worker> w;
  std::vector<std::string> heard;
  std::vector<EpHandle> from;
  std::vector<EpHandle> failed;
  std::string payload;  // the last payload taken
};

std::unique_ptr<Peer> make(Fabric& f, const WorkerOptions& o = {}) {
  auto p = std::make_unique<Peer>();
  auto w = f.create_worker(o);
  EXPECT_TRUE(w.is_ok()) << w.status().to_string();
  p->w = std::move(w).value();
  Peer* raw = p.get();
  raw->w->on_message([raw](Incoming& in) {
    raw->heard.emplace_back(in.header);
    raw->from.push_back(in.reply_to);
    if (in.payload_bytes) {
      raw->payload.assign(in.payload_bytes, '\0');
      Iov v{raw->payload.data(), raw->payload.size()};
      EXPECT_TRUE(raw->w->fetch_payload(in, {&v, 1}, [](Status s) { EXPECT_TRUE(s.is_ok()); }).is_ok());
    }
  });
  raw->w->on_peer_failure([raw](EpHandle h, const Status&) { raw->failed.push_back(h); });
  return p;
}

// Progresses every worker until `done` or 10000 rounds.
bool until(std::initializer_list<Peer*> peers, const std::function<bool()>& done) {
  for (int i = 0; i < 10000 && !done(); ++i)
    for (Peer* p : peers) p->w->progress();
  return done();
}

TEST(SimFabric, MessagesPayloadsAndReplies) {
  Fabric f;
  auto a = make(f), b = make(f);
  auto ep = a->w->connect(b->w->address());
  ASSERT_TRUE(ep.is_ok());
  std::string data = "payload bytes";
  Iov v{data.data(), data.size()};
  bool sent = false;
  ASSERT_TRUE(a->w->send(*ep, "hello", {&v, 1}, [&](Status s) { sent = s.is_ok(); }).is_ok());
  EXPECT_FALSE(sent) << "a send completes from progress(), not inside send()";
  ASSERT_TRUE(until({a.get(), b.get()}, [&] { return sent && b->heard.size() == 1; }));
  EXPECT_EQ(b->heard[0], "hello");
  EXPECT_EQ(b->payload, data);
  ASSERT_TRUE(b->w->send(b->from[0], "answer", {}, [](Status) {}).is_ok());
  ASSERT_TRUE(until({a.get(), b.get()}, [&] { return a->heard.size() == 1; }));
  EXPECT_EQ(a->from[0], *ep) << "the answer comes on the endpoint that asked";
  EXPECT_EQ(a->w->connect("sim:nobody").status().code(), StatusCode::kShutdown);
}

TEST(SimFabric, RemoteKeysAreChecked) {
  Fabric f;
  auto a = make(f), b = make(f);
  std::vector<char> mem(4096, 'x');
  auto reg = b->w->register_memory(mem.data(), mem.size());
  ASSERT_TRUE(reg.is_ok());
  auto ep = a->w->connect(b->w->address());
  char buf[16];
  Iov v{buf, sizeof(buf)};
  auto op = [&](bool put, uint64_t at, const std::string& key) {
    Status got = error(StatusCode::kInternal, "not done");
    bool done = false;
    Status s = put ? a->w->put(*ep, {&v, 1}, at, key, [&](Status st) { got = st, done = true; })
                   : a->w->get(*ep, at, key, {&v, 1}, [&](Status st) { got = st, done = true; });
    if (!s.is_ok()) return s;
    until({a.get(), b.get()}, [&] { return done; });
    return got;
  };
  std::memcpy(buf, "0123456789abcdef", 16);
  EXPECT_TRUE(op(true, reg->remote_base + 100, reg->rkey).is_ok());
  EXPECT_EQ(std::string(mem.data() + 100, 16), "0123456789abcdef");
  EXPECT_TRUE(op(false, reg->remote_base + 4080, reg->rkey).is_ok());
  EXPECT_EQ(op(false, reg->remote_base + 4081, reg->rkey).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(op(false, reg->remote_base - 1, reg->rkey).code(), StatusCode::kPermissionDenied);
  std::string other = reg->rkey;
  other[0] ^= 0x40;
  EXPECT_EQ(op(true, reg->remote_base, other).code(), StatusCode::kPermissionDenied);
  b->w->deregister_memory(*reg);
  EXPECT_EQ(op(false, reg->remote_base, reg->rkey).code(), StatusCode::kPermissionDenied);
}

TEST(SimFabric, DeadPeersFailTheirEndpoints) {
  Fabric f;
  auto a = make(f), b = make(f);
  auto ep = a->w->connect(b->w->address());
  ASSERT_TRUE(a->w->send(*ep, "before", {}, [](Status) {}).is_ok());
  ASSERT_TRUE(until({a.get(), b.get()}, [&] { return b->heard.size() == 1; }));
  f.kill(b->w->address());
  ASSERT_TRUE(until({a.get()}, [&] { return a->failed.size() == 1; }));
  EXPECT_EQ(a->failed[0], *ep);
  EXPECT_EQ(a->w->send(*ep, "after", {}, [](Status) {}).code(), StatusCode::kShutdown);
  // A worker destroyed is a process gone: the same.
  auto c = make(f);
  auto to_c = a->w->connect(c->w->address());
  ASSERT_TRUE(to_c.is_ok());
  c.reset();
  ASSERT_TRUE(until({a.get()}, [&] { return a->failed.size() == 2; }));
}

TEST(SimFabric, HellosAreAdmittedByTheirIntroduction) {
  Fabric f;
  WorkerOptions o;
  o.introduced_peers_only = true;
  o.admit_hello = [](std::string_view token) { return token == "good"; };
  auto target = make(f, o), good = make(f), bad = make(f);
  good->w->set_introduction("good");
  bad->w->set_introduction("forged");
  ASSERT_TRUE(bad->w->send(*bad->w->connect(target->w->address()), "from bad", {}, [](Status) {}).is_ok());
  ASSERT_TRUE(good->w->send(*good->w->connect(target->w->address()), "from good", {}, [](Status) {}).is_ok());
  ASSERT_TRUE(until({target.get(), good.get(), bad.get()}, [&] { return !target->heard.empty(); }));
  ASSERT_TRUE(until({target.get()}, [&] { return target->w->unproved_dropped() == 1; }));
  EXPECT_EQ(target->heard, std::vector<std::string>{"from good"});
}

// With delays, messages are reordered, drops and duplicates happen as often as asked, and a run is a function
// of its seed.
std::vector<std::string> run(uint64_t seed, Fabric::Counters* counters) {
  Fabric f({seed, 4, 0.1, 0.1});
  auto a = make(f), b = make(f);
  auto ep = a->w->connect(b->w->address());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(a->w->send(*ep, std::to_string(i), {}, [](Status) {}).is_ok());
  for (int i = 0; i < 50; ++i) b->w->progress();
  *counters = f.counters();
  return b->heard;
}

TEST(SimFabric, SeededFaults) {
  Fabric::Counters c1, c2, c3;
  auto first = run(7, &c1);
  auto again = run(7, &c2);
  auto other = run(8, &c3);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_EQ(first.size(), c1.delivered);
  EXPECT_EQ(c1.delivered, 1000 - c1.dropped + c1.duplicated);
  EXPECT_GT(c1.dropped, 50u);
  EXPECT_LT(c1.dropped, 150u);
  EXPECT_GT(c1.duplicated, 50u);
  EXPECT_LT(c1.duplicated, 150u);
  EXPECT_FALSE(std::is_sorted(first.begin(), first.end(),
                              [](const std::string& x, const std::string& y) { return std::stoi(x) < std::stoi(y); }));
}

}  // namespace
}  // namespace rfos::transport::sim
