// Write-behind over the namespace on the simulated fabric: writes land, overlapping ones in order, and a write
// that fails is reported by the next settle (fsync, close), once.
#include "fuse/write_behind.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "server/sim_cluster_testing.h"
#include "transport/sim/sim.h"

namespace rfos::fuse {
namespace {

class WriteBehindTest : public server::testing::SimCluster {
 protected:
  void SetUp() override {
    SimCluster::SetUp();
    auto ns = posix::Namespace::open(
        [this] {
          client::ContainerOptions o;
          o.timeout_ms = 300;  // a lost write fails in a test's time
          return client::Container::open(session(), o);
        },
        [] { return Result<posix::StatFs>(posix::StatFs{}); });
    ASSERT_TRUE(ns.is_ok()) << ns.status().to_string();
    ns_ = std::move(ns).value();
    auto f = ns_->mknod(ns_->root(), "f", S_IFREG | 0644, 0, {});
    ASSERT_TRUE(f.is_ok());
    file_ = f->oid;
  }
  void TearDown() override {
    ns_.reset();
    SimCluster::TearDown();
  }
  std::string read_all(uint64_t len) {
    std::string back(len, '\0');
    auto n = ns_->read(file_, 0, {reinterpret_cast<uint8_t*>(back.data()), back.size()});
    EXPECT_TRUE(n.is_ok());
    back.resize(n.is_ok() ? *n : 0);
    return back;
  }

  std::unique_ptr<posix::Namespace> ns_;
  ObjectId file_;
};

TEST_F(WriteBehindTest, OverlappingWritesLandInTheOrderTheyCame) {
  WriteBehind wb(*ns_, 4, 1u << 20);
  std::string want(64 << 10, '\0');
  uint64_t end = 0;
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < 16; ++i) {
      std::string piece(8 << 10, static_cast<char>('a' + (round + i) % 26));
      uint64_t at = static_cast<uint64_t>((i * 4096 + round * 512) % ((64 << 10) - piece.size()));
      want.replace(at, piece.size(), piece);
      end = std::max(end, at + piece.size());
      wb.submit(file_, at, WriteBytes::copy_of(piece.data(), piece.size()));
    }
  }
  ASSERT_TRUE(wb.settle(file_).is_ok());
  want.resize(end);
  std::string got = read_all(want.size());
  ASSERT_EQ(got.size(), want.size());
  size_t first = 0;
  while (first < want.size() && got[first] == want[first]) ++first;
  EXPECT_EQ(first, want.size()) << "the last write of each byte wins; first difference at " << first;
  EXPECT_FALSE(wb.wait(file_)) << "nothing left to wait for";
}

TEST_F(WriteBehindTest, AFailedWriteIsReportedOnceBySettle) {
  WriteBehind wb(*ns_, 2, 1u << 20);
  transport::sim::Fabric::process().set_knobs({1, 0, 1.0, 0});  // every message lost
  std::string piece(4096, 'x');
  wb.submit(file_, 0, WriteBytes::copy_of(piece.data(), piece.size()));
  EXPECT_TRUE(wb.wait(file_));
  transport::sim::Fabric::process().set_knobs({});
  EXPECT_EQ(wb.settle(file_).code(), StatusCode::kTimeout);
  EXPECT_TRUE(wb.settle(file_).is_ok()) << "reported once";
  wb.submit(file_, 0, WriteBytes::copy_of(piece.data(), piece.size()));
  EXPECT_TRUE(wb.settle(file_).is_ok());
  EXPECT_EQ(read_all(4096), piece);
}

// A small file's writes are held and go with its time update as one operation at settle (close); a wait (a read
// of the file) sends them on their own.
TEST_F(WriteBehindTest, SmallWritesGoWithTheTimeUpdate) {
  WriteBehind wb(*ns_, 2, 1u << 20);
  uint64_t before = ns_->getattr(file_)->mtime_ns;
  wb.submit(file_, 0, WriteBytes::copy_of("hello ", 6));
  wb.submit(file_, 6, WriteBytes::copy_of("world", 5));  // contiguous: held with the first
  EXPECT_EQ(ns_->getattr(file_)->size, 0u) << "held until the file is settled";
  std::optional<posix::Attr> touched;
  ASSERT_TRUE(wb.settle(file_, &touched).is_ok());
  ASSERT_TRUE(touched.has_value());
  EXPECT_EQ(touched->size, 11u);
  EXPECT_EQ(read_all(11), "hello world");
  EXPECT_GT(ns_->getattr(file_)->mtime_ns, before);

  wb.submit(file_, 0, WriteBytes::copy_of("J", 1));
  EXPECT_TRUE(wb.wait(file_)) << "a reader sends what is held";
  EXPECT_EQ(read_all(11), "Jello world");
  touched.reset();
  ASSERT_TRUE(wb.settle(file_, &touched).is_ok());
  EXPECT_FALSE(touched.has_value()) << "nothing was held any more: the caller updates the times";

  // Not contiguous: the held one is sent before the next goes its own way.
  wb.submit(file_, 100, WriteBytes::copy_of("a", 1));
  wb.submit(file_, 50, WriteBytes::copy_of("b", 1));
  ASSERT_TRUE(wb.settle(file_).is_ok());
  std::string got = read_all(101);
  EXPECT_EQ(got.size(), 101u);
  EXPECT_EQ(got[50], 'b');
  EXPECT_EQ(got[100], 'a');
}

TEST_F(WriteBehindTest, TimesGoWithAHeldWrite) {
  WriteBehind wb(*ns_, 2, 1u << 20);
  posix::SetAttr times;
  times.set_mtime = true;
  times.mtime_ns = 1'000'000'000'123;
  posix::Cred owner{0, 0, {}};
  wb.submit(file_, 0, WriteBytes::copy_of("tar", 3));
  auto both = wb.land_with(file_, times, owner);
  ASSERT_TRUE(both.has_value()) << "the held write and the times as one operation";
  EXPECT_EQ(both->mtime_ns, times.mtime_ns);
  EXPECT_EQ(both->size, 3u);
  EXPECT_EQ(read_all(3), "tar");
  EXPECT_EQ(ns_->getattr(file_)->mtime_ns, times.mtime_ns) << "the times after the write, not the write's";
  EXPECT_FALSE(wb.land_with(file_, times, owner).has_value()) << "nothing held: the caller sets the times";

  // Refused (not the owner, no write permission): the bytes land all the same, the times are the caller's.
  wb.submit(file_, 0, WriteBytes::copy_of("TAR", 3));
  EXPECT_FALSE(wb.land_with(file_, times, posix::Cred{1234, 1234, {}}).has_value());
  EXPECT_TRUE(wb.settle(file_).is_ok()) << "the write itself did not fail";
  EXPECT_EQ(read_all(3), "TAR");
}

}  // namespace
}  // namespace rfos::fuse
