// Engine benchmark: update and fetch on one standalone target (no network), the way fio drives a file.
// One case per run; bench/engine_bench.py runs the matrix and fio's ceiling beside it.
//
//   rfos_engine_bench --dir DIR --rw write|randwrite|read|randread --bs BYTES --threads N
//                     --size BYTES_PER_THREAD --runtime SECONDS [--no-sync] [--copy] [--data-sync auto|always]
//                     [--appending-wal]
//
// Each thread owns one object, laid out like a DFS file: dkey = 1 MiB chunk index, akey "data", the array
// offset = the file offset. Updates are durable before they count (the engine syncs data and index, group
// commit across threads). Reads first lay the objects out with 1 MiB updates. Prints one JSON object.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/crc32c.h"
#include "engine/engine.h"

using namespace rfos;
using namespace rfos::engine;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string dir = "/var/tmp/rfos-bench";
  std::string rw = "write";
  uint64_t bs = 4096;
  int threads = 1;
  uint64_t size = 256ull << 20;
  double runtime = 10;
  bool sync = true;
  bool data_sync_auto = false;  // default: the engine's default (always)
  bool appending_wal = false;
  bool copy = false;
};

uint64_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024;
      break;
    case 'm':
    case 'M':
      v *= 1024 * 1024;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<uint64_t>(v);
}

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "rfos_engine_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  std::exit(1);
}

