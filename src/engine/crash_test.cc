// Crash test: a writer process (this binary re-executed with --writer) updates, punches and aggregates with
// several threads and reports every acknowledged operation on a pipe; the test kills it with SIGKILL at a
// random moment, reopens the target and checks that every acknowledged update reads back exactly, every
// acknowledged punch holds, and the allocator accounts for every block. Several rounds on one target.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "engine/crash_testing.h"
#include "engine/engine.h"

namespace rfos::engine {
namespace {

void report(int fd, char op, uint64_t tag) {
  std::string l = std::string(1, op) + " " + std::to_string(tag) + "\n";
  (void)!write(fd, l.data(), l.size());  // < PIPE_BUF: atomic
}

// The writer: runs until killed.
int writer_main(const std::string& dir, int round, int fd) {
  auto opened = Engine::open(testing::small_options(dir, 96ull << 20));
  if (!opened.is_ok()) {
    std::fprintf(stderr, "writer: %s\n", opened.status().to_string().c_str());
    return 2;
  }
  std::unique_ptr<Engine> engine = std::move(opened).value();
  // Every round, not only the first: a round killed before its container was made (a loaded machine takes
  // longer than the shortest round to open the engine) left the next rounds without one.
  (void)engine->pool_create(testing::kCrashPool);
  (void)engine->cont_create(testing::kCrashPool, testing::kCrashCont, {});
  auto cont = engine->cont_open(testing::kCrashPool, testing::kCrashCont);
  if (!cont.is_ok()) {
    std::fprintf(stderr, "writer: %s\n", cont.status().to_string().c_str());
    return 2;
  }
  uint32_t cid = cont->id;
  std::atomic<uint64_t> epoch{uint64_t(round + 1) << 32};
  std::atomic<uint64_t> next_tag{uint64_t(round) << 32};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t * 7919 + round);
      std::vector<uint64_t> mine;
      for (;;)
        testing::crash_step(*engine, cid, next_tag++, epoch, mine, rng, t == 0,
                            [fd](char op, uint64_t tag) { report(fd, op, tag); });
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}

std::string g_self;

TEST(EngineCrash, KillNineLosesNoAcknowledgedUpdate) {
  testing::TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  testing::CrashLedger ledger;
  const int rounds = 6;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      std::string r = std::to_string(round), f = std::to_string(fds[1]);
      execl(g_self.c_str(), g_self.c_str(), "--writer", dir.path().c_str(), r.c_str(), f.c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 900));  // the moment of the kill
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited on its own with " << WEXITSTATUS(status);
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) all.append(buf, n);
    close(fds[0]);
    // Lines are written whole (atomic pipe writes), so everything read is complete.
    std::istringstream lines(all);
    std::string op;
    uint64_t tag;
    size_t acks = 0;
    while (lines >> op >> tag) {
      ledger.record(op[0], tag);
      acks += op == "W";
    }

    auto opened = Engine::open(testing::small_options(dir.path(), 96ull << 20));
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    testing::CrashCheck c = testing::check_after_crash(**opened, ledger);
    ASSERT_EQ(c.problem, "") << "round " << round;
    EXPECT_GE(c.present, c.verified);
    std::printf("round %d: %zu acknowledged this round, %zu verified in all, %zu present, %zu punched\n", round, acks,
                c.verified, c.present, ledger.punched.size());
  }
  EXPECT_GT(ledger.acked.size(), 20u) << "the writer made too little progress to test anything";
}

}  // namespace
}  // namespace rfos::engine

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--writer")
    return rfos::engine::writer_main(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  rfos::engine::g_self = "/proc/self/exe";
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) rfos::engine::g_self.assign(path, n);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
