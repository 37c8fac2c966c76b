// Fuzz target for the data-plane decoders: requests (what a target reads from any peer), replies, key pages,
// extent pages and object pages (what a client reads from a target). Whatever a decoder accepts must re-encode to the
// same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "wire/data_plane.h"

extern "C" {
uint64_t rfos_fuzz_accepted = 0;  // inputs some decoder accepted (tests/fuzz_main.cc)
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  bool any = false;
  auto q = rfos::wire::decode_request(in);
  if (q.is_ok() && rfos::wire::encode_request(*q) != in) std::abort();  // accepted means canonical
  // The id a refusal goes back under is the one the request carried.
  if (q.is_ok() && rfos::wire::request_id_of(in) != q->request_id) std::abort();
  any |= q.is_ok();
  auto p = rfos::wire::decode_reply(in);
  if (p.is_ok() && rfos::wire::encode_reply(*p) != in) std::abort();
  any |= p.is_ok();
  auto k = rfos::wire::decode_key_page(in);
  if (k.is_ok() && rfos::wire::encode_key_page(*k) != in) std::abort();
  any |= k.is_ok();
  auto e = rfos::wire::decode_extent_page(in);
  if (e.is_ok() && rfos::wire::encode_extent_page(*e) != in) std::abort();
  any |= e.is_ok();
  auto o = rfos::wire::decode_object_page(in);
  if (o.is_ok() && rfos::wire::encode_object_page(*o) != in) std::abort();
  any |= o.is_ok();
  rfos_fuzz_accepted += any;
  return 0;
}

// Valid messages of every kind: the stand-in driver's corpus (tests/fuzz/corpus/data_plane_fuzz).
extern "C" void rfos_fuzz_seeds(void (*emit)(void*, const char*, const uint8_t*, size_t), void* ctx) {
  using namespace rfos::wire;
  auto out = [&](const std::string& name, const std::string& bytes) {
    emit(ctx, name.c_str(), reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  for (uint8_t op = 1; op <= kMaxOp; ++op) {
    Request q;
    q.op = static_cast<Op>(op);
    q.kind = op % 2 ? Kind::kArray : Kind::kSingle;
    q.request_id = 1000 + op;
    q.capability = std::string(90, static_cast<char>(op));
    q.oid = {op, 77};
    q.offset = op * 4096;
    q.length = 8192;
    q.dkey = "dkey-" + std::to_string(op);
    q.akey = op % 3 ? "a" : "";
    if (q.op == Op::kUpdate) q.csums = {1, 2};
    if (op == 6 || op == 7 || op == 8 || op == 12) q.anchor = "resume-here";
    if (op == 1 || op == 2) q.flags = op == 1 ? kIfAbsent : 0;
    if (q.op == Op::kWatch) q.length = 0;  // a watch carries no payload
    if (q.op == Op::kGrant) {              // memory lent: a descriptor, its length, one way, a lifetime
      q.kind = Kind::kArray;
      q.remote_addr = 0x7f0000002000;
      q.rkey = std::string(40, 'k');
      q.flags = kGrantFetch;
      q.offset = 60000;
      q.grant = std::string(kGrantBytes, 'g');
    }
    out("request-" + std::to_string(op), encode_request(q));
    if (op == 1 || op == 2) {  // the explicit path: a memory descriptor
      q.kind = Kind::kArray;
      q.remote_addr = 0x7f0000001000;
      q.rkey = std::string(40, 'k');
      out("request-rma-" + std::to_string(op), encode_request(q));
      q.rkey.clear();  // through a grant: its id, the use, its scope
      q.remote_addr = 4096;
      q.flags = 0;
      q.grant = std::string(kGrantRefBytes, 'r');
      out("request-grant-" + std::to_string(op), encode_request(q));
    }
  }
  Reply r;
  r.request_id = 5;
  r.epoch = 123456789;
  r.length = 8192;
  r.csums = {7, 8};
  out("reply-ok", encode_reply(r));
  r = Reply{};
  r.request_id = 6;
  r.status = rfos::StatusCode::kPermissionDenied;
  r.message = "the session has ended";
  out("reply-error", encode_reply(r));
  KeyPage k;
  k.anchor = "next";
  k.keys = {"a", "bb", std::string(8, '\0')};
  out("key-page", encode_key_page(k));
  k.with_values = true;
  k.values = {"v1", "", "v3"};
  k.done = true;
  out("key-page-values", encode_key_page(k));
  ExtentPage e;
  e.anchor = "x";
  e.extents = {{0, 4096}, {1 << 20, 77}};
  out("extent-page", encode_extent_page(e));
  ObjectPage o;
  o.anchor = "after";
  o.oids = {{1, 2}, {UINT64_MAX, 0}};
  out("object-page", encode_object_page(o));
}
