// rfos bench: fio's vocabulary and output against a running server, over the native client's event queue.
//
//   rfos bench --rw randread --bs 4k --numjobs 2 --iodepth 16 --size 256m --runtime 10 [--provider P]
//              [--output-format normal|json] [--ceiling]
//
// Each job is a thread with its own session and transport worker and its own object, laid out as every
// file-like object is (client/file_layout.h). Read patterns lay the objects out first.
// --ceiling also runs the transport's own tool for the same transport and message size on this host
// (loopback: ucx_perftest for UCX, with the endpoint error-handling mode rfos's endpoints use, and fi_pingpong
// for libfabric) and prints the ratio. The JSON follows fio's layout
// (jobs[].read / jobs[].write with io_bytes, bw_bytes, iops, runtime, clat_ns.percentile), so tools that parse fio
// parse it.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/agent_client.h"
#include "cli/cli.h"
#include "cli/transport_tools.h"
#include "client/container.h"
#include "client/file_layout.h"
#include "common/proc_stat.h"
#include "placement/placement.h"
#include "transport/transport.h"

namespace rfos::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string rw = "randread";
  uint64_t bs = 4096;
  uint32_t numjobs = 1;
  uint32_t iodepth = 16;
  uint64_t size = 256u << 20;
  uint64_t io_size = 0;  // fio's io_size: bytes each job moves, then stops (0: until --runtime)
  double runtime_s = 10;
  std::string provider;
  std::string format = "normal";
  std::string pool = "default";
  std::string cont = "default";
  bool ceiling = false;
  bool ceiling_only = false;
  int ceiling_port = 0;
  std::string data_path = "auto";
  std::string iomem = "malloc";
  int payload_sends = -1;
  std::string agent;  // --agent SOCK: through rfos agent
};

// Where a job's I/O goes: the native client's event queue, or an agent's ring.
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  virtual Result<uint64_t> submit(bool write, const ObjectId& oid, const std::string& dkey, uint64_t off,
                                  std::span<uint8_t> buf) = 0;
  // Completions as (ticket, status); a failure of the queue itself comes with ticket 0.
  virtual std::vector<std::pair<uint64_t, Status>> poll(size_t max, int timeout_ms) = 0;
  virtual uint64_t chunk() const = 0;
};

class ContainerQueue final : public IoQueue {
 public:
  explicit ContainerQueue(client::Container& c) : c_(c) {}
  Result<uint64_t> submit(bool write, const ObjectId& oid, const std::string& dkey, uint64_t off,
                          std::span<uint8_t> buf) override {
    return write ? c_.submit_write(oid, dkey, client::layout::kDataAkey, off, buf)
                 : c_.submit_read(oid, dkey, client::layout::kDataAkey, off, buf);
  }
  std::vector<std::pair<uint64_t, Status>> poll(size_t max, int timeout_ms) override {
    std::vector<std::pair<uint64_t, Status>> out;
    for (auto& c : c_.poll(max, timeout_ms)) out.emplace_back(c.ticket, c.status);
    return out;
  }
  uint64_t chunk() const override { return client::layout::chunk_bytes(c_.session().cont.props.chunk_bytes); }

 private:
  client::Container& c_;
};

class AgentQueue final : public IoQueue {
 public:
  AgentQueue(agent::AgentClient& a, uint32_t handle) : a_(a), handle_(handle) {}
  Result<uint64_t> submit(bool write, const ObjectId& oid, const std::string& dkey, uint64_t off,
                          std::span<uint8_t> buf) override {
    uint64_t t = next_++;
    RFOS_RETURN_IF_ERROR(a_.submit(write ? agent::RingOp::kWrite : agent::RingOp::kRead, handle_, oid, dkey,
                                   client::layout::kDataAkey, off, buf, t));
    return t;
  }
  std::vector<std::pair<uint64_t, Status>> poll(size_t max, int timeout_ms) override {
    std::vector<std::pair<uint64_t, Status>> out;
    auto got = a_.poll(max, timeout_ms);
    if (!got.is_ok()) return {{0, got.status()}};
    for (auto& c : *got) out.emplace_back(c.user_data, c.status);
    return out;
  }
  uint64_t chunk() const override { return client::layout::chunk_bytes(0); }

