#include "engine/value_cache.h"

#include <gtest/gtest.h>

namespace rfos::engine {
namespace {

const ObjectId kDir{1, 2};
const ObjectId kOther{3, 4};
using Drop = ValueCache::Drop;

// A commit's drops around its index write.
void commit_drop_dkey(ValueCache& c, uint32_t cid, const ObjectId& oid, std::string_view dkey) {
  c.drop_dkey(Drop::kBeforeWrite, cid, oid, dkey);
  c.committed();
  c.drop_dkey(Drop::kAfterWrite, cid, oid, dkey);
}
void commit_drop_object(ValueCache& c, uint32_t cid, const ObjectId& oid) {
  c.drop_object(Drop::kBeforeWrite, cid, oid);
  c.committed();
  c.drop_object(Drop::kAfterWrite, cid, oid);
}

std::optional<std::string> found(const ValueCache& c, const ValueCache::Key& k, uint64_t seen = ValueCache::kNow) {
  std::optional<std::string> v;
  if (!c.find(k, seen, &v)) return "<not cached>";
  return v;
}

TEST(ValueCacheTest, HoldsValuesAndNonesUntilTheirLevelIsDropped) {
  ValueCache c;
  ValueCache::Key a{1, kDir, "name", "e"}, b{1, kDir, "name", "x"}, other_dkey{1, kDir, "name2", "e"};
  EXPECT_EQ(found(c, a), "<not cached>");
  c.insert(c.ticket(1, kDir), a, "entry");
  c.insert(c.ticket(1, kDir), b, std::nullopt);
  c.insert(c.ticket(1, kDir), other_dkey, "entry2");
  EXPECT_EQ(found(c, a), "entry");
  EXPECT_EQ(found(c, b), std::nullopt);
  commit_drop_dkey(c, 1, kDir, "name");
  EXPECT_EQ(found(c, a), "<not cached>");
  EXPECT_EQ(found(c, b), "<not cached>");
  EXPECT_EQ(found(c, other_dkey), "entry2");
  // A dkey that is a prefix of another is its own level.
  c.insert(c.ticket(1, kDir), a, "entry");
  commit_drop_dkey(c, 1, kDir, "nam");
  EXPECT_EQ(found(c, a), "entry");
  commit_drop_object(c, 1, kDir);
  EXPECT_EQ(found(c, a), "<not cached>");
  EXPECT_EQ(found(c, other_dkey), "<not cached>");
  // An array's size at a key is not the single value there; a drop of its dkey drops both.
  ValueCache::Key size{1, kDir, "name", "e", true};
  c.insert(c.ticket(1, kDir), a, "entry");
  EXPECT_EQ(found(c, size), "<not cached>");
  c.insert(c.ticket(1, kDir), size, std::string(8, '\x01'));
  EXPECT_EQ(found(c, a), "entry");
  EXPECT_EQ(found(c, size), std::string(8, '\x01'));
  commit_drop_dkey(c, 1, kDir, "name");
  EXPECT_EQ(found(c, size), "<not cached>");
  EXPECT_EQ(found(c, a), "<not cached>");
  // Another container's object of the same id is another object.
  c.insert(c.ticket(2, kDir), {2, kDir, "name", "e"}, "elsewhere");
  commit_drop_object(c, 1, kDir);
  EXPECT_EQ(found(c, {2, kDir, "name", "e"}), "elsewhere");
  c.clear();
  EXPECT_EQ(found(c, {2, kDir, "name", "e"}), "<not cached>");
}

TEST(ValueCacheTest, AReadThatRacedADropIsNotKept) {
  ValueCache c;
  ValueCache::Key a{1, kDir, "name", "e"};
  ValueCache::Ticket before = c.ticket(1, kDir);
  // A commit lands between the reader's ticket and its insert: what the reader read may be the old value.
  commit_drop_dkey(c, 1, kDir, "name");
  c.insert(before, a, "old");
  EXPECT_EQ(found(c, a), "<not cached>");
  c.insert(c.ticket(1, kDir), a, "new");
  EXPECT_EQ(found(c, a), "new");
  // While a commit writes the index, what it changes is not found, and nothing read meanwhile goes in: the
  // read may have come before the write or after it. Once it is done, a fresh reader's read does.
  c.drop_dkey(Drop::kBeforeWrite, 1, kDir, "name");
  EXPECT_EQ(found(c, a), "<not cached>");
  ValueCache::Ticket during = c.ticket(1, kDir);
  c.insert(during, a, "read while the index was written");
  EXPECT_EQ(found(c, a), "<not cached>");
  c.committed();
  c.drop_dkey(Drop::kAfterWrite, 1, kDir, "name");
  c.insert(during, a, "read while the index was written");
  EXPECT_EQ(found(c, a), "<not cached>");
  c.insert(c.ticket(1, kDir), a, "read after");
  EXPECT_EQ(found(c, a), "read after");
}

TEST(ValueCacheTest, AReaderOfAnEarlierMomentIsAnsweredOnlyWithWhatWasCurrentThen) {
  ValueCache c;
  ValueCache::Key a{1, kDir, "name", "e"};
  ValueCache::Moment view = c.moment();
  c.drop_dkey(Drop::kBeforeWrite, 1, kDir, "name");
  uint64_t n = c.committed();
  c.drop_dkey(Drop::kAfterWrite, 1, kDir, "name");
  c.fill(n, a, "filled after the view");
  EXPECT_EQ(found(c, a, view.commits), "<not cached>");
  EXPECT_EQ(found(c, a, n), "filled after the view");
  EXPECT_EQ(found(c, a), "filled after the view");
  // What the view reads may go in only if nothing of its shard was dropped since it was made.
  ValueCache::Key b{1, kOther, "k", "a"};
  ValueCache::Moment later = c.moment();
  c.insert(c.ticket(view, 1, kDir), a, "what the view read");
  EXPECT_EQ(found(c, a), "filled after the view");
  c.insert(c.ticket(later, 1, kOther), b, "read through the later view");
  EXPECT_EQ(found(c, b, later.commits), "read through the later view");
}

TEST(ValueCacheTest, KeepsSmallValuesInBoundedBytes) {
  ValueCache c;
  ValueCache::Key big{1, kDir, "big", "e"};
  c.insert(c.ticket(1, kDir), big, std::string(ValueCache::kMaxValueBytes + 1, 'x'));
  EXPECT_EQ(found(c, big), "<not cached>");
  // One large directory fills the cache, then starts over; a small one beside it keeps what it had.
  c.fill(c.committed(), {1, kOther, "small", "e"}, "kept");
  const std::string value(ValueCache::kMaxValueBytes, 'v');
  size_t n = ValueCache::kMaxBytes / value.size() * 3 / 2;
  auto name = [](size_t i) { return "n" + std::to_string(i); };
  for (size_t i = 0; i < n; ++i) {
    c.fill(c.committed(), {1, kDir, name(i), "e"}, value);
    ASSERT_LE(c.bytes(), ValueCache::kMaxBytes);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    auto v = found(c, {1, kDir, name(i), "e"});
    if (v == "<not cached>") continue;
    EXPECT_EQ(v, value);
    ++kept;
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept * value.size(), ValueCache::kMaxBytes);
  EXPECT_EQ(found(c, {1, kDir, name(n - 1), "e"}), value);  // the newest
  EXPECT_EQ(found(c, {1, kOther, "small", "e"}), "kept");
  // What is dropped is given back; an overwrite costs only its difference.
  size_t before = c.bytes();
  c.fill(c.committed(), {1, kDir, name(n - 1), "e"}, "short");
  EXPECT_LT(c.bytes(), before);
  c.clear();
  EXPECT_EQ(c.bytes(), 0u);
}

}  // namespace
}  // namespace rfos::engine
