// The C API's calls on values, keys, scatter-gather, extents and snapshots, checked the same way against an
// open container whichever mode it is in: in-process (c_api_test) or through the agent (agent_test).
#pragma once

#include "rfos/rfos.h"

namespace rfos::testing {

// `cont` is open for writing in pool/cont of `client`, which has no snapshot of it yet; leaves none behind.
void check_keys_and_snapshots(rfos_client_t* client, rfos_cont_t* cont, const char* pool, const char* cont_label);

}  // namespace rfos::testing
