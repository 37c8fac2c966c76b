// Fuzz target for the capability token decoder and verifier (bytes every data-plane request brings from outside).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "wire/capability.h"

namespace {
const uint8_t kKey[32] = {1, 2, 3};
}

extern "C" {
uint64_t rfos_fuzz_accepted = 0;  // inputs some decoder accepted (tests/fuzz_main.cc)
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto decoded = rfos::wire::decode_capability(in);
  auto verified = rfos::wire::verify_capability(in, kKey, 0);
  if (decoded.is_ok()) ++rfos_fuzz_accepted;
  // A token can only verify if it decodes; a random one verifying would mean a broken MAC check.
  if (verified.is_ok() && !decoded.is_ok()) std::abort();
  if (verified.is_ok() && rfos::wire::encode_capability(*verified, kKey) != in) std::abort();
  return 0;
}

// Valid tokens signed with kKey: the stand-in driver's corpus (tests/fuzz/corpus/capability_fuzz).
extern "C" void rfos_fuzz_seeds(void (*emit)(void*, const char*, const uint8_t*, size_t), void* ctx) {
  int n = 0;
  for (uint8_t rights :
       {rfos::wire::Capability::kRead, uint8_t(rfos::wire::Capability::kRead | rfos::wire::Capability::kWrite)})
    for (uint64_t expires : {uint64_t{1}, uint64_t{1} << 40, UINT64_MAX})
      for (bool qos : {false, true}) {  // version 1, and version 2 with a tenant's limits
        rfos::wire::Capability c;
        c.session = rfos::Uuid::random();
        c.pool = rfos::Uuid::random();
        c.cont = rfos::Uuid::random();
        c.rights = rights;
        c.expires_unix_ms = expires;
        if (qos) c.qos = {rfos::wire::qos_key_of("t"), 5000, 0, uint64_t{1} << 30, 0};
        std::string t = rfos::wire::encode_capability(c, kKey);
        std::string name = "token-" + std::to_string(n++);
        emit(ctx, name.c_str(), reinterpret_cast<const uint8_t*>(t.data()), t.size());
      }
}
