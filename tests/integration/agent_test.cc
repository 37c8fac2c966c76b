// `rfos agent` against a real `rfos server` on loopback: apps do I/O through the agent's ring and shared buffer
// while holding no capability, key or endpoint; the server lets the agent act for an app's user only where its
// config trusts it; what the app's user may open is still what the ACLs grant; a hostile app's ring and
// submissions are refused; an app that dies leaves nothing behind; an agent that dies fails its apps at once
// and a new one serves them again.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "agent/agent.h"
#include "agent/agent_client.h"
#include "agent/seal.h"
#include "c_api_keys.h"
#include "client/container.h"
#include "client/control_client.h"
#include "client/file_layout.h"
#include "client/named_objects.h"
#include "engine/engine_testing.h"
#include "posix/namespace.h"
#include "rfos/rfos.h"
#include "rfos/rfos_fs.h"
#include "server_process.h"

namespace rfos::agent {
namespace {

using namespace std::chrono_literals;

constexpr uid_t kNobody = 65534;

class AgentTest : public ::testing::Test {
 protected:
  // A server whose config trusts this process's user (root) as an agent for `trusted_for`, or no agent at all.
  void start_server(const std::string& trusted_for) {
    std::vector<std::string> extra = {"--provider", "ucx+tcp"};
    if (!trusted_for.empty()) extra.insert(extra.end(), {"--trust-agent", "root=" + trusted_for});
    server_ = std::make_unique<testing::ServerProcess>(dir_.path() + "/data", extra);
    ASSERT_TRUE(server_->start());
    control_ = client::ControlClient::create(server_->address());
    ASSERT_TRUE(control_->pool_create("p").is_ok());
    ASSERT_TRUE(control_->cont_create("p", "c", {}).is_ok());
  }

  AgentConfig agent_config() {
    AgentConfig c;
    c.control_address = server_->address();
    c.listen = dir_.path() + "/agent/agent.sock";
    c.timeout_ms = 10000;
    return c;
  }

  void start_agent() { start_agent(agent_config()); }
  void start_agent(const AgentConfig& c) {
    auto a = Agent::start(c);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    agent_ = std::move(a).value();
  }

  // An agent whose one tenant (root's apps) seals its data, with a key of its own.
  AgentConfig sealing_agent() {
    std::string key = dir_.path() + "/tenant.key";
    std::ofstream(key) << std::string(64, 'c');
    chmod(key.c_str(), 0600);
    AgentConfig c = agent_config();
    c.state_dir = dir_.path() + "/agent-state";
    c.tenants = {{"sealed", {"root"}, {}, key, 1, {}}};
    return c;
  }

  // An agent on `listen` whose one tenant (root's apps) is held to 200 I/Os a second, burst 10.
  AgentConfig limited_agent(const std::string& listen) {
    AgentConfig c = agent_config();
    c.listen = listen;
    TenantConfig t{"limited", {"root"}, {}, "", 1, {}};
    t.qos.iops = 200;
    t.qos.burst_ios = 10;
    c.tenants = {t};
    return c;
  }

  std::unique_ptr<AgentClient> connect() {
    AgentClientOptions o;
    o.buffer_bytes = 8 << 20;
    o.entries = 64;
    auto c = AgentClient::connect(dir_.path() + "/agent/agent.sock", o);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c.is_ok() ? std::move(c).value() : nullptr;
  }

