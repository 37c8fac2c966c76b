// The ring between an app and the agent: order, wrap-around, a full queue, the wake-up protocol across threads,
// and a hostile peer's indices and entries; the control protocol's messages round trip and refuse what is malformed.
#include "agent/ring.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "agent/protocol.h"

namespace rfos::agent {
namespace {

// An app's ends over the agent's region, attached through duplicated descriptors as a second process would.
struct Pair {
  std::unique_ptr<RingRegion> agent_region, app_region;
  std::unique_ptr<AgentEnds> agent;
  std::unique_ptr<AppEnds> app;
  explicit Pair(uint32_t entries) {
    agent_region = RingRegion::create(entries, entries).value();
    app_region =
        RingRegion::attach(dup(agent_region->memfd()), dup(agent_region->sq_event()), dup(agent_region->cq_event()))
            .value();
    agent = std::make_unique<AgentEnds>(*agent_region);
    app = std::make_unique<AppEnds>(*app_region);
  }
};

Sqe sqe(uint64_t user_data) {
  Sqe e;
  e.user_data = user_data;
  e.op = static_cast<uint8_t>(RingOp::kNop);
  return e;
}

TEST(Ring, EntriesArriveInOrderAcrossWrapAround) {
  Pair p(8);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(p.app->sq.has_room().value());
      p.app->sq.push(sqe(next_in++));
    }
    p.app->sq.publish();
    uint32_t n = p.agent->sq.ready().value();
    ASSERT_EQ(n, 5u);
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(p.agent->sq.take().user_data, next_out++);
    p.agent->sq.release();
  }
}

TEST(Ring, UnpublishedEntriesAreUnseenAndAFullQueueHasNoRoom) {
  Pair p(4);
  for (int i = 0; i < 4; ++i) p.app->sq.push(sqe(i));
  EXPECT_EQ(p.agent->sq.ready().value(), 0u);  // not published yet
  EXPECT_FALSE(p.app->sq.has_room().value());
  p.app->sq.publish();
  EXPECT_EQ(p.agent->sq.ready().value(), 4u);
  p.agent->sq.take();
  EXPECT_FALSE(p.app->sq.has_room().value());  // taken but not released
  p.agent->sq.release();
  EXPECT_TRUE(p.app->sq.has_room().value());
}

TEST(Ring, ASleepingConsumerIsWokenAndABusyOneIsNot) {
  Pair p(64);
  constexpr uint64_t kCount = 200000;
  std::atomic<uint64_t> rings{0}, publishes{0};
  std::thread producer([&] {
    for (uint64_t i = 0; i < kCount;) {
      if (!p.app->sq.has_room().value()) {
        std::this_thread::yield();
        continue;
      }
      p.app->sq.push(sqe(i++));
      if (i % 7 == 0 || i == kCount) {
        ++publishes;
        rings += p.app->sq.publish() ? 1 : 0;
      }
    }
  });
  uint64_t expect = 0;
  while (expect < kCount) {
    uint32_t n = p.agent->sq.ready().value();
    if (n == 0) {
      // No lost wake-up: a wait with no limit returns once entries are published.
      ASSERT_TRUE(p.agent->sq.wait(-1).is_ok());
      continue;
    }
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(p.agent->sq.take().user_data, expect++);
    p.agent->sq.release();
  }
  producer.join();
  EXPECT_LE(rings.load(), publishes.load());  // at most once per batch (how often depends on the scheduler)
  // Rung only when the consumer said it sleeps: a busy one's eventfd stays quiet. (A ring that raced with the
  // consumer finding entries on its last look may have left a count: taken first.)
  uint64_t count = 0;
  while (read(p.agent_region->sq_event(), &count, sizeof(count)) == sizeof(count)) {
  }
  p.app->sq.push(sqe(kCount));
  EXPECT_FALSE(p.app->sq.publish());
  EXPECT_LT(read(p.agent_region->sq_event(), &count, sizeof(count)), 0);  // nonblocking: nothing there
  p.agent_region->header()->agent_idle.store(1);                          // as wait() says it before it sleeps
  p.app->sq.push(sqe(kCount + 1));
  EXPECT_TRUE(p.app->sq.publish());
  EXPECT_EQ(read(p.agent_region->sq_event(), &count, sizeof(count)), 8);
  EXPECT_EQ(count, 1u);
}

