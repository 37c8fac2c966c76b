// The fabrics' own benchmark tools, run as rfos uses each transport, for ceilings: ucx_perftest (ucp_am_bw) for
// the UCX providers, fi_pingpong (RDM, one message in flight) for libfabric's. The one place that runs them and
// reads what they print: `rfos bench --ceiling` and bench/matrix.py (through `rfos bench --ceiling-only`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rfos::cli {

struct ToolFigure {
  double msg_rate = 0;  // messages a second
  double bw_bytes = 0;  // bytes a second
  double p50_us = 0;    // median latency (with threads: the average overhead), microseconds
};

// ucx_perftest's "Final:" line, either layout: one thread (iterations, latency 50th percentile, average and
// overall, bandwidth average and overall in MiB/s, message rate average and overall) or several (iterations,
// overhead, bandwidth, message rate). kInvalidArgument when there is none.
Result<ToolFigure> parse_ucx_perftest(std::string_view out);
// fi_pingpong's result line: bytes, #sent, #ack, total, time, MB/sec (10^6 bytes), usec/xfer, Mxfers/sec.
Result<ToolFigure> parse_fi_pingpong(std::string_view out);

struct Ceiling {
  std::string tool;  // the tool and how it ran, in words
  double msg_rate = 0, bw_bytes = 0, p50_us = 0;
  // ucx+tcp: the same without peer-failure handling (UCP_ERR_HANDLING_MODE_PEER), which rfos's endpoints have
  // and a server cannot do without (0 when not measured).
  double unhandled_msg_rate = 0, unhandled_bw_bytes = 0;
};

// The transport's own figure on loopback for `provider` with `bs`-byte messages and `depth` in flight (UCX),
// its endpoints set up as rfos's (transport/ucx/ucx.h); `port` for the tool's rendezvous (0: from the pid).
// kNotSupported for a provider with no tool here; kNotFound when the tool is not installed.
Result<Ceiling> transport_ceiling(const std::string& provider, uint64_t bs, uint32_t depth, int port = 0);

}  // namespace rfos::cli