  engine::testing::TempDir dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<client::ControlClient> control_;
  std::unique_ptr<Agent> agent_;
};

void fill(std::span<uint8_t> s, uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& b : s) b = static_cast<uint8_t>(rng());
}

TEST_F(AgentTest, AnAppDoesItsIoThroughTheAgentAndHoldsNoKey) {
  start_server("root");
  start_agent();
  auto app = connect();
  ASSERT_TRUE(app);
  EXPECT_EQ(app->tenant(), "root");  // no tenants configured: each user its own
  auto h = app->open("p", "c", true);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  const ObjectId oid{7, 9};
  auto buf = app->buffer();
  // 1 MiB written and read back synchronously.
  fill(buf.subspan(0, 1 << 20), 1);
  ASSERT_TRUE(app->write(*h, oid, "d", "a", 0, buf.subspan(0, 1 << 20)).is_ok());
  ASSERT_TRUE(app->read(*h, oid, "d", "a", 0, buf.subspan(2 << 20, 1 << 20)).is_ok());
  EXPECT_EQ(std::memcmp(buf.data(), buf.data() + (2 << 20), 1 << 20), 0);
  // 64 writes of 4 KiB in flight at once, then their reads.
  for (uint64_t i = 0; i < 64; ++i) {
    fill(buf.subspan(4096 * i, 4096), 100 + i);
    ASSERT_TRUE(app->submit(RingOp::kWrite, *h, oid, "d2", "a", 4096 * i, buf.subspan(4096 * i, 4096), i).is_ok());
  }
  std::set<uint64_t> done;
  while (done.size() < 64) {
    auto got = app->poll(64, 10000);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_FALSE(got->empty()) << "no completion within 10 s";
    for (auto& c : *got) {
      EXPECT_TRUE(c.status.is_ok()) << c.status.to_string();
      EXPECT_EQ(c.length, 4096u);
      done.insert(c.user_data);
    }
  }
  EXPECT_EQ(app->array_size(*h, oid, "d2", "a").value(), 64u * 4096);
  // What the agent stored is what the native client reads.
  auto native = client::Container::open(*control_, "p", "c").value();
  std::vector<uint8_t> back(64 * 4096);
  ASSERT_TRUE(native->read(oid, "d2", "a", 0, back).is_ok());
  EXPECT_EQ(std::memcmp(back.data(), buf.data(), back.size()), 0);
  // Bytes outside the shared buffer are refused before anything is sent.
  std::vector<uint8_t> mine(4096);
  EXPECT_EQ(app->write(*h, oid, "d", "a", 0, mine).code(), StatusCode::kInvalidArgument);
  // A handle the app was never given is refused by the agent.
  EXPECT_EQ(app->write(*h + 100, oid, "d", "a", 0, buf.subspan(0, 4096)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(app->close(*h).is_ok());
  EXPECT_EQ(app->close(*h).code(), StatusCode::kInvalidArgument);
}

// Deeper than a container hands out in one poll (64): when every call of a container has finished, those not
// yet taken must still be (the agent polls a container only while it has I/O in flight; it used to take 64 and
// spin forever over the rest, with the app waiting for them).
TEST_F(AgentTest, AllOfADeepQueuesCompletionsArrive) {
  start_server("root");
  start_agent();
  AgentClientOptions o;
  o.buffer_bytes = 8 << 20;
  o.entries = 256;
  auto app = AgentClient::connect(dir_.path() + "/agent/agent.sock", o);
  ASSERT_TRUE(app.is_ok()) << app.status().to_string();
  auto h = (*app)->open("p", "c", true);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  const ObjectId oid{7, 10};
  auto buf = (*app)->buffer();
  ASSERT_TRUE((*app)->write(*h, oid, "d", "a", 0, buf.subspan(0, 1 << 20)).is_ok());
  for (int round = 0; round < 8; ++round) {
    for (uint64_t i = 0; i < 256; ++i)
      ASSERT_TRUE(
          (*app)->submit(RingOp::kRead, *h, oid, "d", "a", 4096 * (i % 256), buf.subspan(4096 * i, 4096), i).is_ok());
    size_t done = 0;
    while (done < 256) {
      auto got = (*app)->poll(256, 10000);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      ASSERT_FALSE(got->empty()) << "round " << round << ": " << 256 - done << " reads never completed";
      for (auto& c : *got) EXPECT_TRUE(c.status.is_ok()) << c.status.to_string();
      done += got->size();
    }
  }
  EXPECT_TRUE((*app)->close(*h).is_ok());
}

TEST_F(AgentTest, AnUntrustedAgentMayActOnlyForItself) {
  start_server("");
  start_agent();
  auto app = connect();
  ASSERT_TRUE(app);
  auto h = app->open("p", "c", true);
  EXPECT_EQ(h.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(h.status().message().find("not a trusted agent"), std::string::npos) << h.status().to_string();
}

TEST_F(AgentTest, TrustForAnyUserCoversNoAdministrator) {
  start_server("*");
  start_agent();
  auto app = connect();  // this process runs as root: an administrator, not covered by "*"
  ASSERT_TRUE(app);
  EXPECT_EQ(app->open("p", "c", true).status().code(), StatusCode::kPermissionDenied);
}

// In a child of another user (nobody): it cannot attach to the root tenant's ring or buffer, and what it may open
// through the agent is what the ACLs grant that user.
TEST_F(AgentTest, AnotherUsersAppGetsWhatTheAclsGrantIt) {
  start_server("*");
  ASSERT_TRUE(control_->cont_create("p", "shared", {}, {"A::nobody@:rw"}).is_ok());
  ASSERT_TRUE(control_->acl_update("p", "", {"A::nobody@:r"}).is_ok());  // the pool's read, to connect at all
  start_agent();
  chmod(dir_.path().c_str(), 0755);
  std::string sock = dir_.path() + "/agent/agent.sock";
  // A root app with its ring and buffer: the memfds this process (agent and app) holds for them.
  auto root_app = connect();
  ASSERT_TRUE(root_app);
  std::vector<std::string> memfds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.find("memfd:rfos-") != std::string::npos)
      memfds.push_back("/proc/" + std::to_string(getpid()) + "/fd/" + e.path().filename().string());
  }
  ASSERT_GE(memfds.size(), 2u);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(10);
    // Another user cannot attach to the root tenant's ring or buffer through /proc.
    for (const std::string& m : memfds) {
      int fd = ::open(m.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0 || errno != EACCES) _exit(20);
    }
    AgentClientOptions o;
    o.buffer_bytes = 1 << 20;
    auto app = AgentClient::connect(sock, o);
    if (!app.is_ok()) _exit(11);
    if ((*app)->tenant() != "nobody") _exit(12);
    if ((*app)->open("p", "c", true).status().code() != StatusCode::kPermissionDenied) _exit(13);
    auto h = (*app)->open("p", "shared", true);
    if (!h.is_ok()) {
      std::fprintf(stderr, "open shared: %s\n", h.status().to_string().c_str());
      _exit(14);
    }
    auto buf = (*app)->buffer();
    std::memset(buf.data(), 0x5a, 4096);
    if (!(*app)->write(*h, {1, 1}, "d", "a", 0, buf.subspan(0, 4096)).is_ok()) _exit(15);
    // Control calls relayed by the (root) agent are made as nobody: nobody's name, nobody's rights.
    auto relayed = client::ControlClient::relayed(
        [&](const std::string& type, const std::string& req) { return (*app)->relay_control(type, req); });
    auto info = relayed->server_info();
    if (!info.is_ok() || info->caller != "nobody (uid 65534)" || !info->data_dir.empty()) _exit(16);
    if (relayed->cont_create("p", "mine", {}).status().code() != StatusCode::kPermissionDenied) _exit(17);
    if (!relayed->cont_query("p", "shared").is_ok()) _exit(18);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The write was made as nobody, into the container nobody may write.
  auto native = client::Container::open(*control_, "p", "shared").value();
  std::vector<uint8_t> back(4096);
  ASSERT_TRUE(native->read({1, 1}, "d", "a", 0, back).is_ok());
  EXPECT_EQ(back[0], 0x5a);
}

// The control plane through the agent (`rfos --agent`): every control call but the session ones, made for the
// app's user, with no channel to the server in the app; what does not parse, or is unknown, is refused.
TEST_F(AgentTest, ControlCallsAreRelayedForTheAppsUserButNeverASession) {
  start_server("root");
  start_agent();
  AgentClientOptions o;
  o.ring = false;
  auto app = AgentClient::connect(dir_.path() + "/agent/agent.sock", o);
  ASSERT_TRUE(app.is_ok()) << app.status().to_string();
  auto relayed = client::ControlClient::relayed(
      [&](const std::string& type, const std::string& req) { return (*app)->relay_control(type, req); });
  auto pools = relayed->pool_list();
  ASSERT_TRUE(pools.is_ok()) << pools.status().to_string();
  ASSERT_EQ(pools->size(), 1u);
  EXPECT_EQ(pools->front().label, "p");
  ASSERT_TRUE(relayed->cont_create("p", "through-agent", {}).is_ok());
  EXPECT_TRUE(control_->cont_query("p", "through-agent").is_ok());
  EXPECT_EQ(relayed->cont_query("p", "nope").status().code(), StatusCode::kUnknownContainer);
  auto info = relayed->server_info();
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->caller, "root (uid 0)");
  // A session would hand the app a capability: never relayed.
  EXPECT_EQ(relayed->connect("p", "c", true).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(client::Container::open(*relayed, "p", "c").status().code(), StatusCode::kNotSupported);
  EXPECT_EQ((*app)->relay_control("rfos.wire.RenewRequest", "").status().code(), StatusCode::kNotSupported);
  EXPECT_EQ((*app)->relay_control("rfos.wire.NoSuchRequest", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*app)->relay_control("rfos.wire.PoolQueryRequest", std::string("\xff\xff\xff", 3)).status().code(),
            StatusCode::kInvalidArgument);
  // The connection is still good after the refusals.
  EXPECT_TRUE(relayed->pool_query("p").is_ok());
}

// Named objects and files through the agent (`rfos put/get/stat/rm/ls` with --agent): the bytes go a chunk at a
// time through the shared buffer, the container is opened by the agent for the app's user, and what is stored
// is what the native client reads.
TEST_F(AgentTest, NamedObjectsAndFilesGoThroughTheAgent) {
  start_server("root");
  start_agent();
  AgentClientOptions o;
  o.buffer_bytes = 1 << 20;  // a 3.5 MiB object in four chunks
  auto app = AgentClient::connect(dir_.path() + "/agent/agent.sock", o);
  ASSERT_TRUE(app.is_ok()) << app.status().to_string();
  std::vector<uint8_t> data((7 << 20) / 2);
  fill(data, 5);
  auto source_of = [](const std::vector<uint8_t>& bytes) {
    auto at = std::make_shared<size_t>(0);
    return [&bytes, at](std::span<uint8_t> out) -> Result<size_t> {
      size_t n = std::min(out.size(), bytes.size() - *at);
      std::memcpy(out.data(), bytes.data() + *at, n);
      *at += n;
      return n;
    };
  };
  for (const std::string key : {"dataset/shard-0", "/shard-0.bin"}) {
    auto stored = (*app)->put_object("p", "c", key, 0640, source_of(data));
    ASSERT_TRUE(stored.is_ok()) << key << ": " << stored.status().to_string();
    EXPECT_EQ(*stored, data.size());
    std::vector<uint8_t> back;
    auto got = (*app)->get_object("p", "c", key, [&](std::span<const uint8_t> b) {
      back.insert(back.end(), b.begin(), b.end());
      return Status::ok();
    });
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_TRUE(back == data) << key;
    auto st = (*app)->object_call(ObjectOp::kStat, "p", "c", key);
    ASSERT_TRUE(st.is_ok());
    EXPECT_EQ(st->value, data.size());
  }
  // What the native client reads is what went through the agent.
  auto native = client::Container::open(*control_, "p", "c").value();
  std::vector<uint8_t> back;
  ASSERT_TRUE(client::NamedObjects(*native)
                  .get("dataset/shard-0",
                       [&](std::span<const uint8_t> b) {
                         back.insert(back.end(), b.begin(), b.end());
                         return Status::ok();
                       })
                  .is_ok());
  EXPECT_TRUE(back == data);
  auto list = (*app)->object_call(ObjectOp::kList, "p", "c", "");
  ASSERT_TRUE(list.is_ok());
  EXPECT_NE(list->blob.find("N " + std::to_string(data.size()) + " dataset/shard-0\n"), std::string::npos);
  EXPECT_TRUE((*app)->object_call(ObjectOp::kRemove, "p", "c", "dataset/shard-0").is_ok());
  EXPECT_TRUE((*app)->object_call(ObjectOp::kRemove, "p", "c", "/shard-0.bin").is_ok());
  EXPECT_EQ((*app)->object_call(ObjectOp::kStat, "p", "c", "dataset/shard-0").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*app)
                ->get_object("p", "c", "/shard-0.bin", [](std::span<const uint8_t>) { return Status::ok(); })
                .status()
                .code(),
            StatusCode::kNotFound);
  // A source that fails mid-way leaves no object of that name.
  auto failing = [n = 0](std::span<uint8_t> out) mutable -> Result<size_t> {
    if (n++ == 2) return error(StatusCode::kIoError, "the disk went away");
    std::memset(out.data(), 1, out.size());
    return out.size();
  };
  EXPECT_EQ((*app)->put_object("p", "c", "half", 0640, failing).status().code(), StatusCode::kIoError);
  EXPECT_EQ((*app)->object_call(ObjectOp::kStat, "p", "c", "half").status().code(), StatusCode::kNotFound);
  // And a sink that fails mid-way ends the get, the connection still good.
  ASSERT_TRUE((*app)->put_object("p", "c", "whole", 0640, source_of(data)).is_ok());
  auto full = [](std::span<const uint8_t>) { return error(StatusCode::kNoSpace, "the local disk is full"); };
  EXPECT_EQ((*app)->get_object("p", "c", "whole", full).status().code(), StatusCode::kNoSpace);
  EXPECT_TRUE((*app)->object_call(ObjectOp::kStat, "p", "c", "whole").is_ok());
}

// An app that speaks the protocol itself (not through AgentClient, which refuses to break the rules).
struct RawApp {
  int fd = -1;
  std::unique_ptr<RingRegion> ring;
  std::unique_ptr<AppEnds> ends;
  uint64_t buffer_bytes = 0;
  ~RawApp() {
    if (fd >= 0) close(fd);
  }
  bool start(const std::string& sock) {
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock.c_str(), sizeof(a.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
    Message m;
    m.type = MsgType::kHello;
    m.version = kProtocolVersion;
    if (ask(m).type != MsgType::kWelcome) return false;
    m.type = MsgType::kSetup;
    m.sq_entries = m.cq_entries = 8;
    m.buffer_bytes = 1 << 20;
    std::vector<int> fds;
    Message r = ask(m, &fds);
    if (r.type != MsgType::kReady || fds.size() != 4) return false;
    close(fds[1]);
    buffer_bytes = r.buffer_bytes;
    ring = RingRegion::attach(fds[0], fds[2], fds[3]).value();
    ends = std::make_unique<AppEnds>(*ring);
    return true;
  }
  Message ask(const Message& m, std::vector<int>* fds = nullptr) {
    std::string b = encode_message(m);
    if (send(fd, b.data(), b.size(), 0) != static_cast<ssize_t>(b.size())) return {};
    char buf[kMaxMessageBytes];
    iovec iov{buf, sizeof(buf)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control;
    h.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd, &h, 0);
    if (n <= 0) return {};
    if (cmsghdr* c = CMSG_FIRSTHDR(&h); c && fds) {
      fds->resize((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      std::memcpy(fds->data(), CMSG_DATA(c), fds->size() * sizeof(int));
    }
    return decode_message(std::string_view(buf, static_cast<size_t>(n))).value();
  }
  // Opens container c of pool p for writing: its handle's message (kOpened), or another.
  Message open_c() {
    Message open;
    open.type = MsgType::kOpen;
    open.pool = "p";
    open.cont = "c";
    open.write = true;
    return ask(open);
  }
  // Submits one entry and returns its completion's code.
  uint16_t submit(const Sqe& e) {
    ends->sq.push(e);
    ends->sq.publish();
    while (ends->cq.ready().value() == 0)
      if (!ends->cq.wait(10000, fd).is_ok()) return 0xffff;
    Cqe c = ends->cq.take();
    ends->cq.release();
    return c.code;
  }
};

TEST_F(AgentTest, AHostileAppsSubmissionsAndRingAreRefused) {
  start_server("root");
  start_agent();
  RawApp app;
  ASSERT_TRUE(app.start(dir_.path() + "/agent/agent.sock"));
  Message opened = app.open_c();
  ASSERT_EQ(opened.type, MsgType::kOpened);
  Sqe e;
  e.op = static_cast<uint8_t>(RingOp::kRead);
  e.cont = opened.handle;
  e.dkey_len = e.akey_len = 1;
  e.keys[0] = 'd';
  e.keys[1] = 'a';
  e.length = 4096;
  // Bytes past the shared buffer: the agent's memory beyond it must not be read or written.
  e.buf = app.buffer_bytes - 100;
  EXPECT_EQ(app.submit(e), static_cast<uint16_t>(StatusCode::kInvalidArgument));
  // A handle the agent never gave this app.
  e.buf = 0;
  e.cont = opened.handle + 7;
  EXPECT_EQ(app.submit(e), static_cast<uint16_t>(StatusCode::kInvalidArgument));
  // An unknown op, and a well-formed one that works.
  e.cont = opened.handle;
  e.op = 77;
  EXPECT_EQ(app.submit(e), static_cast<uint16_t>(StatusCode::kInvalidArgument));
  e.op = static_cast<uint8_t>(RingOp::kWrite);
  EXPECT_EQ(app.submit(e), 0);
  // A control message the agent does not take from an app, and a malformed one (the latter ends the connection).
  Message odd;
  odd.type = MsgType::kReady;
  EXPECT_EQ(app.ask(odd).type, MsgType::kError);
  // A tail a thousand entries past the head: the ring is broken and the agent hangs up on the app.
  app.ring->header()->sq_tail.store(app.ring->header()->sq_head.load() + 1000);
  uint64_t one = 1;
  ASSERT_EQ(write(app.ring->sq_event(), &one, sizeof(one)), 8);
  char b;
  pollfd p{app.fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  EXPECT_EQ(recv(app.fd, &b, 1, 0), 0);  // end of stream
  EXPECT_TRUE(testing::poll_until([&] { return agent_->apps() == 0; }, 10s, 10ms));
}

// A user that opens connection after connection (each holds a thread of the agent) is refused past its share;
// one that goes frees its place.
TEST_F(AgentTest, OneUserCannotTakeEveryConnection) {
  start_server("root");
  AgentConfig c = agent_config();
  c.max_apps_per_user = 2;
  auto a = Agent::start(c);
  ASSERT_TRUE(a.is_ok());
  agent_ = std::move(a).value();
  auto first = connect(), second = connect();
  ASSERT_TRUE(first && second);
  auto third = AgentClient::connect(dir_.path() + "/agent/agent.sock");
  EXPECT_EQ(third.status().code(), StatusCode::kBusy) << third.status().to_string();
  first.reset();
  EXPECT_TRUE(testing::poll_until([&] { return agent_->apps() == 1; }, 10s, 10ms));
  EXPECT_TRUE(connect());
}

TEST_F(AgentTest, AnAppKilledMidIoLeavesNothingBehind) {
  start_server("root");
  start_agent();
  std::string sock = dir_.path() + "/agent/agent.sock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    AgentClientOptions o;
    o.buffer_bytes = 8 << 20;
    o.entries = 64;
    auto app = AgentClient::connect(sock, o);
    if (!app.is_ok()) _exit(11);
    auto h = (*app)->open("p", "c", true);
    if (!h.is_ok()) _exit(12);
    auto buf = (*app)->buffer();
    for (uint64_t i = 0; i < 64; ++i)
      if (!(*app)->submit(RingOp::kWrite, *h, {2, 2}, "d", "a", i << 17, buf.subspan(i << 17, 1 << 17), i).is_ok())
        _exit(13);
    char one = 1;
    (void)!write(ready[1], &one, 1);
    pause();  // killed here, its writes in flight
    _exit(0);
  }
  close(ready[1]);
  char one;
  ASSERT_EQ(read(ready[0], &one, 1), 1);
  close(ready[0]);
  EXPECT_EQ(agent_->apps(), 1u);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  // The agent finishes what was in flight, closes the app's containers and lets its memory go.
  EXPECT_TRUE(testing::poll_until([&] { return agent_->apps() == 0; }, 20s, 10ms));
  // And serves the next app as before.
  auto app = connect();
  ASSERT_TRUE(app);
  EXPECT_TRUE(app->open("p", "c", false).is_ok());
}

// For each needle, whether some file under `dir` holds it (each file read once, in 8 MiB pieces that overlap by
// a needle's length).
std::vector<bool> files_hold(const std::string& dir, const std::vector<std::string>& needles) {
  std::vector<bool> found(needles.size(), false);
  size_t longest = 0;
  for (const auto& n : needles) longest = std::max(longest, n.size());
  std::vector<char> buf((8 << 20) + longest);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    size_t kept = 0;
    while (f) {
      f.read(buf.data() + kept, static_cast<std::streamsize>(buf.size() - kept));
      size_t have = kept + static_cast<size_t>(f.gcount());
      for (size_t i = 0; i < needles.size(); ++i)
        if (!found[i] && memmem(buf.data(), have, needles[i].data(), needles[i].size())) found[i] = true;
      kept = std::min(have, longest);
      std::memmove(buf.data(), buf.data() + have - kept, kept);
      if (f.gcount() == 0) break;
    }
  }
  return found;
}

TEST_F(AgentTest, ASealingTenantsBytesAreNeverOnTheMediaAndTamperingIsCaught) {
  start_server("root");
  const AgentConfig c = sealing_agent();
  start_agent(c);
  auto app = connect();
  ASSERT_TRUE(app);
  EXPECT_EQ(app->tenant(), "sealed");
  auto h = app->open("p", "c", true);
  ASSERT_TRUE(h.is_ok());
  // A pattern no other bytes hold, 64 KiB of it, through the agent; another, the same way, through the native
  // client (unsealed), so the scan is seen to find what is there.
  const std::string sealed_marker = "sealed-plaintext-marker-4a7f9c-", open_marker = "open-plaintext-marker-81d3e0-";
  auto buf = app->buffer();
  for (size_t i = 0; i < 65536; ++i) buf[i] = static_cast<uint8_t>(sealed_marker[i % sealed_marker.size()]);
  const ObjectId oid{5, 5};
  ASSERT_TRUE(app->write(*h, oid, "d", "a", 0, buf.subspan(0, 65536)).is_ok());
  auto native = client::Container::open(*control_, "p", "c").value();
  std::string plain(65536, '\0');
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = open_marker[i % open_marker.size()];
  ASSERT_TRUE(
      native->write({6, 6}, "d", "a", 0, {reinterpret_cast<const uint8_t*>(plain.data()), plain.size()}).is_ok());
  // A single value is sealed whole: back through the agent in the clear, 32 bytes longer and ciphertext for anyone
  // else, and an error, never bytes, once changed or moved.
  const std::string value = sealed_marker + sealed_marker + "value";
  std::memcpy(buf.data() + (2 << 20), buf.data(), 65536);  // the array's pattern, kept aside
  std::memcpy(buf.data(), value.data(), value.size());
  ASSERT_TRUE(app->keys(KeyOp::kPutValue, *h, oid, "v", "x", value.size()).is_ok());
  std::memset(buf.data(), 0, value.size());
  auto got = app->keys(KeyOp::kGetValue, *h, oid, "v", "x", 4096);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, value.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), value.size()), value);
  auto stored_value = native->get_value(oid, "v", "x");
  ASSERT_TRUE(stored_value.is_ok());
  EXPECT_EQ(stored_value->size(), value.size() + kSealRecord);
  EXPECT_EQ(stored_value->find(sealed_marker), std::string::npos);
  ASSERT_TRUE(native->put_value(oid, "v", "moved", *stored_value).is_ok());
  EXPECT_EQ(app->keys(KeyOp::kGetValue, *h, oid, "v", "moved", 4096).status().code(), StatusCode::kChecksumMismatch);
  std::string changed = *stored_value;
  changed[kSealRecord + 1] ^= 1;
  ASSERT_TRUE(native->put_value(oid, "v", "x", changed).is_ok());
  EXPECT_EQ(app->keys(KeyOp::kGetValue, *h, oid, "v", "x", 4096).status().code(), StatusCode::kChecksumMismatch);
  std::memcpy(buf.data(), value.data(), value.size());
  ASSERT_TRUE(app->keys(KeyOp::kPutValue, *h, oid, "v", "x", value.size()).is_ok());  // sealed again
  std::memcpy(buf.data(), buf.data() + (2 << 20), 65536);
  // Partial blocks are refused, not half-sealed.
  EXPECT_EQ(app->write(*h, oid, "d", "a", 100, buf.subspan(0, 4096)).code(), StatusCode::kInvalidArgument);
  // Read back through the agent: the plaintext.
  ASSERT_TRUE(app->read(*h, oid, "d", "a", 0, buf.subspan(1 << 20, 65536)).is_ok());
  EXPECT_EQ(std::memcmp(buf.data(), buf.data() + (1 << 20), 65536), 0);
  // What the server holds, read by anyone else, is ciphertext; the media hold no plaintext of it.
  std::vector<uint8_t> stored(65536);
  ASSERT_TRUE(native->read(oid, "d", "a", 0, stored).is_ok());
  EXPECT_NE(std::memcmp(stored.data(), buf.data(), 65536), 0);
  ASSERT_TRUE(control_->pool_query("p").is_ok());
  // Make what was written reach the files (a server stop syncs and closes everything), then scan them.
  std::vector<uint8_t> rec1(32);
  ASSERT_TRUE(native->read(oid, "d", "a" + std::string(kRecordsSuffix), 0, rec1).is_ok());
  server_->stop();
  auto held = files_hold(dir_.path() + "/data",
                         {sealed_marker + sealed_marker.substr(0, 8), open_marker + open_marker.substr(0, 8)});
  EXPECT_FALSE(held[0]) << "the sealed tenant's plaintext is on the media";
  EXPECT_TRUE(held[1]) << "the scan does not find what the native client wrote";
  ASSERT_TRUE(server_->start());
  // Tampering: one byte of the stored ciphertext changed by another client: the agent answers an error.
  app.reset();
  agent_.reset();
  start_agent(c);  // a restarted agent: its nonces go on above what the last one reserved
  control_ = client::ControlClient::create(server_->address());
  // gRPC may first answer on the connection the old server left broken: ask until the new one answers.
  ASSERT_TRUE(testing::poll_until([&] { return control_->pool_query("p").is_ok(); }, 20s, 20ms));
  auto reopened = client::Container::open(*control_, "p", "c");
  ASSERT_TRUE(reopened.is_ok()) << reopened.status().to_string();
  native = std::move(reopened).value();
  app = connect();
  ASSERT_TRUE(app);
  h = app->open("p", "c", true);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  buf = app->buffer();
  ASSERT_TRUE(app->read(*h, oid, "d", "a", 0, buf.subspan(0, 65536)).is_ok());  // whole again after the restart
  EXPECT_EQ(buf[0], static_cast<uint8_t>(sealed_marker[0]));
  stored[5000] ^= 0x20;
  ASSERT_TRUE(native->write(oid, "d", "a", 0, stored).is_ok());
  EXPECT_EQ(app->read(*h, oid, "d", "a", 0, buf.subspan(0, 65536)).code(), StatusCode::kChecksumMismatch);
  // A block copied to another place does not open there either.
  ASSERT_TRUE(app->write(*h, oid, "d", "a", 0, buf.subspan(0, 4096)).is_ok());
  std::vector<uint8_t> block(4096), rec(32);
  ASSERT_TRUE(native->read(oid, "d", "a", 0, block).is_ok());
  ASSERT_TRUE(native->read(oid, "d", "a" + std::string(kRecordsSuffix), 0, rec).is_ok());
  ASSERT_TRUE(native->write(oid, "d", "a", 8192, block).is_ok());
  ASSERT_TRUE(native->write(oid, "d", "a" + std::string(kRecordsSuffix), 64, rec).is_ok());
  EXPECT_EQ(app->read(*h, oid, "d", "a", 8192, buf.subspan(0, 4096)).code(), StatusCode::kChecksumMismatch);
  // The overwrite of block 0 took a nonce of its own.
  EXPECT_NE(std::memcmp(rec.data(), rec1.data(), 12), 0);
}

