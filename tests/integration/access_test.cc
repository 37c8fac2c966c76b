// Who may do what on the control plane, tried as a hostile local user and a hostile remote client would: local
// callers known by the kernel (the control socket's peer credentials), remote ones by mutual TLS, anonymous ones
// on an --insecure listener; ACLs on pools and containers; sessions that only their principal may end or renew,
// that end when an ACL takes their rights away, and whose end survives a restart; capabilities renewed by their
// holder past their lifetime.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "client/container.h"
#include "client/control_client.h"
#include "engine/engine_testing.h"
#include "server_process.h"
#include "wire/capability.h"

#ifndef RFOS_SOURCE_DIR
#error "RFOS_SOURCE_DIR must name the source tree (scripts/make-certs)"
#endif

namespace rfos {
namespace {

using client::ControlClient;
using client::TlsFiles;

// A copy of the rfos binaries (rfos, and rfos-server beside it, which `rfos server` runs) that every user may run:
// the build tree may sit under a directory other users cannot enter (a clone under /root). Made once per
// process, removed at exit.
const std::string& runnable_binary() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/rfos-bin-XXXXXX";
    if (!mkdtemp(tmpl)) return std::string(RFOS_BINARY);
    chmod(tmpl, 0755);
    std::string copy = std::string(tmpl) + "/rfos", server = std::string(tmpl) + "/rfos-server";
    std::string built_server = std::filesystem::path(RFOS_BINARY).parent_path() / "rfos-server";
    std::error_code ec;
    if (!std::filesystem::copy_file(RFOS_BINARY, copy, ec) || chmod(copy.c_str(), 0755) != 0 ||
        !std::filesystem::copy_file(built_server, server, ec) || chmod(server.c_str(), 0755) != 0)
      return std::string(RFOS_BINARY);
    static std::string dir = tmpl;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    });
    return copy;
  }();
  return path;
}

// `rfos ARGS` started as uid:gid (setgroups, setgid, setuid, exec) with RLIMIT_MEMLOCK `memlock` (unchanged when
// 0); its stdout and stderr come through `out`.
struct Spawned {
  pid_t pid = -1;
  FILE* out = nullptr;
};
Spawned rfos_spawn(uid_t uid, gid_t gid, const std::vector<std::string>& args, rlim_t memlock = 0) {
  const std::string& binary = runnable_binary();  // before the fork: the child only execs
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    rlimit lim{memlock, memlock};
    if ((memlock && setrlimit(RLIMIT_MEMLOCK, &lim) != 0) || setgroups(0, nullptr) != 0 || setgid(gid) != 0 ||
        setuid(uid) != 0)
      _exit(126);
    std::vector<std::string> all = {binary};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  return {pid, fdopen(fds[0], "r")};
}

