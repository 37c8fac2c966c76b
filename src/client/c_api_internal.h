// What the C API's handles hold, shared by its parts (client/c_api.cc, posix/c_api_fs.cc, s3/c_api_s3.cc).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_client.h"
#include "client/container.h"
#include "client/control_client.h"
#include "common/status.h"

struct rfos_client {
  std::unique_ptr<rfos::client::ControlClient> control;  // in agent mode relayed by the agent (snapshots)
  std::string agent_socket;                              // agent mode: the agent's socket (rfos_connect "agent://")
  uint32_t timeout_ms = 0;
};

// In agent mode (rfos_connect("agent:///path")) a container handle is a connection to the agent with its ring and
// shared buffer: the buffer's first kStagingSlots MiB carry the bytes of I/O from memory outside it (a copy),
// the rest is what rfos_alloc hands out (no copy).
struct rfos_cont {
  std::unique_ptr<rfos::client::Container> cont;
  std::unique_ptr<rfos::agent::AgentClient> agent;
  uint32_t handle = 0;
  uint64_t next_ticket = 1;
  std::map<size_t, size_t> free_ranges;  // of the shared buffer past the staging slots: offset -> length
  std::map<size_t, size_t> allocated;    // offset -> length
  // Agent mode, as in-process: submitted I/O in flight per allocation (rfos_free waits for its own only), and
  // the buffers rfos_register named (a hint there: other memory is copied through the shared buffer).
  std::map<uint64_t, std::vector<size_t>> submitted;  // ticket -> the allocations holding its buffer
  std::map<size_t, size_t> in_flight;                 // allocation -> submissions not polled yet
  std::map<const void*, size_t> registered;           // start -> length
};

namespace rfos::client::c_api {

// Keeps `s` as the calling thread's last error and returns its negative errno.
int fail(const Status& s);
// A NULL argument: the last error says which, and the caller returns -EINVAL.
bool bad(const void* p, const char* what);

}  // namespace rfos::client::c_api