// The layouts the agent runs for a sealing tenant (named objects, files, the C API's batches; the mount is
// tests/mount's) seal their bytes at any size: they come back whole through the agent, the native client reads
// ciphertext of the same size, the media hold no plaintext, and a changed byte is an error. The namespace over a
// sealing container, in this process, keeps a file's bytes and size through writes at any offset and cuts.
TEST_F(AgentTest, ASealingTenantsObjectsAndFilesAreSealedAtAnySize) {
  start_server("root");
  const AgentConfig c = sealing_agent();
  start_agent(c);
  // Keys longer than a submission holds are refused before the agent looks at them (to hold their blocks).
  {
    RawApp raw;
    ASSERT_TRUE(raw.start(c.listen));
    Message opened = raw.open_c();
    ASSERT_EQ(opened.type, MsgType::kOpened);
    Sqe e;
    e.op = static_cast<uint8_t>(RingOp::kWrite);
    e.cont = opened.handle;
    e.dkey_len = e.akey_len = 250;
    e.length = 4096;
    EXPECT_EQ(raw.submit(e), static_cast<uint16_t>(StatusCode::kInvalidArgument));
  }
  auto app = connect();
  ASSERT_TRUE(app);
  const std::string marker = "sealed-object-marker-7c21e5-";
  auto bytes_of = [&](size_t n) {
    std::string b(n, '\0');
    for (size_t i = 0; i < n; ++i) b[i] = marker[i % marker.size()];
    if (n > 0) b[n - 1] = static_cast<char>(n);  // each size its own last byte
    return b;
  };
  auto source_of = [](const std::string& bytes) {
    auto at = std::make_shared<size_t>(0);
    return [&bytes, at](std::span<uint8_t> out) -> Result<size_t> {
      size_t n = std::min(out.size(), bytes.size() - *at);
      std::memcpy(out.data(), bytes.data() + *at, n);
      *at += n;
      return n;
    };
  };
  auto get = [&](const std::string& name) -> Result<std::string> {
    std::string back;
    auto got = app->get_object("p", "c", name, [&](std::span<const uint8_t> b) {
      back.append(reinterpret_cast<const char*>(b.data()), b.size());
      return Status::ok();
    });
    if (!got.is_ok()) return got.status();
    return back;
  };
  auto native = client::Container::open(*control_, "p", "c").value();
  const std::vector<size_t> sizes = {0, 100, 5000, 16384, 16385, (1u << 20) + 3, (3u << 20) + 100};
  std::vector<std::string> all;
  for (size_t n : sizes) {
    all.push_back(bytes_of(n));
    const std::string& want = all.back();
    for (const std::string& name : {"obj-" + std::to_string(n), "/file-" + std::to_string(n)}) {
      auto stored = app->put_object("p", "c", name, 0640, source_of(want));
      ASSERT_TRUE(stored.is_ok()) << name << ": " << stored.status().to_string();
      auto back = get(name);
      ASSERT_TRUE(back.is_ok()) << name << ": " << back.status().to_string();
      EXPECT_TRUE(*back == want) << name;
      auto st = app->object_call(ObjectOp::kStat, "p", "c", name);
      ASSERT_TRUE(st.is_ok());
      EXPECT_EQ(st->value, n) << name;
    }
    // The native client (no key) reads an object of the same size, whose bytes are not these.
    auto theirs = client::NamedObjects(*native).stat("obj-" + std::to_string(n));
    ASSERT_TRUE(theirs.is_ok());
    EXPECT_EQ(theirs->size, n);
    EXPECT_FALSE(theirs->inlined) << "a sealing tenant's bytes went into a record";
    std::string raw;
    ASSERT_TRUE(client::NamedObjects(*native)
                    .read(*theirs,
                          [&](std::span<const uint8_t> b) {
                            raw.append(reinterpret_cast<const char*>(b.data()), b.size());
                            return Status::ok();
                          })
                    .is_ok());
    EXPECT_EQ(raw.size(), n);
    if (n >= marker.size()) {
      EXPECT_EQ(raw.find(marker), std::string::npos);
    }
  }
  // The C API's batches through the agent: small files (which otherwise ride their create and lookup) and one
  // over a chunk.
  std::string addr = "agent://" + dir_.path() + "/agent/agent.sock";
  rfos_client_t* capi = nullptr;
  ASSERT_EQ(rfos_connect(addr.c_str(), 5000, &capi), 0) << rfos_last_error();
  rfos_fs_t* fs = nullptr;
  ASSERT_EQ(rfos_fs_open(capi, "p", "c", nullptr, &fs), 0) << rfos_last_error();
  ASSERT_EQ(rfos_fs_mkdir(fs, "/batch", 0755), 0) << rfos_last_error();
  std::vector<std::string> names;
  std::vector<rfos_fs_put_t> put;
  for (size_t i = 0; i < 4; ++i) names.push_back("f" + std::to_string(i));
  for (size_t i = 0; i < 4; ++i) put.push_back({names[i].c_str(), 0644, all[i + 1].data(), all[i + 1].size(), 1});
  EXPECT_EQ(rfos_fs_put_files(fs, "/batch", put.data(), put.size(), 0), 4) << rfos_last_error();
  std::vector<std::vector<char>> back(4, std::vector<char>(32768));
  std::vector<rfos_fs_get_t> gets;
  for (size_t i = 0; i < 4; ++i) gets.push_back({names[i].c_str(), back[i].data(), back[i].size(), 0, 1});
  EXPECT_EQ(rfos_fs_get_files(fs, "/batch", gets.data(), gets.size(), 0), 4) << rfos_last_error();
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(gets[i].status, 0) << i;
    ASSERT_EQ(gets[i].len, all[i + 1].size());
    EXPECT_EQ(std::string(back[i].data(), gets[i].len), all[i + 1]) << i;
  }
  rfos_fs_close(fs);
  rfos_disconnect(capi);
  // The namespace over a sealing container: writes at any offset, holes, cuts and growth, against a model.
  std::string nkey(32, '\x11');
  auto sealer = std::shared_ptr<Sealer>(Sealer::open(nkey, dir_.path() + "/ns.nonce", 9).value());
  client::ContainerOptions so;
  so.sealer = sealer;
  auto ns = posix::Namespace::open(*control_, "p", "c", so).value();
  const posix::Cred root(0, 0);
  auto f = ns->mknod(ns->root(), "model.bin", S_IFREG | 0644, 0, root);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  std::string model;
  auto check = [&](const char* after) {
    auto at = ns->getattr(f->oid);
    ASSERT_TRUE(at.is_ok());
    EXPECT_EQ(at->size, model.size()) << after;
    std::string out(model.size() + 100, '\x55');
    auto n = ns->read(f->oid, 0, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
    ASSERT_TRUE(n.is_ok()) << after << ": " << n.status().to_string();
    out.resize(*n);
    EXPECT_TRUE(out == model) << after;
  };
  auto write = [&](uint64_t at, const std::string& b) {
    ASSERT_TRUE(ns->write(f->oid, at, {reinterpret_cast<const uint8_t*>(b.data()), b.size()}).is_ok());
    if (model.size() < at + b.size()) model.resize(at + b.size(), '\0');
    model.replace(at, b.size(), b);
  };
  auto cut = [&](uint64_t size) {
    posix::SetAttr set;
    set.set_size = true;
    set.size = size;
    ASSERT_TRUE(ns->setattr(f->oid, set, root).is_ok());
    model.resize(size, '\0');
  };
  write(0, bytes_of(3000));
  check("a small first write");
  write(1000, std::string(10, 'x'));
  check("an overwrite inside a block");
  write(9000, bytes_of(5000));
  check("a write past a hole");
  write(4090, std::string(20, 'y'));
  check("a write across blocks");
  cut(6000);
  check("a cut inside a block");
  write(7000, std::string(5, 'z'));
  check("growth past the cut");
  cut(4096);
  check("a cut at a block's edge");
  cut(20000);
  check("a cut up, a hole to the end");
  write((1u << 20) - 10, bytes_of(30));
  check("a write across chunks");
  // Its size, read unsealed, is the same; its bytes are not.
  auto plain_ns = posix::Namespace::open(*control_, "p", "c", {}).value();
  auto seen = plain_ns->getattr(f->oid);
  ASSERT_TRUE(seen.is_ok());
  EXPECT_EQ(seen->size, model.size());
  // The ring and the layouts read each other's blocks: an object's short last block through the ring, a block
  // the ring wrote through the object.
  auto victim = client::NamedObjects(*native).stat("obj-5000");
  ASSERT_TRUE(victim.is_ok());
  auto h = app->open("p", "c", true);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  auto buf = app->buffer();
  std::fill(buf.begin(), buf.begin() + 8192, 0xee);
  ASSERT_TRUE(
      app->read(*h, victim->data, client::layout::chunk_key(0), client::layout::kDataAkey, 0, buf.subspan(0, 8192))
          .is_ok());
  std::string want = all[2];  // the 5000 bytes
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), 5000), want);
  EXPECT_TRUE(std::all_of(buf.begin() + 5000, buf.begin() + 8192, [](uint8_t b) { return b == 0; }));
  std::fill(buf.begin(), buf.begin() + 4096, 'q');
  ASSERT_TRUE(
      app->write(*h, victim->data, client::layout::chunk_key(0), client::layout::kDataAkey, 0, buf.subspan(0, 4096))
          .is_ok());
  want.replace(0, 4096, std::string(4096, 'q'));
  auto mixed = get("obj-5000");
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().to_string();
  EXPECT_TRUE(*mixed == want);
  // A ring write in flight (its blocks held until the agent reaps it, on the thread that serves this app's
  // requests too) ends before a request of the same app for those blocks, which waits for nothing (it would wait
  // out the agent's timeout, then fail Busy). The ring and the requests are two channels: the request sees the
  // write if the agent took it from the ring first, the bytes before it otherwise.
  // (Its bytes lie past where the request's chunks come into the shared buffer.)
  std::fill(buf.begin() + (1 << 20), buf.begin() + (1 << 20) + 4096, 'r');
  ASSERT_TRUE(app->submit(RingOp::kWrite, *h, victim->data, client::layout::chunk_key(0), client::layout::kDataAkey, 0,
                          buf.subspan(1 << 20, 4096), 77)
                  .is_ok());
  const auto asked = std::chrono::steady_clock::now();
  auto during = get("obj-5000");
  ASSERT_TRUE(during.is_ok()) << during.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(c.timeout_ms));
  std::string written = want;
  written.replace(0, 4096, std::string(4096, 'r'));
  EXPECT_TRUE(*during == want || *during == written);
  auto completions = app->poll(1, 10000);
  ASSERT_TRUE(completions.is_ok());
  ASSERT_EQ(completions->size(), 1u);
  EXPECT_TRUE((*completions)[0].status.is_ok());
  want = written;
  auto after = get("obj-5000");
  ASSERT_TRUE(after.is_ok()) << after.status().to_string();
  EXPECT_TRUE(*after == want);
  // Bytes in a record (an object another client put small, which a sealing handle never does) are not its own.
  ASSERT_TRUE(client::NamedObjects(*native).put("planted", source_of(std::string(100, 'p'))).is_ok());
  EXPECT_EQ(get("planted").status().code(), StatusCode::kChecksumMismatch);
  // A byte of a sealed object changed by someone without the key: an error through the agent, never bytes.
  std::vector<uint8_t> chunk(5000);
  ASSERT_TRUE(native->read(victim->data, client::layout::chunk_key(0), client::layout::kDataAkey, 0, chunk).is_ok());
  chunk[4500] ^= 4;
  ASSERT_TRUE(native->write(victim->data, client::layout::chunk_key(0), client::layout::kDataAkey, 0, chunk).is_ok());
  EXPECT_EQ(get("obj-5000").status().code(), StatusCode::kChecksumMismatch);
  // On the media: none of it in the clear, where what the native client writes is found.
  const std::string open_marker = "open-object-marker-19ad0c-";
  std::string plain(8192, '\0');
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = open_marker[i % open_marker.size()];
  ASSERT_TRUE(client::NamedObjects(*native).put("open", source_of(plain)).is_ok());
  app.reset();
  agent_.reset();
  ns.reset();
  plain_ns.reset();
  native.reset();
  server_->stop();
  auto held = files_hold(dir_.path() + "/data", {marker + marker.substr(0, 8), open_marker + open_marker.substr(0, 8)});
  EXPECT_FALSE(held[0]) << "the sealed tenant's plaintext is on the media";
  EXPECT_TRUE(held[1]) << "the scan does not find what the native client wrote";
}

