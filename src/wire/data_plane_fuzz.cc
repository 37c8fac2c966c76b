// Fuzz target: data-plane request and reply headers, key pages and extent pages arrive from the network.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "wire/data_plane.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto q = rfos::wire::decode_request(in);
  if (q.is_ok() && rfos::wire::encode_request(*q) != in) std::abort();  // accepted means canonical
  auto p = rfos::wire::decode_reply(in);
  if (p.is_ok() && rfos::wire::encode_reply(*p) != in) std::abort();
  auto k = rfos::wire::decode_key_page(in);
  if (k.is_ok() && rfos::wire::encode_key_page(*k) != in) std::abort();
  auto e = rfos::wire::decode_extent_page(in);
  if (e.is_ok() && rfos::wire::encode_extent_page(*e) != in) std::abort();
  return 0;
}
