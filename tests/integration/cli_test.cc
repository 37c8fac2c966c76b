// The rfos CLI as a user runs it, against a real server started with --create-defaults: put/get of files and
// stdin, exit codes a script can act on.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/engine_testing.h"
#include "server_process.h"

namespace rfos {
namespace {

struct Shell {
  int code;
  std::string out;
};

Shell sh(const std::string& cmd) {
  Shell r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Cli, PutGetRoundTripsAndExitCodes) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--create-defaults"});
  ASSERT_TRUE(server.start());
  std::string rfos = std::string(RFOS_BINARY) + " --addr " + server.address();

  std::string in = dir.path() + "/in.bin", out = dir.path() + "/out.bin";
  std::string data = engine::testing::pattern(9, 3 * 1024 * 1024 + 123);
  std::ofstream(in, std::ios::binary) << data;
  EXPECT_EQ(sh(rfos + " put data.bin " + in).code, 0);
  EXPECT_EQ(sh(rfos + " get data.bin " + out).code, 0);
  EXPECT_TRUE(slurp(out) == data);

  // stdin and stdout, and an empty object.
  EXPECT_EQ(sh("echo -n 'hello rfos' | " + rfos + " put greeting -").code, 0);
  Shell g = sh(rfos + " get greeting -");
  EXPECT_EQ(g.code, 0);
  EXPECT_EQ(g.out, "hello rfos");

  // Snapshots: get --snapshot reads the object as it was; snap list / destroy.
  Shell snap = sh(rfos + " cont snap create --pool default default");
  ASSERT_EQ(snap.code, 0);
  std::string epoch = snap.out.substr(0, snap.out.find('\n'));
  EXPECT_EQ(sh("echo -n 'changed' | " + rfos + " put greeting -").code, 0);
  EXPECT_EQ(sh(rfos + " get greeting -").out, "changed");
  EXPECT_EQ(sh(rfos + " get --snapshot " + epoch + " greeting -").out, "hello rfos");
  EXPECT_EQ(sh(rfos + " cont snap list --pool default default").out, epoch + "\n");
  EXPECT_EQ(sh(rfos + " cont snap destroy --pool default default --epoch " + epoch).code, 0);
  EXPECT_EQ(sh(rfos + " cont snap destroy --pool default default --epoch " + epoch + " 2>/dev/null").code, 1);
  EXPECT_EQ(sh("echo -n 'hello rfos' | " + rfos + " put greeting -").code, 0);
  EXPECT_EQ(sh("printf '' | " + rfos + " put empty -").code, 0);
  g = sh(rfos + " get empty -");
  EXPECT_EQ(g.code, 0);
  EXPECT_EQ(g.out, "");
  // put replaces: a shorter object leaves nothing of the longer one behind.
  EXPECT_EQ(sh("echo -n short | " + rfos + " put data.bin -").code, 0);
  EXPECT_EQ(sh(rfos + " get data.bin -").out, "short");

