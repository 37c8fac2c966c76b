// What is particular to the UCX providers (ucx+tcp, ucx+shm, ucx+rc, ucx+dc_x, ucx+ud), for the UCX worker and
// for tools that measure UCX the way rfos uses it (rfos bench --ceiling). Layers above the transport need none
// of it.
#pragma once

#include <string_view>

namespace rfos::transport {

// Whether UCX endpoints for `provider` detect a dead peer (UCP_ERR_HANDLING_MODE_PEER, which UCX documents as
// turning off the protocols that could hang on one: on tcp the zero-copy rendezvous lanes): every UCX transport
// but shared memory, which cannot in UCX 1.13. A tool measuring the transport for rfos (rfos bench --ceiling)
// sets its endpoints up the same way.
bool ucx_detects_peer_failure(std::string_view provider);

// UCX's transports (UCX_TLS) for a `ucx+...` provider string, nullptr for one UCX does not provide. Also what
// a tool measuring the transport for rfos (rfos bench --ceiling) runs on.
const char* ucx_transports(std::string_view provider);

}  // namespace rfos::transport
