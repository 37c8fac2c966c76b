// Loopback only: tests and benchmarks send traffic to 127.0.0.1 and pin the fabrics to `lo`.
#pragma once

#include <cstdlib>

namespace rfos::testing {

inline void pin_fabrics_to_loopback() {
  setenv("UCX_NET_DEVICES", "lo", 0);
  setenv("FI_TCP_IFACE", "lo", 0);
  setenv("FI_NET_IFACE", "lo", 0);
}

}  // namespace rfos::testing
