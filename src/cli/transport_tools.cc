#include "cli/transport_tools.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "transport/ucx/ucx.h"

namespace rfos::cli {

namespace {

std::vector<double> numbers(std::string_view line) {
  std::vector<double> v;
  static const std::regex number(R"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)");
  std::string s(line);
  for (auto it = std::sregex_iterator(s.begin(), s.end(), number); it != std::sregex_iterator(); ++it)
    v.push_back(std::strtod(it->str().c_str(), nullptr));
  return v;
}

std::vector<std::string_view> lines(std::string_view out) {
  std::vector<std::string_view> v;
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    if (end == std::string_view::npos) end = out.size();
    v.push_back(out.substr(at, end - at));
    at = end + 1;
  }
  return v;
}

// Runs a two-sided tool on loopback: a server copy in the background, then the client; returns the client's
// output. The tools say nothing when they listen: the client starts half a second after the server.
Result<std::string> run_pair(const std::string& env, const std::string& tool, const std::string& server_args,
                             const std::string& client_args, const std::string& install) {
  if (std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) != 0)
    return error(StatusCode::kNotFound, tool + " is not installed (apt-get install " + install + ")");
  std::string server = env + "timeout 120 " + tool + server_args + " >/dev/null 2>&1 &";
  if (std::system(server.c_str()) != 0) return error(StatusCode::kInternal, "cannot start " + tool);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  FILE* p = popen((env + "timeout 120 " + tool + client_args + " 127.0.0.1 2>&1").c_str(), "r");
  std::string out;
  char line[512];
  while (p && fgets(line, sizeof(line), p)) out += line;
  if (p) pclose(p);
  return out;
}

}  // namespace

Result<ToolFigure> parse_ucx_perftest(std::string_view out) {
  for (std::string_view l : lines(out)) {
    if (l.rfind("Final:", 0) != 0) continue;
    std::vector<double> v = numbers(l.substr(6));
    if (v.size() >= 8 && v[7] > 0) return ToolFigure{v[7], v[5] * 1024 * 1024, v[1]};  // its MB are MiB
    if (v.size() == 4 && v[3] > 0) return ToolFigure{v[3], v[2] * 1024 * 1024, v[1]};  // several threads (-T)
  }
  return error(StatusCode::kInvalidArgument, "no Final: line in ucx_perftest's output");
}

Result<ToolFigure> parse_fi_pingpong(std::string_view out) {
  static const std::regex size(R"(\d+[kmg]?)");
  for (std::string_view l : lines(out)) {
    std::istringstream in{std::string(l)};
    std::vector<std::string> f{std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
    if (f.size() < 8 || !std::regex_match(f[0], size) || f[2].empty() || f[2][0] != '=') continue;
    double mbs = std::strtod(f[5].c_str(), nullptr), usec = std::strtod(f[6].c_str(), nullptr);
    if (usec <= 0) continue;
    return ToolFigure{1e6 / usec, mbs * 1e6, usec};
  }
  return error(StatusCode::kInvalidArgument, "no result line in fi_pingpong's output");
}

// fi_pingpong stands for libfabric, which Debian ships without fabtests' bandwidth tests: a ping-pong is one
// message in flight, so at depth > 1 rfos may beat it (ratio above 1), and it is shown, not taken as a ceiling.
Result<Ceiling> transport_ceiling(const std::string& provider, uint64_t bs, uint32_t depth, int port) {
  if (port == 0) port = 20000 + static_cast<int>(getpid() % 20000);
  std::string p = std::to_string(port);
  if (provider.rfind("ofi+", 0) == 0) {
    const char* prov = provider == "ofi+tcp" ? "tcp;ofi_rxm" : provider == "ofi+shm" ? "shm" : nullptr;
    if (!prov) return error(StatusCode::kNotSupported, "no fi_pingpong ceiling for " + provider);
    std::string env = "FI_TCP_IFACE=${FI_TCP_IFACE:-lo} FI_NET_IFACE=${FI_NET_IFACE:-lo} ";
    std::string args = std::string(" -p '") + prov + "' -e rdm -S " + std::to_string(bs) + " -I " +
                       (bs >= (1 << 20) ? "500" : "20000");
    RFOS_ASSIGN_OR_RETURN(std::string out,
                          run_pair(env, "fi_pingpong", args + " -B " + p, args + " -P " + p, "libfabric-bin"));
    RFOS_ASSIGN_OR_RETURN(ToolFigure f, parse_fi_pingpong(out));
    return Ceiling{"fi_pingpong rdm, depth 1", f.msg_rate, f.bw_bytes, f.p50_us};
  }
  // UCX's transports as rfos's workers pick them (transport/ucx/ucx.h); the verbs ones need RDMA hardware.
  const char* tls = provider == "ucx+tcp" || provider == "ucx+shm" ? transport::ucx_transports(provider) : nullptr;
  if (!tls) return error(StatusCode::kNotSupported, "no ucx_perftest ceiling for " + provider);
  std::string env = std::string("UCX_TLS=") + tls + " UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} ";
  std::string args = " -p " + p + " -t ucp_am_bw -s " + std::to_string(bs) + " -O " +
                     std::to_string(std::max<uint32_t>(depth, 1)) + " -n " + (bs >= (1 << 20) ? "2000" : "100000");
  auto perftest = [&](const std::string& a) -> Result<ToolFigure> {
    RFOS_ASSIGN_OR_RETURN(std::string out, run_pair(env, "ucx_perftest", a, a, "ucx-utils"));
    return parse_ucx_perftest(out);
  };
  // Endpoints like rfos's: with peer-failure handling (-e) where rfos's detect a dead peer (on tcp the receiver
  // then copies every payload), without it on shm, which cannot.
  if (!transport::ucx_detects_peer_failure(provider)) {
    RFOS_ASSIGN_OR_RETURN(ToolFigure plain, perftest(args));
    return Ceiling{"ucx_perftest ucp_am_bw", plain.msg_rate, plain.bw_bytes, plain.p50_us};
  }
  RFOS_ASSIGN_OR_RETURN(ToolFigure handled, perftest(args + " -e"));
  RFOS_ASSIGN_OR_RETURN(ToolFigure unhandled, perftest(args));
  return Ceiling{"ucx_perftest ucp_am_bw -e", handled.msg_rate,  handled.bw_bytes, handled.p50_us,
                 unhandled.msg_rate,          unhandled.bw_bytes};
}

}  // namespace rfos::cli