 private:
  agent::AgentClient& a_;
  uint32_t handle_;
  uint64_t next_ = 1;
};

struct JobResult {
  Status status;
  uint64_t ops = 0;
  std::vector<uint32_t> lat_ns;
};

ObjectId job_object(uint32_t job) {
  std::string key = "rfos-bench-job-" + std::to_string(job);
  return placement::with_class({placement::mix(placement::fnv1a(key)), placement::mix(job + 1)},
                               placement::ObjectClass::kSX);
}

// Keeps `depth` I/Os in flight until `stop`; `next` gives each I/O's offset.
template <typename Next>
Status pump(IoQueue& c, const ObjectId& oid, bool write, uint64_t bs, uint32_t depth,
            const std::vector<std::span<uint8_t>>& bufs, Next next, const std::atomic<bool>& stop, JobResult* r,
            uint64_t max_ops) {
  std::map<uint64_t, std::pair<size_t, Clock::time_point>> inflight;
  std::vector<size_t> free_bufs;
  for (size_t i = 0; i < depth; ++i) free_bufs.push_back(i);
  uint64_t issued = 0;
  const uint64_t chunk = c.chunk();
  if (bs > chunk || chunk % bs != 0)
    return error(StatusCode::kInvalidArgument,
                 "the block size must divide the container's chunk size (" + std::to_string(chunk) + " bytes)");
  while (true) {
    while (!free_bufs.empty() && !stop.load(std::memory_order_relaxed) && issued < max_ops) {
      uint64_t off = next();
      size_t b = free_bufs.back();
      std::string dkey = client::layout::chunk_key(off / chunk);
      auto t = c.submit(write, oid, dkey, off, {bufs[b].data(), bs});
      if (!t.is_ok()) return t.status();
      free_bufs.pop_back();
      inflight[*t] = {b, Clock::now()};
      ++issued;
    }
    if (inflight.empty()) return Status::ok();
    for (auto& [ticket, status] : c.poll(depth, 100)) {
      RFOS_RETURN_IF_ERROR(status);  // the I/O's, or the queue's own (ticket 0)
      auto it = inflight.find(ticket);
      if (it == inflight.end()) continue;
      if (r) {
        r->lat_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(
            UINT32_MAX,
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - it->second.second).count())));
        ++r->ops;
      }
      free_bufs.push_back(it->second.first);
      inflight.erase(it);
    }
  }
}