// A tenant held to 200 I/Os a second (burst 10) cannot go faster, however many it submits at once. (Its rate
// against another tenant running flat out is measured in bench/agent_qos_bench.py; here only the bound that
// must hold on any machine: never faster than the limit.)
TEST_F(AgentTest, ALimitedTenantIsHeldToItsRate) {
  start_server("root");
  auto a = Agent::start(limited_agent(agent_config().listen));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  agent_ = std::move(a).value();
  auto app = connect();
  ASSERT_TRUE(app);
  auto h = app->open("p", "c", true);
  ASSERT_TRUE(h.is_ok());
  auto buf = app->buffer();
  constexpr uint64_t kIos = 110;
  auto start = std::chrono::steady_clock::now();
  uint64_t submitted = 0, done = 0;
  while (done < kIos) {
    while (submitted < kIos && app->in_flight() < 16) {
      ASSERT_TRUE(app->submit(RingOp::kWrite, *h, {9, 9}, "d", "a", 4096 * (submitted % 64),
                              buf.subspan(4096 * (submitted % 64), 4096), submitted)
                      .is_ok());
      ++submitted;
    }
    auto got = app->poll(16, 10000);
    ASSERT_TRUE(got.is_ok());
    ASSERT_FALSE(got->empty()) << "no completion within 10 s";
    for (auto& x : *got) EXPECT_TRUE(x.status.is_ok()) << x.status.to_string();
    done += got->size();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(secs, 0.9 * double(kIos - 10) / 200) << "faster than its limit allows";
  // The control channel is heard while the ring is held back.
  EXPECT_TRUE(app->array_size(*h, {9, 9}, "d", "a").is_ok());
}

// A tenant's limits travel in its capabilities (the server signs what the trusted agent names), and the targets
// hold all the tenant's sessions to them together: two agents serving one tenant of 200 I/Os a second (each agent
// alone would let 200 a second through) move 220 writes no faster than the one limit allows. (Each agent's own
// bucket would let the two apps through in about half the time.)
TEST_F(AgentTest, TheTargetsHoldATenantToItsLimitsAcrossAgents) {
  start_server("root");
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::unique_ptr<AgentClient>> apps;
  for (int i = 0; i < 2; ++i) {
    AgentConfig c = limited_agent(dir_.path() + "/agent" + std::to_string(i) + "/agent.sock");
    auto a = Agent::start(c);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    agents.push_back(std::move(a).value());
    AgentClientOptions o;
    o.buffer_bytes = 1 << 20;
    o.entries = 64;
    auto app = AgentClient::connect(c.listen, o);
    ASSERT_TRUE(app.is_ok()) << app.status().to_string();
    apps.push_back(std::move(app).value());
  }
  std::vector<uint32_t> handles;
  for (auto& app : apps) {
    auto h = app->open("p", "c", true);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    handles.push_back(*h);
  }
  constexpr uint64_t kIosEach = 110;
  auto start = std::chrono::steady_clock::now();
  std::vector<uint64_t> submitted(2, 0), done(2, 0);
  while (done[0] + done[1] < 2 * kIosEach) {
    for (size_t i = 0; i < 2; ++i) {
      auto buf = apps[i]->buffer();
      while (submitted[i] < kIosEach && apps[i]->in_flight() < 16) {
        uint64_t slot = submitted[i] % 64;
        ASSERT_TRUE(apps[i]
                        ->submit(RingOp::kWrite, handles[i], {9, 9 + i}, "d", "a", 4096 * slot,
                                 buf.subspan(4096 * slot, 4096), submitted[i])
                        .is_ok());
        ++submitted[i];
      }
      if (apps[i]->in_flight() == 0) continue;
      auto got = apps[i]->poll(16, 1);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      for (auto& x : *got) EXPECT_TRUE(x.status.is_ok()) << x.status.to_string();
      done[i] += got->size();
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // At most the targets' burst (10) and 200 a second: 210 of the 220 take at least 1.05 s.
  EXPECT_GE(secs, 0.9 * double(2 * kIosEach - 10) / 200) << "faster than the tenant's one limit allows";
}

// The C API unchanged, in agent mode: rfos_connect("agent://SOCK") (or RFOS_AGENT), the same calls.
TEST_F(AgentTest, TheCApiWorksThroughTheAgent) {
  start_server("root");
  start_agent();
  std::string addr = "agent://" + dir_.path() + "/agent/agent.sock";
  rfos_client_t* client = nullptr;
  ASSERT_EQ(rfos_connect(addr.c_str(), 5000, &client), 0) << rfos_last_error();
  rfos_cont_t* cont = nullptr;
  ASSERT_EQ(rfos_cont_open(client, "p", "c", 1, nullptr, &cont), 0) << rfos_last_error();
  const rfos_oid_t oid{11, 12};
  // Synchronous I/O from ordinary memory (copied through the shared buffer), across 1 MiB boundaries.
  std::vector<uint8_t> data(3 << 20), back(3 << 20);
  fill(data, 7);
  ASSERT_EQ(rfos_write(cont, oid, "d", "a", 100, data.data(), data.size()), 0) << rfos_last_error();
  ASSERT_EQ(rfos_read(cont, oid, "d", "a", 100, back.data(), back.size()), 0) << rfos_last_error();
  EXPECT_EQ(data, back);
  uint64_t size = 0;
  ASSERT_EQ(rfos_array_size(cont, oid, "d", "a", &size), 0);
  EXPECT_EQ(size, 100 + data.size());
  // The event queue over memory from rfos_alloc (the agent's shared buffer: no copy).
  void* buf = nullptr;
  ASSERT_EQ(rfos_alloc(cont, 1 << 20, &buf), 0) << rfos_last_error();
  std::memset(buf, 0x3c, 1 << 20);
  uint64_t ticket = 0;
  ASSERT_EQ(rfos_submit_write(cont, oid, "d2", "a", 0, buf, 1 << 20, &ticket), 0) << rfos_last_error();
  rfos_completion_t done[4];
  int n = 0;
  while (n == 0) n = rfos_poll(cont, done, 4, 10000);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(done[0].ticket, ticket);
  EXPECT_EQ(done[0].status, 0);
  // Submitted I/O from other memory is refused with a clear error; so are synchronous calls while it is in flight.
  EXPECT_EQ(rfos_submit_write(cont, oid, "d2", "a", 0, data.data(), 4096, &ticket), -EINVAL);
  ASSERT_EQ(rfos_submit_read(cont, oid, "d2", "a", 0, buf, 4096, &ticket), 0) << rfos_last_error();
  EXPECT_EQ(rfos_put_value(cont, oid, "d", "v", "x", 1), -EAGAIN);
  while (rfos_poll(cont, done, 4, 10000) == 0) {
  }
  // Values, keys, scatter-gather, extents and snapshots as in-process (c_api_test runs the same checks).
  testing::check_keys_and_snapshots(client, cont, "p", "c");
  // One submission may run from one allocation into the next (the agent's first fit places them side by side);
  // neither goes while it is in flight.
  void* next = nullptr;
  ASSERT_EQ(rfos_alloc(cont, 4096, &next), 0) << rfos_last_error();
  ASSERT_EQ(static_cast<uint8_t*>(next), static_cast<uint8_t*>(buf) + (1 << 20));
  ASSERT_EQ(rfos_submit_write(cont, oid, "d3", "a", 0, static_cast<uint8_t*>(next) - 4096, 8192, &ticket), 0)
      << rfos_last_error();
  EXPECT_EQ(rfos_free(cont, next), -EAGAIN);
  EXPECT_EQ(rfos_free(cont, buf), -EAGAIN);
  n = 0;
  while (n == 0) n = rfos_poll(cont, done, 4, 10000);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(rfos_free(cont, next), 0);
  EXPECT_EQ(rfos_free(cont, buf), 0);
  EXPECT_EQ(rfos_free(cont, buf), -ENOENT);  // as in-process
  rfos_cont_close(cont);
  rfos_disconnect(client);
  // What went through the agent is what the native client reads.
  auto native = client::Container::open(*control_, "p", "c").value();
  std::vector<uint8_t> check(1 << 20);
  ASSERT_TRUE(native->read({11, 12}, "d2", "a", 0, check).is_ok());
  EXPECT_EQ(check[12345], 0x3c);
  // No agent at the address: a clear error at connect.
  std::string none = "agent://" + dir_.path() + "/nowhere.sock";
  EXPECT_EQ(rfos_connect(none.c_str(), 1000, &client), -ENOENT);
}

// What `run` answers through a client in-process (mode 0) and through the agent (mode 1), line by line the same.
void expect_the_same_in_both_modes(const std::string& direct, const std::string& agent,
                                   const std::function<std::vector<std::string>(rfos_client_t*, size_t)>& run) {
  std::vector<std::vector<std::string>> outcomes;
  for (const std::string& addr : {direct, agent}) {
    rfos_client_t* client = nullptr;
    ASSERT_EQ(rfos_connect(addr.c_str(), 5000, &client), 0) << rfos_last_error();
    outcomes.push_back(run(client, outcomes.size()));
    rfos_disconnect(client);
  }
  ASSERT_EQ(outcomes[0].size(), outcomes[1].size());
  for (size_t i = 0; i < outcomes[0].size(); ++i) EXPECT_EQ(outcomes[1][i], outcomes[0][i]) << "in-process first";
}

// The same calls at the edges answer the same in-process and through the agent: empty, missing, too large, out
// of range, the wrong kind of value.
TEST_F(AgentTest, TheCApiAnswersTheSameThroughTheAgent) {
  start_server("root");
  start_agent();
  expect_the_same_in_both_modes(
      server_->address(), "agent://" + dir_.path() + "/agent/agent.sock", [](rfos_client_t* client, size_t mode) {
        rfos_cont_t* cont = nullptr;
        EXPECT_EQ(rfos_cont_open(client, "p", "c", 1, nullptr, &cont), 0) << rfos_last_error();
        if (!cont) return std::vector<std::string>{"no container"};
        auto out = testing::c_api_edge_outcomes(cont, 1000 * mode);
        rfos_cont_close(cont);
        return out;
      });
}

// The namespace calls at the edges answer the same in-process and through the agent (whose namespace runs there).
TEST_F(AgentTest, TheCApisNamespaceAnswersTheSameThroughTheAgent) {
  start_server("root");
  start_agent();
  expect_the_same_in_both_modes(server_->address(), "agent://" + dir_.path() + "/agent/agent.sock",
                                [](rfos_client_t* client, size_t mode) {
                                  rfos_fs_t* fs = nullptr;
                                  EXPECT_EQ(rfos_fs_open(client, "p", "c", nullptr, &fs), 0) << rfos_last_error();
                                  if (!fs) return std::vector<std::string>{"no namespace"};
                                  auto out = testing::c_api_fs_edge_outcomes(fs, "/edges-" + std::to_string(mode));
                                  rfos_fs_close(fs);
                                  return out;
                                });
}

// The C API's namespace (rfos_fs_*) in agent mode: the namespace runs in the agent for this user, batches of
// files go through the shared buffer (split when they do not fit it), and the native namespace reads the same.
TEST_F(AgentTest, TheCApisNamespaceWorksThroughTheAgent) {
  start_server("root");
  start_agent();
  setenv("RFOS_AGENT_BUFFER_MIB", "1", 1);  // small, so that a batch splits and a large file goes alone
  std::string addr = "agent://" + dir_.path() + "/agent/agent.sock";
  rfos_client_t* client = nullptr;
  ASSERT_EQ(rfos_connect(addr.c_str(), 5000, &client), 0) << rfos_last_error();
  rfos_fs_t* fs = nullptr;
  EXPECT_LT(rfos_fs_open(client, "p", "nope", nullptr, &fs), 0);
  ASSERT_EQ(rfos_fs_open(client, "p", "c", nullptr, &fs), 0) << rfos_last_error();
  ASSERT_EQ(rfos_fs_mkdir(fs, "/train", 0755), 0) << rfos_last_error();
  EXPECT_EQ(rfos_fs_mkdir(fs, "/train", 0755), -EEXIST);
  // 300 samples of 3 KiB (more than one 1 MiB batch) and, among them, one of 800 KiB.
  constexpr size_t kFiles = 301;
  constexpr size_t kLarge = 10;
  std::vector<std::string> names(kFiles);
  std::vector<std::vector<uint8_t>> data(kFiles);
  std::vector<rfos_fs_put_t> put(kFiles);
  for (size_t i = 0; i < kFiles; ++i) {
    names[i] = "sample-" + std::to_string(i);
    data[i].resize(i == kLarge ? 800 << 10 : 3072);
    fill(data[i], static_cast<uint32_t>(i));
    put[i] = {names[i].c_str(), 0644, data[i].data(), data[i].size(), 1};
  }
  EXPECT_EQ(rfos_fs_put_files(fs, "/train", put.data(), kFiles, 0), static_cast<int>(kFiles)) << rfos_last_error();
  for (size_t i = 0; i < kFiles; ++i) EXPECT_EQ(put[i].status, 0) << i;
  EXPECT_EQ(rfos_fs_sync(fs), 0);
  std::vector<std::vector<uint8_t>> back(kFiles);
  std::vector<rfos_fs_get_t> get(kFiles);
  for (size_t i = 0; i < kFiles; ++i) {
    // The large one's capacity is past what a batch holds: it is read alone, after the files around it.
    back[i].resize(i == kLarge ? 900 << 10 : 3072);
    get[i] = {names[i].c_str(), back[i].data(), back[i].size(), 0, 1};
  }
  EXPECT_EQ(rfos_fs_get_files(fs, "/train", get.data(), kFiles, 0), static_cast<int>(kFiles)) << rfos_last_error();
  for (size_t i = 0; i < kFiles; ++i) {
    ASSERT_EQ(get[i].status, 0) << i;
    ASSERT_EQ(get[i].len, data[i].size()) << i;
    EXPECT_EQ(std::memcmp(back[i].data(), data[i].data(), data[i].size()), 0) << i;
  }
  // Too small a buffer, and a name that is not there: each entry says so.
  uint8_t tiny[16];
  rfos_fs_get_t two[2] = {{names[0].c_str(), tiny, sizeof(tiny), 0, 1}, {"absent", tiny, sizeof(tiny), 0, 1}};
  EXPECT_EQ(rfos_fs_get_files(fs, "/train", two, 2, 0), 0);
  EXPECT_EQ(two[0].status, -ENOBUFS);
  EXPECT_EQ(two[0].len, 3072u);
  EXPECT_EQ(two[1].status, -ENOENT);
  EXPECT_LT(rfos_fs_put_files(fs, "/no-such-dir", put.data(), 1, 0), 0);
  rfos_fs_close(fs);
  rfos_disconnect(client);
  unsetenv("RFOS_AGENT_BUFFER_MIB");
  // The native namespace reads what went through the agent.
  auto ns = posix::Namespace::open(*control_, "p", "c", {}).value();
  auto f = ns->resolve("/train/sample-7", posix::Cred(0, 0));
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->size, 3072u);
}

// An open whose answer came after the app gave up waiting leaves no handle behind in the agent (it holds 64 per
// app at most): the late answer is dropped and the handle it names closed; and the wait on the ring does not
// spin over late answers queued on the socket.
TEST_F(AgentTest, ALateAnswerToAnOpenLeavesNoHandleBehind) {
  start_server("root");
  start_agent();
  auto app = connect();
  ASSERT_TRUE(app);
  int timed_out = 0;
  for (int i = 0; i < 70; ++i) {
    app->set_timeout_ms(0);  // gives up at once: the answer comes late
    auto h = app->open("p", "c", false);
    if (h.is_ok())
      ASSERT_TRUE(app->close(*h).is_ok());
    else
      ++timed_out;
    app->set_timeout_ms(30000);
    auto next = app->open("p", "c", false);
    ASSERT_TRUE(next.is_ok()) << i << ": " << next.status().to_string();
    ASSERT_TRUE(app->close(*next).is_ok());
  }
  EXPECT_GT(timed_out, 64) << "the opens were meant to time out";
  // Late answers still queued (the last closes') are taken off the socket by a wait on the ring.
  auto none = app->poll(1, 50);
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_TRUE(none->empty());
}

TEST_F(AgentTest, AnAgentThatDiesFailsItsAppsAtOnceAndANewOneServesThem) {
  start_server("root");
  std::string sock = dir_.path() + "/agent/agent.sock";
  auto spawn = [&] {
    pid_t pid = fork();
    if (pid == 0) {
      execl(RFOS_BINARY, RFOS_BINARY, "--addr", server_->address().c_str(), "agent", "--listen", sock.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  auto connectable = [&] {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock.c_str(), sizeof(a.sun_path) - 1);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  };
  pid_t agent = spawn();
  ASSERT_TRUE(testing::poll_until(connectable, 30s, 20ms));
  auto app = connect();
  ASSERT_TRUE(app);
  auto h = app->open("p", "c", true);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  auto buf = app->buffer();
  fill(buf.subspan(0, 65536), 3);
  ASSERT_TRUE(app->write(*h, {3, 3}, "d", "a", 0, buf.subspan(0, 65536)).is_ok());
  auto spinner = connect();  // an app that polls without waiting, as one that spins over its completions does
  ASSERT_TRUE(spinner);
  auto sh = spinner->open("p", "c", true);
  ASSERT_TRUE(sh.is_ok()) << sh.status().to_string();
  kill(agent, SIGKILL);
  int status;
  waitpid(agent, &status, 0);
  // The app learns at once: a wait with no limit returns, every call fails with Shutdown.
  auto got = app->poll(1, -1);
  EXPECT_EQ(got.status().code(), StatusCode::kShutdown);
  EXPECT_EQ(app->open("p", "c", true).status().code(), StatusCode::kShutdown);
  // The spinning app within 64 polls, and its submissions from then on.
  int polls = 0;
  Status spun;
  while (polls < 1000 && (spun = spinner->poll(1, 0).status()).is_ok()) ++polls;
  EXPECT_EQ(spun.code(), StatusCode::kShutdown) << spun.to_string();
  EXPECT_LT(polls, 64);
  EXPECT_EQ(spinner->submit(RingOp::kWrite, *sh, {3, 3}, "d", "a", 0, spinner->buffer().subspan(0, 4096), 7).code(),
            StatusCode::kShutdown);
  EXPECT_EQ(spinner->in_flight(), 0u);
  spinner.reset();
  // A new agent on the same socket; the app reconnects and finds what was acknowledged.
  agent = spawn();
  ASSERT_TRUE(testing::poll_until(connectable, 30s, 20ms));
  app = connect();
  ASSERT_TRUE(app);
  h = app->open("p", "c", false);
  ASSERT_TRUE(h.is_ok());
  buf = app->buffer();  // a new buffer: the expected bytes made again in it
  fill(buf.subspan(0, 65536), 3);
  ASSERT_TRUE(app->read(*h, {3, 3}, "d", "a", 0, buf.subspan(1 << 20, 65536)).is_ok());
  EXPECT_EQ(std::memcmp(buf.data(), buf.data() + (1 << 20), 65536), 0);
  app.reset();
  kill(agent, SIGTERM);
  waitpid(agent, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace rfos::agent
