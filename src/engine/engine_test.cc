#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>

#include "common/crc32c.h"
#include "common/fault.h"
#include "engine/engine_testing.h"
#include "engine/index/wal_file_system.h"

namespace rfos::engine {
namespace {

using testing::bytes;
using testing::pattern;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { reopen(); }

  void reopen() {
    ASSERT_NO_FATAL_FAILURE(target_.open());
    engine_ = target_.engine.get();
    cid_ = target_.cid;
    pool_ = target_.pool;
    cont_ = target_.cont;
  }

  KeyRef key(std::string_view dkey = "d", std::string_view akey = "a") { return {cid_, oid_, dkey, akey}; }

  Status put_array(const KeyRef& k, Epoch e, uint64_t off, const std::string& data) {
    UpdateOp op{k, e, ValueKind::kArray, off, data.size()};
    return engine_->update(op, bytes(data), make_csums(ValueKind::kArray, off, bytes(data), 4096));
  }
  Status put_single(const KeyRef& k, Epoch e, const std::string& data) {
    UpdateOp op{k, e, ValueKind::kSingle, 0, data.size()};
    return engine_->update(op, bytes(data), make_csums(ValueKind::kSingle, 0, bytes(data), 4096));
  }
  Result<std::string> get_array(const KeyRef& k, Epoch e, uint64_t off, uint64_t len,
                                std::vector<uint32_t>* csums = nullptr) {
    return engine_->fetch({k, e, ValueKind::kArray, off, len}, csums);
  }
  Result<std::string> get_single(const KeyRef& k, Epoch e) { return engine_->fetch({k, e, ValueKind::kSingle, 0, 0}); }

  // The index's write-ahead logs in a target's directory, by path, with their sizes.
  static std::map<std::string, uint64_t> index_logs(const std::string& dir) {
    std::map<std::string, uint64_t> sizes;
    for (const auto& f : std::filesystem::directory_iterator(dir + "/index"))
      if (f.path().extension() == ".log") sizes[f.path()] = f.file_size();
    return sizes;
  }
  // The target's files as they are now, open: what a crash would leave.
  void copy_target(const testing::TempDir& to) {
    std::filesystem::copy(target_.dir.path(), to.path(),
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  }

  testing::Target target_;
  Engine* engine_ = nullptr;
  Uuid pool_, cont_;
  uint32_t cid_ = 0;
  ObjectId oid_{1, 2};
};

TEST_F(EngineTest, SingleValueVersions) {
  ASSERT_TRUE(put_single(key(), 5, "five").is_ok());
  ASSERT_TRUE(put_single(key(), 9, "nine").is_ok());
  EXPECT_EQ(get_single(key(), 4).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(key(), 5), "five");
  EXPECT_EQ(*get_single(key(), 8), "five");
  EXPECT_EQ(*get_single(key(), kEpochLatest), "nine");
  reopen();
  EXPECT_EQ(*get_single(key(), 8), "five");
  EXPECT_EQ(*get_single(key(), 9), "nine");
}

// The highest epoch a write or snapshot carried is recorded with its commit: a reopened target knows it, so
// a server's clock restarts past it (a wall clock that went back cannot stamp below stored versions).
TEST_F(EngineTest, HighEpochIsRecordedAndSurvivesReopen) {
  Epoch start = engine_->high_epoch();
  ASSERT_TRUE(put_single(key(), start + 50, "fifty").is_ok());
  EXPECT_EQ(engine_->high_epoch(), start + 50);
  ASSERT_TRUE(put_single(key("e"), start + 20, "lower").is_ok());  // a lower epoch does not move it back
  EXPECT_EQ(engine_->high_epoch(), start + 50);
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "e", start + 60).is_ok());
  EXPECT_EQ(engine_->high_epoch(), start + 60);
  reopen();
  EXPECT_EQ(engine_->high_epoch(), start + 60);
  ASSERT_TRUE(engine_->snapshot_create(cid_, start + 90).is_ok());
  EXPECT_TRUE(engine_->has_snapshot(cid_, start + 90));
  EXPECT_FALSE(engine_->has_snapshot(cid_, start + 89));
  EXPECT_FALSE(engine_->has_snapshot(cid_ + 1000, start + 90));
  reopen();
  EXPECT_EQ(engine_->high_epoch(), start + 90);
  EXPECT_TRUE(engine_->has_snapshot(cid_, start + 90));
}

