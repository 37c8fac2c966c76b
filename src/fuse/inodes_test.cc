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
  EXPECT_EQ(inodes_.hint({2, 2}), a);
  EXPECT_NE(inodes_.hint({9, 9}) & (1ull << 63), 0u) << "objects the kernel was not handed get a stand-in";
  inodes_.forget(a, 1);
  EXPECT_TRUE(inodes_.oid(a).is_ok()) << "one lookup is still held";
  inodes_.forget(a, 1);
  EXPECT_EQ(inodes_.oid(a).status().code(), StatusCode::kNotFound) << "stale once forgotten";
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

}  // namespace
}  // namespace rfos::fuse
