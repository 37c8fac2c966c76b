// Power-loss test: writer threads update, punch and aggregate; after a random number of acknowledged operations
// the media seam (engine/power_cut.h) cuts the power; the engine is destroyed, everything that was not durable
// is torn or gone, the target is reopened without the seam and must hold every update and punch acknowledged
// before the cut, exactly, with nothing present torn and fsck clean. Many rounds on one target, each with its own
// cut. Seeded: the seed is printed; RFOS_POWER_CUT_SEED=N repeats a run, RFOS_POWER_CUT_ROUNDS=N sets the rounds.
#include "engine/power_cut.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "engine/crash_testing.h"

namespace rfos::engine {
namespace {

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

struct RoundResult {
  size_t acks = 0;  // acknowledged this round, before the cut
  std::string applied;
  testing::CrashCheck check;
  bool flushed_with_index = false;
};

// One round: open with the seam, write until `cut_after` operations were acknowledged, cut, tear, reopen, check.
RoundResult run_round(const std::string& dir, uint64_t seed, int round, size_t cut_after, EngineOptions::DataSync mode,
                      testing::CrashLedger* ledger) {
  RoundResult out;
  PowerCut power(seed);
  EngineOptions o = testing::small_options(dir, 96ull << 20);
  o.data_sync = mode;
  o.power_cut = &power;
  {
    auto opened = Engine::open(o);
    if (!opened.is_ok()) {
      out.check.problem = "open with the seam: " + opened.status().to_string();
      return out;
    }
    std::unique_ptr<Engine> engine = std::move(opened).value();
    out.flushed_with_index = engine->data_flushed_with_index();
    (void)engine->pool_create(testing::kCrashPool);
    (void)engine->cont_create(testing::kCrashPool, testing::kCrashCont, {});
    auto cont = engine->cont_open(testing::kCrashPool, testing::kCrashCont);
    if (!cont.is_ok()) {
      out.check.problem = "container: " + cont.status().to_string();
      return out;
    }
    std::mutex mu;  // the ledger and the count
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> epoch{std::max<uint64_t>(engine->high_epoch(), uint64_t(round + 1) << 32)};
    std::atomic<uint64_t> next_tag{uint64_t(round) << 32};
    std::vector<std::thread> writers;
    for (int t = 0; t < 3; ++t) {
      writers.emplace_back([&, t] {
        std::mt19937_64 rng(seed * 31 + t);
        std::vector<uint64_t> mine;
        while (!stop) {
          testing::crash_step(*engine, cont->id, next_tag++, epoch, mine, rng, t == 0, [&](char op, uint64_t tag) {
            // Only what was acknowledged before the power went counts: afterwards the machine is off.
            std::lock_guard lock(mu);
            if (power.is_cut()) return;
            ledger->record(op, tag);
            if (op == 'W' && ++out.acks >= cut_after) power.cut();
          });
          if (power.is_cut()) stop = true;
        }
      });
    }
    for (auto& w : writers) w.join();
  }  // the engine goes down with the power off: nothing it does now reaches the media
  auto applied = power.apply();
  if (!applied.is_ok()) {
    out.check.problem = "apply: " + applied.status().to_string();
    return out;
  }
  out.applied = *applied;
  auto reopened = Engine::open(testing::small_options(dir, 96ull << 20));
  if (!reopened.is_ok()) {
    out.check.problem = "reopen: " + reopened.status().to_string();
    return out;
  }
  out.check = testing::check_after_crash(**reopened, *ledger);
  return out;
}

TEST(EnginePowerCut, AcknowledgedUpdatesSurviveALossOfPower) {
  uint64_t seed = env_or("RFOS_POWER_CUT_SEED", std::random_device{}());
  uint64_t rounds = env_or("RFOS_POWER_CUT_ROUNDS", 12);
  std::printf("seed %llu (RFOS_POWER_CUT_SEED=%llu repeats this run), %llu rounds\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(rounds));
  testing::TempDir dir;
  testing::CrashLedger ledger;
  std::mt19937_64 rng(seed);
  for (uint64_t round = 0; round < rounds; ++round) {
    size_t cut_after = 1 + rng() % 150;
    RoundResult r =
        run_round(dir.path(), rng(), static_cast<int>(round), cut_after, EngineOptions::DataSync::kAlways, &ledger);
    ASSERT_EQ(r.check.problem, "") << "seed " << seed << ", round " << round << " (cut after " << cut_after
                                   << " acknowledgements; " << r.applied << ")";
    EXPECT_FALSE(r.flushed_with_index);
    EXPECT_GE(r.check.present, r.check.verified);
    std::printf("round %llu: cut after %zu acknowledged, %s; %zu verified in all, %zu present, %zu punched\n",
                static_cast<unsigned long long>(round), r.acks, r.applied.c_str(), r.check.verified, r.check.present,
                ledger.punched.size());
  }
  EXPECT_GT(ledger.acked.size(), rounds * 5) << "the writers made too little progress to test anything";
}

// Lazy commits (UpdateOp::lazy, apply's `lazy`) are durable after sync(), and a batch is never torn: after the cut each
// batch is there whole or not at all, and the log keeps a prefix (a batch present means every earlier one is).
TEST(EnginePowerCut, LazyCommitsAreDurableAfterASync) {
  uint64_t seed = env_or("RFOS_POWER_CUT_SEED", std::random_device{}());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  testing::TempDir dir;
  PowerCut power(seed);
  EngineOptions o = testing::small_options(dir.path(), 96ull << 20);
  o.power_cut = &power;
  const ObjectId oid{9, 9};
  auto batch = [&](int i) {
    std::string n = std::to_string(i);
    return std::vector<Mutation>{{Mutation::Kind::kPutSingle, oid, "s" + n, "a", "single " + n},
                                 {Mutation::Kind::kPutArray, oid, "d" + n, "d", std::string(3000, char('a' + i % 26))}};
  };
  constexpr int kSynced = 20, kAll = 60;
  {
    auto engine = Engine::open(o);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    ASSERT_TRUE((*engine)->pool_create(testing::kCrashPool).is_ok());
    ASSERT_TRUE((*engine)->cont_create(testing::kCrashPool, testing::kCrashCont, {}).is_ok());
    uint32_t cid = (*engine)->cont_open(testing::kCrashPool, testing::kCrashCont)->id;
    for (int i = 0; i < kAll; ++i) {
      ASSERT_TRUE((*engine)->apply(cid, 100 + i, batch(i), /*lazy=*/true).is_ok());
      if (i == kSynced - 1) {
        ASSERT_TRUE((*engine)->sync().is_ok());
      }
    }
    power.cut();
  }
  auto applied = power.apply();
  ASSERT_TRUE(applied.is_ok());
  std::printf("%s\n", applied->c_str());
  // The log written ahead keeps its fill past the records (the engine's close did not cut it after the power
  // went), and some of its unsynced pages were lost, in any order.
  EXPECT_EQ(applied->find("lost pages of 0 written-ahead logs"), std::string::npos) << *applied;
  auto engine = Engine::open(testing::small_options(dir.path(), 96ull << 20));
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  uint32_t cid = (*engine)->cont_open(testing::kCrashPool, testing::kCrashCont)->id;
  bool gone = false;
  int present = 0;
  for (int i = 0; i < kAll; ++i) {
    std::string n = std::to_string(i);
    auto s = (*engine)->fetch({{cid, oid, "s" + n, "a"}, kEpochLatest, ValueKind::kSingle, 0, 0});
    auto d = (*engine)->fetch({{cid, oid, "d" + n, "d"}, kEpochLatest, ValueKind::kArray, 0, 3000});
    ASSERT_EQ(s.is_ok(), d.is_ok()) << "batch " << i << " is torn";
    if (i < kSynced) {
      ASSERT_TRUE(s.is_ok()) << "batch " << i << " was synced";
    }
    if (!s.is_ok()) {
      gone = true;
      continue;
    }
    ASSERT_FALSE(gone) << "batch " << i << " is there but an earlier one is not";
    EXPECT_EQ(*s, "single " + n);
    EXPECT_EQ(*d, std::string(3000, char('a' + i % 26)));
    ++present;
  }
  std::printf("%d of %d batches present after the cut\n", present, kAll);
  EXPECT_TRUE((*engine)->check().is_ok());
}

// Lazy updates with block data: acknowledged before their data is synced, so a cut may leave their index records
// (a prefix of the log) naming data that never reached the media. Open finds them by their markers, checks their
// data against their checksums and drops those whose data is torn: every key reads back as its last synced
// value or as a lazy one exactly, never a checksum error or torn bytes; what was synced is there; fsck is clean
// (the dropped updates' blocks are free again). Several cuts, since a cut may leave no torn record to find (about
// three in four do not, the log's unsynced pages being lost in any order): at least kRounds, and more until one
// has, up to kMostRounds (six alone found none in about one run of six).
TEST(EnginePowerCut, LazyDataUpdatesTornByACutAreDroppedWhole) {
  uint64_t seed = env_or("RFOS_POWER_CUT_SEED", std::random_device{}());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  constexpr int kKeys = 24, kRounds = 6, kMostRounds = 48;
  constexpr size_t kLen = 3 * 4096 + 100;  // block data, unaligned
  const ObjectId oid{9, 9};
  uint64_t checked = 0, dropped = 0;
  int round = 0;
  for (; round < kRounds || (dropped == 0 && round < kMostRounds); ++round) {
    testing::TempDir dir;
    PowerCut power(seed + round);
    EngineOptions o = testing::small_options(dir.path(), 96ull << 20);
    o.power_cut = &power;
    uint64_t epoch = 100;
    auto put = [&](Engine& e, uint32_t cid, int key, uint64_t tag, bool lazy) {
      std::string data = testing::pattern(tag, kLen), dkey = "k" + std::to_string(key);
      UpdateOp op{{cid, oid, dkey, "d"}, ++epoch, ValueKind::kArray, 4000, kLen};
      op.lazy = lazy;
      return e.update(op, testing::bytes(data), make_csums(ValueKind::kArray, 4000, testing::bytes(data), 4096));
    };
    {
      auto engine = Engine::open(o);
      ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
      ASSERT_TRUE((*engine)->pool_create(testing::kCrashPool).is_ok());
      ASSERT_TRUE((*engine)->cont_create(testing::kCrashPool, testing::kCrashCont, {}).is_ok());
      uint32_t cid = (*engine)->cont_open(testing::kCrashPool, testing::kCrashCont)->id;
      for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(put(**engine, cid, k, 1000 + k, false).is_ok());  // durable
      for (int k = 0; k < kKeys / 2; ++k) ASSERT_TRUE(put(**engine, cid, k, 2000 + k, true).is_ok());
      ASSERT_TRUE((*engine)->sync().is_ok());  // the first half's second values are durable now
      for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(put(**engine, cid, k, 3000 + k, true).is_ok());
      for (int k = kKeys; k < kKeys + 8; ++k) ASSERT_TRUE(put(**engine, cid, k, 3000 + k, true).is_ok());
      power.cut();
    }
    ASSERT_TRUE(power.apply().is_ok());
    auto engine = Engine::open(testing::small_options(dir.path(), 96ull << 20));
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    checked += (*engine)->lazy_recovery().checked;
    dropped += (*engine)->lazy_recovery().dropped;
    uint32_t cid = (*engine)->cont_open(testing::kCrashPool, testing::kCrashCont)->id;
    for (int k = 0; k < kKeys + 8; ++k) {
      auto got =
          (*engine)->fetch({{cid, oid, "k" + std::to_string(k), "d"}, kEpochLatest, ValueKind::kArray, 4000, kLen});
      if (k >= kKeys && got.status().code() == StatusCode::kNotFound) continue;  // never synced, gone
      ASSERT_TRUE(got.is_ok()) << "key " << k << " round " << round << ": " << got.status().to_string();
      uint64_t synced = k < kKeys / 2 ? 2000 + k : 1000 + k;
      bool is_synced = *got == testing::pattern(synced, kLen), is_lazy = *got == testing::pattern(3000 + k, kLen);
      ASSERT_TRUE(k < kKeys ? (is_synced || is_lazy) : is_lazy) << "key " << k << " round " << round << " is torn";
    }
    ASSERT_TRUE((*engine)->check().is_ok()) << (*engine)->check().to_string();
  }
  std::printf("%llu lazy updates checked after %d cuts, %llu dropped\n", static_cast<unsigned long long>(checked),
              round, static_cast<unsigned long long>(dropped));
  EXPECT_GT(dropped, 0u) << "no cut left a torn lazy update to drop: the test tested nothing (seed " << seed << ")";
}

// The test can fail: with data_sync auto the engine leaves the block file's sync to the index's, which this
// model does not credit, so acknowledged updates are lost. (On a real ext4 or XFS with O_DIRECT the WAL's device
// flush covers them; engine open checks that layout before it takes the mode.)
TEST(EnginePowerCut, DataSyncAutoIsOutsideTheModel) {
  uint64_t seed = env_or("RFOS_POWER_CUT_SEED", std::random_device{}());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  testing::TempDir dir;
  testing::CrashLedger ledger;
  RoundResult r = run_round(dir.path(), seed, 0, 60, EngineOptions::DataSync::kAuto, &ledger);
  ASSERT_TRUE(r.flushed_with_index)
      << "data_sync auto was not taken on " << dir.path()
      << " (not ext4/XFS with O_DIRECT?): this test needs it; set RFOS_TEST_DIR to such a file system";
  EXPECT_NE(r.check.problem, "") << "every acknowledged update survived although no block data was synced: the "
                                    "seam lets unsynced writes through ("
                                 << r.applied << ")";
  std::printf("as expected: %s\n", r.check.problem.c_str());
}

}  // namespace
}  // namespace rfos::engine
