// What the UCX provider's parts share: UCX's status codes as rfos's, and the lock UCX's set-up needs.
#pragma once

#include <ucp/api/ucp.h>

#include <mutex>
#include <string>

#include "common/status.h"

namespace rfos::transport::ucx {

Status ucs_error(ucs_status_t s, const std::string& what);

// UCX 1.13 sets a context and a worker up under locks of its memory hooks (ucm) taken in different orders on
// different paths (ucs_rcache_create installing an event handler; ucs_sysv_alloc's shmat, which the hooks
// intercept): sixteen threads opening workers at once (rfos bench --numjobs 16 over ucx+shm) deadlocked in
// them. Contexts and workers are made and closed one at a time per process; it costs nothing afterwards.
std::mutex& ucx_setup_mutex();

}  // namespace rfos::transport::ucx
