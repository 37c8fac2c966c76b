// Fuzz target: capability tokens arrive from the network with every data-plane request.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "wire/capability.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  static const uint8_t kKey[32] = {1, 2, 3};
  auto decoded = rfos::wire::decode_capability(in);
  auto verified = rfos::wire::verify_capability(in, kKey, 0);
  // A token can only verify if it decodes; a random one verifying would mean a broken MAC check.
  if (verified.is_ok() && !decoded.is_ok()) std::abort();
  if (verified.is_ok() && rfos::wire::encode_capability(*verified, kKey) != in) std::abort();
  return 0;
}
