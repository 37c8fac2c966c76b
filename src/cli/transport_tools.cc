#include "cli/transport_tools.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "transport/ucx/ucx.h"

namespace rfos::cli {

namespace {

// The whitespace-separated fields of `line` that are numbers, "inf" and "nan" included: ucx_perftest prints
// "inf" in a column whose interval measured nothing, and skipping it would shift every column after it.
std::vector<double> numbers(std::string_view line) {
  std::vector<double> v;
  std::istringstream in{std::string(line)};
  for (std::string field; in >> field;) {
    char* end = nullptr;
    double x = std::strtod(field.c_str(), &end);
    if (end == field.c_str() + field.size()) v.push_back(x);
  }
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

// Whether some socket listens on TCP `port` (any address, v4 or v6): the tools below all listen on their
// rendezvous port before they do anything else.
bool listening(int port) {
  char want[8];
  std::snprintf(want, sizeof(want), ":%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string local, remote, state, line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      f >> state >> local >> remote >> state;  // "sl", then the local and remote address, then the state
      if (state == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0) return true;
    }
  }
  return false;
}

// Runs a two-sided tool on loopback: a server copy, then, once it listens on `port`, the client; returns the
// client's output. The server is waited for (or stopped, if the client failed) before this returns, so the next
// pair may use the same port.
Result<std::string> run_pair(const std::string& env, const std::string& tool, int port, const std::string& server_args,
                             const std::string& client_args, const std::string& install) {
  if (std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) != 0)
    return error(StatusCode::kNotFound, tool + " is not installed (apt-get install " + install + ")");
  if (listening(port)) return error(StatusCode::kBusy, "port " + std::to_string(port) + " is taken");
  std::string server = "exec env " + env + "timeout 120 " + tool + server_args + " >/dev/null 2>&1";
  const char* argv[] = {"/bin/sh", "-c", server.c_str(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
    return error(StatusCode::kInternal, "cannot start " + tool);
  auto reap = [&](bool stop) {
    if (stop) kill(pid, SIGTERM);  // timeout passes it on to the tool
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  };
  // Polled, bounded: a loaded machine may take seconds to start it.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!listening(port)) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return error(StatusCode::kInternal,
                   tool + "'s server side exited before it listened on port " + std::to_string(port));
    if (std::chrono::steady_clock::now() > deadline) {
      reap(true);
      return error(StatusCode::kTimeout,
                   tool + "'s server side did not listen on port " + std::to_string(port) + " within 60 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FILE* p = popen((env + "timeout 120 " + tool + client_args + " 127.0.0.1 2>&1").c_str(), "r");
  std::string out;
  char line[512];
  while (p && fgets(line, sizeof(line), p)) out += line;
  int rc = p ? pclose(p) : -1;
  reap(rc != 0);
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
                          run_pair(env, "fi_pingpong", port, args + " -B " + p, args + " -P " + p, "libfabric-bin"));
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
    RFOS_ASSIGN_OR_RETURN(std::string out, run_pair(env, "ucx_perftest", port, a, a, "ucx-utils"));
    Result<ToolFigure> f = parse_ucx_perftest(out);
    if (!f.is_ok())
      return error(f.status().code(),
                   f.status().message() + ": " + out.substr(out.size() - std::min<size_t>(out.size(), 400)));
    return f;
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
