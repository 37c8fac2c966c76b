// The mount's inode table: numbers, what the kernel holds, and when an unlinked inode's object goes.
#include "fuse/inodes.h"

#include <gtest/gtest.h>

#include <vector>

namespace rfos::fuse {
namespace {

class InodesTest : public ::testing::Test {
 protected:
  std::vector<ObjectId> purged_;
  Inodes inodes_{{1, 1}, [this](const ObjectId& o) { purged_.push_back(o); }};
};

TEST_F(InodesTest, NumbersAreStableWhileTheKernelHoldsThem) {
  EXPECT_EQ(*inodes_.oid(kRootIno), (ObjectId{1, 1}));
  Ino a = inodes_.remember({2, 2});
  EXPECT_EQ(inodes_.remember({2, 2}), a) << "a second lookup, the same number";
  EXPECT_NE(inodes_.remember({3, 3}), a);
  // What stat shows is the object's own number, whatever the kernel holds it by, held or not.
  EXPECT_EQ(inodes_.number({2, 2}), 2u);
  EXPECT_EQ(inodes_.number({9, 0x1234}), 0x1234u);
  EXPECT_EQ(inodes_.number({1, 1}), kRootIno) << "the root's";
  EXPECT_NE(inodes_.number({7, 1}), kRootIno) << "never the root's";
  EXPECT_NE(inodes_.number({7, 0}), 0u);
  inodes_.forget(a, 1);
  EXPECT_TRUE(inodes_.oid(a).is_ok()) << "one lookup is still held";
  inodes_.forget(a, 1);
  EXPECT_EQ(inodes_.oid(a).status().code(), StatusCode::kNotFound) << "stale once forgotten";
  EXPECT_EQ(inodes_.number({2, 2}), 2u) << "and its number the same";
  inodes_.forget(kRootIno, 100);
  EXPECT_TRUE(inodes_.oid(kRootIno).is_ok()) << "the root is never forgotten";
  EXPECT_TRUE(purged_.empty()) << "nothing was unlinked";
}

TEST_F(InodesTest, AnUnlinkedOpenFileGoesAtItsLastRelease) {
  Ino f = inodes_.remember({4, 4});
  inodes_.opened(f, 1);
  inodes_.unlinked({4, 4});
  inodes_.forget(f, 1);
  EXPECT_TRUE(purged_.empty()) << "still open";
  EXPECT_TRUE(inodes_.oid(f).is_ok());
  inodes_.opened(f, -1);
  EXPECT_EQ(purged_, (std::vector<ObjectId>{{4, 4}}));
  EXPECT_FALSE(inodes_.oid(f).is_ok());
  inodes_.unlinked({5, 5});  // never handed to the kernel: goes at once
  EXPECT_EQ(purged_.size(), 2u);
  EXPECT_EQ(inodes_.size(), 1u) << "only the root is left";
}

// The attribute cache: what was seen answers within its age, a newer sighting is not overwritten by an older
// one, a change keeps the latest ctime, and stale drops it.
TEST_F(InodesTest, SeenAttributesAnswerWithinTheirAge) {
  Ino f = inodes_.remember({6, 6});
  posix::Attr a, got;
  a.oid = {6, 6};
  a.size = 10;
  a.ctime_ns = 100;
  uint64_t age = 0;
  EXPECT_FALSE(inodes_.recent(f, 1000, 500, &got, &age)) << "nothing seen yet";
  inodes_.seen({6, 6}, a, 1000);
  ASSERT_TRUE(inodes_.recent(f, 1200, 500, &got, &age));
  EXPECT_EQ(got.size, 10u);
  EXPECT_EQ(age, 200u);
  EXPECT_FALSE(inodes_.recent(f, 1500, 500, &got, &age)) << "as old as the timeout";
  posix::Attr older = a;
  older.size = 5;
  inodes_.seen({6, 6}, older, 900);  // asked for before the one kept: dropped
  ASSERT_TRUE(inodes_.recent(f, 1200, 500, &got, &age));
  EXPECT_EQ(got.size, 10u);
  posix::Attr changed = a;
  changed.size = 20;
  changed.ctime_ns = 50;  // a change older than what is kept
  inodes_.changed(changed, 1300);
  ASSERT_TRUE(inodes_.recent(f, 1300, 500, &got, &age));
  EXPECT_EQ(got.size, 10u);
  changed.ctime_ns = 200;
  inodes_.changed(changed, 1300);
  ASSERT_TRUE(inodes_.recent(f, 1300, 500, &got, &age));
  EXPECT_EQ(got.size, 20u);
  inodes_.stale({6, 6});
  EXPECT_FALSE(inodes_.recent(f, 1300, 500, &got, &age));
  inodes_.seen({6, 6}, a, 1400);
  inodes_.stale_all();
  EXPECT_FALSE(inodes_.recent(f, 1400, 500, &got, &age));
  inodes_.seen({7, 7}, a, 1400);  // never handed to the kernel: nothing kept
  EXPECT_EQ(inodes_.size(), 2u);
}

TEST_F(InodesTest, OpenFilesWritesAndKnownMissingXattrs) {
  Ino f = inodes_.remember({8, 8}), g = inodes_.remember({9, 9});
  std::vector<ObjectId> open;
  ASSERT_TRUE(inodes_.open_files(4, &open));
  EXPECT_TRUE(open.empty());
  inodes_.opened(f, 1);
  inodes_.opened(g, 1);
  ASSERT_TRUE(inodes_.open_files(4, &open));
  EXPECT_EQ(open.size(), 2u);
  EXPECT_FALSE(inodes_.open_files(1, &open)) << "more open than the caller can name";
  inodes_.opened(g, -1);
  ASSERT_TRUE(inodes_.open_files(1, &open));
  EXPECT_EQ(open, (std::vector<ObjectId>{{8, 8}}));

  uint64_t w = inodes_.writes(f);
  inodes_.written({8, 8}, 0);
  EXPECT_EQ(inodes_.writes(f), w + 1);

  // A write grows the size seen and keeps the rest good; one inside the file changes nothing seen.
  posix::Attr a, got;
  a.oid = {8, 8};
  a.size = 100;
  a.mtime_ns = 7;
  uint64_t age = 0;
  inodes_.seen({8, 8}, a, 1000);
  inodes_.written({8, 8}, 4096);
  ASSERT_TRUE(inodes_.recent(f, 1100, 500, &got, &age)) << "a write keeps what was seen";
  EXPECT_EQ(got.size, 4096u);
  EXPECT_EQ(got.mtime_ns, 7u);
  inodes_.written({8, 8}, 50);
  ASSERT_TRUE(inodes_.recent(f, 1100, 500, &got, &age));
  EXPECT_EQ(got.size, 4096u);
  inodes_.seen({8, 8}, a, 1200, w);  // asked for before the writes: dropped
  ASSERT_TRUE(inodes_.recent(f, 1250, 500, &got, &age));
  EXPECT_EQ(got.size, 4096u);

  EXPECT_FALSE(inodes_.no_xattrs(f, 100, 50));
  inodes_.created({8, 8}, 100);
  EXPECT_TRUE(inodes_.no_xattrs(f, 120, 50));
  EXPECT_FALSE(inodes_.no_xattrs(f, 150, 50)) << "known only for the attribute timeout";
  inodes_.created({8, 8}, 200);
  inodes_.xattrs_changed({8, 8});
  EXPECT_FALSE(inodes_.no_xattrs(f, 210, 50));
}

TEST_F(InodesTest, TimesSetAfterAWriteKeepTheCloseFromMovingThem) {
  const ObjectId f{5, 5};
  inodes_.remember(f);
  uint64_t first = inodes_.written(f, 10);
  EXPECT_FALSE(inodes_.times_set_since(f, first)) << "no times set yet: the close moves the mtime";
  auto before = inodes_.times_set(f);
  EXPECT_FALSE(before.has_value());
  EXPECT_TRUE(inodes_.times_set_since(f, first)) << "set after the write: the close leaves them";
  uint64_t second = inodes_.written(f, 20);
  EXPECT_GT(second, first);
  EXPECT_FALSE(inodes_.times_set_since(f, second)) << "a write after the set moves the mtime again";
  auto again = inodes_.times_set(f);
  inodes_.times_restore(f, again);  // a set that failed
  EXPECT_FALSE(inodes_.times_set_since(f, second));
  EXPECT_EQ(inodes_.written({6, 6}, 1), 0u) << "an object the kernel was not handed counts nothing";
}

}  // namespace
}  // namespace rfos::fuse
