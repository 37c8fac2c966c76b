// The control plane against a real `rfos server` process on loopback: pools, containers, sessions and their
// capabilities, errors a user can act on, persistence across kill -9, and a server that is gone.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "client/container.h"
#include "client/control_client.h"
#include "common/ids.h"
#include "engine/engine_testing.h"
#include "server_process.h"
#include "wire/capability.h"

namespace rfos {
namespace {

using client::ControlClient;

uint64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(ControlPlane, PoolsContainersSessions) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path());
  ASSERT_TRUE(server.start());
  auto cc = ControlClient::create(server.address());
  ASSERT_TRUE(cc->health().is_ok());
  auto info = cc->server_info();
  ASSERT_TRUE(info.is_ok());
  EXPECT_EQ(info->targets, 2u);
  EXPECT_EQ(info->provider, "ucx+tcp");

  auto pool = cc->pool_create("tank");
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ(pool->targets, 2u);
  EXPECT_GT(pool->total_bytes, 60ull << 20);
  EXPECT_EQ(cc->pool_create("tank").status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(cc->pool_create("bad label!").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cc->pool_query("nope").status().code(), StatusCode::kUnknownPool);
  EXPECT_EQ(cc->pool_query(pool->uuid)->label, "tank");

  client::ContProps props;
  props.oclass = "S1";
  auto cont = cc->cont_create("tank", "data", props);
  ASSERT_TRUE(cont.is_ok()) << cont.status().to_string();
  EXPECT_EQ(cont->props.oclass, "S1");
  EXPECT_EQ(cont->props.chunk_bytes, 1u << 20);
  EXPECT_EQ(cc->cont_create("tank", "data", {}).status().code(), StatusCode::kAlreadyExists);
  props.oclass = "RP_9";
  EXPECT_EQ(cc->cont_create("tank", "x", props).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cc->cont_create("nope", "x", {}).status().code(), StatusCode::kUnknownPool);
  EXPECT_EQ(cc->cont_query("tank", "nope").status().code(), StatusCode::kUnknownContainer);
  EXPECT_EQ(cc->cont_list("tank")->size(), 1u);

  // A session's capability names the pool, the container and the rights, and expires.
  auto s = cc->connect("tank", "data", true, 60);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->target_addresses.size(), 2u);
  auto cap = wire::decode_capability(s->capability);
  ASSERT_TRUE(cap.is_ok());
  EXPECT_EQ(cap->pool.to_string(), pool->uuid);
  EXPECT_EQ(cap->cont.to_string(), cont->uuid);
  EXPECT_EQ(cap->rights, wire::Capability::kRead | wire::Capability::kWrite);
  EXPECT_GT(s->expires_unix_ms, now_ms() + 50'000);
  EXPECT_LE(s->expires_unix_ms, now_ms() + 61'000);
  auto ro = cc->connect("tank", "data", false);
  ASSERT_TRUE(ro.is_ok());
  EXPECT_EQ(wire::decode_capability(ro->capability)->rights, wire::Capability::kRead);
  EXPECT_EQ(cc->connect("tank", "nope", false).status().code(), StatusCode::kUnknownContainer);
  EXPECT_EQ(cc->cont_query("tank", "data")->open_sessions, 2u);
  EXPECT_TRUE(cc->disconnect(s->session_id).is_ok());
  EXPECT_EQ(cc->disconnect(s->session_id).code(), StatusCode::kNotFound);
  EXPECT_EQ(cc->cont_query("tank", "data")->open_sessions, 1u) << "an ended session is not open";
  EXPECT_TRUE(cc->disconnect(ro->session_id).is_ok());
  // A handle's session ends when the handle is closed, not at its capability's expiry.
  {
    auto handle = client::Container::open(*cc, "tank", "data", {});
    ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
    EXPECT_EQ(cc->cont_query("tank", "data")->open_sessions, 1u);
  }
  EXPECT_EQ(cc->cont_query("tank", "data")->open_sessions, 0u);

  // Destroy refuses a pool with containers unless forced.
  EXPECT_EQ(cc->pool_destroy("tank", false).code(), StatusCode::kBusy);
  ASSERT_TRUE(cc->cont_destroy("tank", "data").is_ok());
  EXPECT_EQ(cc->cont_list("tank")->size(), 0u);
  ASSERT_TRUE(cc->pool_destroy("tank", false).is_ok());
  EXPECT_TRUE(cc->pool_list()->empty());
}

TEST(ControlPlane, StateSurvivesKillNine) {
  engine::testing::TempDir dir;
  std::string pool_uuid, cont_uuid;
  {
    testing::ServerProcess server(dir.path());
    ASSERT_TRUE(server.start());
    auto cc = ControlClient::create(server.address());
    auto pool = cc->pool_create("p1");
    ASSERT_TRUE(pool.is_ok());
    pool_uuid = pool->uuid;
    auto cont = cc->cont_create("p1", "c1", {});
    ASSERT_TRUE(cont.is_ok());
    cont_uuid = cont->uuid;
    ASSERT_TRUE(cc->pool_create("p2").is_ok());
    ASSERT_TRUE(cc->pool_destroy("p2", false).is_ok());
    server.kill();  // SIGKILL
  }
  testing::ServerProcess server(dir.path());
  ASSERT_TRUE(server.start());
  auto cc = ControlClient::create(server.address());
  auto pools = cc->pool_list();
  ASSERT_TRUE(pools.is_ok());
  ASSERT_EQ(pools->size(), 1u);
  EXPECT_EQ((*pools)[0].uuid, pool_uuid);
  EXPECT_EQ((*pools)[0].containers, 1u);
  EXPECT_EQ(cc->cont_query("p1", "c1")->uuid, cont_uuid);
  // A clean stop exits 0.
  server.stop();
  EXPECT_TRUE(WIFEXITED(server.exit_status()) && WEXITSTATUS(server.exit_status()) == 0);
}

TEST(ControlPlane, GoneServerGivesAClearErrorNotAHang) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path());
  ASSERT_TRUE(server.start());
  std::string addr = server.address();
  server.kill();
  auto cc = ControlClient::create(addr, 1000);
  auto t0 = std::chrono::steady_clock::now();
  Status s = cc->pool_list().status();
  EXPECT_TRUE(s.code() == StatusCode::kShutdown || s.code() == StatusCode::kTimeout) << s.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A second server on an address one already serves must not start: on TCP gRPC would otherwise share the port
// (SO_REUSEPORT) and the kernel would hand each new client to either of them; on the control socket the second
// would take the path from the first.
TEST(ControlPlane, SecondServerOnTheSameAddressIsRefused) {
  engine::testing::TempDir a, b, c;
  testing::ServerProcess first(a.path(), {"--control-addr", "127.0.0.1:0", "--insecure"});
  ASSERT_TRUE(first.start());
  auto cc = ControlClient::create(first.address());
  auto info = cc->server_info();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  std::string tcp = info->control_address.substr(info->control_address.find(' ') + 1);
  ASSERT_NE(tcp.find("127.0.0.1:"), std::string::npos) << info->control_address;
  testing::ServerProcess second(b.path(), {"--control-addr", tcp, "--insecure"});
  EXPECT_FALSE(second.start());
  second.stop();
  EXPECT_TRUE(WIFEXITED(second.exit_status()) && WEXITSTATUS(second.exit_status()) != 0);
  testing::ServerProcess third(c.path(), {"--control-socket", first.socket_path()});
  EXPECT_FALSE(third.start());
  third.stop();
  EXPECT_TRUE(WIFEXITED(third.exit_status()) && WEXITSTATUS(third.exit_status()) != 0);
  EXPECT_TRUE(cc->pool_list().is_ok());
}

// The control socket's directory, when the server makes it, lets every local user reach the socket (the server's
// umask is 077), and the socket takes anyone's connection: the server decides what each caller may do.
TEST(ControlPlane, ControlSocketIsReachableByEveryLocalUser) {
  engine::testing::TempDir dir, run;
  std::string sock_dir = run.path() + "/rfos", sock = sock_dir + "/control.sock";
  ASSERT_EQ(chmod(run.path().c_str(), 0755), 0);
  testing::ServerProcess server(dir.path(), {"--control-socket", sock});
  ASSERT_TRUE(server.start());
  struct stat st {};
  ASSERT_EQ(stat(sock_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  EXPECT_TRUE(ControlClient::create("unix:" + sock)->health().is_ok());
}

// A TCP listener without TLS is refused unless the operator says --insecure.
TEST(ControlPlane, PlainTcpNeedsInsecure) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--control-addr", "127.0.0.1:0"});
  EXPECT_FALSE(server.start());
  server.stop();
  EXPECT_TRUE(WIFEXITED(server.exit_status()) && WEXITSTATUS(server.exit_status()) != 0);
}

TEST(ControlPlane, BadConfigIsRefused) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--provider", "carrier+pigeon"});
  EXPECT_FALSE(server.start());
  server.kill(SIGTERM);
}

}  // namespace
}  // namespace rfos
