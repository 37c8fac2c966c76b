// What a mount knows of the directories it made: names absent only while nothing says otherwise, and not past
// the lifetime.
#include "fuse/whole_dirs.h"

#include <gtest/gtest.h>

namespace rfos::fuse {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

TEST(WholeDirs, ADirectoryMadeHereHoldsOnlyTheNamesMadeHere) {
  WholeDirs w(kSecond);
  ObjectId d{1, 1}, other{1, 2};
  uint64_t left = 0;
  EXPECT_FALSE(w.absent(d, "a", 0, &left)) << "nothing is known of a directory not made here";
  w.made(d, 100);
  EXPECT_TRUE(w.absent(d, "a", 100, &left));
  EXPECT_EQ(left, kSecond);
  w.named(d, "a");
  EXPECT_FALSE(w.absent(d, "a", 200, &left));
  EXPECT_TRUE(w.absent(d, "b", 200, &left));
  EXPECT_EQ(left, kSecond - 100);
  w.unnamed(d, "a");
  EXPECT_TRUE(w.absent(d, "a", 300, &left));
  w.named(other, "x");  // not made here: nothing learnt
  EXPECT_FALSE(w.absent(other, "y", 300, &left));
}

TEST(WholeDirs, DoubtAndTimeEndTheKnowledge) {
  WholeDirs w(kSecond);
  ObjectId d{1, 1};
  uint64_t left = 0;
  w.made(d, 0);
  w.forget(d);  // another client's change, or a change of ours that failed
  EXPECT_FALSE(w.absent(d, "a", 1, &left));
  w.made(d, 0);
  EXPECT_TRUE(w.absent(d, "a", kSecond - 1, &left));
  EXPECT_EQ(left, 1u);
  EXPECT_FALSE(w.absent(d, "a", kSecond, &left)) << "past its lifetime";
  EXPECT_EQ(w.size(), 0u) << "dropped once past it";
  WholeDirs off(0);
  off.made(d, 0);
  EXPECT_FALSE(off.absent(d, "a", 0, &left)) << "a lifetime of 0 keeps nothing (--negative-timeout 0)";
}

TEST(WholeDirs, Bounded) {
  WholeDirs w(kSecond, 2, 2);
  uint64_t left = 0;
  w.made({1, 1}, 0);
  w.made({1, 2}, 0);
  w.made({1, 3}, 0);
  EXPECT_FALSE(w.absent({1, 3}, "a", 0, &left)) << "past max_dirs, a directory is not kept";
  w.made({1, 4}, kSecond);  // the others expired: room again
  EXPECT_TRUE(w.absent({1, 4}, "a", kSecond, &left));
  w.named({1, 4}, "a");
  w.named({1, 4}, "b");
  w.named({1, 4}, "c");  // past max_names: forgotten, never answered wrongly
  EXPECT_FALSE(w.absent({1, 4}, "z", kSecond, &left));
}

}  // namespace
}  // namespace rfos::fuse
