// Fuzz target for what an S3 client sends the gateway before any storage call: the Authorization header, the
// query string and a presigned URL's parameters, percent-encoding, dates, aws-chunked bodies (signed and
// unsigned, fed in pieces), XML bodies (CompleteMultipartUpload, DeleteObjects), and a request's head (Beast's
// HTTP parser, then the target split into bucket, key and query). The first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <boost/beast/http.hpp>

#include "s3/rdma_token.h"
#include "s3/sigv4.h"
#include "s3/xml.h"

extern "C" {
uint64_t rfos_fuzz_accepted = 0;  // inputs some parser accepted (tests/fuzz_main.cc)
}

namespace {
using namespace rfos::s3;

const std::string kKey = signing_key("secret", "20130524", "us-east-1", "s3");

void seed_chunked(std::string* out, bool signed_body) {
  std::string prev(64, '0');
  auto chunk = [&](const std::string& data) {
    std::string to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n" + prev +
                          "\n" + hex_of(sha256("")) + "\n" + hex_of(sha256(data));
    prev = signature_of(kKey, to_sign);
    char size[32];
    std::snprintf(size, sizeof(size), "%zx", data.size());
    *out += size;
    if (signed_body) *out += ";chunk-signature=" + prev;
    *out += "\r\n" + data + "\r\n";
  };
  chunk("hello");
  chunk(std::string(300, 'x'));
  if (signed_body) {
    chunk("");
    out->resize(out->size() - 2);  // the last chunk: its size line, then one CRLF
    *out += "\r\n";
  } else {
    *out += "0\r\nx-amz-checksum-crc32c:AAAAAA==\r\n\r\n";
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 8;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  bool ok = false;
  switch (which) {
    case 0:
      ok = parse_authorization(in).is_ok();
      break;
    case 1: {
      auto q = parse_query(in);
      if (q.is_ok()) {
        auto p = parse_presigned(*q);
        ok = p.is_ok() && p->has_value();
        if (ok) (void)canonical_request("GET", "/b/k", *q, {{"host", "h"}}, (*p)->signed_headers, kUnsignedPayload);
      }
      break;
    }
    case 2:
    case 3: {
      // Fed in pieces whose sizes the input's length picks, so framing is split at many places.
      ChunkDecoder signed_d(kKey, "20130524T000000Z", "20130524/us-east-1/s3/aws4_request", std::string(64, '0'));
      ChunkDecoder unsigned_d;
      ChunkDecoder& d = which == 2 ? signed_d : unsigned_d;
      std::string out;
      size_t step = 1 + in.size() % 13;
      rfos::Status s;
      for (size_t at = 0; at < in.size() && s.is_ok(); at += step) s = d.feed(in.substr(at, step), &out);
      ok = s.is_ok() && d.done();
      if (ok && out.size() != d.payload_bytes()) std::abort();
      break;
    }
    case 4:
      ok = uri_decode(in).is_ok() && parse_amz_date(in.substr(0, 16)).is_ok();
      if (auto b = from_base64(in); b && base64(*b) != in) std::abort();  // accepted means canonical
      if (auto b = bucket_of_host(in, {"s3.test", "localhost"}); b && b->empty()) std::abort();
      break;
    case 5: {
      auto doc = parse_xml(in);
      ok = doc.is_ok();
      if (ok && doc->name.empty()) std::abort();
      break;
    }
    case 6: {
      // A request's head as the gateway reads it: Beast's parser, then the target split into bucket and key.
      namespace http = boost::beast::http;
      http::request_parser<http::empty_body> parser;
      parser.header_limit(64u << 10);
      parser.eager(false);
      boost::beast::error_code ec;
      parser.put(boost::asio::buffer(in.data(), in.size()), ec);
      if (!ec && parser.is_header_done()) {
        auto& msg = parser.get();
        auto t = parse_target(std::string_view(msg.target().data(), msg.target().size()));
        ok = t.is_ok();
        if (ok && (t->path.empty() || t->path[0] != '/')) std::abort();
      }
      break;
    }
    case 7: {
      auto t = parse_rdma_token(in);
      ok = t.is_ok();
      if (ok && format_rdma_token(*t) != in) std::abort();  // accepted means canonical
      break;
    }
  }
  if (ok) ++rfos_fuzz_accepted;
  return 0;
}

extern "C" void rfos_fuzz_seeds(void (*emit)(void* ctx, const char* name, const uint8_t* data, size_t size),
                                void* ctx) {
  auto put = [&](const char* name, uint8_t which, const std::string& body) {
    std::string s(1, static_cast<char>(which));
    s += body;
    emit(ctx, name, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  put("authorization", 0,
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, "
      "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  put("presigned", 1,
      "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
      "20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
      "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  std::string signed_body, unsigned_body;
  seed_chunked(&signed_body, true);
  seed_chunked(&unsigned_body, false);
  put("chunked-signed", 2, signed_body);
  put("chunked-unsigned", 3, unsigned_body);
  put("date", 4, "20130524T000000Z");
  put("complete", 5,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/"
      "2006-03-01/\"><Part><ETag>&quot;0123&quot;</ETag><PartNumber>1</PartNumber></Part><!-- c --><Part><ETag>"
      "<![CDATA[\"4567\"]]></ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>");
  put("request", 6,
      "PUT /bucket/dir/a%20key?partNumber=2&uploadId=abc HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nx-amz-date: "
      "20130524T000000Z\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nContent-Length: 5\r\n\r\n");
  put("rdma-token", 7, "rfos1:00112233445566778899aabbccddeeff:1048576");
  put("delete", 5, "<Delete><Quiet>true</Quiet><Object><Key>a&#x2F;b&#47;&amp;c</Key></Object><Object/></Delete>");
}
