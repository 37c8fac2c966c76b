// Fuzz target for every decoder of bytes the engine reads back from its media: object keys and the
// extent, single-value, container and format records. A decoder must reject or accept, never misbehave,
// and what it accepts must re-encode to an equivalent record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/index/keys.h"

using namespace rfos::engine::index;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ObjectKey k;
  if (parse_object_key(in, &k) && k.level == 2 && k.akey.empty()) std::abort();
  ExtentRecord e;
  if (decode_extent(in, &e)) {
    ExtentRecord again;
    if (!decode_extent(encode_extent(e), &again) || again.length != e.length || again.runs != e.runs ||
        again.csums != e.csums || again.inline_data != e.inline_data)
      std::abort();
  }
  SingleRecord s;
  if (decode_single(in, &s) && s.data.size() + 9 != size) std::abort();
  ContRecord c;
  if (decode_cont(in, &c)) {
    // A record from before the punch flag re-encodes one byte longer.
    std::string again = encode_cont(c);
    if (again != in && (again.size() != in.size() + 1 || again.compare(0, in.size(), in) != 0 || !c.has_punches))
      std::abort();
  }
  FormatRecord f;
  if (decode_format(in, &f) && encode_format(f) != in) std::abort();
  return 0;
}
