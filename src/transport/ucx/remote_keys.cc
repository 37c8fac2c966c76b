#include "transport/ucx/remote_keys.h"

#include "transport/ucx/ucx_common.h"

namespace rfos::transport::ucx {

RemoteKeys::~RemoteKeys() { clear(); }

void RemoteKeys::clear() {
  for (auto& [_, rk] : keys_) ucp_rkey_destroy(rk);
  keys_.clear();
}

Result<ucp_rkey_h> RemoteKeys::get(uint64_t h, ucp_ep_h ep, std::string_view packed) {
  auto key = std::make_pair(h, std::string(packed));
  auto it = keys_.find(key);
  if (it != keys_.end()) return it->second;
  if (keys_.size() >= kMax) clear();
  ucp_rkey_h rk = nullptr;
  ucs_status_t s = ucp_ep_rkey_unpack(ep, packed.data(), &rk);
  if (s != UCS_OK) return ucs_error(s, "malformed remote key");
  // A key UCX would serve through a mapping in this process (its shared-memory transports: sysv, posix) is
  // refused. Over such a key this worker's own CPU copies into or out of the segment the key names, at the
  // offset the peer gives, and UCX checks neither that the range lies inside the segment nor whose segment it
  // is: a peer could have this process write into its own memory or read another peer's. The keys rfos
  // clients send are of memory they registered (register_memory, alloc_memory), which UCX's shared-memory
  // transports reach by messages the owner serves, and which RDMA NICs check.
  void* mapped = nullptr;
  if (ucp_rkey_ptr(rk, 0, &mapped) == UCS_OK) {
    ucp_rkey_destroy(rk);
    return error(StatusCode::kPermissionDenied,
                 "the remote key names a shared-memory segment, which this server does not map for peers");
  }
  keys_.emplace(std::move(key), rk);
  return rk;
}

void RemoteKeys::forget(uint64_t ep) {
  for (auto it = keys_.lower_bound({ep, std::string()}); it != keys_.end() && it->first.first == ep;) {
    ucp_rkey_destroy(it->second);
    it = keys_.erase(it);
  }
}

}  // namespace rfos::transport::ucx
