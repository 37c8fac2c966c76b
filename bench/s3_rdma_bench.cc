// The S3 gateway's RDMA path against the native client, in one process and one run (docs/BENCHMARKS.md):
// put_from / get_into through `rfos s3` (the targets move the bytes to and from this process's registered buffer)
// beside, on a handle of this process and the same registered buffer:
//   - "direct": the ceiling: the same pieces of a file-like object written and read by this process on the
//     explicit path (the targets reading from and writing into the same buffer one-sidedly, 16 pieces in flight,
//     the same checksums, computed and verified here instead of on the targets), no HTTP, no gateway, no grant;
//   - "named": NamedObjects put / get of the buffer (what `rfos put` and `rfos get` do: messages, staged copies);
//   - "agent" (with AGENT_SOCK): put_from / get_into through `rfos agent`, the targets moving the app's shared
//     buffer, lent by the agent's session (the offloaded client).
// Alternating, per rep.
//
//   s3_rdma_bench HOST:PORT ACCESS_KEY SECRET_KEY POOL BUCKET SIZE_MIB REPS [PROVIDER [AGENT_SOCK]]
//
// The server is $RFOS_ADDR (or the local socket); the bucket must exist. Prints MB/s medians and the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_client.h"
#include "client/container.h"
#include "client/control_client.h"
#include "client/file_layout.h"
#include "client/named_objects.h"
#include "s3/rdma_client.h"