// A batch is one commit: its puts and punches appear together, at one version, and stay after a reopen.
TEST_F(EngineTest, ABatchAppliesEverythingAtOnce) {
  ASSERT_TRUE(put_single(key("gone"), 3, "old").is_ok());
  std::vector<Mutation> batch = {
      {Mutation::Kind::kPutSingle, oid_, "n1", "a", "one"},
      {Mutation::Kind::kPutArray, oid_, "n2", "d", std::string(3000, 'x'), 4096},
      {Mutation::Kind::kPunchDkey, oid_, "gone", "", ""},
  };
  ASSERT_TRUE(engine_->apply(cid_, 7, batch, false).is_ok());
  EXPECT_EQ(*get_single(key("n1"), kEpochLatest), "one");
  EXPECT_EQ(*get_array(key("n2", "d"), kEpochLatest, 4096, 3000), std::string(3000, 'x'));
  EXPECT_EQ(*engine_->array_size(key("n2", "d"), kEpochLatest), 4096u + 3000u);
  EXPECT_EQ(get_single(key("gone"), kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(key("gone"), 6), "old");
  EXPECT_EQ(get_single(key("n1"), 6).status().code(), StatusCode::kNotFound);
  // Refused whole: one bad member stores nothing.
  std::vector<Mutation> bad = {{Mutation::Kind::kPutSingle, oid_, "n3", "a", "three"},
                               {Mutation::Kind::kPutArray, oid_, "n4", "d", std::string(5000, 'y'), 0}};
  EXPECT_EQ(engine_->apply(cid_, 8, bad, false).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(get_single(key("n3"), kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->apply(cid_, 2, batch, false).code(), StatusCode::kOk);  // older epochs are still writable
  ASSERT_TRUE(engine_->snapshot_create(cid_, 10).is_ok());
  EXPECT_EQ(engine_->apply(cid_, 9, batch, false).code(), StatusCode::kEpochTooOld);
  // Lazy ones are visible at once, and sync() makes them durable (the power-cut test checks that part).
  // An object punch hides every key of it.
  const ObjectId other{5, 5};
  ASSERT_TRUE(engine_->apply(cid_, 11, {{{Mutation::Kind::kPutSingle, other, "k", "a", "v"}}}, false).is_ok());
  ASSERT_TRUE(engine_->apply(cid_, 11, {{{Mutation::Kind::kPunchObject, other, "", "", ""}}}, false).is_ok());
  EXPECT_EQ(engine_->fetch({{cid_, other, "k", "a"}, kEpochLatest, ValueKind::kSingle, 0, 0}).status().code(),
            StatusCode::kNotFound);
  // An array punch in a batch: a hole from its offset, as punch_extent makes; the array ends before it.
  Mutation cut{Mutation::Kind::kPunchArray, oid_, "n2", "d", "", 5000};
  cut.length = 4096 + 3000 - 5000;
  ASSERT_TRUE(engine_->apply(cid_, 11, {&cut, 1}, false).is_ok());
  EXPECT_EQ(*engine_->array_size(key("n2", "d"), kEpochLatest), 5000u);
  EXPECT_EQ(*get_array(key("n2", "d"), kEpochLatest, 4096, 3000), std::string(904, 'x') + std::string(2096, '\0'));
  cut.length = kMutationPunchMaxBytes + 1;
  EXPECT_EQ(engine_->apply(cid_, 11, {&cut, 1}, false).code(), StatusCode::kInvalidArgument);
  cut.length = 0;
  EXPECT_EQ(engine_->apply(cid_, 11, {&cut, 1}, false).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine_->apply(cid_, 11, {{{Mutation::Kind::kPutSingle, oid_, "n5", "a", "five"}}}, true).is_ok());
  EXPECT_EQ(*get_single(key("n5"), kEpochLatest), "five");
  ASSERT_TRUE(engine_->sync().is_ok());
  ASSERT_TRUE(engine_->sync().is_ok());  // nothing left to sync
  reopen();
  EXPECT_EQ(*get_single(key("n1"), kEpochLatest), "one");
  EXPECT_EQ(*get_single(key("n5"), kEpochLatest), "five");
  EXPECT_EQ(get_single(key("gone"), kEpochLatest).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(engine_->check().is_ok());
}

// apply_if_idle commits only while no other commit is under way, and changes nothing when it refuses, so a thread
// that must not wait for the media (a target's) never does. Durable batches on another thread keep the commit
// queue busy (each syncs the log); the loop runs until it has seen a refusal.
TEST_F(EngineTest, ApplyIfIdleRefusesWhileAnotherCommits) {
  auto put = [&](const std::string& dkey) {
    return engine_->apply_if_idle(cid_, 21, {{{Mutation::Kind::kPutSingle, oid_, dkey, "a", "x"}}});
  };
  ASSERT_TRUE(put("alone").is_ok());  // nothing else commits
  EXPECT_EQ(*get_single(key("alone"), kEpochLatest), "x");
  std::atomic<bool> stop{false};
  std::thread durable([&] {
    for (int i = 0; !stop; ++i) {
      Status s = engine_->apply(cid_, 20, {{{Mutation::Kind::kPutSingle, oid_, "d", "a", std::to_string(i)}}}, false);
      if (!s.is_ok()) return ADD_FAILURE() << s.to_string();
    }
  });
  int refused = 0;
  for (int i = 0; refused == 0 && i < 100000; ++i) {
    std::string dkey = "n" + std::to_string(i);
    Status s = put(dkey);
    if (s.is_ok()) {
      EXPECT_EQ(*get_single(key(dkey), kEpochLatest), "x");
      continue;
    }
    EXPECT_EQ(s.code(), StatusCode::kBusy) << s.to_string();  // not ASSERT: the thread is joined below
    EXPECT_EQ(get_single(key(dkey), kEpochLatest).status().code(), StatusCode::kNotFound);
    ++refused;
  }
  stop = true;
  durable.join();
  EXPECT_EQ(refused, 1);
  ASSERT_TRUE(put("after").is_ok());
  ASSERT_TRUE(engine_->sync().is_ok());
  reopen();
  EXPECT_EQ(*get_single(key("after"), kEpochLatest), "x");
  ASSERT_TRUE(engine_->check().is_ok());
}

TEST_F(EngineTest, ArrayRoundTripsAtManySizes) {
  Epoch e = 1;
  for (uint64_t len : {1ull, 100ull, 4095ull, 4096ull, 4097ull, 65536ull, 1048576ull, 1048577ull, 3145728ull + 5}) {
    for (uint64_t off : {0ull, 1ull, 4096ull, 1048570ull}) {
      std::string data = pattern(len * 31 + off, len);
      std::string dk = "len" + std::to_string(len) + "off" + std::to_string(off);
      ASSERT_TRUE(put_array(key(dk), e++, off, data).is_ok()) << len << " @" << off;
      std::vector<uint32_t> csums;
      auto got = get_array(key(dk), kEpochLatest, off, len, &csums);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(*got, data) << len << " @" << off;
      EXPECT_EQ(csums, make_csums(ValueKind::kArray, off, bytes(data), 4096));
    }
  }
  ASSERT_TRUE(engine_->check().is_ok());
  reopen();
  std::string data = pattern(1048577ull * 31 + 1, 1048577);
  EXPECT_EQ(*get_array(key("len1048577off1"), kEpochLatest, 1, 1048577), data);
  ASSERT_TRUE(engine_->check().is_ok());
}

TEST_F(EngineTest, OverlapsResolveNewestWinsAndHolesReadZero) {
  ASSERT_TRUE(put_array(key(), 1, 0, std::string(10000, 'a')).is_ok());
  ASSERT_TRUE(put_array(key(), 2, 5000, std::string(1000, 'b')).is_ok());
  ASSERT_TRUE(put_array(key(), 2, 5500, std::string(100, 'c')).is_ok());  // same epoch: later commit wins
  ASSERT_TRUE(put_array(key(), 3, 20000, std::string(10, 'd')).is_ok());
  std::string want = std::string(5000, 'a') + std::string(500, 'b') + std::string(100, 'c') + std::string(400, 'b') +
                     std::string(4000, 'a') + std::string(10000, '\0') + std::string(10, 'd');
  std::vector<uint32_t> csums;
  auto got = get_array(key(), kEpochLatest, 0, want.size(), &csums);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(csums, make_csums(ValueKind::kArray, 0, bytes(want), 4096));
  EXPECT_EQ(*get_array(key(), 1, 4990, 20), std::string(20, 'a'));
  EXPECT_EQ(*engine_->array_size(key(), kEpochLatest), 20010u);
  EXPECT_EQ(*engine_->array_size(key(), 2), 10000u);
  Anchor anchor;
  auto exts = engine_->list_extents(key(), kEpochLatest, &anchor, 100);
  ASSERT_TRUE(exts.is_ok());
  EXPECT_EQ(*exts, (std::vector<Extent>{{0, 10000}, {20000, 10}}));
}

TEST_F(EngineTest, PunchesHideOlderVersions) {
  ASSERT_TRUE(put_array(key("d1", "a1"), 1, 0, "hello").is_ok());
  ASSERT_TRUE(put_single(key("d1", "a2"), 1, "v").is_ok());
  ASSERT_TRUE(put_single(key("d2", "a1"), 1, "w").is_ok());
  ASSERT_TRUE(engine_->punch_akey(key("d1", "a1"), 2).is_ok());
  EXPECT_EQ(get_array(key("d1", "a1"), 2, 0, 5).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_array(key("d1", "a1"), 1, 0, 5), "hello");
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "d1", 3).is_ok());
  EXPECT_EQ(get_single(key("d1", "a2"), 3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(key("d2", "a1"), 3), "w");
  ASSERT_TRUE(engine_->punch_extent(key("d3", "x"), 4, 0, 10).code() == StatusCode::kOk);
  ASSERT_TRUE(put_array(key("d3", "x"), 5, 0, "0123456789").is_ok());
  ASSERT_TRUE(engine_->punch_extent(key("d3", "x"), 6, 5, 5).is_ok());
  EXPECT_EQ(*engine_->array_size(key("d3", "x"), kEpochLatest), 5u);
  EXPECT_EQ(*get_array(key("d3", "x"), kEpochLatest, 0, 10), std::string("01234") + std::string(5, '\0'));
  ASSERT_TRUE(engine_->punch_object(cid_, oid_, 7).is_ok());
  EXPECT_EQ(get_single(key("d2", "a1"), kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(key("d2", "a1"), 6), "w");
  EXPECT_EQ(engine_->punch_object(cid_, oid_, 8).code(), StatusCode::kNotFound);
  ASSERT_TRUE(put_single(key("d2", "a1"), 8, "back").is_ok());
  EXPECT_EQ(*get_single(key("d2", "a1"), kEpochLatest), "back");
  // The container's record says it has punches (fetches skip the punch lookups where it does not): after a
  // reopen they still hide what they hid.
  reopen();
  EXPECT_EQ(get_array(key("d1", "a1"), kEpochLatest, 0, 5).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(get_single(key("d1", "a2"), kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(key("d2", "a1"), kEpochLatest), "back");
  EXPECT_EQ(*get_single(key("d2", "a1"), 6), "w");
}

// Reads through a view answer as fetches do, in any order (its iterator steps forward to near keys and seeks
// back), and show the index as it was when the view was made.
TEST_F(EngineTest, AReadViewReadsAsFetchesDoAtItsMoment) {
  KeyRef other{cid_, ObjectId{7, 7}, "/", "a"};
  ASSERT_TRUE(put_single(key("/", "a"), 1, "inode-1").is_ok());
  ASSERT_TRUE(put_single(key("/", "a"), 2, "inode-2").is_ok());
  ASSERT_TRUE(put_single(key("/x", "s"), 2, "xattr").is_ok());
  const std::string chunk0(8, '\0');  // a file's first chunk, after its inode and extended attributes
  KeyRef chunk = key(chunk0, "d");
  ASSERT_TRUE(put_array(chunk, 3, 0, "first chunk").is_ok());
  ASSERT_TRUE(put_array(chunk, 4, 100, "later").is_ok());
  ASSERT_TRUE(put_single(other, 1, "other").is_ok());
  ASSERT_TRUE(put_single(KeyRef{cid_, other.oid, "gone", "a"}, 1, "punched").is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, other.oid, "gone", 2).is_ok());
  ReadView view = engine_->read_view();
  auto single = [&](const KeyRef& k) {
    FetchOp op{k, kEpochLatest, ValueKind::kSingle};
    op.view = &view;
    return engine_->fetch(op);
  };
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_EQ(*single(key("/", "a")), "inode-2");
    EXPECT_EQ(*engine_->array_size(chunk, kEpochLatest, &view), 105u);  // forward, in the same object
    FetchOp whole{chunk, kEpochLatest, ValueKind::kArray, 0, 105};
    whole.view = &view;
    EXPECT_EQ(*engine_->fetch(whole), "first chunk" + std::string(89, '\0') + "later");
    EXPECT_EQ(*single(key("/x", "s")), "xattr");  // back
    EXPECT_EQ(*single(other), "other");           // another object
    EXPECT_EQ(single(KeyRef{cid_, other.oid, "gone", "a"}).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(single(key("/y", "s")).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(engine_->array_size(key("/", "a"), kEpochLatest, &view).status().code(), StatusCode::kNotFound);
    if (pass == 0) {  // changes after the view was made: it goes on showing its moment
      ASSERT_TRUE(put_single(key("/", "a"), 5, "inode-5").is_ok());
      ASSERT_TRUE(put_array(chunk, 5, 200, "grown").is_ok());
      ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "/x", 6).is_ok());
    }
  }
  EXPECT_EQ(*get_single(key("/", "a"), kEpochLatest), "inode-5");
  EXPECT_EQ(*engine_->array_size(chunk, kEpochLatest), 205u);
  EXPECT_EQ(get_single(key("/x", "s"), kEpochLatest).status().code(), StatusCode::kNotFound);
  ReadView now = engine_->read_view();
  FetchOp op{key("/x", "s"), kEpochLatest, ValueKind::kSingle};
  op.view = &now;
  EXPECT_EQ(engine_->fetch(op).status().code(), StatusCode::kNotFound);
}

// Single values at the latest epoch come from the value cache when it has them; every commit keeps it right.
TEST_F(EngineTest, CachedSingleValuesFollowEveryCommit) {
  auto single = [&](std::string_view dkey, std::string_view akey, ReadView* view = nullptr) {
    FetchOp op{key(dkey, akey), kEpochLatest, ValueKind::kSingle};
    op.view = view;
    return engine_->fetch(op);
  };
  auto batch = [&](Epoch e, std::vector<Mutation> ms) { return engine_->apply(cid_, e, ms, true); };
  auto put = [&](std::string dkey, std::string akey, std::string v) {
    return Mutation{Mutation::Kind::kPutSingle, oid_, std::move(dkey), std::move(akey), std::move(v)};
  };
  auto punch_dkey = [&](std::string dkey) {
    Mutation m;
    m.kind = Mutation::Kind::kPunchDkey;
    m.oid = oid_;
    m.dkey = std::move(dkey);
    return m;
  };
  auto absent = [](const Result<std::string>& r) { return r.status().code() == StatusCode::kNotFound; };

  // A batch's values are filled in: read without the index.
  ASSERT_TRUE(batch(10, {put("d", "a", "one")}).is_ok());
  uint64_t hits = engine_->cached_reads();
  EXPECT_EQ(*single("d", "a"), "one");
  EXPECT_EQ(engine_->cached_reads(), hits + 1);
  // None is cached as well, after one read of the index.
  EXPECT_TRUE(absent(single("d", "b")));
  EXPECT_TRUE(absent(single("d", "b")));
  EXPECT_EQ(engine_->cached_reads(), hits + 2);
  // A write that is not a batch drops what it wrote over: the none above, and the other akeys of its dkey.
  ASSERT_TRUE(put_single(key("d", "b"), 11, "two").is_ok());
  EXPECT_EQ(*single("d", "b"), "two");
  EXPECT_EQ(*single("d", "a"), "one");
  // A batch below an epoch already committed lies under the newer record: it is not filled in.
  ASSERT_TRUE(batch(13, {put("d", "a", "thirteen")}).is_ok());
  ASSERT_TRUE(batch(12, {put("d", "a", "twelve")}).is_ok());
  EXPECT_EQ(*single("d", "a"), "thirteen");
  EXPECT_EQ(*single("d", "a"), "thirteen");
  // A value a batch puts and then punches is not filled in; its punch drops the dkey's other akeys.
  ASSERT_TRUE(batch(14, {put("d", "c", "gone"), punch_dkey("d")}).is_ok());
  EXPECT_TRUE(absent(single("d", "c")));
  EXPECT_TRUE(absent(single("d", "a")));
  EXPECT_TRUE(absent(single("d", "b")));
  // A view answers from what was current when it was made, not from a value filled in after it.
  ASSERT_TRUE(batch(15, {put("e", "a", "old")}).is_ok());
  ReadView before = engine_->read_view();
  ASSERT_TRUE(batch(16, {put("e", "a", "new")}).is_ok());
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_EQ(*single("e", "a", &before), "old");
    EXPECT_EQ(*single("e", "a"), "new");
  }
  ReadView after = engine_->read_view();
  EXPECT_EQ(*single("e", "a", &after), "new");
  // Reads at an epoch go to the index.
  EXPECT_EQ(*get_single(key("e", "a"), 15), "old");
  // An object punch drops every key of the object.
  ASSERT_TRUE(batch(17, {put("f", "a", "x")}).is_ok());
  EXPECT_EQ(*single("f", "a"), "x");
  ASSERT_TRUE(engine_->punch_object(cid_, oid_, 18).is_ok());
  EXPECT_TRUE(absent(single("f", "a")));
  EXPECT_TRUE(absent(single("e", "a")));
  EXPECT_EQ(*get_single(key("e", "a"), 17), "new");
}

// An array's size at the latest epoch is cached after one walk of its records, and every commit that writes
// its dkey (a write, a punch, a batch, aggregation) or its object drops it.
TEST_F(EngineTest, CachedArraySizesFollowEveryCommit) {
  auto size = [&](std::string_view dkey, ReadView* view = nullptr) {
    return engine_->array_size(key(dkey, "a"), kEpochLatest, view);
  };
  ASSERT_TRUE(put_array(key("d", "a"), 1, 0, pattern(1, 5000)).is_ok());
  uint64_t hits = engine_->cached_reads();
  EXPECT_EQ(*size("d"), 5000u);
  EXPECT_EQ(*size("d"), 5000u);
  EXPECT_EQ(engine_->cached_reads(), hits + 1);
  // A single value of the same name is another entry.
  ASSERT_TRUE(put_single(key("d", "s"), 1, "v").is_ok());
  EXPECT_EQ(*get_single(key("d", "s"), kEpochLatest), "v");
  EXPECT_EQ(*size("d"), 5000u);
  // Writes past the end and punches move it.
  ASSERT_TRUE(put_array(key("d", "a"), 2, 9000, "tail").is_ok());
  EXPECT_EQ(*size("d"), 9004u);
  ASSERT_TRUE(engine_->punch_extent(key("d", "a"), 3, 4000, 10000).is_ok());
  EXPECT_EQ(*size("d"), 4000u);
  Mutation cut{Mutation::Kind::kPunchArray, oid_, "d", "a", "", 100};
  cut.length = 1 << 20;
  ASSERT_TRUE(engine_->apply(cid_, 4, {&cut, 1}, false).is_ok());
  EXPECT_EQ(*size("d"), 100u);
  // None is cached too, and a write makes it an array.
  EXPECT_EQ(size("e").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(size("e").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(put_array(key("e", "a"), 5, 10, "x").is_ok());
  EXPECT_EQ(*size("e"), 11u);
  {  // A view answers as of when it was made.
    ReadView before = engine_->read_view();
    ASSERT_TRUE(put_array(key("e", "a"), 6, 100, "y").is_ok());
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT_EQ(*size("e", &before), 11u);
      EXPECT_EQ(*size("e"), 101u);
    }
  }
  // Reads at an epoch walk the records.
  EXPECT_EQ(*engine_->array_size(key("e", "a"), 5), 11u);
  // Aggregation's rewrite keeps the size; a dkey punch and an object punch drop it.
  for (Epoch e = 7; e < 20; ++e) ASSERT_TRUE(put_array(key("e", "a"), e, e * 3, pattern(e, 50)).is_ok());
  EXPECT_EQ(*size("e"), 19u * 3 + 50);
  ASSERT_TRUE(engine_->aggregate(cid_, 19).is_ok());
  EXPECT_EQ(*size("e"), 19u * 3 + 50);
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "e", 20).is_ok());
  EXPECT_EQ(size("e").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*size("d"), 100u);
  ASSERT_TRUE(engine_->punch_object(cid_, oid_, 21).is_ok());
  EXPECT_EQ(size("d").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*engine_->array_size(key("d", "a"), 20), 100u);
}

TEST_F(EngineTest, EnumerationResumesFromAnchors) {
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(put_single(key("dkey" + std::to_string(i), "a"), 1, "x").is_ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(put_single(key("dkey0", "akey" + std::to_string(i)), 2, "y").is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "dkey7", 3).is_ok());
  std::set<std::string> seen;
  Anchor anchor;
  int calls = 0;
  while (!anchor.done) {
    auto page = engine_->list_dkeys(cid_, oid_, kEpochLatest, &anchor, 4);
    ASSERT_TRUE(page.is_ok());
    EXPECT_LE(page->size(), 4u);
    for (auto& k : *page) EXPECT_TRUE(seen.insert(k).second) << "duplicate " << k;
    ASSERT_LT(++calls, 20);
  }
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_EQ(seen.count("dkey7"), 0u);
  Anchor a2;
  auto all = engine_->list_dkeys(cid_, oid_, 2, &a2, 100);
  EXPECT_EQ(all->size(), 25u);
  Anchor a3;
  auto akeys = engine_->list_akeys(cid_, oid_, "dkey0", kEpochLatest, &a3, 100);
  EXPECT_EQ(akeys->size(), 6u);
  Anchor a4;
  ASSERT_TRUE(put_single({cid_, ObjectId{9, 9}, "d", "a"}, 4, "z").is_ok());
  auto objs = engine_->list_objects(cid_, kEpochLatest, &a4, 1);
  ASSERT_EQ(objs->size(), 1u);
  auto objs2 = engine_->list_objects(cid_, kEpochLatest, &a4, 10);
  ASSERT_EQ(objs2->size(), 1u);
  EXPECT_NE((*objs)[0], (*objs2)[0]);
  EXPECT_TRUE(a4.done);
}

// An object of ordered dkeys (a name index) lists them in byte order, from any key on, a prefix at a time; its
// keys survive a reopen and aggregation, and a dkey with a NUL byte is refused.
TEST_F(EngineTest, OrderedDkeysListInByteOrderFromAnyKey) {
  const ObjectId idx{ObjectId::kOrderedDkeys | 7, 7};
  auto at = [&](std::string_view d) { return KeyRef{cid_, idx, d, "v"}; };
  const std::vector<std::string> names = {"b", "a", "ab", "abc", std::string("a\x01", 2), "ba", "c", "aa\xff"};
  for (const std::string& n : names) ASSERT_TRUE(put_single(at(n), 1, "value of " + n).is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, idx, "ab", 2).is_ok());
  ASSERT_TRUE(engine_->aggregate(cid_, 2).is_ok());
  reopen();
  // Pages of 2 from the start, of 3 from "ab" on (inclusive), and of one prefix with each name's value.
  auto list = [&](size_t page, std::string_view from, std::string_view prefix, std::vector<std::string>* values) {
    std::vector<std::string> out;
    Anchor a;
    a.position = from;
    for (int calls = 0; !a.done; ++calls) {
      EXPECT_LT(calls, 10);
      std::vector<std::optional<std::string>> found;
      auto got = engine_->list_dkeys(cid_, idx, kEpochLatest, &a, page, prefix, "v", &found);
      EXPECT_TRUE(got.is_ok()) << got.status().to_string();
      if (!got.is_ok()) break;
      out.insert(out.end(), got->begin(), got->end());
      if (values)
        for (auto& v : found) values->push_back(v.value_or("?"));
    }
    return out;
  };
  const std::string a1("a\x01", 2);
  EXPECT_EQ(list(2, "", "", nullptr), (std::vector<std::string>{"a", a1, "aa\xff", "abc", "b", "ba", "c"}));
  EXPECT_EQ(list(3, "ab", "", nullptr), (std::vector<std::string>{"abc", "b", "ba", "c"}));
  EXPECT_EQ(list(3, "a\x02", "", nullptr), (std::vector<std::string>{"aa\xff", "abc", "b", "ba", "c"}));
  std::vector<std::string> values;
  EXPECT_EQ(list(1, "", "a", &values), (std::vector<std::string>{"a", a1, "aa\xff", "abc"}));
  EXPECT_EQ(values, (std::vector<std::string>{"value of a", "value of " + a1, "value of aa\xff", "value of abc"}));
  EXPECT_EQ(list(5, "b", "b", nullptr), (std::vector<std::string>{"b", "ba"}));
  EXPECT_EQ(list(5, "bb", "b", nullptr), std::vector<std::string>{});
  EXPECT_EQ(list(5, "", "d", nullptr), std::vector<std::string>{});
  EXPECT_EQ(*engine_->fetch({at("ba"), kEpochLatest, ValueKind::kSingle}), "value of ba");
  EXPECT_EQ(put_single(at(std::string("x\0y", 3)), 3, "nul").code(), StatusCode::kInvalidArgument);
  // Another object's dkeys keep length order, and a prefix filters them.
  for (const char* n : {"bb", "a", "ab"}) ASSERT_TRUE(put_single(key(n), 4, "x").is_ok());
  Anchor a;
  std::vector<std::optional<std::string>> ignored;
  EXPECT_EQ(*engine_->list_dkeys(cid_, oid_, kEpochLatest, &a, 10, "a", {}, &ignored),
            (std::vector<std::string>{"a", "ab"}));
  // A page steps over a bounded number of names it does not give (64 per name asked for), then ends short but
  // not done, where it stopped: the next goes on from there.
  for (int i = 0; i < 150; ++i) ASSERT_TRUE(put_single(key("k" + std::to_string(1000 + i)), 4, "x").is_ok());
  Anchor steps;
  auto first = engine_->list_dkeys(cid_, oid_, kEpochLatest, &steps, 1, "z", {}, &ignored);
  ASSERT_TRUE(first.is_ok());
  EXPECT_TRUE(first->empty());
  EXPECT_FALSE(steps.done);
  int pages = 1;
  for (; !steps.done && pages < 10; ++pages)
    EXPECT_TRUE(engine_->list_dkeys(cid_, oid_, kEpochLatest, &steps, 1, "z", {}, &ignored)->empty());
  EXPECT_TRUE(steps.done);
  EXPECT_EQ(pages, 3) << "153 names stepped over, 65 a page";
}

TEST_F(EngineTest, BadInputIsRefusedAndChangesNothing) {
  auto bad = [&](UpdateOp op, StatusCode code) {
    auto tx = engine_->update_begin(op);
    EXPECT_EQ(tx.status().code(), code) << tx.status().to_string();
  };
  bad({key(), 1, ValueKind::kArray, 0, 0}, StatusCode::kInvalidArgument);
  bad({key(""), 1, ValueKind::kArray, 0, 10}, StatusCode::kInvalidArgument);
  bad({key("d", std::string(kKeyMaxBytes + 1, 'k')), 1, ValueKind::kArray, 0, 10}, StatusCode::kInvalidArgument);
  bad({key(), 0, ValueKind::kArray, 0, 10}, StatusCode::kInvalidArgument);
  bad({key(), 1, ValueKind::kSingle, 0, kSingleValueMaxBytes + 1}, StatusCode::kTooLarge);
  bad({key(), 1, ValueKind::kArray, 0, 1ull << 30}, StatusCode::kTooLarge);
  bad({key(), 1, ValueKind::kArray, kArrayOffsetMax, 1}, StatusCode::kInvalidArgument);
  bad({{999, oid_, "d", "a"}, 1, ValueKind::kArray, 0, 10}, StatusCode::kUnknownContainer);
  EXPECT_EQ(engine_->cont_open(pool_, Uuid::random()).status().code(), StatusCode::kUnknownContainer);
  EXPECT_EQ(engine_->cont_open(Uuid::random(), cont_).status().code(), StatusCode::kUnknownPool);
  EXPECT_EQ(engine_->cont_create(pool_, cont_, {}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(engine_->pool_create(pool_).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(get_single(key("nope"), kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(get_array(key("nope"), kEpochLatest, 0, 1).status().code(), StatusCode::kNotFound);

  // Wrong checksums: refused, nothing stored, space given back.
  auto before = engine_->space();
  std::string data = pattern(1, 8192);
  std::vector<uint32_t> csums = make_csums(ValueKind::kArray, 0, bytes(data), 4096);
  csums[1] ^= 1;
  EXPECT_EQ(engine_->update({key(), 1, ValueKind::kArray, 0, data.size()}, bytes(data), csums).code(),
            StatusCode::kChecksumMismatch);
  EXPECT_EQ(engine_->update({key(), 1, ValueKind::kArray, 0, data.size()}, bytes(data), {}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(get_array(key(), kEpochLatest, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->space().free_bytes, before.free_bytes);

  // Kinds do not mix on read.
  ASSERT_TRUE(put_single(key("s"), 1, "single").is_ok());
  EXPECT_EQ(get_array(key("s"), kEpochLatest, 0, 1).status().code(), StatusCode::kWrongValueKind);
  ASSERT_TRUE(engine_->check().is_ok());
}

TEST_F(EngineTest, SnapshotsAndAggregation) {
  std::string one_mib = pattern(7, 1 << 20);
  ASSERT_TRUE(put_array(key(), 1, 0, one_mib).is_ok());
  ASSERT_TRUE(engine_->snapshot_create(cid_, 1).is_ok());
  ASSERT_TRUE(put_array(key(), 2, 0, pattern(8, 1 << 20)).is_ok());
  ASSERT_TRUE(put_array(key(), 3, 0, pattern(9, 1 << 20)).is_ok());
  EXPECT_EQ(put_array(key(), 1, 0, "late").code(), StatusCode::kEpochTooOld);
  auto free_before = engine_->space().free_bytes;
  auto stats = engine_->aggregate(cid_, 3);
  ASSERT_TRUE(stats.is_ok()) << stats.status().to_string();
  EXPECT_EQ(stats->records_removed, 1u);  // epoch 2 is hidden from both views (snapshot 1 and 3)
  EXPECT_EQ(stats->bytes_reclaimed, 1u << 20);
  EXPECT_EQ(engine_->space().free_bytes, free_before + (1u << 20));
  EXPECT_EQ(*get_array(key(), 1, 0, 1 << 20), one_mib);
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 1 << 20), pattern(9, 1 << 20));
  EXPECT_EQ(get_array(key(), 2, 0, 1).status().code(), StatusCode::kEpochTooOld);
  EXPECT_EQ(put_array(key(), 3, 0, "x").code(), StatusCode::kEpochTooOld);
  ASSERT_TRUE(engine_->snapshot_destroy(cid_, 1).is_ok());
  stats = engine_->aggregate(cid_, 4);
  EXPECT_EQ(stats->records_removed, 1u);
  ASSERT_TRUE(engine_->check().is_ok());
  reopen();
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 1 << 20), pattern(9, 1 << 20));
  ASSERT_TRUE(engine_->check().is_ok());
}

// A listing of dkeys brings the value of one akey where its scan meets it first, as a fetch at that epoch would
// return it; elsewhere it says so, and the caller fetches.
TEST_F(EngineTest, ListDkeysWithValues) {
  ASSERT_TRUE(put_single(key("d1", "e"), 1, "v1").is_ok());
  ASSERT_TRUE(put_single(key("d1", "e"), 3, "v2").is_ok());
  ASSERT_TRUE(put_single(key("d2", "a"), 1, "other akey first").is_ok());
  ASSERT_TRUE(put_single(key("d2", "e"), 1, "behind it").is_ok());
  ASSERT_TRUE(put_array(key("d3", "e"), 1, 0, "an array").is_ok());
  ASSERT_TRUE(put_single(key("d4", "e"), 1, "punched").is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "d4", 4).is_ok());
  ASSERT_TRUE(put_single(key("d5", "e"), 5, "v5").is_ok());
  Anchor anchor;
  std::vector<std::optional<std::string>> values;
  auto keys = engine_->list_dkeys(cid_, oid_, kEpochLatest, &anchor, 100, {}, "e", &values);
  ASSERT_TRUE(keys.is_ok()) << keys.status().to_string();
  EXPECT_EQ(*keys, (std::vector<std::string>{"d1", "d2", "d3", "d5"}));
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], std::optional<std::string>("v2"));
  EXPECT_FALSE(values[1]) << "the scan met akey 'a' first";
  EXPECT_FALSE(values[2]) << "an array is no single value";
  EXPECT_EQ(values[3], std::optional<std::string>("v5"));
  Anchor older;
  keys = engine_->list_dkeys(cid_, oid_, 3, &older, 100, {}, "e", &values);
  ASSERT_TRUE(keys.is_ok());
  EXPECT_EQ(*keys, (std::vector<std::string>{"d1", "d2", "d3", "d4"}));
  EXPECT_EQ(values[0], std::optional<std::string>("v2"));
  EXPECT_EQ(values[3], std::optional<std::string>("punched")) << "at epoch 3 the punch (at 4) is not there yet";
  Anchor first;
  keys = engine_->list_dkeys(cid_, oid_, 2, &first, 1, {}, "e", &values);
  ASSERT_TRUE(keys.is_ok());
  EXPECT_EQ(*keys, std::vector<std::string>{"d1"});
  EXPECT_EQ(values, std::vector<std::optional<std::string>>{std::string("v1")});
}

// A container's first punch starts marking the objects that hold punches; reads of an object without a mark
// skip the punch lookups and still see what they must, before and after a reopen.
TEST_F(EngineTest, PunchMarks) {
  KeyRef other{cid_, ObjectId{7, 7}, "d", "a"};
  ASSERT_TRUE(put_single(key("d1"), 1, "one").is_ok());
  ASSERT_TRUE(put_single(key("d2"), 1, "two").is_ok());
  ASSERT_TRUE(put_single(other, 1, "other").is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "d1", 2).is_ok());
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_EQ(get_single(key("d1"), kEpochLatest).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(*get_single(key("d1"), 1), "one");
    EXPECT_EQ(*get_single(key("d2"), kEpochLatest), "two");
    EXPECT_EQ(*get_single(other, kEpochLatest), "other");
    ASSERT_TRUE(engine_->check().is_ok());
    reopen();
  }
  // A batch's punch marks its object too: the object punch hides what the other object held.
  Mutation m;
  m.kind = Mutation::Kind::kPunchObject;
  m.oid = other.oid;
  ASSERT_TRUE(engine_->apply(cid_, 3, {&m, 1}, false).is_ok());
  EXPECT_EQ(get_single(other, kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(other, 2), "other");
  ASSERT_TRUE(engine_->check().is_ok());
}

// After its first pass, aggregation looks only at the objects written since: an object whose newest versions
// were above the boundary is looked at again, and after a reopen or a snapshot's removal, every object is.
TEST_F(EngineTest, AggregationLooksAtWhatChanged) {
  KeyRef other{cid_, ObjectId{7, 7}, "d", "a"};
  ASSERT_TRUE(put_single(key(), 1, "a1").is_ok());
  ASSERT_TRUE(put_single(key(), 2, "a2").is_ok());
  ASSERT_TRUE(put_single(other, 1, "b1").is_ok());
  ASSERT_TRUE(put_single(other, 2, "b2").is_ok());
  auto stats = engine_->aggregate(cid_, 2);
  ASSERT_TRUE(stats.is_ok()) << stats.status().to_string();
  EXPECT_EQ(stats->records_removed, 2u);  // a1 and b1
  ASSERT_TRUE(put_single(key(), 3, "a3").is_ok());
  ASSERT_TRUE(put_single(key(), 4, "a4").is_ok());
  ASSERT_TRUE(put_single(other, 5, "b5").is_ok());
  stats = engine_->aggregate(cid_, 4);
  EXPECT_EQ(stats->records_removed, 2u);  // a2 and a3; b2 is the newest version at 4
  stats = engine_->aggregate(cid_, 5);
  EXPECT_EQ(stats->records_removed, 1u);  // b2, under b5, which the last pass could not judge
  stats = engine_->aggregate(cid_, 6);
  EXPECT_EQ(stats->records_removed, 0u);
  EXPECT_EQ(*get_single(key(), kEpochLatest), "a4");
  EXPECT_EQ(*get_single(other, kEpochLatest), "b5");

  // A snapshot pins a version in an object nobody writes again; its removal frees it.
  ASSERT_TRUE(put_single(other, 7, "b7").is_ok());
  ASSERT_TRUE(engine_->snapshot_create(cid_, 7).is_ok());
  ASSERT_TRUE(put_single(other, 8, "b8").is_ok());
  stats = engine_->aggregate(cid_, 9);
  EXPECT_EQ(stats->records_removed, 1u);  // b5; b7 is the snapshot's
  ASSERT_TRUE(engine_->snapshot_destroy(cid_, 7).is_ok());
  stats = engine_->aggregate(cid_, 10);
  EXPECT_EQ(stats->records_removed, 1u);  // b7
  ASSERT_TRUE(engine_->check().is_ok());

  // A reopened engine knows nothing of what changed before: its first pass looks at everything.
  ASSERT_TRUE(put_single(key(), 11, "a11").is_ok());
  reopen();
  stats = engine_->aggregate(cid_, 12);
  EXPECT_EQ(stats->records_removed, 1u);  // a4
  EXPECT_EQ(*get_single(key(), kEpochLatest), "a11");
  ASSERT_TRUE(engine_->check().is_ok());
}

TEST_F(EngineTest, ZeroCopyTwoPhase) {
  UpdateOp op{key(), 1, ValueKind::kArray, 4096, 3u << 20};
  auto tx = engine_->update_begin(op);
  ASSERT_TRUE(tx.is_ok());
  ASSERT_EQ(tx->buffers().size(), 4u);  // split at the 1 MiB grains
  std::string data = pattern(3, op.length);
  size_t pos = 0;
  for (const IoBuf& b : tx->buffers()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4096, (op.offset + pos) % 4096);
    std::memcpy(b.data, data.data() + pos, b.len);
    pos += b.len;
  }
  ASSERT_EQ(pos, data.size());
  EXPECT_EQ(tx->csum_count(), (3u << 20) / 4096);
  ASSERT_TRUE(engine_->update_end(*tx, make_csums(ValueKind::kArray, op.offset, bytes(data), 4096)).is_ok());
  EXPECT_EQ(engine_->update_end(*tx, {}).code(), StatusCode::kInvalidArgument);

  auto abort = engine_->update_begin({key("other"), 2, ValueKind::kArray, 0, 1 << 20});
  ASSERT_TRUE(abort.is_ok());
  engine_->update_abort(*abort);
  EXPECT_EQ(get_array(key("other"), kEpochLatest, 0, 1).status().code(), StatusCode::kNotFound);

  auto f = engine_->fetch_begin({key(), kEpochLatest, ValueKind::kArray, 4096, op.length});
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->to_string(), data);
  engine_->fetch_end(*f);
  ASSERT_TRUE(engine_->check().is_ok());
}

