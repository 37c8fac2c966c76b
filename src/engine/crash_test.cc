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

#include "engine/engine.h"
#include "engine/engine_testing.h"

namespace rfos::engine {
namespace {

using testing::bytes;
using testing::pattern;

const Uuid kPool = *Uuid::parse("00000000-0000-4000-8000-00000000c0de");
const Uuid kCont = *Uuid::parse("00000000-0000-4000-8000-00000000beef");
const ObjectId kOid{7, 7};

struct WriteSpec {
  bool single;
  uint64_t offset;
  uint64_t length;
};

// Sizes cover inline pieces, one block, unaligned multi-block and multi-grain updates.
WriteSpec spec_for(uint64_t tag) {
  switch (tag % 6) {
    case 0:
      return {true, 0, 1 + tag % 2000};
    case 1:
      return {false, tag % 100, 1 + tag % 3000};
    case 2:
      return {false, 0, 4096};
    case 3:
      return {false, 4096 * (tag % 7), 65536};
    case 4:
      return {false, 777, (1u << 20) + 4096};
    default:
      return {false, (1u << 20) - 100, 300000};
  }
}

void report(int fd, const std::string& line) {
  std::string l = line + "\n";
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
  (void)engine->pool_create(kPool);
  (void)engine->cont_create(kPool, kCont, {});
  auto cont = engine->cont_open(kPool, kCont);
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
      std::vector<std::string> mine;
      for (;;) {
        uint64_t tag = next_tag++;
        std::string dkey = "k" + std::to_string(tag);
        WriteSpec w = spec_for(tag);
        std::string data = pattern(tag, w.length);
        ValueKind kind = w.single ? ValueKind::kSingle : ValueKind::kArray;
        Status s = engine->update({{cid, kOid, dkey, "a"}, ++epoch, kind, w.offset, w.length}, bytes(data),
                                  make_csums(kind, w.offset, bytes(data), 4096));
        if (s.is_ok()) {
          report(fd, "W " + std::to_string(tag));
          mine.push_back(dkey);
        } else if (s.code() == StatusCode::kNoSpace) {
          // Make room: punch an old key of ours and aggregate, as a long-running server would.
          if (!mine.empty()) {
            std::string victim = mine[rng() % mine.size()];
            report(fd, "I " + victim.substr(1));
            if (engine->punch_dkey(cid, kOid, victim, ++epoch).is_ok()) report(fd, "P " + victim.substr(1));
          }
          (void)engine->aggregate(cid, epoch.load() - 8);
        }
        if (t == 0 && tag % 50 == 0) (void)engine->aggregate(cid, epoch.load() - 16);
      }
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}

std::string g_self;

TEST(EngineCrash, KillNineLosesNoAcknowledgedUpdate) {
  testing::TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  std::map<uint64_t, bool> acked;  // tag -> written (true); punched when erased into `punched`
  std::set<uint64_t> punched, maybe_punched;
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
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 900));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited on its own with " << WEXITSTATUS(status);
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) all.append(buf, n);
    close(fds[0]);
    std::istringstream lines(all);
    std::string op;
    uint64_t tag;
    size_t acks = 0;
    while (lines >> op >> tag) {
      if (op == "W") acked[tag] = true, ++acks;
      if (op == "I") maybe_punched.insert(tag);
      if (op == "P") punched.insert(tag);
    }
    // A torn last line would show as a parse failure above only if it were not newline-terminated: lines are
    // written whole (atomic pipe writes), so everything read is complete.

    auto opened = Engine::open(testing::small_options(dir.path(), 96ull << 20));
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    auto engine = std::move(opened).value();
    Status chk = engine->check();
    ASSERT_TRUE(chk.is_ok()) << "round " << round << ": " << chk.to_string();
    auto info = engine->cont_open(kPool, kCont);
    if (!info.is_ok()) {
      ASSERT_EQ(acks, 0u) << "container missing after acknowledged writes";
      continue;
    }
    // The key of tag t, as the writer wrote it.
    auto fetch_tag = [&](const std::string& dkey, uint64_t t) {
      WriteSpec w = spec_for(t);
      return engine->fetch({{info->id, kOid, dkey, "a"},
                            kEpochLatest,
                            w.single ? ValueKind::kSingle : ValueKind::kArray,
                            w.offset,
                            w.length});
    };
    size_t verified = 0;
    for (const auto& [t, _] : acked) {
      std::string dkey = "k" + std::to_string(t);
      auto got = fetch_tag(dkey, t);
      if (punched.count(t)) {
        ASSERT_EQ(got.status().code(), StatusCode::kNotFound) << "punched key " << dkey << " came back";
        continue;
      }
      if (maybe_punched.count(t) && !got.is_ok()) continue;
      ASSERT_TRUE(got.is_ok()) << "round " << round << " acknowledged " << dkey << ": " << got.status().to_string();
      ASSERT_TRUE(*got == pattern(t, spec_for(t).length))
          << "round " << round << " acknowledged " << dkey << " reads back wrong";
      ++verified;
    }
    // Nothing half-written is visible: every key that exists at all, acknowledged or not (a commit can land
    // just before the kill, without its acknowledgement), reads back whole and exact.
    size_t present = 0;
    Anchor anchor;
    while (!anchor.done) {
      auto page = engine->list_dkeys(info->id, kOid, kEpochLatest, &anchor, 256);
      ASSERT_TRUE(page.is_ok()) << page.status().to_string();
      for (const std::string& dkey : *page) {
        uint64_t t = std::stoull(dkey.substr(1));
        auto got = fetch_tag(dkey, t);
        ASSERT_TRUE(got.is_ok()) << "round " << round << " present key " << dkey << ": " << got.status().to_string();
        ASSERT_TRUE(*got == pattern(t, spec_for(t).length)) << "round " << round << " key " << dkey << " is torn";
        ++present;
      }
    }
    EXPECT_GE(present, verified);
    std::printf("round %d: %zu acknowledged this round, %zu verified in all, %zu present, %zu punched\n", round, acks,
                verified, present, punched.size());
  }
  EXPECT_GT(acked.size(), 20u) << "the writer made too little progress to test anything";
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
