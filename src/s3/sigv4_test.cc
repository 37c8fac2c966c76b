// Signature V4 against the worked examples of AWS's documentation (the signature test suite's get-vanilla, the
// S3 GET Object example, and the aws-chunked upload example with its chain of chunk signatures), and its parsers'
// refusals.
#include <isa-l/crc.h>

#include <functional>

#include "common/crc32c.h"
#include "s3/crc64.h"
#include "s3/sigv4.h"
#include "s3/xml.h"

#include <gtest/gtest.h>

namespace rfos::s3 {
namespace {

constexpr std::string_view kEmptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string sign(std::string_view secret, const Auth& a, std::string_view method, std::string_view path,
                 const Params& q, const Headers& h, std::string_view payload) {
  auto canonical = canonical_request(method, path, q, h, a.signed_headers, payload);
  EXPECT_TRUE(canonical.is_ok()) << canonical.status().to_string();
  return signature_of(signing_key(secret, a.date, a.region, a.service),
                      string_to_sign(a.amz_date, a.scope(), canonical.value()));
}

TEST(SigV4, TheTestSuitesGetVanilla) {
  auto a = parse_authorization(
      "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, "
      "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  a->amz_date = "20150830T123600Z";
  Headers h{{"host", "example.amazonaws.com"}, {"x-amz-date", "20150830T123600Z"}};
  EXPECT_EQ(sign("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", *a, "GET", "/", {}, h, kEmptyHash), a->signature);
  // Any change to what is signed changes the signature.
  EXPECT_NE(sign("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", *a, "GET", "/x", {}, h, kEmptyHash), a->signature);
  EXPECT_NE(sign("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEZ", *a, "GET", "/", {}, h, kEmptyHash), a->signature);
}

TEST(SigV4, TheS3GetObjectExample) {
  auto a = parse_authorization(
      "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
      "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
      "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  a->amz_date = "20130524T000000Z";
  Headers h{{"host", "examplebucket.s3.amazonaws.com"},
            {"range", "bytes=0-9"},
            {"x-amz-content-sha256", std::string(kEmptyHash)},
            {"x-amz-date", "20130524T000000Z"},
            {"user-agent", "not signed"}};
  EXPECT_EQ(sign("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", *a, "GET", "/test.txt", {}, h, kEmptyHash), a->signature);
  // A client's side: the whole header, every header given signed.
  Headers sent(h.begin(), h.end() - 1);
  auto header = authorization_for(
      "GET", "/test.txt", {}, sent, kEmptyHash, "AKIAIOSFODNN7EXAMPLE",
      signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3"), a->amz_date, "us-east-1");
  ASSERT_TRUE(header.is_ok()) << header.status().to_string();
  EXPECT_EQ(*header,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  // A signed header the request lacks is an error, not a signature.
  h.erase(h.begin() + 1);
  EXPECT_FALSE(canonical_request("GET", "/test.txt", {}, h, a->signed_headers, kEmptyHash).is_ok());
}

TEST(SigV4, TheChunkedUploadExample) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  Auth a;
  a.date = "20130524";
  a.region = "us-east-1";
  a.service = "s3";
  a.amz_date = "20130524T000000Z";
  a.signed_headers = {"content-encoding",     "content-length", "host",
                      "x-amz-content-sha256", "x-amz-date",     "x-amz-decoded-content-length",
                      "x-amz-storage-class"};
  Headers h{{"host", "s3.amazonaws.com"},
            {"x-amz-date", "20130524T000000Z"},
            {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
            {"content-encoding", "aws-chunked"},
            {"x-amz-decoded-content-length", "66560"},
            {"content-length", "66824"},
            {"x-amz-content-sha256", std::string(kStreamingSigned)}};
  std::string seed = sign(secret, a, "PUT", "/examplebucket/chunkObject.txt", {}, h, kStreamingSigned);
  EXPECT_EQ(seed, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
  std::string body = "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n" +
                     std::string(65536, 'a') +
                     "\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n" +
                     std::string(1024, 'a') +
                     "\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n";
  EXPECT_EQ(body.size(), 66824u);
  const std::string key = signing_key(secret, a.date, a.region, a.service);
  // Fed in pieces of every size from 1 byte: the same payload, and done at the end.
  for (size_t step : {size_t{1}, size_t{7}, size_t{4096}, body.size()}) {
    ChunkDecoder d(key, a.amz_date, a.scope(), seed);
    std::string out;
    for (size_t at = 0; at < body.size(); at += step)
      ASSERT_TRUE(d.feed(std::string_view(body).substr(at, step), &out).is_ok()) << step;
    EXPECT_TRUE(d.done());
    EXPECT_EQ(out, std::string(66560, 'a'));
  }
  // One byte of a chunk changed: its signature fails.
  std::string bad = body;
  bad[200] = 'b';
  ChunkDecoder d(key, a.amz_date, a.scope(), seed);
  std::string out;
  EXPECT_EQ(d.feed(bad, &out).code(), StatusCode::kPermissionDenied);
  // A chain from another request's signature fails at the first chunk.
  ChunkDecoder other(key, a.amz_date, a.scope(), std::string(64, '0'));
  EXPECT_EQ(other.feed(body, &out).code(), StatusCode::kPermissionDenied);
  // Cut short: not done.
  ChunkDecoder cut(key, a.amz_date, a.scope(), seed);
  ASSERT_TRUE(cut.feed(std::string_view(body).substr(0, 1000), &out).is_ok());
  EXPECT_FALSE(cut.done());
}

TEST(SigV4, UnsignedChunksWithATrailer) {
  std::string body = "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
  ChunkDecoder d;
  std::string out;
  ASSERT_TRUE(d.feed(body, &out).is_ok());
  EXPECT_TRUE(d.done());
  EXPECT_EQ(out, "hello world");
  ASSERT_EQ(d.trailers().size(), 1u);
  EXPECT_EQ(d.trailers()[0].first, "x-amz-checksum-crc32");
  for (std::string bad :
       {"zz\r\n", "5\r\nhelloXX", "5;chunk-signature=abc\r\n", "5\nhello\r\n", "5\r\nhello\r\n0\r\n\r\nmore"}) {
    ChunkDecoder e;
    std::string o;
    EXPECT_FALSE(e.feed(bad, &o).is_ok()) << bad;
  }
}

TEST(SigV4, RequestTargets) {
  auto t = parse_target("/bucket/dir/a%20key%2Bplus?uploadId=x&partNumber=2&flag");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->bucket, "bucket");
  EXPECT_EQ(t->key, "dir/a key+plus");
  EXPECT_EQ(t->query, (Params{{"uploadId", "x"}, {"partNumber", "2"}, {"flag", ""}}));
  EXPECT_EQ(parse_target("/")->bucket, "");
  EXPECT_EQ(parse_target("/b")->key, "");
  EXPECT_EQ(parse_target("/b/")->key, "");
  EXPECT_EQ(parse_target("/b/")->bucket, "b");
  EXPECT_FALSE(parse_target("b/k").is_ok());
  EXPECT_FALSE(parse_target("/b/%zz").is_ok());
  EXPECT_FALSE(parse_target("/b/k?x=%4").is_ok());
}

TEST(SigV4, VirtualHostedBuckets) {
  const std::vector<std::string> domains = {"s3.example.com", "localhost"};
  EXPECT_EQ(bucket_of_host("data.s3.example.com", domains), "data");
  EXPECT_EQ(bucket_of_host("My.Data.S3.Example.COM:9000", domains), "my.data");
  EXPECT_EQ(bucket_of_host("b.localhost:9000", domains), "b");
  EXPECT_EQ(bucket_of_host("s3.example.com", domains), std::nullopt);  // the service itself: path-style
  EXPECT_EQ(bucket_of_host(".s3.example.com", domains), std::nullopt);
  EXPECT_EQ(bucket_of_host("datas3.example.com", domains), std::nullopt);
  EXPECT_EQ(bucket_of_host("127.0.0.1:9000", domains), std::nullopt);
  EXPECT_EQ(bucket_of_host("[::1]:9000", domains), std::nullopt);
  EXPECT_EQ(bucket_of_host("data.s3.example.com", {}), std::nullopt);
}

TEST(SigV4, PresignedQueriesAndTheirRefusals) {
  auto q = parse_query(
      "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2F"
      "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
      "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  ASSERT_TRUE(q.is_ok());
  auto a = parse_presigned(*q);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->expires_s, 86400u);
  // The S3 documentation's presigned GET of /test.txt.
  Headers h{{"host", "examplebucket.s3.amazonaws.com"}};
  EXPECT_EQ(sign("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", **a, "GET", "/test.txt", *q, h, kUnsignedPayload),
            (*a)->signature);
  EXPECT_FALSE(parse_presigned(*parse_query("X-Amz-Algorithm=AWS4-HMAC-SHA256")).is_ok());
  EXPECT_FALSE(parse_presigned(*parse_query("X-Amz-Algorithm=HMAC")).is_ok());
  EXPECT_FALSE(parse_presigned(*parse_query("a=b"))->has_value());
  EXPECT_FALSE(parse_authorization("AWS4-HMAC-SHA256 Credential=a/b/c/d/e").is_ok());
  EXPECT_FALSE(parse_authorization("AWS AKID:sig").is_ok());
  EXPECT_FALSE(parse_query("a=%4").is_ok());
  EXPECT_FALSE(parse_query("a=%zz").is_ok());
  EXPECT_EQ(*uri_decode("a%2Fb+c"), "a/b+c");
  EXPECT_EQ(uri_encode("a/b c~", true), "a/b%20c~");
  EXPECT_EQ(uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(*from_hex("6b00ff"), std::string("k\0\xff", 3));
  EXPECT_EQ(*from_hex(hex_of("any bytes")), "any bytes");
  EXPECT_FALSE(from_hex("abc").has_value());
  EXPECT_FALSE(from_hex("AB").has_value());
  EXPECT_EQ(*parse_amz_date("19700101T000100Z"), 60);
  EXPECT_EQ(format_amz_date(60), "19700101T000100Z");
  EXPECT_FALSE(parse_amz_date("19700101T000100").is_ok());
}

TEST(Checksums, Crc64NvmeCheckValueAndPieces) {
  EXPECT_EQ(crc64nvme(0, "123456789", 9), 0xAE8B14860A799888ull);  // the catalogue's check value
  EXPECT_EQ(crc64nvme(0, "", 0), 0u);
  std::string data(100003, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 7));
  const uint64_t whole = crc64nvme(0, data.data(), data.size());
  for (size_t cut : {size_t{1}, size_t{7}, size_t{8}, size_t{4097}, data.size() - 3})  // any split, any alignment
    EXPECT_EQ(crc64nvme(crc64nvme(0, data.data(), cut), data.data() + cut, data.size() - cut), whole) << cut;
  data[5000] ^= 1;
  EXPECT_NE(crc64nvme(0, data.data(), data.size()), whole);
}

TEST(Checksums, CombinedCrcsAreTheWholeOnes) {
  std::string data(70001, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + (i >> 9));
  const std::string_view d(data);
  struct Crc {
    uint64_t poly;
    int width;
    std::function<uint64_t(std::string_view)> of;
  };
  const Crc crcs[] = {
      {kCrc64NvmePoly, 64, [](std::string_view b) { return crc64nvme(0, b.data(), b.size()); }},
      {kCrc32Poly, 32,
       [](std::string_view b) {
         return uint64_t{crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(b.data()), b.size())};
       }},
      {kCrc32cPoly, 32, [](std::string_view b) { return uint64_t{crc32c_extend(0, b.data(), b.size())}; }},
  };
  for (const Crc& c : crcs)
    for (size_t cut : {size_t{0}, size_t{1}, size_t{4096}, size_t{65536}, data.size()}) {
      EXPECT_EQ(crc_combine(c.of(d.substr(0, cut)), c.of(d.substr(cut)), data.size() - cut, c.poly, c.width), c.of(d))
          << c.poly << " cut at " << cut;
    }
  // Three pieces, as three parts.
  const Crc& c = crcs[1];
  uint64_t acc = c.of(d.substr(0, 100));
  acc = crc_combine(acc, c.of(d.substr(100, 30000)), 30000, c.poly, c.width);
  acc = crc_combine(acc, c.of(d.substr(30100)), data.size() - 30100, c.poly, c.width);
  EXPECT_EQ(acc, c.of(d));
}

TEST(Base64, StrictDecoding) {
  for (std::string s :
       {std::string(), std::string("f"), std::string("fo"), std::string("foo"), std::string("\0\xff\x10\x80", 4)})
    EXPECT_EQ(from_base64(base64(s)), s);
  EXPECT_EQ(from_base64("AAAAAA=="), std::string(4, '\0'));
  for (const char* bad : {"A", "AAA", "AA=A", "A===", "AAAAAA=", "AB==", "AA A", "AAAA\n", "!!!!"})
    EXPECT_FALSE(from_base64(bad).has_value()) << bad;
}

TEST(Xml, RequestBodiesAndTheirRefusals) {
  auto doc = parse_xml(
      "<?xml version=\"1.0\"?><s3:Delete xmlns:s3=\"x\"><Object><Key>a&amp;b&#x2F;&#47;</Key></Object><Quiet/>"
      "</s3:Delete>");
  ASSERT_TRUE(doc.is_ok()) << doc.status().to_string();
  EXPECT_EQ(doc->name, "Delete");
  ASSERT_NE(doc->child("Object"), nullptr);
  EXPECT_EQ(doc->child("Object")->child("Key")->text, "a&b//");
  EXPECT_NE(doc->child("Quiet"), nullptr);
  // A name's local part may not be empty (found by s3_fuzz: "<p:>" made a root without a name).
  EXPECT_FALSE(parse_xml("<p:></p:>").is_ok());
  EXPECT_FALSE(parse_xml("<a><b:/></a>").is_ok());
  EXPECT_FALSE(parse_xml("<a></b>").is_ok());
  EXPECT_FALSE(parse_xml("<a>&unknown;</a>").is_ok());
  EXPECT_FALSE(parse_xml("<!DOCTYPE a><a/>").is_ok());
  EXPECT_FALSE(parse_xml("<a/><b/>").is_ok());
}

}  // namespace
}  // namespace rfos::s3