  // ls shows every named object once, with its size (an object is striped over both targets).
  Shell ls = sh(rfos + " ls");
  EXPECT_EQ(ls.code, 0);
  EXPECT_NE(ls.out.find("         5  data.bin"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("        10  greeting"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("         0  empty"), std::string::npos) << ls.out;
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 3) << ls.out;

  // A KEY that starts with '/' is a file of the container's POSIX namespace: what rfos fs and the mount show,
  // written all or nothing as well.
  std::string model = engine::testing::pattern(4, 2 * 1024 * 1024 + 7);
  std::ofstream(in, std::ios::binary | std::ios::trunc) << model;
  EXPECT_EQ(sh(rfos + " put -q /model.bin " + in).code, 0);
  Shell fls = sh(rfos + " fs ls rfos:/");
  EXPECT_NE(fls.out.find(std::to_string(model.size()) + "  model.bin"), std::string::npos) << fls.out;
  EXPECT_EQ(sh(rfos + " get -q /model.bin " + out).code, 0);
  EXPECT_TRUE(slurp(out) == model);
  EXPECT_NE(sh(rfos + " stat /model.bin").out.find("size: " + std::to_string(model.size())), std::string::npos);
  ls = sh(rfos + " ls");
  EXPECT_NE(ls.out.find("files and directories of the POSIX namespace"), std::string::npos) << ls.out;
  EXPECT_EQ(sh(rfos + " put -q /no/such/dir " + in + " 2>/dev/null").code, 1);
  EXPECT_EQ(sh(rfos + " rm /model.bin").code, 0);
  EXPECT_EQ(sh(rfos + " get /model.bin - 2>/dev/null").code, 1);
  Shell check = sh(rfos + " fs check");
  EXPECT_EQ(check.code, 0) << check.out;
  EXPECT_NE(check.out.find("1 directories, 0 files\nconsistent"), std::string::npos) << check.out;

  // rfos bench speaks fio's JSON layout: a short run of each pattern yields I/O in the right direction.
  for (std::string rw : {"randwrite", "randread"}) {
    Shell b = sh(rfos + " bench --rw " + rw + " --bs 4k --iodepth 4 --size 2m --runtime 1 --output-format json");
    ASSERT_EQ(b.code, 0) << b.out;
    std::string side = rw == "randwrite" ? "\"write\":{\"io_bytes\":" : "\"read\":{\"io_bytes\":";
    size_t at = b.out.find(side);
    ASSERT_NE(at, std::string::npos) << b.out;
    EXPECT_GT(std::strtoull(b.out.c_str() + at + side.size(), nullptr, 10), 0u) << b.out;
    EXPECT_NE(b.out.find("\"clat_ns\":{"), std::string::npos);
    EXPECT_NE(b.out.find("\"99.000000\":"), std::string::npos);
  }
  EXPECT_NE(sh(rfos + " bench --bs 3m 2>/dev/null").code, 0);

  // --ceiling runs ucx_perftest as rfos's endpoints are set up (the server here is ucx+tcp: peer-failure
  // handling, -e) and reports the figure without it beside, each with rfos's ratio to it.
  if (sh("command -v ucx_perftest >/dev/null 2>&1").code == 0) {
    Shell c = sh(rfos + " bench --rw write --bs 4k --iodepth 4 --size 2m --runtime 1 --ceiling --output-format json");
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_NE(c.out.find("\"ceiling\":{\"tool\":\"ucx_perftest ucp_am_bw -e\",\"msg_rate\":"), std::string::npos)
        << c.out;
    std::string other = "\"without_peer_failure_handling\":{\"msg_rate\":";
    size_t at = c.out.find(other);
    ASSERT_NE(at, std::string::npos) << c.out;
    EXPECT_GT(std::strtod(c.out.c_str() + at + other.size(), nullptr), 0.0) << c.out;
  }

  // Errors a user can act on: unknown object or pool (1), no server (3), bad usage (non-zero).
  EXPECT_EQ(sh(rfos + " get nothing-here - 2>/dev/null").code, 1);
  EXPECT_EQ(sh(rfos + " get --pool nope greeting - 2>/dev/null").code, 1);
  EXPECT_NE(sh(rfos + " put 2>/dev/null").code, 0);
  server.kill();
  EXPECT_EQ(sh(rfos + " --timeout-ms 2000 get greeting - 2>/dev/null").code, 3);
}

// The same commands through `rfos agent` (--agent, or RFOS_AGENT): the agent makes them for this user; the
// data commands it does not run yet fail saying so.
TEST(Cli, CommandsThroughTheAgent) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--create-defaults", "--trust-agent", "root=root"});
  ASSERT_TRUE(server.start());
  std::string sock = dir.path() + "/agent/agent.sock";
  pid_t agent = fork();
  if (agent == 0) {
    std::string addr = server.address();
    execl(RFOS_BINARY, RFOS_BINARY, "--addr", addr.c_str(), "agent", "--listen", sock.c_str(), "--provider", "ucx+tcp",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(agent, 0);
  std::string rfos = std::string(RFOS_BINARY) + " --addr " + server.address() + " --agent " + sock;
  Shell who{1, ""};
  for (int i = 0; i < 200 && who.code != 0; ++i) {  // until the agent serves its socket
    who = sh(rfos + " whoami 2>/dev/null");
    if (who.code != 0) usleep(50000);
  }
  EXPECT_EQ(who.out, "root (uid 0)\n");
  EXPECT_NE(sh(rfos + " pool list").out.find("default"), std::string::npos);
  std::string in = dir.path() + "/in.bin", out = dir.path() + "/out.bin";
  std::string data = engine::testing::pattern(3, 5 * 1024 * 1024 + 17);  // two chunks of the CLI's 4 MiB buffer
  std::ofstream(in, std::ios::binary) << data;
  for (std::string key : {"through-agent.bin", "/through-agent.bin"}) {
    EXPECT_EQ(sh(rfos + " put -q " + key + " " + in).code, 0) << key;
    EXPECT_EQ(sh(rfos + " get -q " + key + " " + out).code, 0) << key;
    EXPECT_TRUE(slurp(out) == data) << key;
    EXPECT_NE(sh(rfos + " stat " + key).out.find("size: " + std::to_string(data.size())), std::string::npos);
  }
  // A small object is kept in its name's record, and stat says so, through the agent as without it.
  std::string small_in = dir.path() + "/small.bin";
  std::ofstream(small_in, std::ios::binary) << data.substr(0, 100);
  EXPECT_EQ(sh(rfos + " put -q small.bin " + small_in).code, 0);
  EXPECT_EQ(sh(rfos + " get -q small.bin " + out).code, 0);
  EXPECT_TRUE(slurp(out) == data.substr(0, 100));
  for (const std::string& client : {rfos, std::string(RFOS_BINARY) + " --addr " + server.address()})
    EXPECT_NE(sh(client + " stat small.bin").out.find("the bytes are kept in the name's record"), std::string::npos)
        << client;
  // The native client reads what went through the agent.
  EXPECT_EQ(sh(std::string(RFOS_BINARY) + " --addr " + server.address() + " get -q through-agent.bin " + out).code, 0);
  EXPECT_TRUE(slurp(out) == data);
  EXPECT_NE(sh(rfos + " ls").out.find(std::to_string(data.size()) + "  through-agent.bin"), std::string::npos);
  // --snapshot: a snapshot made through the agent reads the object as it was; it is read-only.
  Shell snap = sh(rfos + " cont snap create --pool default default");
  ASSERT_EQ(snap.code, 0);
  std::string epoch = snap.out.substr(0, snap.out.find('\n'));
  EXPECT_EQ(sh(rfos + " rm through-agent.bin").code, 0);
  EXPECT_EQ(sh(rfos + " get through-agent.bin - 2>/dev/null").code, 1);
  EXPECT_EQ(sh(rfos + " get -q --snapshot " + epoch + " through-agent.bin " + out).code, 0);
  EXPECT_TRUE(slurp(out) == data);
  EXPECT_NE(
      sh(rfos + " stat --snapshot " + epoch + " through-agent.bin").out.find("size: " + std::to_string(data.size())),
      std::string::npos);
  EXPECT_NE(sh(rfos + " ls --snapshot " + epoch).out.find("through-agent.bin"), std::string::npos);
  EXPECT_EQ(sh(rfos + " ls").out.find("through-agent.bin"), std::string::npos);
  Shell path = sh(rfos + " get --snapshot " + epoch + " /through-agent.bin - 2>&1");
  EXPECT_EQ(path.code, 1);
  EXPECT_NE(path.out.find("NotSupported"), std::string::npos) << path.out;
  EXPECT_EQ(sh(rfos + " cont snap destroy --pool default default --epoch " + epoch).code, 0);
  Shell fs = sh(rfos + " fs ls rfos:/");
  EXPECT_EQ(fs.code, 0);
  EXPECT_NE(fs.out.find(std::to_string(data.size()) + "  through-agent.bin"), std::string::npos) << fs.out;
  Shell check = sh(rfos + " fs check");
  EXPECT_EQ(check.code, 0) << check.out;
  EXPECT_TRUE(check.out.ends_with(" files\nconsistent\n")) << check.out;
  Shell copy = sh(rfos + " fs copy rfos:/through-agent.bin " + dir.path() + "/copied");
  EXPECT_EQ(copy.code, 0);
  EXPECT_EQ(copy.out, "copied 1 files\n");
  EXPECT_TRUE(slurp(dir.path() + "/copied") == data);
  kill(agent, SIGTERM);
  int status = 0;
  waitpid(agent, &status, 0);
}

}  // namespace
}  // namespace rfos