// An update whose caller has no checksums (a target's read from lent memory) is checksummed by the engine, and
// stored checksums are what a later fetch checks: the same as the caller's would have been.
TEST_F(EngineTest, AnUpdateWithoutTheCallersChecksumsIsChecksummedHere) {
  std::string data = pattern(4, (1u << 20) + 100);
  UpdateOp op{key(), 1, ValueKind::kArray, 4096, data.size()};
  EXPECT_EQ(engine_->update(op, bytes(data), {}).code(), StatusCode::kInvalidArgument);  // checksums are owed
  op.checksum_here = true;
  ASSERT_TRUE(engine_->update(op, bytes(data), {}).is_ok());
  std::vector<uint32_t> csums;
  auto got = get_array(key(), kEpochLatest, 4096, data.size(), &csums);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, data);
  EXPECT_EQ(csums, make_csums(ValueKind::kArray, 4096, bytes(data), 4096));
  ASSERT_TRUE(engine_->check().is_ok());
}

TEST_F(EngineTest, ConcurrentWritersGroupCommit) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string dk = "t" + std::to_string(t) + "i" + std::to_string(i);
        std::string data = pattern(t * 1000 + i, 4096 * (1 + i % 3));
        if (!put_array(key(dk), 1 + i, 0, data).is_ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  // Four writers each waiting for its commit: their commits must have shared syncs.
  Engine::CommitStats stats = engine_->commit_stats();
  EXPECT_GE(stats.writers, 200u);
  EXPECT_LT(stats.groups, stats.writers) << "no two of " << stats.writers << " updates shared a commit";
  std::printf("%llu updates in %llu commit groups\n", static_cast<unsigned long long>(stats.writers),
              static_cast<unsigned long long>(stats.groups));
  reopen();
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 50; ++i) {
      std::string dk = "t" + std::to_string(t) + "i" + std::to_string(i);
      EXPECT_EQ(*get_array(key(dk), kEpochLatest, 0, 4096 * (1 + i % 3)), pattern(t * 1000 + i, 4096 * (1 + i % 3)));
    }
  ASSERT_TRUE(engine_->check().is_ok());
}

