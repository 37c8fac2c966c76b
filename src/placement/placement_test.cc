#include "placement/placement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rfos::placement {
namespace {

TEST(Placement, S1KeepsAnObjectOnOneTarget) {
  ObjectId oid = with_class({12345, 678}, ObjectClass::kS1);
  EXPECT_EQ(object_class(oid), ObjectClass::kS1);
  uint32_t t = target_of(oid, "a", 8);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(target_of(oid, std::to_string(i), 8), t);
  // Ordered dkeys are the class byte's top bit: the class stays S1, the object on one target.
  ObjectId ordered = with_class({12345, 678}, ObjectClass::kS1, true);
  EXPECT_TRUE(ordered.ordered_dkeys());
  EXPECT_FALSE(oid.ordered_dkeys());
  EXPECT_EQ(object_class(ordered), ObjectClass::kS1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(target_of(ordered, std::to_string(i), 8), target_of(ordered, "a", 8));
  EXPECT_FALSE(with_class(ordered, ObjectClass::kSX).ordered_dkeys());
}

TEST(Placement, SXSpreadsDkeysEvenly) {
  ObjectId oid = with_class({1, 2}, ObjectClass::kSX);
  std::vector<int> count(8, 0);
  for (int i = 0; i < 8000; ++i) count[target_of(oid, std::to_string(i), 8)]++;
  for (int c : count) {
    EXPECT_GT(c, 800);
    EXPECT_LT(c, 1200);
  }
}

TEST(Placement, GrowingTheMapMovesFewKeys) {
  ObjectId oid{3, 4};
  int moved = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string k = std::to_string(i);
    uint32_t a = target_of(oid, k, 10), b = target_of(oid, k, 11);
    if (a != b) {
      ++moved;
      EXPECT_EQ(b, 10u);  // a key only ever moves to the new target
    }
  }
  EXPECT_LT(moved, 1300);  // about 1/11
  EXPECT_GT(moved, 600);
}

TEST(Placement, IsAPureFunction) {
  EXPECT_EQ(target_of({9, 9}, "x", 5), target_of({9, 9}, "x", 5));
  EXPECT_EQ(target_of({9, 9}, "x", 1), 0u);
}

}  // namespace
}  // namespace rfos::placement