using namespace rfos;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "s3_rdma_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s HOST:PORT ACCESS_KEY SECRET_KEY POOL BUCKET SIZE_MIB REPS [PROVIDER]\n", argv[0]);
    return 2;
  }
  const std::string hostport = argv[1], pool = argv[4], bucket = argv[5];
  const size_t size = std::stoull(argv[6]) << 20;
  const int reps = std::stoi(argv[7]);
  s3::S3Endpoint e;
  e.host = hostport.substr(0, hostport.rfind(':'));
  e.port = static_cast<uint16_t>(std::stoi(hostport.substr(hostport.rfind(':') + 1)));
  e.access_key = argv[2];
  e.secret_key = argv[3];
  auto control = client::ControlClient::create(client::default_control_address());
  client::ContainerOptions o;
  if (argc > 8) o.provider = argv[8];
  auto c = client::Container::open(*control, pool, bucket, o);
  if (!c.is_ok()) return fail("open " + bucket, c.status());
  client::Container& cont = **c;
  // The buffer is registered once, as an application's (GPU) buffer would be.
  auto mem = cont.alloc_memory(size);
  if (!mem.is_ok()) return fail("alloc_memory", mem.status());
  std::span<uint8_t> buf = *mem;
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(buf.data() + i, &v, 8);
  }
  const std::vector<uint8_t> want(buf.begin(), buf.end());
  s3::RdmaClient rdma(cont, e);
  client::NamedObjects objects(cont);
  // Through the agent: its shared buffer holds the same bytes.
  std::unique_ptr<agent::AgentClient> app;
  std::unique_ptr<s3::RdmaClient> offloaded;
  if (argc > 9) {
    agent::AgentClientOptions ao;
    ao.buffer_bytes = size;
    ao.entries = 16;
    auto a = agent::AgentClient::connect(argv[9], ao);
    if (!a.is_ok()) return fail("connect to the agent", a.status());
    app = std::move(a).value();
    auto h = app->open(pool, bucket, false);
    if (!h.is_ok()) return fail("open " + bucket + " through the agent", h.status());
    std::memcpy(app->buffer().data(), want.data(), size);
    offloaded = std::make_unique<s3::RdmaClient>(s3::lender_of(*app, *h), e);
  }
  std::map<std::string, std::vector<double>> mbps;
  const ObjectId direct_oid = client::NamedObjects::fresh_data_object();
  const uint64_t chunk = client::layout::chunk_bytes(cont.session().cont.props.chunk_bytes);
  auto direct = [&](bool write) -> Status {
    cont.set_data_path(client::DataPath::kExplicit);
    std::set<client::Ticket> in_flight;
    Status s;
    for (size_t next = 0; s.is_ok() && (next < size || !in_flight.empty());) {
      while (in_flight.size() < 16 && next < size) {
        const size_t len =
            std::min<size_t>(client::layout::piece_length(chunk, next, size - next), client::kMaxIoBytes);
        const std::string dkey = client::layout::chunk_key(next / chunk);
        auto t = write ? cont.submit_write(direct_oid, dkey, client::layout::kDataAkey, next, buf.subspan(next, len))
                       : cont.submit_read(direct_oid, dkey, client::layout::kDataAkey, next, buf.subspan(next, len));
        if (!t.is_ok()) return t.status();
        in_flight.insert(*t);
        next += len;
      }
      for (const client::Completion& c : cont.poll(16, 100)) {
        in_flight.erase(c.ticket);
        if (!c.status.is_ok()) s = c.status;
      }
    }
    while (!in_flight.empty())
      for (const client::Completion& c : cont.poll(16, 100)) in_flight.erase(c.ticket);
    cont.set_data_path(client::DataPath::kAuto);
    return s;
  };
  using Clock = std::chrono::steady_clock;
  auto timed = [&](const std::string& name, const std::function<Status()>& f) -> Status {
    auto t = Clock::now();
    Status s = f();
    double secs = std::chrono::duration<double>(Clock::now() - t).count();
    if (s.is_ok()) mbps[name].push_back(size / secs / 1e6);
    return s;
  };
  for (int rep = 0; rep < reps; ++rep) {
    Status s = timed("direct put", [&] { return direct(true); });
    if (!s.is_ok()) return fail("direct put", s);
    std::memset(buf.data(), 0, size);
    s = timed("direct get", [&] { return direct(false); });
    if (!s.is_ok()) return fail("direct get", s);
    if (!std::equal(want.begin(), want.end(), buf.begin()))
      return fail("direct get", error(StatusCode::kCorruption, "bytes differ"));
    s = timed("named put", [&] {
      size_t at = 0;
      return objects.put("native", [&](std::span<uint8_t> b) -> Result<size_t> {
        size_t n = std::min(b.size(), size - at);
        std::memcpy(b.data(), buf.data() + at, n);
        at += n;
        return n;
      });
    });
    if (!s.is_ok()) return fail("named put", s);
    s = timed("named get", [&] {
      size_t at = 0;
      return objects.get("native", [&](std::span<const uint8_t> b) {
        std::memcpy(buf.data() + at, b.data(), b.size());
        at += b.size();
        return Status::ok();
      });
    });
    if (!s.is_ok()) return fail("named get", s);
    s = timed("rdma put", [&] { return rdma.put_from(bucket, "rdma", buf).status(); });
    if (!s.is_ok()) return fail("rdma put", s);
    std::memset(buf.data(), 0, size);
    s = timed("rdma get", [&] {
      auto n = rdma.get_into(bucket, "rdma", buf);
      if (n.is_ok() && *n != size) return error(StatusCode::kInternal, "short");
      return n.status();
    });
    if (!s.is_ok()) return fail("rdma get", s);
    if (!std::equal(want.begin(), want.end(), buf.begin()))
      return fail("rdma get", error(StatusCode::kCorruption, "bytes differ"));
    if (!offloaded) continue;
    std::span<uint8_t> shared = app->buffer().subspan(0, size);
    s = timed("agent put", [&] { return offloaded->put_from(bucket, "agent", shared).status(); });
    if (!s.is_ok()) return fail("agent put", s);
    std::memset(shared.data(), 0, size);
    s = timed("agent get", [&] {
      auto n = offloaded->get_into(bucket, "agent", shared);
      if (n.is_ok() && *n != size) return error(StatusCode::kInternal, "short");
      return n.status();
    });
    if (!s.is_ok()) return fail("agent get", s);
    if (!std::equal(want.begin(), want.end(), shared.begin()))
      return fail("agent get", error(StatusCode::kCorruption, "bytes differ"));
  }
  std::printf("%s, %zu MiB objects, %d reps (medians, MB/s):\n",
              o.provider.empty() ? "pool's provider" : o.provider.c_str(), size >> 20, reps);
  for (const auto& [k, v] : mbps) {
    std::printf("  %-11s %8.1f   (", k.c_str(), median(v));
    for (double x : v) std::printf(" %.0f", x);
    std::printf(" )\n");
  }
  std::printf("  rdma / direct (the ceiling): put %.2f, get %.2f\n",
              median(mbps["rdma put"]) / median(mbps["direct put"]),
              median(mbps["rdma get"]) / median(mbps["direct get"]));
  if (offloaded)
    std::printf("  agent / direct: put %.2f, get %.2f\n", median(mbps["agent put"]) / median(mbps["direct put"]),
                median(mbps["agent get"]) / median(mbps["direct get"]));
  return 0;
}