// The exit code and output of `rfos ARGS` run to its end as uid:gid.
struct Ran {
  int code = -1;
  std::string out;
};
Ran rfos_as(uid_t uid, gid_t gid, const std::vector<std::string>& args) {
  Spawned p = rfos_spawn(uid, gid, args);
  if (p.pid < 0) return {};
  Ran r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p.out)) > 0) r.out.append(buf, n);
  fclose(p.out);
  int status = 0;
  waitpid(p.pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

// A local user who is not root against the control socket: the kernel names them, and they get what ACLs grant.
// Needs root to become another user (CI runs as root).
TEST(Access, LocalUsersGetWhatTheAclsGrant) {
  RFOS_REQUIRE_ROOT("to run clients as another user");
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path());
  ASSERT_TRUE(server.start());
  auto root = ControlClient::create(server.address());
  ASSERT_TRUE(root->pool_create("p").is_ok());
  ASSERT_TRUE(root->cont_create("p", "c", {}).is_ok());
  ASSERT_TRUE(root->pool_create("other").is_ok());
  auto nobody = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--addr", server.address()});
    return rfos_as(kNobody, kNogroup, args);
  };
  // Something nobody may read, to store.
  char tmpl[] = "/tmp/rfos-access-XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  std::string scratch = tmpl;
  chmod(scratch.c_str(), 0777);
  std::string in = scratch + "/in";
  std::ofstream(in) << "what nobody wrote";
  chmod(in.c_str(), 0644);

  Ran r = nobody({"whoami"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "nobody (uid 65534)\n");
  r = nobody({"pool", "list"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "") << "pools nobody may not read are not listed";
  r = nobody({"pool", "create", "mine"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("may not create pools"), std::string::npos) << r.out;
  r = nobody({"pool", "destroy", "--force", "p"});
  EXPECT_EQ(r.code, 1) << r.out;
  r = nobody({"cont", "destroy", "--pool", "p", "c"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("may not destroy"), std::string::npos) << r.out;
  r = nobody({"cont", "create", "--pool", "p", "squat"});
  EXPECT_EQ(r.code, 1) << r.out;
  r = nobody({"put", "--pool", "p", "--cont", "c", "k", in});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("PermissionDenied"), std::string::npos) << r.out;
  r = nobody({"pool", "acl", "update", "p", "-e", "A::nobody@:rwa"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(root->cont_list("p")->size(), 1u);

  // Granted read on the pool and read-write on the container, nobody can store and read back, and no more.
  ASSERT_TRUE(root->acl_update("p", "", {"A::nobody@:r"}).is_ok());
  ASSERT_TRUE(root->acl_update("p", "c", {"A::nobody@:rw"}).is_ok());
  r = nobody({"put", "--pool", "p", "--cont", "c", "k", in});
  EXPECT_EQ(r.code, 0) << r.out;
  r = nobody({"get", "--pool", "p", "--cont", "c", "k", "-"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "what nobody wrote");
  r = nobody({"pool", "list"});
  EXPECT_NE(r.out.find(" p "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("other"), std::string::npos) << r.out;
  r = nobody({"cont", "create", "--pool", "p", "squat"});  // creating containers needs w on the pool
  EXPECT_EQ(r.code, 1) << r.out;
  r = nobody({"cont", "destroy", "--pool", "p", "c"});  // destroying needs a
  EXPECT_EQ(r.code, 1) << r.out;
  r = nobody({"cont", "acl", "get", "--pool", "p", "c"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("A::nobody@:rw"), std::string::npos) << r.out;
  r = nobody({"cont", "acl", "update", "--pool", "p", "c", "-e", "A::nobody@:rwa"});
  EXPECT_EQ(r.code, 1) << r.out;

  // Taken away again: refused again.
  ASSERT_TRUE(root->acl_remove("p", "c", {"u:nobody@"}).is_ok());
  r = nobody({"get", "--pool", "p", "--cont", "c", "k", "-"});
  EXPECT_EQ(r.code, 1) << r.out;
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

// `rfos server` as an unprivileged user with Debian's default locked-memory limit (8 MiB; root here lacks
// CAP_SYS_RESOURCE to raise it, as on CI): the buffer arenas do not fit, so it serves with unregistered buffers,
// says so and which limit to raise and how; its own user administers it, and what it makes is its own.
TEST(Access, ServerRunsAsAnUnprivilegedUser) {
  RFOS_REQUIRE_ROOT("to start a server as another user");
  char data_tmpl[] = "/var/tmp/rfos-unpriv-XXXXXX", sock_tmpl[] = "/tmp/rfos-unpriv-ctl-XXXXXX";
  ASSERT_TRUE(mkdtemp(data_tmpl) && mkdtemp(sock_tmpl));
  std::string data = std::string(data_tmpl) + "/data", sock_dir = sock_tmpl, sock = sock_dir + "/control.sock";
  ASSERT_EQ(chmod(data_tmpl, 0755), 0);
  ASSERT_EQ(chown(sock_tmpl, kNobody, kNogroup), 0);
  ASSERT_EQ(chmod(sock_tmpl, 0755), 0);
  std::vector<std::string> args = {"server",
                                   "--data-dir",
                                   data,
                                   "--control-socket",
                                   sock,
                                   "--targets",
                                   "2",
                                   "--target-bytes",
                                   std::to_string(64ull << 20)};
  ASSERT_EQ(mkdir(data.c_str(), 0700), 0);
  ASSERT_EQ(chown(data.c_str(), kNobody, kNogroup), 0);

  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  rlim_t memlock = std::min<rlim_t>(lim.rlim_max, 8ull << 20);
  Spawned up = rfos_spawn(kNobody, kNogroup, args, memlock);
  ASSERT_GT(up.pid, 0);
  bool listening = false;
  std::string said;
  char line[2048];
  while (!listening && fgets(line, sizeof(line), up.out)) {
    said += line;
    listening = std::string(line).find("listening on") != std::string::npos;
  }
  EXPECT_NE(said.find("RLIMIT_MEMLOCK"), std::string::npos) << said;
  EXPECT_NE(said.find("LimitMEMLOCK=infinity"), std::string::npos) << said;
  std::thread drain([f = up.out] {
    char buf[512];
    while (fgets(buf, sizeof(buf), f)) {
    }
    fclose(f);
  });
  EXPECT_TRUE(listening) << said;
  if (listening) {
    auto root = ControlClient::create("unix:" + sock);
    ASSERT_TRUE(root->pool_create("p").is_ok());
    ASSERT_TRUE(root->cont_create("p", "c", {}).is_ok());
    auto c = client::Container::open(*root, "p", "c");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    std::string bytes = "stored by a server that is not root";
    ASSERT_TRUE(
        (*c)->write({3, 3}, "d", "a", 0, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}).is_ok());
    std::string back(bytes.size(), '\0');
    ASSERT_TRUE((*c)->read({3, 3}, "d", "a", 0, {reinterpret_cast<uint8_t*>(back.data()), back.size()}).is_ok());
    EXPECT_EQ(back, bytes);
    // Everything it made is its own and private.
    struct stat st {};
    ASSERT_EQ(stat((data + "/mgmt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kNobody);
    EXPECT_EQ(st.st_mode & 077, 0u);
  }
  kill(up.pid, SIGTERM);
  int status = 0;
  waitpid(up.pid, &status, 0);
  drain.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::error_code ec;
  std::filesystem::remove_all(data_tmpl, ec);
  std::filesystem::remove_all(sock_dir, ec);
}

// Certificates for a server on 127.0.0.1 and clients alice and bob, made by scripts/make-certs, plus a client
// whose certificate another CA signed.
class Pki {
 public:
  Pki() {
    std::string script = std::string(RFOS_SOURCE_DIR) + "/scripts/make-certs";
    ok_ = std::system((script + " " + dir_.path() + " 127.0.0.1 alice bob >/dev/null").c_str()) == 0 &&
          std::system((script + " " + dir_.path() + "/rogue 127.0.0.1 alice >/dev/null").c_str()) == 0;
  }
  bool ok() const { return ok_; }
  std::vector<std::string> server_flags() const {
    return {"--control-addr", "127.0.0.1:0",      "--tls-cert", file("server.pem"),
            "--tls-key",      file("server.key"), "--tls-ca",   file("ca.pem")};
  }
  TlsFiles client(const std::string& name) const { return {file("ca.pem"), file(name + ".pem"), file(name + ".key")}; }
  TlsFiles rogue(const std::string& name) const {
    return {file("ca.pem"), file("rogue/" + name + ".pem"), file("rogue/" + name + ".key")};
  }

 private:
  std::string file(const std::string& name) const { return dir_.path() + "/" + name; }
  engine::testing::TempDir dir_;
  bool ok_ = false;
};

// The TCP listener of a server that also has its control socket.
std::string tcp_address(ControlClient& local) {
  auto info = local.server_info();
  if (!info.is_ok()) return "";
  size_t space = info->control_address.find(' ');
  return space == std::string::npos ? "" : info->control_address.substr(space + 1);
}

class TlsAccess : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pki_.ok()) << "scripts/make-certs failed (openssl missing?)";
    start();
    ASSERT_TRUE(root_->pool_create("p", {"alice", "", {}}).is_ok());
  }
  void start() {
    server_ = std::make_unique<testing::ServerProcess>(dir_.path(), pki_.server_flags());
    ASSERT_TRUE(server_->start());
    root_ = ControlClient::create(server_->address());
    tcp_ = tcp_address(*root_);
    ASSERT_FALSE(tcp_.empty());
  }
  std::unique_ptr<ControlClient> as(const std::string& name) {
    return ControlClient::create(tcp_, 5000, pki_.client(name));
  }
  Pki pki_;
  engine::testing::TempDir dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<ControlClient> root_;
  std::string tcp_;
};

TEST_F(TlsAccess, OnlyClientsWithACertificateOfTheCaGetIn) {
  auto alice = as("alice");
  auto info = alice->server_info();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->caller, "tls:alice");
  EXPECT_EQ(info->data_dir, "") << "the data directory is for administrators";
  // No certificate, one another CA signed, or plain text: no call gets through.
  TlsFiles none{pki_.client("alice").ca, "", ""};
  for (auto& c : {ControlClient::create(tcp_, 3000, none), ControlClient::create(tcp_, 3000, pki_.rogue("alice")),
                  ControlClient::create(tcp_, 3000)}) {
    Status s = c->pool_list().status();
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.code(), StatusCode::kPermissionDenied) << "refused at the handshake, not by an ACL: " << s.to_string();
  }
}

TEST_F(TlsAccess, AclsDecideAndSessionsBelongToTheirPrincipal) {
  auto alice = as("alice"), bob = as("bob");
  // The pool's owner may make containers in it; nobody but administrators makes pools.
  EXPECT_EQ(alice->pool_create("q").status().code(), StatusCode::kPermissionDenied);
  auto cont = alice->cont_create("p", "c", {});
  ASSERT_TRUE(cont.is_ok()) << cont.status().to_string();
  EXPECT_EQ(cont->owner, "alice");
  // Bob is nobody here yet.
  EXPECT_TRUE(bob->pool_list()->empty());
  EXPECT_EQ(bob->connect("p", "c", false).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bob->cont_destroy("p", "c").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bob->acl_update("p", "c", {"A::bob@:rwa"}).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bob->snapshot_create("p", "c").status().code(), StatusCode::kPermissionDenied);
  // Only administrators change owners.
  EXPECT_EQ(alice->set_owner("p", "c", "bob", "").status().code(), StatusCode::kPermissionDenied);

  // Alice lets bob read.
  ASSERT_TRUE(alice->acl_update("p", "", {"A::bob@:r"}).is_ok());
  ASSERT_TRUE(alice->acl_update("p", "c", {"A::bob@:r"}).is_ok());
  auto bs = bob->connect("p", "c", false);
  ASSERT_TRUE(bs.is_ok()) << bs.status().to_string();
  EXPECT_EQ(wire::decode_capability(bs->capability)->rights, wire::Capability::kRead);
  EXPECT_EQ(bob->connect("p", "c", true).status().code(), StatusCode::kPermissionDenied);

  // A session id is in every capability in clear: someone else's id ends nothing and renews nothing.
  auto as_ = alice->connect("p", "c", true);
  ASSERT_TRUE(as_.is_ok());
  EXPECT_EQ(bob->disconnect(as_->session_id).code(), StatusCode::kPermissionDenied);
  client::Session stolen = *as_;
  EXPECT_EQ(bob->renew(&stolen).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(stolen.capability, as_->capability);
  client::Session renewed = *as_;
  ASSERT_TRUE(alice->renew(&renewed).is_ok());
  EXPECT_EQ(wire::decode_capability(renewed.capability)->rights, wire::Capability::kRead | wire::Capability::kWrite);

  // Taking bob's right away ends his session now: renewing it fails, and so does the data plane.
  client::ContainerOptions o;
  o.write = false;
  o.timeout_ms = 10000;
  auto reader = client::Container::open(*bob, "p", "c", o);
  ASSERT_TRUE(reader.is_ok()) << reader.status().to_string();
  auto w = client::Container::open(*alice, "p", "c");
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  std::string data = "alice's";
  ASSERT_TRUE((*w)->write({1, 1}, "d", "a", 0, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}).is_ok());
  std::string back(data.size(), '\0');
  ASSERT_TRUE((*reader)->read({1, 1}, "d", "a", 0, {reinterpret_cast<uint8_t*>(back.data()), back.size()}).is_ok());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(alice->acl_remove("p", "c", {"u:bob@"}).is_ok());
  client::Session bobs = *bs;
  EXPECT_EQ(bob->renew(&bobs).code(), StatusCode::kPermissionDenied);
  Status s = (*reader)->read({1, 1}, "d", "a", 0, {reinterpret_cast<uint8_t*>(back.data()), back.size()});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.to_string();
  // Alice's own session goes on.
  ASSERT_TRUE((*w)->write({1, 1}, "d", "a", 0, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}).is_ok());
}

TEST_F(TlsAccess, AnEndedSessionStaysEndedAcrossARestart) {
  auto alice = as("alice");
  ASSERT_TRUE(alice->cont_create("p", "c", {}).is_ok());
  auto s = alice->connect("p", "c", true);
  ASSERT_TRUE(s.is_ok());
  auto live = alice->connect("p", "c", true);
  ASSERT_TRUE(live.is_ok());
  ASSERT_TRUE(alice->disconnect(s->session_id).is_ok());
  server_->stop();
  start();
  alice = as("alice");
  client::Session ended = *s;
  EXPECT_EQ(alice->renew(&ended).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(alice->disconnect(s->session_id).code(), StatusCode::kNotFound);
  // A session that did not end is still hers to renew.
  client::Session kept = *live;
  EXPECT_TRUE(alice->renew(&kept).is_ok());
}

// A capability lives ttl_s; a Container renews it before then, or connects again once an idle handle let it
// expire, so a long-lived client keeps working. (The waits are the thing under test: the lifetime passing.)
TEST_F(TlsAccess, ContainersOutliveTheirCapability) {
  auto alice = as("alice");
  ASSERT_TRUE(alice->cont_create("p", "c", {}).is_ok());
  client::ContainerOptions o;
  o.ttl_s = 2;
  auto c = client::Container::open(*alice, "p", "c", o);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  std::string first = (*c)->session().capability;
  std::string data = "renewed";
  for (int ms : {0, 800, 800, 800, 2500}) {  // renewed on the way, then idle past the expiry
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    Status s = (*c)->write({2, 2}, "d", "a", 0, {reinterpret_cast<const uint8_t*>(data.data()), data.size()});
    ASSERT_TRUE(s.is_ok()) << "after a " << ms << " ms pause: " << s.to_string();
  }
  EXPECT_NE((*c)->session().capability, first);
  auto expired = wire::decode_capability(first);
  ASSERT_TRUE(expired.is_ok());
  EXPECT_LT(expired->expires_unix_ms, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                std::chrono::system_clock::now().time_since_epoch())
                                                                .count()));
}

// A TCP listener without TLS exists only when the operator says --insecure, and its callers are anonymous: they
// get what ACLs grant EVERYONE@, and own nothing.
TEST(Access, InsecureListenerCallersAreAnonymous) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--control-addr", "127.0.0.1:0", "--insecure"});
  ASSERT_TRUE(server.start());
  auto root = ControlClient::create(server.address());
  ASSERT_TRUE(root->pool_create("p").is_ok());
  ASSERT_TRUE(root->cont_create("p", "c", {}).is_ok());
  auto anon = ControlClient::create(tcp_address(*root));
  auto info = anon->server_info();
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->caller, "anonymous");
  EXPECT_TRUE(anon->pool_list()->empty());
  EXPECT_EQ(anon->connect("p", "c", false).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(anon->pool_create("q").status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(root->acl_update("p", "", {"A::EVERYONE@:rw"}).is_ok());
  ASSERT_TRUE(root->acl_update("p", "c", {"A::EVERYONE@:r"}).is_ok());
  EXPECT_TRUE(anon->connect("p", "c", false).is_ok());
  EXPECT_EQ(anon->connect("p", "c", true).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(anon->cont_create("p", "mine", {}).status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace rfos
