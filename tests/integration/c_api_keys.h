// The C API's calls on values, keys, scatter-gather, extents and snapshots, checked the same way against an
// open container whichever mode it is in: in-process (c_api_test) or through the agent (agent_test).
#pragma once

#include <string>
#include <vector>

#include "rfos/rfos.h"
#include "rfos/rfos_fs.h"

namespace rfos::testing {

// `cont` is open for writing in pool/cont of `client`, which has no snapshot of it yet; leaves none behind.
void check_keys_and_snapshots(rfos_client_t* client, rfos_cont_t* cont, const char* pool, const char* cont_label);

// What each of a list of calls at the edges (empty, missing, too large, out of range, the wrong kind) answers on
// `cont`, open for writing, with objects of ids lo + 1.. of its own: one line per call, to be the same in every
// mode (agent_test compares in-process and through the agent).
std::vector<std::string> c_api_edge_outcomes(rfos_cont_t* cont, uint64_t lo);
// The same for the namespace calls (rfos_fs_*) under directory `top` (absolute, not there yet).
std::vector<std::string> c_api_fs_edge_outcomes(rfos_fs_t* fs, const std::string& top);

}  // namespace rfos::testing
