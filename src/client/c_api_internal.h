// What the C API's handles hold, shared by its parts (client/c_api.cc, posix/c_api_fs.cc).
#pragma once

#include <memory>
#include <string>

#include "client/control_client.h"
#include "common/status.h"

struct rfos_client {
  std::unique_ptr<rfos::client::ControlClient> control;  // in agent mode relayed by the agent (snapshots)
  std::string agent_socket;                              // agent mode: the agent's socket (rfos_connect "agent://")
  uint32_t timeout_ms = 0;
};

namespace rfos::client::c_api {

// Keeps `s` as the calling thread's last error and returns its negative errno.
int fail(const Status& s);
// A NULL argument: the last error says which, and the caller returns -EINVAL.
bool bad(const void* p, const char* what);

}  // namespace rfos::client::c_api
