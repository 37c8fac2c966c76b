// AWS Signature Version 4 as S3 uses it (docs/s3.md, "Authentication"): the canonical request, the string to
// sign, the signing key, and the two places a signature comes in (the Authorization header, and the query of a
// presigned URL); and the aws-chunked body (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, each chunk signed in a chain
// from the request's signature, or STREAMING-UNSIGNED-PAYLOAD-TRAILER).
//
// Every parser here reads bytes from the network: each returns kInvalidArgument for what it cannot read, never
// reads past its input, and is fuzzed (s3_fuzz).
//
// Thread-safety: functions are pure; a ChunkDecoder is one request's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rfos::s3 {

// Lowercase hexadecimal of bytes, and back (nullopt for anything but an even count of lowercase hex digits).
std::string hex_of(std::string_view bytes);
std::optional<std::string> from_hex(std::string_view hex);
std::string sha256(std::string_view data);  // raw, 32 bytes
std::string hmac_sha256(std::string_view key, std::string_view data);
std::string base64(std::string_view bytes);
// ASCII letters lowercased (header names, algorithm names, host names).
std::string ascii_lower(std::string_view s);
// Strict: nullopt unless `text` is canonical base64 (padded, nothing else in it) of some bytes.
std::optional<std::string> from_base64(std::string_view text);
// n bytes from OpenSSL's generator (ids, nonces).
std::string random_bytes(size_t n);
// Equal without telling by its timing where they differ.
bool equal_secret(std::string_view a, std::string_view b);

// An incremental digest (OpenSSL EVP): "sha256", "md5", "sha1".
class Digest {
 public:
  explicit Digest(const char* name);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void update(std::string_view bytes);
  std::string finish();  // raw

 private:
  void* ctx_;
};

// RFC 3986 percent-encoding as SigV4 wants it: all but A-Z a-z 0-9 - _ . ~ (and '/' when keep_slash).
std::string uri_encode(std::string_view s, bool keep_slash);
// %XX decoded ('+' stays '+'). kInvalidArgument for a malformed escape.
Result<std::string> uri_decode(std::string_view s);

using Params = std::vector<std::pair<std::string, std::string>>;   // decoded, in the order given
using Headers = std::vector<std::pair<std::string, std::string>>;  // lowercase names, values as received

// A query string's parameters, decoded ("a&b=1": {"a",""}, {"b","1"}).
Result<Params> parse_query(std::string_view raw);

// A request target ("/bucket/key?query", path-style) split: the decoded path, the query's parameters, and the
// bucket and key the path names ("" for ListBuckets' "/" and for a bucket's own requests). kInvalidArgument for a
// target that does not start with '/' or does not decode.
struct Target {
  std::string path;
  Params query;
  std::string bucket;
  std::string key;
};
Result<Target> parse_target(std::string_view target);
// Virtual-hosted-style addressing: the bucket a Host header names as "<bucket>.<domain>[:port]" for one of
// `domains` (compared without case, as DNS names are); nullopt for any other host (path-style: the path names it).
std::optional<std::string> bucket_of_host(std::string_view host, const std::vector<std::string>& domains);

// What a request's signature says of itself.
struct Auth {
  std::string access_key;
  std::string date;  // YYYYMMDD, the scope's
  std::string region;
  std::string service;
  std::vector<std::string> signed_headers;  // lowercase, as listed
  std::string signature;                    // lowercase hex
  std::string amz_date;                     // YYYYMMDDTHHMMSSZ
  bool presigned = false;
  uint64_t expires_s = 0;  // presigned: how long the URL is good for
  std::string scope() const { return date + "/" + region + "/" + service + "/aws4_request"; }
};

// "AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request, SignedHeaders=a;b, Signature=HEX"; the
// request's date comes from x-amz-date (or Date) by the caller.
Result<Auth> parse_authorization(std::string_view header);
// X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires (1 s .. 7 days), X-Amz-SignedHeaders,
// X-Amz-Signature. nullopt when the query carries no X-Amz-Algorithm (not presigned).
Result<std::optional<Auth>> parse_presigned(const Params& query);
// The time "YYYYMMDDTHHMMSSZ" names, in seconds since the epoch.
Result<int64_t> parse_amz_date(std::string_view s);
std::string format_amz_date(int64_t unix_s);

// The canonical request of `method` on `path` (decoded; encoded here once, '/' kept) with `query` (for a
// presigned request X-Amz-Signature is left out), the signed headers' values (trimmed, inner runs of spaces
// one, repeats joined with ','), and the payload hash. kInvalidArgument when a signed header is missing.
Result<std::string> canonical_request(std::string_view method, std::string_view path, const Params& query,
                                      const Headers& headers, const std::vector<std::string>& signed_headers,
                                      std::string_view payload_hash);
std::string string_to_sign(std::string_view amz_date, std::string_view scope, std::string_view canonical);
std::string signing_key(std::string_view secret, std::string_view date, std::string_view region,
                        std::string_view service);
// hex(HMAC(key, string_to_sign)).
std::string signature_of(std::string_view key, std::string_view to_sign);
// A client's side: the Authorization header of a request whose `headers` (lowercase names, host, x-amz-date and
// x-amz-content-sha256 among them) are all signed, with `key` the day's signing_key for the S3 service.
Result<std::string> authorization_for(std::string_view method, std::string_view path, const Params& query,
                                      const Headers& headers, std::string_view payload_hash,
                                      std::string_view access_key, std::string_view key, std::string_view amz_date,
                                      std::string_view region);

// The payload hash values x-amz-content-sha256 may take beside a hex SHA-256.
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kStreamingSigned = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
inline constexpr std::string_view kStreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

// Decodes an aws-chunked body: "HEX[;chunk-signature=SIG]\r\nDATA\r\n" ... "0...\r\n" then, unsigned, trailer
// lines and "\r\n" (signed: "\r\n"). With a signing key each chunk's signature must be the next of the chain
// that starts at the request's signature; the payload is given out before its chunk's signature is checked,
// so a consumer keeps nothing it was given until done() (a put swaps its object in only then).
class ChunkDecoder {
 public:
  // Unsigned (trailer allowed).
  ChunkDecoder() = default;
  // Signed: each chunk's signature checked.
  ChunkDecoder(std::string key, std::string amz_date, std::string scope, std::string seed_signature);

  // Takes the next bytes of the body; appends payload bytes to *out. kInvalidArgument for bad framing,
  // kPermissionDenied for a chunk whose signature is wrong; after an error the decoder takes nothing more.
  Status feed(std::string_view in, std::string* out);
  bool done() const { return state_ == State::kDone; }
  uint64_t payload_bytes() const { return payload_; }
  // Trailer headers (lowercase names), once done().
  const Headers& trailers() const { return trailers_; }

 private:
  enum class State { kSizeLine, kData, kDataEnd, kTrailer, kDone, kFailed };
  Status fail(StatusCode code, std::string message);
  Status chunk_line(std::string_view line);
  Status end_of_chunk();

  bool signed_ = false;
  std::string key_, amz_date_, scope_, prev_signature_;
  State state_ = State::kSizeLine;
  std::string line_;   // a line read so far
  uint64_t left_ = 0;  // of the current chunk's data
  std::string chunk_signature_;
  std::optional<Digest> chunk_hash_;
  bool last_chunk_ = false;
  uint64_t payload_ = 0;
  Headers trailers_;
};

}  // namespace rfos::s3
