// Watching peer processes: a live one is watched until it exits, a made-up one is not watched at all.
#include "transport/ucx/peer_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace rfos::transport::ucx {
namespace {

// A child that exits when told.
class Child {
 public:
  Child() {
    if (pipe(ready_) != 0 || pipe(release_) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      char c = 1;
      (void)!write(ready_[1], &c, 1);
      (void)!read(release_[0], &c, 1);
      _exit(0);
    }
    char c;
    if (pid_ > 0 && read(ready_[0], &c, 1) != 1) pid_ = -1;
  }
  ~Child() { end(); }
  PeerProcess process() const { return {static_cast<uint64_t>(pid_), process_start_time(static_cast<uint64_t>(pid_))}; }
  bool ok() const { return pid_ > 0; }
  void end() {
    if (pid_ <= 0) return;
    char c = 1;
    (void)!write(release_[1], &c, 1);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int ready_[2] = {-1, -1}, release_[2] = {-1, -1};
  pid_t pid_ = -1;
};

TEST(ProcessWatch, AProcessIsGoneOnceItExits) {
  Child child;
  ASSERT_TRUE(child.ok());
  PeerProcess kid = child.process();
  ASSERT_NE(kid.start, 0u);
  ProcessWatch w(std::chrono::milliseconds(0));
  EXPECT_TRUE(w.watch(1, kid));
  EXPECT_TRUE(w.watch(2, PeerProcess::self()));
  EXPECT_FALSE(w.watch(3, {kid.pid, kid.start + 1})) << "another process that had this id";
  EXPECT_FALSE(w.watch(4, {0, 0}));
  EXPECT_TRUE(w.gone().empty());
  child.end();
  EXPECT_EQ(w.gone(), std::vector<ProcessWatch::Handle>{1});
  w.forget(1);
  EXPECT_TRUE(w.gone().empty());
  EXPECT_TRUE(w.watching(2));
}

TEST(ProcessWatch, LooksNoMoreOftenThanItsInterval) {
  Child child;
  ASSERT_TRUE(child.ok());
  ProcessWatch w(std::chrono::hours(1));
  ASSERT_TRUE(w.watch(1, child.process()));
  auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(w.gone(now).empty());
  child.end();
  EXPECT_TRUE(w.gone(now + std::chrono::minutes(1)).empty()) << "looked again within the interval";
  EXPECT_EQ(w.gone(now + std::chrono::hours(2)), std::vector<ProcessWatch::Handle>{1});
}

}  // namespace
}  // namespace rfos::transport::ucx