TEST(Ring, OneRingPerSleepWhateverThePublishesBeforeTheConsumerRuns) {
  Pair p(8);
  p.agent_region->header()->agent_idle.store(1);  // asleep, as wait() says it
  int rang = 0;
  for (uint64_t i = 0; i < 5; ++i) {
    p.app->sq.push(sqe(i));
    rang += p.app->sq.publish() ? 1 : 0;
  }
  EXPECT_EQ(rang, 1);
  uint64_t count = 0;
  ASSERT_EQ(read(p.agent_region->sq_event(), &count, sizeof(count)), 8);
  EXPECT_EQ(count, 1u);
  // The next sleep is rung for again, and the consumer finds all five (the wait returns at once: they are there).
  ASSERT_TRUE(p.agent->sq.wait(-1).is_ok());
  EXPECT_EQ(p.agent->sq.ready().value(), 5u);
  p.agent_region->header()->agent_idle.store(1);
  p.app->sq.push(sqe(5));
  EXPECT_TRUE(p.app->sq.publish());
}

TEST(Ring, AWaitEndsWhenTheOtherSideHangsUp) {
  Pair p(4);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  std::thread closer([&] { close(sv[1]); });
  Status s = p.app->cq.wait(-1, sv[0]);
  closer.join();
  EXPECT_EQ(s.code(), StatusCode::kShutdown);
  close(sv[0]);
}

TEST(Ring, AHostilePeersIndicesAreCaught) {
  Pair p(8);
  // The app claims 1000 entries in a ring of 8.
  p.agent_region->header()->sq_tail.store(1000);
  EXPECT_EQ(p.agent->sq.ready().status().code(), StatusCode::kCorruption);
  // The app moves the completion queue's head past what the agent published.
  p.agent_region->header()->cq_head.store(50);
  EXPECT_EQ(p.agent->cq.has_room().status().code(), StatusCode::kCorruption);
}

TEST(Ring, TheAppCannotShrinkOrResizeTheRegion) {
  auto r = RingRegion::create(8, 8).value();
  int fd = dup(r->memfd());
  EXPECT_NE(ftruncate(fd, 4096 * 1000), 0);
  EXPECT_NE(ftruncate(fd, 0), 0);
  EXPECT_NE(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);  // sealed against more seals, too
  close(fd);
}