// The index's WAL is written ahead while the target is open (so that its synced writes do not grow it) and cut
// back to its records when closed. A copy taken while open is the state a crash leaves, fill past the last
// record; it opens with every update in it. (The crash test kills writers with the fill in place.)
TEST_F(EngineTest, IndexLogIsWrittenAheadAndRecoversPastItsFill) {
  const uint64_t chunk = index::kWalPrewriteChunkBytes;
  const int n = 500;  // inline pieces of 3000 bytes: more than a chunk of log records
  for (int i = 0; i < n; ++i) ASSERT_TRUE(put_array(key("k" + std::to_string(i)), 1, 0, pattern(i, 3000)).is_ok());
  auto open_sizes = index_logs(target_.dir.path());
  ASSERT_FALSE(open_sizes.empty());
  uint64_t largest = 0;
  for (const auto& [name, size] : open_sizes) largest = std::max(largest, size);
  EXPECT_GE(largest, 2 * chunk);
  EXPECT_EQ(largest % chunk, 0u);

  testing::TempDir copy;
  copy_target(copy);
  target_.engine.reset();
  engine_ = nullptr;
  for (const auto& [name, size] : index_logs(target_.dir.path())) {
    auto was = open_sizes.find(name);
    if (was != open_sizes.end()) {
      EXPECT_LT(size, was->second) << name;
    }
  }

  auto crashed = Engine::open(testing::small_options(copy.path()));
  ASSERT_TRUE(crashed.is_ok()) << crashed.status().to_string();
  auto info = (*crashed)->cont_open(pool_, cont_);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  for (int i = 0; i < n; ++i) {
    auto got =
        (*crashed)->fetch({{info->id, oid_, "k" + std::to_string(i), "a"}, kEpochLatest, ValueKind::kArray, 0, 3000});
    ASSERT_TRUE(got.is_ok()) << i << ": " << got.status().to_string();
    EXPECT_EQ(*got, pattern(i, 3000)) << i;
  }
  EXPECT_TRUE((*crashed)->check().is_ok());
  reopen();
  EXPECT_EQ(*get_array(key("k" + std::to_string(n - 1)), kEpochLatest, 0, 3000), pattern(n - 1, 3000));
}

