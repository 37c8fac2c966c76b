// Remote keys a peer sent (packed), unpacked once per endpoint and kept for its next gets and puts. Keys that
// UCX would serve through a shared-memory mapping in this process are refused (see get()). Bounded: clients
// register once, so the cache rarely turns over; when full it starts over.
//
// Thread-safety: the worker's thread.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rfos::transport::ucx {

class RemoteKeys {
 public:
  RemoteKeys() = default;
  ~RemoteKeys();
  RemoteKeys(const RemoteKeys&) = delete;
  RemoteKeys& operator=(const RemoteKeys&) = delete;

  // The key `packed` as endpoint `ep` (handle `h`) can use it. kIoError for a malformed key;
  // kPermissionDenied for one naming a shared-memory segment.
  Result<ucp_rkey_h> get(uint64_t h, ucp_ep_h ep, std::string_view packed);
  // Drops the keys of endpoint `h` (it failed or closed).
  void forget(uint64_t h);
  void clear();

 private:
  static constexpr size_t kMax = 4096;
  std::map<std::pair<uint64_t, std::string>, ucp_rkey_h> keys_;
};

}  // namespace rfos::transport::ucx