TEST(Ring, AttachRefusesWhatIsNotARing) {
  auto r = RingRegion::create(8, 8).value();
  r->header()->magic = 0;
  EXPECT_EQ(RingRegion::attach(dup(r->memfd()), dup(r->sq_event()), dup(r->cq_event())).status().code(),
            StatusCode::kInvalidArgument);
  r->header()->magic = kRingMagic;
  r->header()->sq_entries = 1024;  // the region is too small for that
  EXPECT_EQ(RingRegion::attach(dup(r->memfd()), dup(r->sq_event()), dup(r->cq_event())).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RingRegion::create(6, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RingRegion::create(8, kMaxRingEntries * 2).status().code(), StatusCode::kInvalidArgument);
}

TEST(Ring, SubmissionsAreCheckedAgainstTheSharedBuffer) {
  Sqe e;
  e.op = static_cast<uint8_t>(RingOp::kWrite);
  e.dkey_len = 4;
  e.akey_len = 4;
  e.length = 4096;
  e.buf = 0;
  EXPECT_TRUE(check_sqe(e, 1 << 20, 1 << 20).is_ok());
  Sqe past = e;
  past.buf = (1 << 20) - 100;
  EXPECT_EQ(check_sqe(past, 1 << 20, 1 << 20).code(), StatusCode::kInvalidArgument);
  Sqe wrap = e;
  wrap.buf = ~uint64_t{0} - 10;  // buf + length wraps around
  EXPECT_EQ(check_sqe(wrap, 1 << 20, 1 << 20).code(), StatusCode::kInvalidArgument);
  Sqe keys = e;
  keys.dkey_len = 70;
  keys.akey_len = 10;
  EXPECT_EQ(check_sqe(keys, 1 << 20, 1 << 20).code(), StatusCode::kInvalidArgument);
  Sqe op = e;
  op.op = 9;
  EXPECT_EQ(check_sqe(op, 1 << 20, 1 << 20).code(), StatusCode::kInvalidArgument);
  Sqe flags = e;
  flags.flags = 1;
  EXPECT_EQ(check_sqe(flags, 1 << 20, 1 << 20).code(), StatusCode::kInvalidArgument);
  Sqe big = e;
  big.length = (1 << 20) + 1;
  EXPECT_EQ(check_sqe(big, 4 << 20, 1 << 20).code(), StatusCode::kInvalidArgument);
}

TEST(Protocol, MessagesRoundTripAndMalformedOnesAreRefused) {
  Message open;
  open.type = MsgType::kOpen;
  open.id = 7;
  open.pool = "p";
  open.cont = "c";
  open.write = true;
  auto back = decode_message(encode_message(open));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->pool, "p");
  EXPECT_EQ(back->cont, "c");
  EXPECT_TRUE(back->write);
  EXPECT_EQ(back->id, 7u);
  std::string bytes = encode_message(open);
  EXPECT_FALSE(decode_message(bytes.substr(0, bytes.size() - 1)).is_ok());  // short
  EXPECT_FALSE(decode_message(bytes + "x").is_ok());                        // bytes left over
  bytes[0] = 99;
  EXPECT_FALSE(decode_message(bytes).is_ok());  // unknown type
  Message err = error_message(3, error(StatusCode::kPermissionDenied, "no"));
  auto e = decode_message(encode_message(err));
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(status_of(*e).code(), StatusCode::kPermissionDenied);
  err.code = 0;  // an error that says it is none
  EXPECT_FALSE(decode_message(encode_message(err)).is_ok());
  EXPECT_FALSE(decode_message(std::string(kMaxMessageBytes + 1, '\1')).is_ok());
  Message mount;
  mount.type = MsgType::kMount;
  mount.pool = "p";
  mount.cont = "c";
  mount.text = "fsname=rfos:p/c\n";
  auto m = decode_message(encode_message(mount));
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->type, MsgType::kMount);
  EXPECT_EQ(m->text, mount.text);
  EXPECT_EQ(m->cont, "c");
  Message control;
  control.type = MsgType::kControl;
  control.text = "rfos.wire.PoolListRequest";
  control.blob = std::string(40000, '\x01');
  auto c = decode_message(encode_message(control));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->blob, control.blob);
  // Every type round-trips with nothing left over (a field one side writes and the other does not read).
  for (MsgType t : {MsgType::kHello, MsgType::kSetup, MsgType::kOpen, MsgType::kClose, MsgType::kKeys, MsgType::kMount,
                    MsgType::kControl, MsgType::kObject, MsgType::kChunk, MsgType::kNext, MsgType::kWelcome,
                    MsgType::kReady, MsgType::kOpened, MsgType::kDone, MsgType::kControlled}) {
    Message any;
    any.type = t;
    any.value = 1;
    any.dkey = "d";
    any.text = "t";
    auto r = decode_message(encode_message(any));
    EXPECT_TRUE(r.is_ok()) << static_cast<int>(t) << ": " << r.status().to_string();
  }
  Message object;
  object.type = MsgType::kObject;
  object.pool = "p";
  object.cont = "c";
  object.text = "/dir";
  object.value = static_cast<uint64_t>(ObjectOp::kListDir);
  object.buffer_bytes = 7;
  object.dkey = "anchor";
  object.epoch = 9;
  auto o = decode_message(encode_message(object));
  ASSERT_TRUE(o.is_ok()) << o.status().to_string();
  EXPECT_EQ(o->dkey, "anchor");
  EXPECT_EQ(o->epoch, 9u);
  EXPECT_EQ(o->buffer_bytes, 7u);
  // A batch of files: what decodes, and what a get's capacities past the buffer or a short batch are refused as.
  std::string get;
  uint32_t two = 2;
  get.append(reinterpret_cast<const char*>(&two), 4);
  for (const char* name : {"a", "b"}) {
    uint16_t len = 1;
    uint64_t cap = 600;
    get.append(reinterpret_cast<const char*>(&len), 2);
    get += name;
    get.append(reinterpret_cast<const char*>(&cap), 8);
  }
  auto batch = decode_file_batch(get, false, 1200);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  EXPECT_EQ((*batch)[1].name, "b");
  EXPECT_EQ((*batch)[1].capacity, 600u);
  EXPECT_FALSE(decode_file_batch(get, false, 1199).is_ok());
  EXPECT_FALSE(decode_file_batch(get.substr(0, get.size() - 1), false, 1200).is_ok());
  EXPECT_FALSE(decode_file_batch(get, true, 1200).is_ok());  // not a put's layout
  std::string cut = encode_message(control);
  EXPECT_FALSE(decode_message(cut.substr(0, cut.size() - 1)).is_ok());  // a blob past the end
}

}  // namespace
}  // namespace rfos::agent
