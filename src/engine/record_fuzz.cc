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

extern "C" {
uint64_t rfos_fuzz_accepted = 0;  // inputs some decoder accepted (tests/fuzz_main.cc)
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ObjectKey k;
  bool any = parse_object_key(in, &k);
  if (any && k.level == 2 && k.akey.empty()) std::abort();
  ExtentRecord e;
  if (decode_extent(in, &e)) {
    any = true;
    ExtentRecord again;
    if (!decode_extent(encode_extent(e), &again) || again.length != e.length || again.runs != e.runs ||
        again.csums != e.csums || again.inline_data != e.inline_data)
      std::abort();
  }
  SingleRecord s;
  if (decode_single(in, &s) && s.data.size() + 9 != size) std::abort();
  ContRecord c;
  any |= decode_single(in, &s);
  if (decode_cont(in, &c)) {
    any = true;
    // A record from before the punch flag re-encodes one byte longer.
    std::string again = encode_cont(c);
    if (again != in && (again.size() != in.size() + 1 || again.compare(0, in.size(), in) != 0 || !c.has_punches))
      std::abort();
  }
  FormatRecord f;
  if (decode_format(in, &f) && encode_format(f) != in) std::abort();
  any |= decode_format(in, &f);
  rfos_fuzz_accepted += any;
  return 0;
}

// Valid keys and records: the stand-in driver's corpus (tests/fuzz/corpus/engine_record_fuzz).
extern "C" void rfos_fuzz_seeds(void (*emit)(void*, const char*, const uint8_t*, size_t), void* ctx) {
  auto out = [&](const std::string& name, const std::string& bytes) {
    emit(ctx, name.c_str(), reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  ExtentRecord e;
  e.length = 8192;
  e.csum_chunk_bytes = 4096;
  e.csums = {1, 2};
  e.runs = {{10, 2}};
  out("extent", encode_extent(e));
  e.runs = {{10, 1}, {40, 1}};
  out("extent-two-runs", encode_extent(e));
  ExtentRecord in_record;
  in_record.flags = ExtentRecord::kInline;
  in_record.length = 5;
  in_record.csum_chunk_bytes = 4096;
  in_record.csums = {3};
  in_record.inline_data = "hello";
  out("extent-inline", encode_extent(in_record));
  ExtentRecord hole;
  hole.flags = ExtentRecord::kHole;
  hole.length = 4096;
  out("extent-hole", encode_extent(hole));
  out("single", encode_single(42, "a single value"));
  out("cont", encode_cont({3, 4096, true, 99, true}));
  out("cont-no-punches", encode_cont({4, 65536, false, 0, false}));
  out("format", encode_format({1, 4096, 1 << 18, rfos::Uuid::random()}));
  // Object-record keys: an object punch, a dkey punch, a single value, an extent.
  std::string k = object_prefix(7, {1, 2});
  std::string punch = k + std::string(1, kPunchTag);
  append_version(&punch, 5, 6);
  out("key-object-punch", punch);
  append_dkey(&k, "dkey");
  std::string dpunch = k + std::string(1, kPunchTag);
  append_version(&dpunch, 5, 6);
  out("key-dkey-punch", dpunch);
  append_akey(&k, "akey");
  std::string single = k + std::string(1, kSingleTag);
  append_version(&single, 9, 10);
  out("key-single", single);
  std::string extent = k;
  append_extent_start(&extent, 1 << 20);
  append_version(&extent, 11, 12);
  out("key-extent", extent);
  // The same single value under an object of ordered dkeys (its dkey NUL-terminated).
  std::string ordered = object_prefix(7, {rfos::ObjectId::kOrderedDkeys | 1, 2});
  append_dkey(&ordered, "dkey");
  append_akey(&ordered, "akey");
  ordered.push_back(kSingleTag);
  append_version(&ordered, 9, 10);
  out("key-single-ordered", ordered);
}