std::string dkey_of(uint64_t offset) { return std::to_string(offset >> 20); }

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--dir")
      a.dir = next();
    else if (k == "--rw")
      a.rw = next();
    else if (k == "--bs")
      a.bs = parse_size(next());
    else if (k == "--threads")
      a.threads = std::atoi(next());
    else if (k == "--size")
      a.size = parse_size(next());
    else if (k == "--runtime")
      a.runtime = std::atof(next());
    else if (k == "--no-sync")
      a.sync = false;
    else if (k == "--data-sync" && i + 1 < argc)
      a.data_sync_auto = std::string(argv[++i]) == "auto";
    else if (k == "--appending-wal")
      a.appending_wal = true;
    else if (k == "--copy")
      a.copy = true;
    else {
      std::fprintf(stderr,
                   "usage: %s --dir DIR --rw write|randwrite|read|randread --bs N --threads N --size N "
                   "--runtime S [--no-sync] [--copy] [--data-sync auto|always] [--appending-wal]\n",
                   argv[0]);
      return 2;
    }
  }
  bool is_write = a.rw == "write" || a.rw == "randwrite";
  bool is_rand = a.rw == "randwrite" || a.rw == "randread";
  if (a.bs == 0 || a.bs > (1u << 20) || a.size < a.bs || a.threads < 1) {
    std::fprintf(stderr, "bad --bs/--size/--threads\n");
    return 2;
  }
  a.size = a.size / a.bs * a.bs;

  std::filesystem::remove_all(a.dir);
  EngineOptions opts;
  opts.dir = a.dir;
  opts.block_file_bytes = 2 * a.size * a.threads + (256ull << 20);  // room for versions awaiting aggregation
  opts.block_file_bytes = opts.block_file_bytes / 4096 * 4096;
  opts.arena_bytes = 64ull << 20;
  opts.sync = a.sync;
  if (a.data_sync_auto) opts.data_sync = EngineOptions::DataSync::kAuto;
  if (a.appending_wal) opts.prewrite_wal = false;
  auto opened = Engine::open(opts);
  if (!opened.is_ok()) die("open", opened.status());
  std::unique_ptr<Engine> eng = std::move(opened).value();
  Uuid pool = Uuid::random(), cont = Uuid::random();
  if (Status s = eng->pool_create(pool); !s.is_ok()) die("pool", s);
  if (Status s = eng->cont_create(pool, cont, {}); !s.is_ok()) die("container", s);
  uint32_t cid = eng->cont_open(pool, cont)->id;

  // One payload, and its checksums, reused for every update (offsets are bs-aligned, so the checksum layout
  // does not depend on the offset when bs is a multiple of the 4 KiB chunk).
  std::string payload(a.bs, '\0');
  std::mt19937_64 fill(1);
  for (char& c : payload) c = static_cast<char>(fill());
  std::vector<uint32_t> csums;
  chunk_crcs(0, {reinterpret_cast<const uint8_t*>(payload.data()), payload.size()}, 4096, &csums);
  std::atomic<Epoch> epoch{1};

  // Buffers known to hold a given source's bytes: (buffer, source, length).
  std::mutex filled_mu;
  std::set<std::tuple<const void*, const void*, size_t>> filled_set;
  auto filled = [&](uint8_t* buf, const char* src, size_t len) {
    std::lock_guard lock(filled_mu);
    return !filled_set.insert({buf, src, len}).second;
  };
  auto do_update = [&](uint64_t oid, uint64_t off, uint64_t len, const char* src,
                       const std::vector<uint32_t>& cs) -> Status {
    std::string dkey = dkey_of(off);
    for (;;) {
      UpdateOp op{{cid, {0, oid}, dkey, "data"}, epoch++, ValueKind::kArray, off, len};
      auto tx = eng->update_begin(op);
      if (!tx.is_ok()) return tx.status();
      // The engine's buffers are what an RDMA transport lands data in, without a CPU copy. Model that: copy
      // the payload only into a buffer that does not hold it yet (--copy copies every time, like a TCP
      // receive would). update_end verifies the checksums either way.
      size_t pos = 0;
      for (const IoBuf& b : tx->buffers()) {
        if (a.copy || !filled(b.data, src + pos, b.len)) std::memcpy(b.data, src + pos, b.len);
        pos += b.len;
      }
      Status s = eng->update_end(*tx, cs);
      if (s.code() != StatusCode::kEpochTooOld) return s;  // overtaken by aggregation: stamp a new epoch
    }
  };

  if (!is_write) {
    // Lay out every object with 1 MiB updates (a 4 KiB read then finds one record per 1 MiB chunk).
    std::string big(std::min<uint64_t>(a.size, 1 << 20), 'x');
    for (char& c : big) c = static_cast<char>(fill());
    std::vector<uint32_t> big_cs;
    chunk_crcs(0, {reinterpret_cast<const uint8_t*>(big.data()), big.size()}, 4096, &big_cs);
    for (int t = 0; t < a.threads; ++t)
      for (uint64_t off = 0; off < a.size; off += big.size())
        if (Status s = do_update(t + 1, off, big.size(), big.data(), big_cs); !s.is_ok()) die("layout", s);
  }

  std::atomic<bool> stop{false};
  // Updates never overwrite in place: like a server, reclaim superseded versions in the background.
  std::thread aggregator;
  if (is_write) {
    aggregator = std::thread([&] {
      while (!stop.load()) {
        usleep(100000);
        Epoch upto = epoch.load() > 64 ? epoch.load() - 64 : 0;
        if (upto > 0) (void)eng->aggregate(cid, upto);
      }
    });
  }
  std::vector<std::vector<uint32_t>> lat_ns(a.threads);
  std::vector<uint64_t> ops(a.threads, 0);
  std::vector<std::thread> threads;
  Status failure;
  std::mutex failure_mu;
  auto t0 = Clock::now();
  for (int t = 0; t < a.threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 17);
      uint64_t blocks = a.size / a.bs, next = 0;
      lat_ns[t].reserve(1 << 20);
      while (!stop.load(std::memory_order_relaxed)) {
        uint64_t off = (is_rand ? rng() % blocks : next++ % blocks) * a.bs;
        auto s0 = Clock::now();
        Status s;
        if (is_write) {
          s = do_update(t + 1, off, a.bs, payload.data(), csums);
        } else {
          std::string dkey = dkey_of(off);
          auto tx =
              eng->fetch_begin({{cid, {0, uint64_t(t + 1)}, dkey, "data"}, kEpochLatest, ValueKind::kArray, off, a.bs});
          s = tx.status();
        }
        if (!s.is_ok()) {
          std::lock_guard lock(failure_mu);
          failure = s;
          stop = true;
          break;
        }
        lat_ns[t].push_back(static_cast<uint32_t>(std::min<int64_t>(
            UINT32_MAX, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s0).count())));
        ++ops[t];
      }
    });
  }
  while (std::chrono::duration<double>(Clock::now() - t0).count() < a.runtime && !stop) usleep(10000);
  stop = true;
  for (auto& th : threads) th.join();
  if (aggregator.joinable()) aggregator.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!failure.is_ok()) die(a.rw, failure);

  std::vector<uint32_t> all;
  uint64_t total = 0;
  for (int t = 0; t < a.threads; ++t) {
    all.insert(all.end(), lat_ns[t].begin(), lat_ns[t].end());
    total += ops[t];
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) -> uint64_t {
    return all.empty() ? 0 : all[std::min(all.size() - 1, size_t(p / 100 * all.size()))];
  };
  double mean = 0;
  for (uint32_t v : all) mean += v;
  mean = all.empty() ? 0 : mean / all.size();
  std::printf(
      "{\"rw\":\"%s\",\"bs\":%llu,\"threads\":%d,\"runtime_s\":%.3f,\"ops\":%llu,\"iops\":%.1f,"
      "\"bw_bytes\":%.1f,\"lat_ns\":{\"mean\":%.0f,\"p50\":%llu,\"p99\":%llu,\"p999\":%llu},"
      "\"direct_io\":%s,\"sync\":%s,\"one_flush\":%s}\n",
      a.rw.c_str(), (unsigned long long)a.bs, a.threads, secs, (unsigned long long)total, total / secs,
      total * double(a.bs) / secs, mean, (unsigned long long)pct(50), (unsigned long long)pct(99),
      (unsigned long long)pct(99.9), eng->direct_io() ? "true" : "false", a.sync ? "true" : "false",
      eng->data_flushed_with_index() ? "true" : "false");
  eng.reset();
  std::filesystem::remove_all(a.dir);
  return 0;
}