// --ceiling-only: the transport tool's figures alone (what bench/matrix.py takes as its transport ceilings).
void ceiling_only(Context& ctx, const BenchArgs& a) {
  std::string provider = a.provider.empty() && std::getenv("RFOS_PROVIDER") ? std::getenv("RFOS_PROVIDER") : a.provider;
  if (provider.empty())
    return (void)ctx.check(error(StatusCode::kInvalidArgument, "--ceiling-only needs --provider"), "bench");
  if (a.bs == 0 || a.iodepth == 0)
    return (void)ctx.check(error(StatusCode::kInvalidArgument, "--bs and --iodepth must be at least 1"), "bench");
  auto c = transport_ceiling(provider, a.bs, a.iodepth, a.ceiling_port);
  if (!ctx.check(c.status(), "bench")) return;
  if (a.format == "json") {
    nlohmann::ordered_json j = {{"provider", provider},    {"bs", a.bs},
                                {"iodepth", a.iodepth},    {"tool", c->tool},
                                {"msg_rate", c->msg_rate}, {"bw_bytes", c->bw_bytes},
                                {"p50_us", c->p50_us}};
    if (c->unhandled_msg_rate > 0)
      j["without_peer_failure_handling"] = {{"msg_rate", c->unhandled_msg_rate}, {"bw_bytes", c->unhandled_bw_bytes}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("ceiling (%s, %s, %llu B, depth %u, loopback): %.1fk msg/s, %.1f MiB/s\n", c->tool.c_str(),
              provider.c_str(), (unsigned long long)a.bs, a.iodepth, c->msg_rate / 1000, c->bw_bytes / 1048576);
}

}  // namespace

void add_bench_command(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "measure I/O against a server, fio style");
  cmd->add_option("--rw", a->rw, "read, write, randread or randwrite")
      ->check(CLI::IsMember({"read", "write", "randread", "randwrite"}))
      ->capture_default_str();
  add_size_option(cmd, "--bs", a->bs, "block size, up to 1m")->capture_default_str();
  cmd->add_option("--numjobs", a->numjobs, "jobs (threads), each with its own session and object")
      ->capture_default_str();
  cmd->add_option("--iodepth", a->iodepth, "I/Os in flight per job")->capture_default_str();
  add_size_option(cmd, "--size", a->size, "bytes per job")->capture_default_str();
  add_size_option(cmd, "--io-size", a->io_size,
                  "bytes each job moves before it stops (fio's io_size; default: until --runtime)");
  cmd->add_option("--runtime", a->runtime_s, "seconds")->capture_default_str();
  cmd->add_option("--provider", a->provider, "data-plane provider (default: $RFOS_PROVIDER or the pool's)");
  cmd->add_option("--output-format", a->format, "normal or json")->check(CLI::IsMember({"normal", "json"}));
  cmd->add_option("--pool", a->pool, "pool label or uuid")->capture_default_str();
  cmd->add_option("--cont", a->cont, "container label or uuid")->capture_default_str();
  cmd->add_option(
         "--data-path", a->data_path,
         "auto, message (data rides the messages) or explicit (targets RDMA-read/write the registered buffers)")
      ->check(CLI::IsMember({"auto", "message", "explicit"}))
      ->capture_default_str();
  cmd->add_option("--iomem", a->iomem,
                  "the jobs' I/O buffers: fabric (Container::alloc_memory: allocated and registered at once) or "
                  "malloc (the heap, registered once with register_memory)")
      ->check(CLI::IsMember({"fabric", "malloc"}))
      ->capture_default_str();
  cmd->add_option("--payload-sends-at-once", a->payload_sends,
                  "payloads over 64 KiB moving at once per job (-1: the provider's default, 0: no limit)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--agent", a->agent,
                  "through the rfos agent on this socket (each job an app of its own) instead of in-process");
  cmd->add_flag("--ceiling", a->ceiling,
                "also measure the transport ceiling (ucx_perftest or fi_pingpong, loopback) and print the ratio");
  cmd->add_flag("--ceiling-only", a->ceiling_only,
                "measure only the transport ceiling for --provider, --bs and --iodepth (no server needed)");
  cmd->add_option("--ceiling-port", a->ceiling_port,
                  "the port the ceiling's tool pair meets on (default: from the pid)")
      ->check(CLI::Range(1024, 65535));
  cmd->callback([&ctx, a] {
    if (a->agent.empty()) a->agent = ctx.agent;  // rfos --agent SOCK bench, or $RFOS_AGENT
    if (a->ceiling_only) return ceiling_only(ctx, *a);
    const uint64_t* bs = &a->bs;
    const uint64_t* size = &a->size;
    if (*bs == 0 || *bs > client::kMaxIoBytes || client::kMaxIoBytes % *bs != 0 || *size < *bs || a->numjobs == 0 ||
        a->iodepth == 0) {
      ctx.check(error(StatusCode::kInvalidArgument, "--bs must divide 1m, --size >= --bs, jobs and depth >= 1"),
                "bench");
      return;
    }
    uint64_t max_ops = a->io_size ? std::max<uint64_t>(a->io_size / a->bs, 1) : UINT64_MAX;
    uint64_t blocks = *size / *bs;
    bool write = a->rw == "write" || a->rw == "randwrite";
    bool rand = a->rw == "randread" || a->rw == "randwrite";
    std::string provider = a->provider;
    if (provider.empty() && std::getenv("RFOS_PROVIDER")) provider = std::getenv("RFOS_PROVIDER");

    std::vector<JobResult> results(a->numjobs);
    std::atomic<uint32_t> agent_pid{0};
    std::atomic<bool> stop{false};
    std::atomic<uint32_t> ready{0}, finished{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (uint32_t j = 0; j < a->numjobs; ++j) {
      threads.emplace_back([&, j] {
        JobResult& r = results[j];
        ObjectId oid = job_object(j);
        std::unique_ptr<client::Container> cont;
        std::unique_ptr<agent::AgentClient> app;
        std::unique_ptr<IoQueue> q;
        // The buffers, registered once as an RDMA application's are: the heap's, or the fabric's; through an
        // agent, slices of the buffer it shares (the layout's 1 MiB writes after them).
        std::vector<std::vector<uint8_t>> heap(a->iomem == "malloc" && a->agent.empty() ? a->iodepth : 0,
                                               std::vector<uint8_t>(*bs));
        std::vector<std::span<uint8_t>> bufs, big;
        if (!a->agent.empty()) {
          agent::AgentClientOptions ao;
          ao.buffer_bytes = a->iodepth * *bs + (8u << 20);
          ao.entries = 1;
          while (ao.entries < std::max<uint32_t>(a->iodepth, 8)) ao.entries *= 2;  // the layout keeps 8 in flight
          auto ac = agent::AgentClient::connect(a->agent, ao);
          auto h = ac.is_ok() ? (*ac)->open(a->pool, a->cont, true) : Result<uint32_t>(ac.status());
          if (!h.is_ok()) {
            r.status = h.status();
            ++ready;
            return;
          }
          app = std::move(ac).value();
          agent_pid = app->agent_pid();
          for (uint32_t i = 0; i < a->iodepth; ++i) bufs.push_back(app->buffer().subspan(i * *bs, *bs));
          for (uint32_t i = 0; i < 8; ++i) big.push_back(app->buffer().subspan(a->iodepth * *bs + (i << 20), 1 << 20));
          q = std::make_unique<AgentQueue>(*app, *h);
        } else {
          client::ContainerOptions o;
          o.provider = provider;
          o.data_path = a->data_path == "explicit"  ? client::DataPath::kExplicit
                        : a->data_path == "message" ? client::DataPath::kMessage
                                                    : client::DataPath::kAuto;
          o.payload_sends_at_once = a->payload_sends;
          auto control = ctx.control();
          auto c = client::Container::open(*control, a->pool, a->cont, o);
          if (!c.is_ok()) {
            r.status = c.status();
            ++ready;
            return;
          }
          cont = std::move(c).value();
          for (uint32_t i = 0; i < a->iodepth && r.status.is_ok(); ++i) {
            if (!heap.empty()) {
              bufs.emplace_back(heap[i]);
              r.status = cont->register_memory(heap[i]);
            } else if (auto m = cont->alloc_memory(*bs); m.is_ok()) {
              bufs.push_back(*m);
            } else {
              r.status = m.status();
            }
          }
          q = std::make_unique<ContainerQueue>(*cont);
        }
        std::mt19937_64 rng(j + 1);
        for (auto& b : bufs)
          for (auto& x : b) x = static_cast<uint8_t>(rng());
        if (!r.status.is_ok()) {
          ++ready;
          return;
        }
        std::vector<std::vector<uint8_t>> big_heap(big.empty() ? std::min<uint32_t>(a->iodepth, 8) : 0,
                                                   std::vector<uint8_t>(1 << 20));
        for (auto& b : big_heap) big.emplace_back(b);
        if (!write) {  // lay the object out with 1 MiB writes, as fio lays out its files
          uint64_t chunk = std::min<uint64_t>(*size, 1 << 20), pos = 0;
          std::atomic<bool> never{false};
          r.status = pump(
              *q, oid, true, chunk, static_cast<uint32_t>(big.size()), big,
              [&] {
                uint64_t p = pos;
                pos += chunk;
                return p;
              },
              never, nullptr, *size / chunk);
        }
        ++ready;
        while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!r.status.is_ok()) return;
        uint64_t seq = 0;
        r.lat_ns.reserve(1 << 20);
        r.status = pump(
            *q, oid, write, *bs, a->iodepth, bufs, [&] { return (rand ? rng() % blocks : seq++ % blocks) * *bs; }, stop,
            &r, max_ops);
        ++finished;
      });
    }
    while (ready.load() < a->numjobs) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto t0 = Clock::now();
    double app_cpu0 = cpu_seconds_of_self(), agent_cpu0 = agent_pid ? cpu_seconds_of(agent_pid) : -1;
    go = true;
    while (std::chrono::duration<double>(Clock::now() - t0).count() < a->runtime_s && finished.load() < a->numjobs) {
      // A run bounded by --io-size ends within 2 ms of its last I/O; one bounded by time needs no finer look.
      std::this_thread::sleep_for(std::chrono::milliseconds(a->io_size == 0 ? 20 : 2));
      bool failed = false;
      for (auto& r : results) failed |= !r.status.is_ok();
      if (failed) break;
    }
    stop = true;
    // CPU over the measured phase: this process (the app) and, through an agent, the agent's.
    double app_cpu = cpu_seconds_of_self() - app_cpu0;
    double agent_cpu = agent_cpu0 >= 0 ? cpu_seconds_of(agent_pid) - agent_cpu0 : -1;
    for (auto& t : threads) t.join();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& r : results)
      if (!ctx.check(r.status, "bench")) return;

    std::vector<uint32_t> lat;
    uint64_t ops = 0;
    for (auto& r : results) {
      ops += r.ops;
      lat.insert(lat.end(), r.lat_ns.begin(), r.lat_ns.end());
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) -> uint64_t {
      return lat.empty() ? 0 : lat[std::min(lat.size() - 1, static_cast<size_t>(p / 100 * lat.size()))];
    };
    double mean = 0;
    for (uint32_t v : lat) mean += v;
    mean = lat.empty() ? 0 : mean / lat.size();
    double iops = ops / secs, bw = ops * double(*bs) / secs;
    std::string used = provider.empty() ? "(pool default)" : provider;

    Result<Ceiling> ceiling = error(StatusCode::kNotSupported, "not asked");
    if (a->ceiling) {
      std::string p = provider;
      if (p.empty()) {
        auto s = ctx.control()->server_info();
        if (s.is_ok()) p = s->provider;
      }
      used = p;
      ceiling = transport_ceiling(p, *bs, a->iodepth, a->ceiling_port);
    }

    const char* dir = write ? "write" : "read";
    double gib = std::max(ops * double(*bs) / (1 << 30), 1e-9), kio = std::max(ops / 1000.0, 1e-9);
    if (a->format == "json") {
      // fio's layout (--output-format=json), so tools that read fio read this too.
      auto side = [&](bool active) {
        nlohmann::ordered_json j = {{"io_bytes", active ? ops * *bs : 0},
                                    {"bw_bytes", active ? bw : 0.0},
                                    {"iops", active ? iops : 0.0},
                                    {"runtime", active ? secs * 1000 : 0.0},
                                    {"total_ios", active ? ops : 0}};
        j["clat_ns"] = {{"min", active ? pct(0) : 0},
                        {"max", active && !lat.empty() ? lat.back() : 0},
                        {"mean", active ? mean : 0.0},
                        {"percentile",
                         {{"1.000000", active ? pct(1) : 0},
                          {"50.000000", active ? pct(50) : 0},
                          {"90.000000", active ? pct(90) : 0},
                          {"99.000000", active ? pct(99) : 0},
                          {"99.900000", active ? pct(99.9) : 0}}}};
        return j;
      };
      nlohmann::ordered_json out = {{"fio version", "rfos-0.1.0"},
                                    {"global options",
                                     {{"rw", a->rw},
                                      {"bs", std::to_string(*bs)},
                                      {"numjobs", std::to_string(a->numjobs)},
                                      {"iodepth", std::to_string(a->iodepth)},
                                      {"provider", used}}},
                                    {"jobs",
                                     {{{"jobname", "rfos-bench"},
                                       {"groupid", 0},
                                       {"error", 0},
                                       {"read", side(!write)},
                                       {"write", side(write)}}}}};
      if (ceiling.is_ok()) {
        nlohmann::ordered_json c = {{"tool", ceiling->tool},
                                    {"msg_rate", ceiling->msg_rate},
                                    {"bw_bytes", ceiling->bw_bytes},
                                    {"ratio_iops", iops / ceiling->msg_rate},
                                    {"ratio_bw", bw / ceiling->bw_bytes}};
        if (ceiling->unhandled_msg_rate > 0)
          c["without_peer_failure_handling"] = {{"msg_rate", ceiling->unhandled_msg_rate},
                                                {"bw_bytes", ceiling->unhandled_bw_bytes},
                                                {"ratio_iops", iops / ceiling->unhandled_msg_rate}};
        out["ceiling"] = std::move(c);
      } else if (a->ceiling) {  // asked for and not had: said, not left out
        out["ceiling"] = {{"error", ceiling.status().to_string()}};
      }
      out["rfos_cpu"] = {{"app_s", app_cpu},
                         {"agent_s", agent_cpu},
                         {"app_s_per_gib", app_cpu / gib},
                         {"app_s_per_kio", app_cpu / kio}};
      if (agent_cpu >= 0) {
        out["rfos_cpu"]["agent_s_per_gib"] = agent_cpu / gib;
        out["rfos_cpu"]["agent_s_per_kio"] = agent_cpu / kio;
      }
      std::printf("%s\n", out.dump().c_str());
      return;
    }
    std::printf("rfos-bench: (g=0): rw=%s, bs=(R) %llu-%llu, provider=%s, iodepth=%u, numjobs=%u\n", a->rw.c_str(),
                (unsigned long long)*bs, (unsigned long long)*bs, used.c_str(), a->iodepth, a->numjobs);
    std::printf("  %s: IOPS=%.1fk, BW=%.1fMiB/s (%.1fMB/s)(%s/%.0fmsec)\n", dir, iops / 1000, bw / 1048576, bw / 1e6,
                human_bytes(ops * *bs).c_str(), secs * 1000);
    std::printf("    clat (usec): min=%.1f, max=%.1f, avg=%.1f\n", pct(0) / 1e3, lat.empty() ? 0 : lat.back() / 1e3,
                mean / 1e3);
    std::printf(
        "    clat percentiles (usec): 1.00th=[%.1f], 50.00th=[%.1f], 90.00th=[%.1f], 99.00th=[%.1f], "
        "99.90th=[%.1f]\n",
        pct(1) / 1e3, pct(50) / 1e3, pct(90) / 1e3, pct(99) / 1e3, pct(99.9) / 1e3);
    std::printf("  cpu: this process %.2f s (%.3f s per GiB, %.4f s per 1k I/Os)", app_cpu, app_cpu / gib,
                app_cpu / kio);
    if (agent_cpu >= 0)
      std::printf(", the agent %.2f s (%.3f s per GiB, %.4f s per 1k I/Os)", agent_cpu, agent_cpu / gib,
                  agent_cpu / kio);
    std::printf("\n");
    if (a->ceiling) {
      if (ceiling.is_ok()) {
        std::printf("  ceiling (%s, %s, %llu B, loopback): %.1fk msg/s, %.1f MiB/s -> ratio IOPS %.2f, BW %.2f\n",
                    ceiling->tool.c_str(), used.c_str(), (unsigned long long)*bs, ceiling->msg_rate / 1000,
                    ceiling->bw_bytes / 1048576, iops / ceiling->msg_rate, bw / ceiling->bw_bytes);
        if (ceiling->unhandled_msg_rate > 0)
          std::printf(
              "  (without peer-failure handling, which a server cannot use: %.1fk msg/s, %.1f MiB/s -> "
              "ratio IOPS %.2f)\n",
              ceiling->unhandled_msg_rate / 1000, ceiling->unhandled_bw_bytes / 1048576,
              iops / ceiling->unhandled_msg_rate);
      } else
        std::printf("  ceiling: %s\n", ceiling.status().to_string().c_str());
    }
  });
}

}  // namespace rfos::cli