// A power cut may keep later pages of the log's unsynced records and lose earlier ones, which then read as what the
// log was written ahead with. Recovery keeps a prefix. The hard case: the lost bytes start at a record's header and
// the next block starts with a record of its own, where zeros read as padding, were skipped, and the records after
// them replayed. Here the log loses such a span, and every batch present after the reopen has every earlier one.
TEST_F(EngineTest, ALostSpanOfTheIndexLogEndsRecoveryThere) {
  const int n = 20000;
  auto batch = [&](int i) {
    return std::vector<Mutation>{
        {Mutation::Kind::kPutSingle, oid_, "k" + std::to_string(i), "a", pattern(i, 40 + i % 17)}};
  };
  for (int i = 0; i < n; ++i) ASSERT_TRUE(engine_->apply(cid_, 5, batch(i), /*lazy=*/true).is_ok());
  testing::TempDir copy;
  copy_target(copy);
  auto logs = index_logs(copy.path());
  ASSERT_FALSE(logs.empty());
  std::string log = std::max_element(logs.begin(), logs.end(), [](const auto& a, const auto& b) {
                      return a.second < b.second;
                    })->first;
  std::string bytes;
  {
    std::ifstream in(log, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // RocksDB's log: 32 KiB blocks of records, each a 7-byte header (crc32c 4, length 2, type 1: 1 full, 2 first,
  // 3 middle, 4 last) and its bytes; fewer than 7 bytes left in a block are padding.
  constexpr size_t kBlock = 32768, kHeader = 7;
  auto starts_fresh = [&](size_t at) {
    return at + kHeader <= bytes.size() && (bytes[at + 6] == 1 || bytes[at + 6] == 2);
  };
  size_t from = 0, to = 0;
  for (size_t block = kBlock; block + kBlock < bytes.size() && to == 0; block += kBlock) {
    if (!starts_fresh(block + kBlock)) continue;  // the block after the lost span starts a record of its own
    for (size_t at = block; at + kHeader <= block + kBlock;) {
      if (bytes[at + 6] == 0) break;  // padding, or the end of the records
      if (starts_fresh(at) && at > block) {
        from = at;
        to = block + kBlock;
        break;
      }
      at += kHeader + (static_cast<uint8_t>(bytes[at + 4]) | static_cast<uint8_t>(bytes[at + 5]) << 8);
    }
  }
  ASSERT_GT(to, from) << "no block of this log starts with a record of its own";
  {
    std::string fill(to - from, index::kWalFillByte);
    std::fstream out(log, std::ios::binary | std::ios::in | std::ios::out);
    out.seekp(static_cast<std::streamoff>(from));
    out.write(fill.data(), static_cast<std::streamsize>(fill.size()));
  }
  auto cut = Engine::open(testing::small_options(copy.path()));
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  auto info = (*cut)->cont_open(pool_, cont_);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  int present = 0;
  bool gone = false;
  for (int i = 0; i < n; ++i) {
    auto got = (*cut)->fetch({{info->id, oid_, "k" + std::to_string(i), "a"}, kEpochLatest, ValueKind::kSingle, 0, 0});
    if (!got.is_ok()) {
      gone = true;
      continue;
    }
    ASSERT_FALSE(gone) << "batch " << i << " came back after an earlier one was lost";
    EXPECT_EQ(*got, pattern(i, 40 + i % 17));
    ++present;
  }
  EXPECT_TRUE(gone) << "the lost span held no batch";
  EXPECT_GT(present, 0);
  EXPECT_TRUE((*cut)->check().is_ok());
}

TEST_F(EngineTest, InjectedWriteErrorStoresNothing) {
  fault::arm("blockio.write");
  EXPECT_EQ(put_array(key(), 1, 0, pattern(1, 8192)).code(), StatusCode::kIoError);
  fault::disarm_all();
  EXPECT_EQ(get_array(key(), kEpochLatest, 0, 1).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(engine_->check().is_ok());
  ASSERT_TRUE(put_array(key(), 1, 0, pattern(1, 8192)).is_ok());
}

TEST_F(EngineTest, ContainerDestroyFreesSpace) {
  auto before = engine_->space().free_bytes;
  ASSERT_TRUE(put_array(key(), 1, 0, pattern(1, 4 << 20)).is_ok());
  EXPECT_EQ(engine_->space().free_bytes, before - (4u << 20));
  ASSERT_TRUE(engine_->cont_destroy(pool_, cont_).is_ok());
  EXPECT_EQ(engine_->space().free_bytes, before);
  EXPECT_EQ(get_array(key(), kEpochLatest, 0, 1).status().code(), StatusCode::kUnknownContainer);
  ASSERT_TRUE(engine_->check().is_ok());
  ASSERT_TRUE(engine_->pool_destroy(pool_).is_ok());
  EXPECT_TRUE(engine_->pool_list().empty());
}

// fetch_submit answers exactly what fetch_begin does, on the caller's own ring: arrays with holes, unaligned
// ranges (bounce buffers), inline pieces, single values and errors; more fetches at once than the ring holds
// (queue depth 32 here); and a media error reaches the fetch that hit it.
TEST_F(EngineTest, SubmittedFetchesMatchBlockingOnes) {
  ASSERT_TRUE(put_array(key("big"), 1, 0, pattern(1, 3 << 20)).is_ok());
  ASSERT_TRUE(put_array(key("big"), 2, 5000, pattern(2, 70000)).is_ok());
  ASSERT_TRUE(put_array(key("small"), 1, 100, pattern(3, 300)).is_ok());  // inline, with a hole before it
  ASSERT_TRUE(put_single(key("one"), 1, "single value").is_ok());
  auto ring = engine_->make_io_ring();
  ASSERT_TRUE(ring.is_ok()) << ring.status().to_string();

  struct Case {
    FetchOp op;
    Result<std::string> want;
    std::vector<uint32_t> want_csums;
    std::optional<Result<std::string>> got;
    std::vector<uint32_t> got_csums;
  };
  std::vector<Case> cases;
  auto add = [&](std::string_view dkey, ValueKind kind, uint64_t off, uint64_t len) {
    FetchOp op{key(dkey), kEpochLatest, kind, off, len};
    std::vector<uint32_t> csums;
    auto want = engine_->fetch(op, &csums);
    cases.push_back({op, std::move(want), std::move(csums), std::nullopt, {}});
  };
  for (int i = 0; i < 40; ++i) add("big", ValueKind::kArray, (i * 77777) % (3 << 20), 1 + (i * 4099) % (1 << 20));
  add("small", ValueKind::kArray, 0, 8192);
  add("one", ValueKind::kSingle, 0, 0);
  add("none", ValueKind::kArray, 0, 4096);
  add("one", ValueKind::kArray, 0, 4096);
  for (Case& c : cases) {
    engine_->fetch_submit(**ring, c.op, [&c](Result<FetchTx> tx) {
      if (tx.is_ok()) c.got_csums.assign(tx->csums().begin(), tx->csums().end());
      c.got.emplace(tx.is_ok() ? Result<std::string>(tx->to_string()) : Result<std::string>(tx.status()));
    });
  }
  (*ring)->drain();
  EXPECT_EQ((*ring)->in_flight(), 0u);
  for (const Case& c : cases) {
    ASSERT_TRUE(c.got.has_value());
    ASSERT_EQ(c.got->status().code(), c.want.status().code()) << c.got->status().to_string();
    if (!c.want.is_ok()) continue;
    EXPECT_TRUE(**c.got == *c.want);
    EXPECT_EQ(c.got_csums, c.want_csums);
  }

  fault::arm("blockio.read");
  std::optional<Status> failed;
  engine_->fetch_submit(**ring, {key("big"), kEpochLatest, ValueKind::kArray, 0, 8192},
                        [&](Result<FetchTx> tx) { failed = tx.status(); });
  (*ring)->drain();
  fault::disarm_all();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->code(), StatusCode::kIoError);
  ASSERT_TRUE(engine_->check().is_ok());
}

// update_submit stores exactly what update_end does, from the caller's own ring: arrays at unaligned offsets,
// inline pieces, several grains, single values; more updates at once than the ring holds, with a thread
// committing blocking updates at the same time (groups led by either committer); all durable across a reopen.
// A checksum mismatch, a wrong checksum count and a media error store nothing and give the space back.
TEST_F(EngineTest, SubmittedUpdatesMatchBlockingOnes) {
  auto ring = engine_->make_io_ring();
  ASSERT_TRUE(ring.is_ok()) << ring.status().to_string();
  struct Case {
    std::string dkey;
    ValueKind kind;
    uint64_t offset;
    std::string data;
    std::optional<Status> got;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 48; ++i) {
    uint64_t len = i % 4 == 0 ? (3u << 20) - 5 : 1 + (i * 40993) % (1 << 20);
    cases.push_back({"a" + std::to_string(i), ValueKind::kArray, (i * 7919ull) % 10000, pattern(i, len), {}});
  }
  cases.push_back({"tiny", ValueKind::kArray, 100, pattern(100, 300), {}});
  cases.push_back({"one", ValueKind::kSingle, 0, "a single value", {}});
  std::atomic<bool> blocking_ok{true};
  std::thread blocking([&] {
    for (int i = 0; i < 30; ++i)
      if (!put_array(key("sync" + std::to_string(i)), 5, 0, pattern(500 + i, 4096)).is_ok()) blocking_ok = false;
  });
  for (Case& c : cases) {
    UpdateOp op{key(c.dkey), 7, c.kind, c.offset, c.data.size()};
    auto tx = engine_->update_begin(op);
    while (!tx.is_ok() && tx.status().code() == StatusCode::kBusy && (*ring)->in_flight() > 0) {
      (*ring)->poll();  // the arena is full of updates in flight: let some finish, as a target does
      tx = engine_->update_begin(op);
    }
    ASSERT_TRUE(tx.is_ok()) << tx.status().to_string();
    size_t pos = 0;
    for (const IoBuf& b : tx->buffers()) {
      std::memcpy(b.data, c.data.data() + pos, b.len);
      pos += b.len;
    }
    engine_->update_submit(**ring, std::move(tx).value(), make_csums(c.kind, c.offset, bytes(c.data), 4096),
                           [&c](Status st) { c.got = st; });
  }
  (*ring)->drain();
  blocking.join();
  EXPECT_TRUE(blocking_ok.load());
  EXPECT_EQ((*ring)->in_flight(), 0u);
  for (const Case& c : cases) {
    ASSERT_TRUE(c.got.has_value()) << c.dkey;
    ASSERT_TRUE(c.got->is_ok()) << c.dkey << ": " << c.got->to_string();
  }
  ring->reset();
  reopen();
  for (const Case& c : cases) {
    auto back = c.kind == ValueKind::kSingle ? get_single(key(c.dkey), kEpochLatest)
                                             : get_array(key(c.dkey), kEpochLatest, c.offset, c.data.size());
    ASSERT_TRUE(back.is_ok()) << c.dkey;
    EXPECT_TRUE(*back == c.data) << c.dkey;
  }
  for (int i = 0; i < 30; ++i)
    EXPECT_EQ(*get_array(key("sync" + std::to_string(i)), kEpochLatest, 0, 4096), pattern(500 + i, 4096));
  ASSERT_TRUE(engine_->check().is_ok());

  // Refusals: nothing stored, every reserved block back.
  ring = engine_->make_io_ring();
  ASSERT_TRUE(ring.is_ok());
  uint64_t free_before = engine_->space().free_bytes;
  auto refused = [&](std::string_view dkey, uint64_t len, std::vector<uint32_t> csums) {
    auto tx = engine_->update_begin({key(dkey), 9, ValueKind::kArray, 0, len});
    EXPECT_TRUE(tx.is_ok());
    std::string data = pattern(9, len);
    std::memcpy(tx->buffers()[0].data, data.data(), tx->buffers()[0].len);
    if (csums.empty()) csums = make_csums(ValueKind::kArray, 0, bytes(data), 4096);
    std::optional<Status> got;
    engine_->update_submit(**ring, std::move(tx).value(), csums, [&](Status st) { got = st; });
    (*ring)->drain();
    EXPECT_TRUE(got.has_value());
    return got.value_or(Status::ok()).code();
  };
  auto damaged = make_csums(ValueKind::kArray, 0, bytes(pattern(9, 1 << 20)), 4096);
  damaged[100] ^= 1;
  EXPECT_EQ(refused("bad", 1 << 20, damaged), StatusCode::kChecksumMismatch);
  EXPECT_EQ(refused("bad", 8192, {1, 2, 3}), StatusCode::kInvalidArgument);
  fault::arm("blockio.write");
  EXPECT_EQ(refused("bad", 65536, {}), StatusCode::kIoError);
  fault::disarm_all();
  EXPECT_EQ(get_array(key("bad"), kEpochLatest, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->space().free_bytes, free_before);
  ASSERT_TRUE(engine_->check().is_ok());
}

// Aggregating many small overwrites removes thousands of records at once, which compacts the index range
// (tombstones would slow every later read): reads stay right through it, and the space comes back.
TEST_F(EngineTest, ACleanStopLeavesNoLazyWriteToCheck) {
  std::string data = pattern(3, 20000);
  UpdateOp op{key("lazy", "d"), 1, ValueKind::kArray, 0, data.size()};
  op.lazy = true;
  ASSERT_TRUE(engine_->update(op, bytes(data), make_csums(ValueKind::kArray, 0, bytes(data), 4096)).is_ok());
  reopen();  // the engine is destroyed: it syncs
  EXPECT_EQ(engine_->lazy_recovery().checked, 0u);
  EXPECT_EQ(*get_array(key("lazy", "d"), kEpochLatest, 0, data.size()), data);
}

TEST_F(EngineTest, PunchRecordsThatHideNothingGo) {
  // A removed name: its value and the dkey punch that removed it both go.
  ASSERT_TRUE(put_single(key("gone"), 1, "v").is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "gone", 2).is_ok());
  auto agg = engine_->aggregate(cid_, 3);
  ASSERT_TRUE(agg.is_ok()) << agg.status().to_string();
  EXPECT_EQ(agg->records_removed, 2u);
  EXPECT_EQ(get_single(key("gone"), kEpochLatest).status().code(), StatusCode::kNotFound);
  // A purged object: its data, its punch and its mark go; written again, it reads as new.
  KeyRef other{cid_, ObjectId{5, 5}, "k", "a"};
  ASSERT_TRUE(put_single(other, 4, "old").is_ok());
  ASSERT_TRUE(engine_->punch_object(cid_, other.oid, 5).is_ok());
  agg = engine_->aggregate(cid_, 6);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(agg->records_removed, 2u);
  ASSERT_TRUE(engine_->check().is_ok());
  ASSERT_TRUE(put_single(other, 7, "new").is_ok());
  EXPECT_EQ(*get_single(other, kEpochLatest), "new");
  // A punch that still hides a version a snapshot sees stays.
  ASSERT_TRUE(put_single(key("pinned"), 8, "x").is_ok());
  ASSERT_TRUE(engine_->snapshot_create(cid_, 9).is_ok());
  ASSERT_TRUE(engine_->punch_dkey(cid_, oid_, "pinned", 10).is_ok());
  agg = engine_->aggregate(cid_, 11);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(agg->records_removed, 0u);
  EXPECT_EQ(get_single(key("pinned"), kEpochLatest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*get_single(key("pinned"), 9), "x");
  ASSERT_TRUE(engine_->snapshot_destroy(cid_, 9).is_ok());
  agg = engine_->aggregate(cid_, 12);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(agg->records_removed, 2u);  // the version and then its punch
  ASSERT_TRUE(engine_->check().is_ok());
  reopen();
  EXPECT_EQ(*get_single(other, kEpochLatest), "new");
  EXPECT_EQ(get_single(key("pinned"), kEpochLatest).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(engine_->check().is_ok());
}

TEST_F(EngineTest, AggregationMergesAGrainSpreadOverManyRecords) {
  // Pieces overlapping at random offsets of the second grain, inline and in blocks, a hole in the middle and
  // one past the data's end: as a file's random overwrites and truncates leave them.
  const uint64_t base = 1 << 20;
  std::string want(300000, '\0');
  uint64_t end = 0;
  Epoch e = 1;
  for (int i = 0; i < 40; ++i, ++e) {
    uint64_t off = (i * 7919ull) % 250000, len = i % 3 == 0 ? 100 + i : 5000 + 997 * i;
    std::string d = pattern(200 + i, len);
    ASSERT_TRUE(put_array(key(), e, base + off, d).is_ok());
    want.replace(off, len, d);
    end = std::max(end, off + len);
  }
  ASSERT_TRUE(engine_->punch_extent(key(), e++, base + 1000, 3000).is_ok());
  want.replace(1000, 3000, std::string(3000, '\0'));
  ASSERT_TRUE(engine_->punch_extent(key(), e++, base + end - 500, 1 << 20).is_ok());  // past the end: cut
  end -= 500;
  want.resize(end);
  ASSERT_TRUE(put_array(key(), 1000, base + 10, "newer than the pass").is_ok());  // above upto: stays on top
  auto agg = engine_->aggregate(cid_, e);
  ASSERT_TRUE(agg.is_ok()) << agg.status().to_string();
  EXPECT_EQ(agg->grains_merged, 1u);
  EXPECT_GE(agg->records_removed, 40u);
  want.replace(10, 19, "newer than the pass");
  EXPECT_EQ(*engine_->array_size(key(), kEpochLatest), base + end);
  EXPECT_EQ(*get_array(key(), kEpochLatest, base, end), want);
  ASSERT_TRUE(engine_->check().is_ok());
  // Merged once: the next pass finds one record (and the newer one) and leaves them.
  agg = engine_->aggregate(cid_, 1001);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(agg->grains_merged, 0u);
  // A whole grain with a few small overwrites is not rewritten for them (1 MiB for 40 KiB written).
  KeyRef dense{cid_, oid_, "dense", "a"};
  ASSERT_TRUE(put_array(dense, 1002, 0, pattern(7, 1 << 20)).is_ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(put_array(dense, 1003 + i, i * 50000, pattern(8 + i, 4096)).is_ok());
  agg = engine_->aggregate(cid_, 1100);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(agg->grains_merged, 0u);
  reopen();
  EXPECT_EQ(*get_array(key(), kEpochLatest, base, end), want);
  EXPECT_EQ(*engine_->array_size(key(), kEpochLatest), base + end);
  ASSERT_TRUE(engine_->check().is_ok());
}

// Truncates leave holes. One over data that a view still sees stays; one over nothing (a truncate that extended
// the file, or one whose data underneath went) reads as no record at all and goes.
TEST_F(EngineTest, AggregationDropsHolesThatHideNothing) {
  ASSERT_TRUE(put_array(key(), 1, 0, pattern(1, 10000)).is_ok());
  ASSERT_TRUE(engine_->punch_extent(key(), 2, 6000, 10000).is_ok());  // cuts the data: stays
  ASSERT_TRUE(engine_->punch_extent(key(), 3, 20000, 5000).is_ok());  // past the data: hides nothing
  ASSERT_TRUE(put_array(key(), 4, 30000, pattern(2, 4096)).is_ok());  // then the file grows past both
  ASSERT_TRUE(put_array(key(), 5, 40000, pattern(3, 100)).is_ok());   // covered below by the next
  ASSERT_TRUE(engine_->punch_extent(key(), 6, 39000, 2000).is_ok());  // its data goes under it: so does it
  ASSERT_TRUE(put_array(key(), 7, 39000, pattern(4, 2000)).is_ok());
  std::string want = pattern(1, 6000) + std::string(24000, '\0') + pattern(2, 4096);
  want += std::string(39000 - want.size(), '\0') + pattern(4, 2000);
  auto agg = engine_->aggregate(cid_, 7);
  ASSERT_TRUE(agg.is_ok()) << agg.status().to_string();
  // The extending hole, the hidden write at 40000 and the hole over it.
  EXPECT_EQ(agg->records_removed, 3u);
  EXPECT_EQ(*engine_->array_size(key(), kEpochLatest), 41000u);
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 41000), want);
  // A snapshot that sees the data under a hole keeps the hole for the reads above it.
  KeyRef snap{cid_, oid_, "snap", "a"};
  ASSERT_TRUE(put_array(snap, 8, 0, pattern(5, 8192)).is_ok());
  ASSERT_TRUE(engine_->snapshot_create(cid_, 8).is_ok());
  ASSERT_TRUE(engine_->punch_extent(snap, 9, 4096, 4096).is_ok());
  ASSERT_TRUE(put_array(snap, 10, 0, pattern(6, 8192 - 4096)).is_ok());  // the data's visible part, overwritten
  agg = engine_->aggregate(cid_, 10);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_EQ(*engine_->array_size(snap, kEpochLatest), 4096u);
  EXPECT_EQ(*get_array(snap, 8, 0, 8192), pattern(5, 8192));
  EXPECT_EQ(*engine_->array_size(snap, 8), 8192u);
  ASSERT_TRUE(engine_->check().is_ok());
  reopen();
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 41000), want);
  EXPECT_EQ(*engine_->array_size(snap, kEpochLatest), 4096u);
}

// A read or size that walks many records of one array that overlap (or holes) says so (the target then
// aggregates sooner); a pass clears it. Few records, or many side by side, which a pass cannot take away, do not.
TEST_F(EngineTest, ReadsTellWhenRecordsPiledUp) {
  Epoch e = 1;
  for (size_t i = 0; i < kPiledUpRecords * 2; ++i, ++e) ASSERT_TRUE(put_array(key(), e, i * 100, "x").is_ok());
  ASSERT_TRUE(engine_->array_size(key(), kEpochLatest).is_ok());
  EXPECT_FALSE(engine_->records_piled_up());
  for (size_t i = 0; i < kPiledUpRecords; ++i, ++e) ASSERT_TRUE(put_array(key(), e, 7, "yy").is_ok());
  ASSERT_TRUE(get_array(key(), kEpochLatest, 0, 10).is_ok());
  EXPECT_TRUE(engine_->records_piled_up());
  auto agg = engine_->aggregate(cid_, e);
  ASSERT_TRUE(agg.is_ok());
  EXPECT_FALSE(engine_->records_piled_up());
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 10), std::string("x\0\0\0\0\0\0yy\0", 10));
  EXPECT_FALSE(engine_->records_piled_up());  // the overwritten records went
  // Holes: truncates piled up (above the pass's boundary).
  ++e;
  for (size_t i = 0; i < kPiledUpRecords; ++i, ++e) ASSERT_TRUE(engine_->punch_extent(key(), e, 50 + i, 10).is_ok());
  ASSERT_TRUE(engine_->array_size(key(), kEpochLatest).is_ok());
  EXPECT_TRUE(engine_->records_piled_up());
}

TEST_F(EngineTest, AggregatingManySmallOverwritesCompactsAndKeepsReads) {
  ASSERT_TRUE(put_array(key(), 1, 0, pattern(1, 4 << 20)).is_ok());
  std::string want = pattern(1, 4 << 20);
  Epoch e = 2;
  for (int i = 0; i < 3000; ++i, ++e) {
    uint64_t off = (i * 7919ull % 1024) * 4096;
    std::string d = pattern(100 + i, 4096);
    ASSERT_TRUE(put_array(key(), e, off, d).is_ok());
    want.replace(off, 4096, d);
  }
  std::string top = pattern(9, 1 << 20);  // covers the first MiB: its small records become garbage
  ASSERT_TRUE(put_array(key(), e, 0, top).is_ok());
  want.replace(0, 1 << 20, top);
  auto agg = engine_->aggregate(cid_, e);
  ASSERT_TRUE(agg.is_ok()) << agg.status().to_string();
  EXPECT_GE(agg->records_removed, 1024u);
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 4 << 20), want);
  ASSERT_TRUE(engine_->check().is_ok());
  reopen();
  EXPECT_EQ(*get_array(key(), kEpochLatest, 0, 4 << 20), want);
}

}  // namespace
}  // namespace rfos::engine
