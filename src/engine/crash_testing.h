// What the engine's crash tests share (kill -9: crash_test.cc; power loss: power_cut_test.cc): the writers'
// updates and punches, the ledger of what was acknowledged, and the check of a reopened target against it.
#pragma once

#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "engine/engine.h"
#include "engine/engine_testing.h"

namespace rfos::engine::testing {

inline const Uuid kCrashPool = *Uuid::parse("00000000-0000-4000-8000-00000000c0de");
inline const Uuid kCrashCont = *Uuid::parse("00000000-0000-4000-8000-00000000beef");
inline const ObjectId kCrashOid{7, 7};

struct CrashWrite {
  bool single;
  uint64_t offset;
  uint64_t length;
};

// The write of tag t, under dkey "k<t>": sizes cover inline pieces, one block, unaligned multi-block and
// multi-grain updates.
inline CrashWrite crash_write(uint64_t tag) {
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

// One writer's next operation: the update of `tag`; on kNoSpace, a punch of one of its earlier keys and an
// aggregation (as a long-running server makes room). `on` receives "W tag", "I tag" (punch asked), "P tag"
// (punch acknowledged).
template <typename Report>
void crash_step(Engine& engine, uint32_t cid, uint64_t tag, std::atomic<uint64_t>& epoch, std::vector<uint64_t>& mine,
                std::mt19937_64& rng, bool aggregates, Report&& on) {
  std::string dkey = "k" + std::to_string(tag);
  CrashWrite w = crash_write(tag);
  std::string data = pattern(tag, w.length);
  ValueKind kind = w.single ? ValueKind::kSingle : ValueKind::kArray;
  Status s = engine.update({{cid, kCrashOid, dkey, "a"}, ++epoch, kind, w.offset, w.length}, bytes(data),
                           make_csums(kind, w.offset, bytes(data), 4096));
  if (s.is_ok()) {
    on('W', tag);
    mine.push_back(tag);
  } else if (s.code() == StatusCode::kNoSpace) {
    if (!mine.empty()) {
      uint64_t victim = mine[rng() % mine.size()];
      on('I', victim);
      if (engine.punch_dkey(cid, kCrashOid, "k" + std::to_string(victim), ++epoch).is_ok()) on('P', victim);
    }
    (void)engine.aggregate(cid, epoch.load() - 8);
  }
  if (aggregates && tag % 50 == 0) (void)engine.aggregate(cid, epoch.load() - 16);
}

// What the writers were told, over every round on one target.
struct CrashLedger {
  std::set<uint64_t> acked;
  std::set<uint64_t> punched, maybe_punched;
  void record(char op, uint64_t tag) {
    if (op == 'W') acked.insert(tag);
    if (op == 'I') maybe_punched.insert(tag);
    if (op == 'P') punched.insert(tag);
  }
};

struct CrashCheck {
  std::string problem;  // empty when the target matches the ledger
  size_t verified = 0;  // acknowledged updates read back exactly
  size_t present = 0;   // keys present, acknowledged or not, all whole
};

// Checks a reopened target against the ledger: fsck clean, every acknowledged update reads back exactly unless
// a punch of it may have landed, every acknowledged punch holds, and every key present at all (a commit can land
// without its acknowledgement) reads back whole.
inline CrashCheck check_after_crash(Engine& engine, const CrashLedger& ledger) {
  CrashCheck out;
  Status chk = engine.check();
  if (!chk.is_ok()) return {"fsck: " + chk.to_string()};
  auto info = engine.cont_open(kCrashPool, kCrashCont);
  if (!info.is_ok()) {
    if (!ledger.acked.empty()) out.problem = "container missing after acknowledged writes";
    return out;
  }
  auto fetch = [&](uint64_t t) {
    CrashWrite w = crash_write(t);
    return engine.fetch({{info->id, kCrashOid, "k" + std::to_string(t), "a"},
                         kEpochLatest,
                         w.single ? ValueKind::kSingle : ValueKind::kArray,
                         w.offset,
                         w.length});
  };
  for (uint64_t t : ledger.acked) {
    auto got = fetch(t);
    if (ledger.punched.count(t)) {
      if (got.status().code() != StatusCode::kNotFound) return {"punched key k" + std::to_string(t) + " came back"};
      continue;
    }
    if (ledger.maybe_punched.count(t) && !got.is_ok()) continue;
    if (!got.is_ok()) return {"acknowledged k" + std::to_string(t) + ": " + got.status().to_string()};
    if (*got != pattern(t, crash_write(t).length)) return {"acknowledged k" + std::to_string(t) + " reads back wrong"};
    ++out.verified;
  }
  Anchor anchor;
  while (!anchor.done) {
    auto page = engine.list_dkeys(info->id, kCrashOid, kEpochLatest, &anchor, 256);
    if (!page.is_ok()) return {"list: " + page.status().to_string()};
    for (const std::string& dkey : *page) {
      uint64_t t = std::stoull(dkey.substr(1));
      auto got = fetch(t);
      if (!got.is_ok()) return {"present key " + dkey + ": " + got.status().to_string()};
      if (*got != pattern(t, crash_write(t).length)) return {"present key " + dkey + " is torn"};
      ++out.present;
    }
  }
  return out;
}

}  // namespace rfos::engine::testing
