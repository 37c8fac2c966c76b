#include "s3/service.h"

#include <isa-l/crc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <set>

#include "client/file_stream.h"
#include "client/named_objects.h"
#include "common/coding.h"
#include "common/crc32c.h"
#include "s3/crc64.h"
#include "s3/rdma_token.h"
#include "s3/sigv4.h"
#include "s3/xml.h"

namespace rfos::s3 {

namespace {

constexpr size_t kMaxKeys = 1000;
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxMetadataBytes = 2048;  // user metadata, as S3 bounds it
constexpr std::string_view kAttrsMagic = "S3a1";

// --- XML ---------------------------------------------------------------------------------------------------

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 has no way to write the other control characters, not even as references: a key that holds one
        // (listed without encoding-type=url, or named in an error) shows U+FFFD there, so the document parses.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += "\xEF\xBF\xBD";
        else
          out.push_back(c);
    }
  }
  return out;
}

struct Xml {
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  Xml& open(std::string_view tag, std::string_view attrs = {}) {
    s.append("<").append(tag);
    if (!attrs.empty()) s.append(" ").append(attrs);
    s.append(">");
    return *this;
  }
  Xml& close(std::string_view tag) {
    s.append("</").append(tag).append(">");
    return *this;
  }
  Xml& leaf(std::string_view tag, std::string_view text) { return open(tag).text(text).close(tag); }
  Xml& text(std::string_view t) {
    s += xml_escape(t);
    return *this;
  }
};

constexpr std::string_view kNs = "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

Response xml_response(unsigned status, Xml&& x) {
  Response r;
  r.status = status;
  r.headers.emplace_back("content-type", "application/xml");
  r.body = std::move(x.s);
  return r;
}

// --- time ----------------------------------------------------------------------------------------------------

std::string utc(uint64_t unix_ms, const char* format) {
  time_t t = static_cast<time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[64];
  std::strftime(b, sizeof(b), format, &tm);
  return b;
}

std::string http_date(uint64_t unix_ms) { return utc(unix_ms, "%a, %d %b %Y %H:%M:%S GMT"); }

std::string iso_date(uint64_t unix_ms) {
  return utc(unix_ms, "%Y-%m-%dT%H:%M:%S") + "." + std::to_string(1000 + unix_ms % 1000).substr(1) + "Z";
}

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// RFC 7231's IMF-fixdate (what clients send in If-Modified-Since); nullopt for anything else.
std::optional<int64_t> parse_http_date(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char* end = strptime(str.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end) return std::nullopt;
  return static_cast<int64_t>(timegm(&tm));
}

// --- object attributes (kept with the object by NamedObjects::put) ----------------------------------------

using Attrs = std::vector<std::pair<std::string, std::string>>;

std::string encode_attrs(const Attrs& a) {
  std::string out(kAttrsMagic);
  for (const auto& [k, v] : a) {
    put_be16(&out, static_cast<uint16_t>(k.size()));
    out += k;
    put_be32(&out, static_cast<uint32_t>(v.size()));
    out += v;
  }
  return out;
}

// Attributes stored by another put (`rfos put`: none) read as none.
Attrs decode_attrs(std::string_view s) {
  Attrs out;
  if (!s.starts_with(kAttrsMagic)) return out;
  s.remove_prefix(kAttrsMagic.size());
  while (s.size() >= 2) {
    size_t n = get_be16(s.data());
    if (s.size() < 2 + n + 4) return {};
    std::string k(s.substr(2, n));
    size_t m = get_be32(s.data() + 2 + n);
    if (s.size() < 6 + n + m) return {};
    out.emplace_back(std::move(k), std::string(s.substr(6 + n, m)));
    s.remove_prefix(6 + n + m);
  }
  if (!s.empty()) return {};
  return out;
}

const std::string* attr(const Attrs& a, std::string_view name) {
  for (const auto& [k, v] : a)
    if (k == name) return &v;
  return nullptr;
}

// The ETag, quoted: the MD5 S3 would give, or, for an object stored by other means (no MD5 was taken), its data
// object's id with "-1", which clients read as "not an MD5" (the multipart form).
std::string etag_of(const client::ObjectStat& st, const Attrs& a) {
  if (const std::string* e = attr(a, "etag")) return "\"" + *e + "\"";
  char b[40];
  std::snprintf(b, sizeof(b), "%016llx%016llx", static_cast<unsigned long long>(st.data.hi),
                static_cast<unsigned long long>(st.data.lo));
  return "\"" + std::string(b) + "-1\"";
}

// The headers S3 stores with an object and gives back on GET and HEAD.
constexpr std::string_view kStoredHeaders[] = {"content-type",     "content-encoding", "content-disposition",
                                               "content-language", "cache-control",    "expires"};

// --- requests ------------------------------------------------------------------------------------------------

bool valid_bucket_name(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  if (b.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string_view::npos) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(b.front()) && alnum(b.back()) && b.find("..") == std::string_view::npos;
}

std::string resource_of(const Request& req) { return "/" + req.bucket + (req.key.empty() ? "" : "/" + req.key); }

client::ContainerOptions options(const ServiceConfig& config, bool write = true) {
  client::ContainerOptions o;
  o.write = write;
  o.provider = config.provider;
  o.timeout_ms = config.timeout_ms;
  return o;
}

// The bucket's handle for this user, to read it or also to write it (a user granted only r gets a read handle:
// asking for more would be refused).
Result<client::Container*> bucket(const ServiceConfig& config, const User& user, Handles& handles,
                                  const std::string& name, bool write) {
  return handles.get(user, config.pool, name, options(config, write));
}

// What a cached handle whose container or session went away (destroyed and made again, expired) answers.
bool stale_handle(StatusCode code) {
  return code == StatusCode::kUnknownContainer || code == StatusCode::kPermissionDenied ||
         code == StatusCode::kShutdown;
}

// A call on the bucket's handle, again on a fresh handle when the cached one's session is gone.
template <typename F>
auto with_bucket(const ServiceConfig& config, const User& user, Handles& handles, const std::string& name, bool write,
                 F&& f) -> decltype(f(std::declval<client::Container&>())) {
  for (int attempt = 0;; ++attempt) {
    auto c = bucket(config, user, handles, name, write);
    if (!c.is_ok()) return c.status();
    auto r = f(**c);
    StatusCode code;
    if constexpr (std::is_same_v<decltype(r), Status>)
      code = r.code();
    else
      code = r.status().code();
    if (attempt == 0 && stale_handle(code)) {
      handles.drop(user, name);
      continue;
    }
    return r;
  }
}

// --- buckets -------------------------------------------------------------------------------------------------

void list_buckets(const ServiceConfig& config, const User& user, const std::function<void(Response)>& reply) {
  auto conts = user.control->cont_list(config.pool);
  if (!conts.is_ok()) return reply(error_response(conts.status(), "/"));
  Xml x;
  x.open("ListAllMyBucketsResult", kNs).open("Owner").leaf("ID", user.name).leaf("DisplayName", user.name);
  x.close("Owner").open("Buckets");
  for (const client::ContInfo& c : *conts) {
    if (c.owner != user.name || !valid_bucket_name(c.label)) continue;
    x.open("Bucket").leaf("Name", c.label).leaf("CreationDate", iso_date(c.created_unix_ms)).close("Bucket");
  }
  x.close("Buckets").close("ListAllMyBucketsResult");
  reply(xml_response(200, std::move(x)));
}

void create_bucket(const ServiceConfig& config, const User& user, const Request& req,
                   const std::function<void(Response)>& reply) {
  if (!valid_bucket_name(req.bucket))
    return reply(error_response(400, "InvalidBucketName", "The specified bucket is not valid.", resource_of(req)));
  auto made = user.control->cont_create(config.pool, req.bucket, client::ContProps{});
  if (made.status().code() == StatusCode::kAlreadyExists) {
    auto info = user.control->cont_query(config.pool, req.bucket);
    if (info.is_ok() && info->owner == user.name)
      return reply(error_response(409, "BucketAlreadyOwnedByYou",
                                  "Your previous request to create the named bucket succeeded and you already own it.",
                                  resource_of(req)));
    return reply(
        error_response(409, "BucketAlreadyExists", "The requested bucket name is not available.", resource_of(req)));
  }
  if (!made.is_ok()) return reply(error_response(made.status(), resource_of(req), true));
  Response r;
  r.headers.emplace_back("location", "/" + req.bucket);
  reply(std::move(r));
}

void head_bucket(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                 const std::function<void(Response)>& reply) {
  // The check S3 makes: the bucket exists and this user may read it. Asked of the server each time (a cached
  // handle outlives a bucket another worker deleted).
  auto info = user.control->cont_query(config.pool, req.bucket);
  if (!info.is_ok()) return reply(error_response(info.status(), resource_of(req), true));
  reply(Response{});
}

void delete_bucket(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                   const std::function<void(Response)>& reply) {
  // Empty: no named object, no upload, no object of other means (the API's, the bench's, a namespace's). What
  // the layout owns beside (the data of a put under way or one that died) goes with the bucket.
  auto empty = with_bucket(config, user, handles, req.bucket, false, [](client::Container& c) -> Result<bool> {
    RFOS_ASSIGN_OR_RETURN(auto listing, client::NamedObjects(c).list());
    return listing.named.empty() && listing.other.empty() && listing.uploads.empty();
  });
  if (!empty.is_ok()) return reply(error_response(empty.status(), resource_of(req), true));
  if (!*empty)
    return reply(
        error_response(409, "BucketNotEmpty", "The bucket you tried to delete is not empty.", resource_of(req)));
  handles.drop(user, req.bucket);
  Status s = user.control->cont_destroy(config.pool, req.bucket);
  if (!s.is_ok()) return reply(error_response(s, resource_of(req), true));
  Response r;
  r.status = 204;
  reply(std::move(r));
}

// --- listing -------------------------------------------------------------------------------------------------

// What ListObjects and ListMultipartUploads take alike: prefix, delimiter, encoding-type, and the page's size.
struct ListingParams {
  std::string prefix, delimiter, encoding;
  size_t max = kMaxKeys;

  // Reads them from `req`, the page's size from `max_name` (max-keys, max-uploads); an error response for a
  // malformed one.
  std::optional<Response> parse(const Request& req, const std::string& max_name) {
    auto p = [&](std::string_view name) { return req.param(name) ? *req.param(name) : std::string(); };
    prefix = p("prefix");
    delimiter = p("delimiter");
    encoding = p("encoding-type");
    if (!encoding.empty() && encoding != "url")
      return error_response(400, "InvalidArgument", "Invalid Encoding Method specified in Request", resource_of(req));
    if (const std::string* m = req.param(max_name)) {
      if (m->empty() || m->size() > 9 || m->find_first_not_of("0123456789") != std::string::npos)
        return error_response(400, "InvalidArgument", max_name + " is not a non-negative number", resource_of(req));
      max = std::min<size_t>(std::stoul(*m), kMaxKeys);
    }
    return std::nullopt;
  }
  std::string encode(std::string_view s) const { return encoding == "url" ? uri_encode(s, true) : std::string(s); }
  // The common prefix `name` (which starts with the prefix) folds into: through the delimiter's first occurrence
  // after the prefix; "" where it folds into none.
  std::string folded(std::string_view name) const {
    std::string_view rest = name.substr(prefix.size());
    size_t d = delimiter.empty() ? std::string_view::npos : rest.find(delimiter);
    return d == std::string_view::npos ? std::string() : prefix + std::string(rest.substr(0, d + delimiter.size()));
  }
};

void list_objects(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                  const std::function<void(Response)>& reply) {
  const bool v2 = req.param("list-type") && *req.param("list-type") == "2";
  if (req.param("list-type") && !v2)
    return reply(error_response(400, "InvalidArgument", "list-type must be 2", resource_of(req)));
  auto p = [&](std::string_view name) { return req.param(name) ? *req.param(name) : std::string(); };
  ListingParams lp;
  if (auto bad = lp.parse(req, "max-keys")) return reply(std::move(*bad));
  const std::string &prefix = lp.prefix, &delimiter = lp.delimiter, &encoding = lp.encoding;
  const size_t max_keys = lp.max;
  // Where to start: after this key, or past this common prefix (and every key under it).
  std::string after;
  bool after_prefix = false;
  if (v2) {
    if (const std::string* t = req.param("continuation-token")) {
      // The token is the hex of where the last page ended: 'k' and a key, or 'p' and a common prefix.
      auto raw = from_hex(*t);
      if (!raw || raw->empty() || ((*raw)[0] != 'k' && (*raw)[0] != 'p'))
        return reply(
            error_response(400, "InvalidArgument", "The continuation token provided is incorrect", resource_of(req)));
      after_prefix = (*raw)[0] == 'p';
      after = raw->substr(1);
    } else {
      after = p("start-after");
    }
  } else {
    // v1's NextMarker is the last key or common prefix given; one that ends with the delimiter is taken for a
    // prefix (S3's own reading).
    after = p("marker");
    after_prefix = !delimiter.empty() && after.ends_with(delimiter);
  }
  // The first name to look at: past the key (or the common prefix and every key under it) the last page ended
  // with.
  std::string start;
  bool nothing_left = false;
  if (after_prefix) {
    start = prefix_successor(after);
    nothing_left = start.empty();  // every name after it starts with it
  } else if (!after.empty()) {
    start = client::NamedObjects::after(after);
  }

  std::vector<client::ObjectStat> contents;
  std::vector<std::string> prefixes;
  std::string last;  // the last key or common prefix given
  bool last_prefix = false;
  bool truncated = false;
  // A page of names at a time from the index, in byte order, through one NamedObjects (it looks for an index of an
  // earlier version once): one more than the keys still to give (to tell whether the listing is truncated), or a
  // full page where a delimiter folds names into common prefixes; a page that ends inside a common prefix goes on
  // past it.
  Status listed = with_bucket(config, user, handles, req.bucket, false, [&](client::Container& c) -> Status {
    contents.clear();  // a call again on a fresh handle starts over
    prefixes.clear();
    last.clear();
    last_prefix = truncated = false;
    client::NamedObjects names(c);
    std::string from = start;
    for (bool done = nothing_left; !done && max_keys > 0;) {
      const size_t want = delimiter.empty() ? max_keys - contents.size() + 1 : kMaxKeys;
      RFOS_ASSIGN_OR_RETURN(client::NamedObjects::IndexPage page, names.list_index(prefix, from, want));
      bool inside_prefix = false;  // the page's last name was folded into the last common prefix
      for (client::ObjectStat& st : page.names) {
        std::string cp = lp.folded(st.name);
        inside_prefix = !cp.empty() && !prefixes.empty() && prefixes.back() == cp;
        if (inside_prefix) continue;  // its prefix is given already
        if (contents.size() + prefixes.size() >= max_keys) {
          truncated = true;
          break;
        }
        last_prefix = !cp.empty();
        if (cp.empty()) {
          last = st.name;
          contents.push_back(std::move(st));
        } else {
          last = cp;
          prefixes.push_back(std::move(cp));
          inside_prefix = true;
        }
      }
      if (truncated || page.done) break;
      if (inside_prefix) {  // past every name under the common prefix
        from = prefix_successor(prefixes.back());
        done = from.empty();
      } else {
        from = std::move(page.next);
      }
    }
    return Status::ok();
  });
  if (!listed.is_ok()) return reply(error_response(listed, resource_of(req), true));
  const char* root = v2 ? "ListBucketResult" : "ListBucketResult";
  Xml x;
  x.open(root, kNs).leaf("Name", req.bucket).leaf("Prefix", lp.encode(prefix));
  if (v2) {
    if (const std::string* t = req.param("continuation-token")) x.leaf("ContinuationToken", *t);
    if (const std::string* s = req.param("start-after")) x.leaf("StartAfter", lp.encode(*s));
    x.leaf("KeyCount", std::to_string(contents.size() + prefixes.size()));
    if (truncated) x.leaf("NextContinuationToken", hex_of((last_prefix ? "p" : "k") + last));
  } else {
    x.leaf("Marker", lp.encode(after));
    if (truncated && !delimiter.empty()) x.leaf("NextMarker", lp.encode(last));
  }
  x.leaf("MaxKeys", std::to_string(max_keys));
  if (!delimiter.empty()) x.leaf("Delimiter", lp.encode(delimiter));
  if (!encoding.empty()) x.leaf("EncodingType", encoding);
  x.leaf("IsTruncated", truncated ? "true" : "false");
  for (const client::ObjectStat& st : contents) {
    Attrs a = decode_attrs(st.attrs);
    x.open("Contents").leaf("Key", lp.encode(st.name)).leaf("LastModified", iso_date(st.mtime_ms));
    x.leaf("ETag", etag_of(st, a)).leaf("Size", std::to_string(st.size)).leaf("StorageClass", "STANDARD");
    if (!v2) x.open("Owner").leaf("ID", user.name).leaf("DisplayName", user.name).close("Owner");
    x.close("Contents");
  }
  for (const std::string& cp : prefixes) x.open("CommonPrefixes").leaf("Prefix", lp.encode(cp)).close("CommonPrefixes");
  x.close(root);
  reply(xml_response(200, std::move(x)));
}

// --- objects -------------------------------------------------------------------------------------------------

// A body's x-amz-checksum-*: its header ("x-amz-checksum-crc32", ...) and value.
using ChecksumHeader = std::optional<std::pair<std::string, std::string>>;
constexpr std::string_view kChecksumPrefix = "x-amz-checksum-";
// The algorithm a checksum's header names ("crc32", ...).
std::string alg_of(const std::pair<std::string, std::string>& checksum) {
  return checksum.first.substr(kChecksumPrefix.size());
}
// A header that carries a checksum's value (not x-amz-checksum-algorithm or -type, which name one).
bool checksum_value_header(std::string_view k) {
  return k.starts_with(kChecksumPrefix) && k != "x-amz-checksum-algorithm" && k != "x-amz-checksum-type";
}
// An object's checksum type beside it (FULL_OBJECT: of its bytes; COMPOSITE: of its parts' checksums), and an
// upload's algorithm until its completion.
constexpr std::string_view kAlgAttr = "x-amz-checksum-algorithm", kTypeAttr = "x-amz-checksum-type";

// An x-amz-checksum-* algorithm over a body: CRC32 (ISA-L, zlib's), CRC32C, CRC64NVME, SHA1, SHA256; its value
// base64 of the big-endian CRC or the digest, as S3 gives it.
class Checksum {
 public:
  // nullopt for an algorithm this gateway does not compute.
  static std::optional<Checksum> of(std::string_view alg) {
    const std::string a = ascii_lower(alg);
    Checksum k;
    k.name_ = a;
    if (a == "sha1" || a == "sha256")
      k.digest_ = std::make_unique<Digest>(a.c_str());
    else if (a != "crc32" && a != "crc32c" && a != "crc64nvme")
      return std::nullopt;
    return k;
  }
  const std::string& name() const { return name_; }  // "crc32", ...
  std::string header() const { return std::string(kChecksumPrefix) + name_; }
  void update(std::string_view b) {
    if (digest_)
      digest_->update(b);
    else if (name_ == "crc32")
      crc_ = crc32_gzip_refl(static_cast<uint32_t>(crc_), reinterpret_cast<const unsigned char*>(b.data()), b.size());
    else if (name_ == "crc64nvme")
      crc_ = crc64nvme(crc_, b.data(), b.size());
    else
      crc_ = crc32c_extend(static_cast<uint32_t>(crc_), b.data(), b.size());
  }
  // FULL_OBJECT of parts: as if bytes whose CRC is `be` (big-endian, a part's) followed, `len` of them, what
  // this took (CRCs of no bytes are 0, so the first part needs no case of its own). false where `be` is not
  // this CRC's size, or this is a digest.
  bool follow_with(std::string_view be, uint64_t len) {
    const size_t bytes = name_ == "crc64nvme" ? 8 : 4;
    if (digest_ || be.size() != bytes) return false;
    const uint64_t part = bytes == 8 ? get_be64(be.data()) : get_be32(be.data());
    const uint64_t poly = name_ == "crc32" ? kCrc32Poly : name_ == "crc32c" ? kCrc32cPoly : kCrc64NvmePoly;
    crc_ = crc_combine(crc_, part, len, poly, static_cast<int>(bytes * 8));
    return true;
  }
  std::string finish() { return base64(finish_raw()); }
  // The big-endian CRC or the digest.
  std::string finish_raw() {
    if (digest_) return digest_->finish();
    std::string be;
    if (name_ == "crc64nvme")
      put_be64(&be, crc_);
    else
      put_be32(&be, static_cast<uint32_t>(crc_));
    return be;
  }

 private:
  std::string name_;
  uint64_t crc_ = 0;
  std::unique_ptr<Digest> digest_;
};

// Whether a request's body comes with a checksum: its value in a header, one named by x-amz-trailer, or only
// its algorithm (x-amz-sdk-checksum-algorithm), as BodyReader::start takes them.
bool names_checksum(const Request& req) {
  for (const auto& [k, v] : req.headers)
    if (checksum_value_header(k)) return true;
  return req.header("x-amz-trailer") || req.header("x-amz-sdk-checksum-algorithm");
}

// Reads the body as the request's x-amz-content-sha256 says it comes, checking what it can as it goes.
class BodyReader {
 public:
  explicit BodyReader(Request& req) : req_(req) {}

  Status start() {
    const std::string& mode = req_.payload_hash;
    if (mode == kStreamingSigned) {
      decoder_.emplace(req_.signing_key, req_.auth.amz_date, req_.auth.scope(), req_.auth.signature);
    } else if (mode == kStreamingUnsignedTrailer) {
      decoder_.emplace();
    } else if (mode != kUnsignedPayload) {
      sha_.emplace("sha256");  // a hex digest: the body must match it
    }
    if (const std::string* len = req_.header("x-amz-decoded-content-length")) {
      if (len->empty() || len->size() > 15 || len->find_first_not_of("0123456789") != std::string::npos)
        return error(StatusCode::kInvalidArgument, "x-amz-decoded-content-length is not a number");
      decoded_length_ = std::stoull(*len);
    } else if (decoder_) {
      return error(StatusCode::kInvalidArgument, "an aws-chunked body needs x-amz-decoded-content-length");
    }
    if (req_.header("content-md5")) md5_check_.emplace("md5");
    // A checksum: its value in a header, or in the aws-chunked body's trailer (x-amz-trailer names it); or only
    // its algorithm named (computed and kept, nothing to check).
    std::string alg;
    for (const auto& [k, v] : req_.headers)
      if (checksum_value_header(k)) {
        alg = k.substr(kChecksumPrefix.size());
        expected_ = v;
      }
    if (const std::string* t = req_.header("x-amz-trailer")) {
      if (!t->starts_with("x-amz-checksum-") || !decoder_ || !alg.empty())
        return error(StatusCode::kInvalidArgument,
                     "x-amz-trailer must name one x-amz-checksum-* of an aws-chunked body");
      alg = t->substr(15);
      from_trailer_ = true;
    }
    if (const std::string* a = req_.header("x-amz-sdk-checksum-algorithm"); a && alg.empty()) alg = *a;
    if (!alg.empty()) {
      checksum_ = Checksum::of(alg);
      if (!checksum_) return error(StatusCode::kNotSupported, "checksum algorithm " + alg + " is not supported yet");
    }
    return Status::ok();
  }

  // The body's checksum, once finish() succeeded: its header and value (none when not asked for).
  std::optional<std::pair<std::string, std::string>> checksum() const { return computed_; }

  bool started() const { return started_; }

  // The next payload bytes into buf (0 at the end).
  Result<size_t> read(std::span<uint8_t> buf) {
    started_ = true;
    while (pending_.size() - at_ == 0 && !end_) {
      if (!req_.upload) {  // a request without a body (Content-Length: 0)
        end_ = true;
        break;
      }
      RFOS_ASSIGN_OR_RETURN(Chunk popped, req_.upload->pop_wait());
      std::string chunk = std::move(popped).take();
      pending_.clear();
      at_ = 0;
      if (chunk.empty()) {
        end_ = true;
        break;
      }
      if (decoder_) {
        RFOS_RETURN_IF_ERROR(decoder_->feed(chunk, &pending_));
      } else {
        pending_ = std::move(chunk);
      }
      if (sha_) sha_->update(pending_);
    }
    size_t n = std::min(buf.size(), pending_.size() - at_);
    std::memcpy(buf.data(), pending_.data() + at_, n);
    etag_.update(std::string_view(pending_).substr(at_, n));
    if (checksum_) checksum_->update(std::string_view(pending_).substr(at_, n));
    if (md5_check_) md5_check_->update(std::string_view(pending_).substr(at_, n));
    at_ += n;
    return n;
  }

  // Once all was read: the S3 error for a body that is not what the request said, else its MD5 (hex).
  Result<std::string> finish(uint64_t size, std::string* code) {
    if (decoder_ && !decoder_->done()) {
      *code = "IncompleteBody";
      return error(StatusCode::kInvalidArgument, "the aws-chunked body ended before its last chunk");
    }
    if (decoder_ && size != decoded_length_) {
      *code = "IncompleteBody";
      return error(StatusCode::kInvalidArgument, "the body's length is not x-amz-decoded-content-length");
    }
    if (from_trailer_) {
      for (const auto& [k, v] : decoder_->trailers())
        if (k == checksum_->header()) expected_ = v;
      if (expected_.empty()) {
        *code = "InvalidRequest";
        return error(StatusCode::kInvalidArgument, "the trailer x-amz-trailer named did not come");
      }
    }
    if (checksum_) {
      std::string got = checksum_->finish();
      if (!expected_.empty() && !equal_secret(got, expected_)) {
        *code = "BadDigest";
        return error(StatusCode::kChecksumMismatch,
                     "The " + checksum_->name() + " you specified did not match the calculated checksum.");
      }
      computed_.emplace(checksum_->header(), got);
    }
    if (sha_ && !equal_secret(hex_of(sha_->finish()), req_.payload_hash)) {
      *code = "XAmzContentSHA256Mismatch";
      return error(StatusCode::kInvalidArgument,
                   "The provided 'x-amz-content-sha256' header does not match what was computed.");
    }
    std::string md5 = etag_.finish();
    if (md5_check_ && !equal_secret(base64(md5_check_->finish()), *req_.header("content-md5"))) {
      *code = "BadDigest";
      return error(StatusCode::kChecksumMismatch, "The Content-MD5 you specified did not match what we received.");
    }
    return hex_of(md5);
  }

 private:
  Request& req_;
  std::optional<ChunkDecoder> decoder_;
  std::optional<Digest> sha_;
  std::optional<Digest> md5_check_;
  Digest etag_{"md5"};
  std::optional<Checksum> checksum_;
  std::string expected_;
  bool from_trailer_ = false;
  std::optional<std::pair<std::string, std::string>> computed_;
  uint64_t decoded_length_ = 0;
  std::string pending_;
  size_t at_ = 0;
  bool end_ = false;
  bool started_ = false;
};

// The metadata a PUT (or CreateMultipartUpload) carries, into *attrs; the S3 error when it cannot be kept.
std::optional<Response> request_attrs(const Request& req, Attrs* attrs) {
  const std::string res = resource_of(req);
  if (req.key.size() > kMaxKeyBytes) return error_response(400, "KeyTooLongError", "Your key is too long.", res);
  size_t meta_bytes = 0;
  for (const auto& [k, v] : req.headers) {
    if (k.starts_with("x-amz-meta-")) {
      meta_bytes += k.size() - 11 + v.size();
      attrs->emplace_back(k, v);
    } else if (std::find(std::begin(kStoredHeaders), std::end(kStoredHeaders), k) != std::end(kStoredHeaders)) {
      attrs->emplace_back(k, v);
    }
  }
  if (meta_bytes > kMaxMetadataBytes)
    return error_response(400, "MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.",
                          res);
  return std::nullopt;
}

// Streams the request's body through `store` on the bucket's handle: the body's MD5 (hex) once all of it was
// stored and checked, or the S3 error; *checksum gets the body's x-amz-checksum-* (header, value) where the
// request asked for one, set before `finish` returns. Tried again on a fresh handle only when it failed before
// it read any body (a body is read once).
// The answer of a PUT or UploadPart that stored its bytes: their ETag (quoted), and one more header where given
// (the body's checksum; the RDMA path's reply).
Response stored(std::string etag, const std::optional<std::pair<std::string, std::string>>& extra) {
  Response r;
  r.headers.emplace_back("etag", std::move(etag));
  if (extra) r.headers.push_back(*extra);
  return r;
}
using StoreBody = std::function<Status(client::Container&, const client::StreamSource&,
                                       const std::function<Result<std::string>(uint64_t)>& finish)>;
Result<std::string> store_body(const ServiceConfig& config, const User& user, Handles& handles, Request& req,
                               const StoreBody& store, std::optional<Response>* failure, ChecksumHeader* checksum) {
  const std::string res = resource_of(req);
  BodyReader body(req);
  if (Status s = body.start(); !s.is_ok()) {
    *failure = s.code() == StatusCode::kNotSupported ? error_response(501, "NotImplemented", s.message(), res)
                                                     : error_response(400, "InvalidRequest", s.message(), res);
    return s;
  }
  std::string code, etag;
  Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto c = bucket(config, user, handles, req.bucket, true);
    if (!c.is_ok()) {
      s = c.status();
      break;
    }
    s = store(
        **c, [&](std::span<uint8_t> b) { return body.read(b); },
        [&](uint64_t size) -> Result<std::string> {
          RFOS_ASSIGN_OR_RETURN(etag, body.finish(size, &code));
          *checksum = body.checksum();
          return etag;
        });
    if (s.is_ok() || body.started() || !stale_handle(s.code())) break;
    handles.drop(user, req.bucket);
  }
  if (req.upload) req.upload->abandon();
  if (!s.is_ok()) {
    if (!failure->has_value())  // unless `store` said what to answer (NoSuchUpload)
      *failure = code.empty() ? error_response(s, res)
                              : error_response(code == "NotImplemented" ? 501 : 400, code, s.message(), res);
    return s;
  }
  return etag;
}

void put_object(const ServiceConfig& config, const User& user, Handles& handles, Request& req,
                const std::function<void(Response)>& reply) {
  Attrs attrs;
  if (auto bad = request_attrs(req, &attrs)) return reply(std::move(*bad));
  std::optional<Response> failure;
  ChecksumHeader checksum;
  auto etag = store_body(
      config, user, handles, req,
      [&](client::Container& c, const client::StreamSource& source, const auto& finish) {
        client::PutOptions o;
        o.attrs = [&](uint64_t size) -> Result<std::string> {
          RFOS_ASSIGN_OR_RETURN(std::string md5, finish(size));
          Attrs all = attrs;
          all.emplace_back("etag", md5);
          if (checksum) {
            all.push_back(*checksum);
            all.emplace_back(kTypeAttr, "FULL_OBJECT");
          }
          return encode_attrs(all);
        };
        return client::NamedObjects(c).put(req.key, source, {}, o);
      },
      &failure, &checksum);
  if (!etag.is_ok()) return reply(std::move(*failure));
  reply(stored("\"" + *etag + "\"", checksum));
}

// "bytes=A-B", "bytes=A-", "bytes=-N" against `size`: [first, last], nullopt when unsatisfiable, and no range
// at all (the whole object) for what is not one range S3 reads.
struct Range {
  uint64_t first = 0, last = 0;
};
std::optional<std::optional<Range>> parse_range(std::string_view h, uint64_t size) {
  using R = std::optional<std::optional<Range>>;
  if (!h.starts_with("bytes=")) return R(std::optional<Range>());
  h.remove_prefix(6);
  size_t dash = h.find('-');
  if (dash == std::string_view::npos || h.find(',') != std::string_view::npos) return R(std::optional<Range>());
  std::string_view a = h.substr(0, dash), b = h.substr(dash + 1);
  auto num = [](std::string_view s) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    return std::stoull(std::string(s));
  };
  if (a.empty()) {  // the last N bytes
    auto n = num(b);
    if (!n) return R(std::optional<Range>());
    if (*n == 0 || size == 0) return std::nullopt;
    return R(Range{size - std::min(*n, size), size - 1});
  }
  auto first = num(a);
  auto last = b.empty() ? std::optional<uint64_t>(UINT64_MAX) : num(b);
  if (!first || !last || *last < *first) return R(std::optional<Range>());
  if (*first >= size) return std::nullopt;
  return R(Range{*first, std::min(*last, size - 1)});
}

// --- multipart uploads ---------------------------------------------------------------------------------------
//
// Kept by the named objects (NamedObjects::begin_upload and the rest: docs/object-layout.md), so that every
// object of the layout is accounted for. Complete makes the listed parts one object (put_parts) and drops the
// upload; abort drops it with its parts.

constexpr size_t kMinPartBytes = 5u << 20;  // every part but the last, as S3
constexpr uint32_t kMaxParts = 10000;

// A multipart upload's checksum, as CreateMultipartUpload asks for it (x-amz-checksum-algorithm, and
// x-amz-checksum-type COMPOSITE or FULL_OBJECT): kept in the upload's attributes (kAlgAttr, kTypeAttr) until
// completion, taken of every part, and at completion made the object's as S3 makes it: COMPOSITE, the algorithm
// over the parts' checksums one after another, "-<parts>" after it (CRC32, CRC32C, SHA1, SHA256); FULL_OBJECT,
// the CRC of the whole object, combined from the parts' CRCs and sizes (CRC32, CRC32C, CRC64NVME).
struct UploadChecksum {
  std::string alg;   // "crc32", ...; empty: none asked for
  std::string type;  // "COMPOSITE" or "FULL_OBJECT"
};
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The XML element of a checksum: ChecksumCRC32, ...
std::string checksum_element(std::string_view alg) { return "Checksum" + upper(std::string(alg)); }

// From CreateMultipartUpload's headers into *out; the S3 error for what S3 does not make.
std::optional<Response> upload_checksum(const Request& req, UploadChecksum* out) {
  const std::string* alg = req.header("x-amz-checksum-algorithm");
  const std::string* type = req.header("x-amz-checksum-type");
  if (!alg && !type) return std::nullopt;
  if (!alg)
    return error_response(400, "InvalidRequest", "x-amz-checksum-type needs x-amz-checksum-algorithm",
                          resource_of(req));
  const std::string a = ascii_lower(*alg);
  const bool crc = a == "crc32" || a == "crc32c", digest = a == "sha1" || a == "sha256";
  std::string t = type ? upper(*type) : a == "crc64nvme" ? "FULL_OBJECT" : "COMPOSITE";
  const bool ok = t == "COMPOSITE" ? crc || digest : t == "FULL_OBJECT" && (crc || a == "crc64nvme");
  if (!ok)
    return error_response(400, "InvalidRequest",
                          "The " + upper(a) + " algorithm does not make a " + t + " checksum of an object of parts",
                          resource_of(req));
  *out = {a, t};
  return std::nullopt;
}

UploadChecksum upload_checksum_of(const Attrs& upload_attrs) {
  const std::string *alg = attr(upload_attrs, kAlgAttr), *type = attr(upload_attrs, kTypeAttr);
  return alg && type ? UploadChecksum{*alg, *type} : UploadChecksum{};
}

// A staged part's record holds its ETag (32 hex digits) and, where its request or its upload asked for one, its
// checksum: "<etag> <alg>:<base64>".
struct PartTag {
  std::string etag, alg, value;
};
PartTag part_tag(std::string_view stored) {
  PartTag t;
  const size_t sp = stored.find(' '), colon = stored.find(':', sp);
  t.etag = stored.substr(0, sp);
  if (sp != std::string_view::npos && colon != std::string_view::npos) {
    t.alg = stored.substr(sp + 1, colon - sp - 1);
    t.value = stored.substr(colon + 1);
  }
  return t;
}
std::string part_tag_text(const std::string& etag, const ChecksumHeader& checksum) {
  return checksum ? etag + " " + alg_of(*checksum) + ":" + checksum->second : etag;
}

// A part's checksum for its upload, in `checksum` (none where the part's request named none): the S3 error, in
// *failure, where it is of another algorithm than the upload's.
Status check_part_checksum(const Request& req, const UploadChecksum& uc, const ChecksumHeader& checksum,
                           std::optional<Response>* failure) {
  if (uc.alg.empty() || !checksum || alg_of(*checksum) == uc.alg) return Status::ok();
  *failure = error_response(400, "InvalidRequest",
                            "Checksum Type mismatch occurred, expected checksum Type: " + uc.alg +
                                ", actual checksum Type: " + alg_of(*checksum),
                            resource_of(req));
  return error(StatusCode::kInvalidArgument, "checksum type mismatch");
}

// The upload, checked against the request's key. When it is not there or is another key's: an error, and in
// *failure the answer (NoSuchUpload); *failure is cleared otherwise (a call tried again on a fresh handle).
Status check_upload(client::Container& c, const Request& req, const std::string& upload_id,
                    std::optional<Response>* failure, client::NamedObjects::Upload* out = nullptr) {
  failure->reset();
  auto u = client::NamedObjects(c).upload(upload_id);
  if (!u.is_ok() && u.status().code() != StatusCode::kNotFound) {
    *failure = error_response(u.status(), resource_of(req));
    return u.status();
  }
  if (!u.is_ok() || u->name != req.key) {
    *failure = error_response(404, "NoSuchUpload",
                              "The specified multipart upload does not exist. The upload ID may be invalid, or the "
                              "upload may have been aborted or completed.",
                              resource_of(req));
    return error(StatusCode::kNotFound, "no such upload");
  }
  if (out) *out = std::move(u).value();
  return Status::ok();
}

void create_upload(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                   const std::function<void(Response)>& reply) {
  Attrs attrs;
  if (auto bad = request_attrs(req, &attrs)) return reply(std::move(*bad));
  UploadChecksum uc;
  if (auto bad = upload_checksum(req, &uc)) return reply(std::move(*bad));
  if (!uc.alg.empty()) {
    attrs.emplace_back(kAlgAttr, uc.alg);
    attrs.emplace_back(kTypeAttr, uc.type);
  }
  const std::string upload_id = hex_of(random_bytes(16));  // unguessable, and unique across gateways
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) {
    return client::NamedObjects(c).begin_upload({upload_id, req.key, encode_attrs(attrs), now_ms()});
  });
  if (!s.is_ok()) return reply(error_response(s, resource_of(req)));
  Xml x;
  x.open("InitiateMultipartUploadResult", kNs).leaf("Bucket", req.bucket).leaf("Key", req.key);
  x.leaf("UploadId", upload_id).close("InitiateMultipartUploadResult");
  Response r = xml_response(200, std::move(x));
  if (!uc.alg.empty()) {
    r.headers.emplace_back(std::string(kAlgAttr), upper(uc.alg));
    r.headers.emplace_back(std::string(kTypeAttr), uc.type);
  }
  reply(std::move(r));
}

// S3's answer to a part number part_number did not take.
Response bad_part_number(const Request& req) {
  return error_response(400, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                        resource_of(req));
}

std::optional<uint32_t> part_number(const Request& req) {
  const std::string* n = req.param("partNumber");
  if (!n || n->empty() || n->size() > 5 || n->find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  uint32_t v = static_cast<uint32_t>(std::stoul(*n));
  if (v < 1 || v > kMaxParts) return std::nullopt;
  return v;
}

// Writes part `n` of the upload (by `write`, which gives its size) into a data object of its own, recorded as being
// written first (the upload's, even if this dies), then as the part (the part uploaded before under that number
// goes; one uploaded at the same time may be left). `check` (the body's digests, a copy's source) runs once all is
// written and gives the part's ETag (32 hex digits: its MD5 where the gateway saw the bytes); its error, or any
// other, abandons the part.
using WriteData = std::function<Status(client::NamedObjects&, const ObjectId& data, uint64_t* size)>;
Result<std::string> write_part(client::Container& c, const std::string& upload_id, uint32_t n, const WriteData& write,
                               const std::function<Result<std::string>(uint64_t)>& check) {
  client::NamedObjects objects(c);
  const ObjectId data = client::NamedObjects::fresh_data_object();
  RFOS_RETURN_IF_ERROR(objects.begin_part(upload_id, data));
  uint64_t size = 0;
  Status s = write(objects, data, &size);
  std::string md5;
  if (s.is_ok()) {
    auto m = check(size);
    s = m.status();
    if (m.is_ok()) md5 = std::move(m).value();
  }
  if (s.is_ok()) s = objects.add_part(upload_id, n, {data, size}, md5);
  if (!s.is_ok()) {
    (void)objects.abandon_part(upload_id, data);
    return s;
  }
  return md5;
}

// A part or object written from a source (a body, a copy's reader).
WriteData from_source(client::Container& c, const client::StreamSource& source) {
  return [&c, source](client::NamedObjects&, const ObjectId& data, uint64_t* size) {
    return client::write_file_object(c, data, 0, source, 16, {}, size);
  };
}

// --- copies --------------------------------------------------------------------------------------------------

// The object x-amz-copy-source names ("bucket/key" or "/bucket/key", URL-encoded), opened on a handle of its own
// (the copy reads it on the put's reader thread while the put writes on its own).
struct CopySource {
  std::string bucket, key;
  std::unique_ptr<client::Container> cont;
  client::ObjectStat st;
};

std::optional<Response> open_copy_source(const ServiceConfig& config, const User& user, const Request& req,
                                         CopySource* src) {
  const std::string res = resource_of(req);
  for (const auto& [k, v] : req.headers)
    if (k.starts_with("x-amz-copy-source-if-") || k.starts_with("x-amz-copy-source-server-side-encryption"))
      return error_response(501, "NotImplemented", "'" + k + "' is not implemented by rfos s3 yet.", res);
  std::string raw = *req.header("x-amz-copy-source");
  if (raw.find("?versionId=") != std::string::npos)
    return error_response(501, "NotImplemented", "Versions are not implemented by rfos s3 yet.", res);
  auto decoded = uri_decode(raw);
  if (!decoded.is_ok()) return error_response(400, "InvalidArgument", "x-amz-copy-source is malformed", res);
  std::string_view path = *decoded;
  if (path.starts_with("/")) path.remove_prefix(1);
  size_t slash = path.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == path.size())
    return error_response(400, "InvalidArgument", "x-amz-copy-source must be BUCKET/KEY", res);
  src->bucket = path.substr(0, slash);
  src->key = path.substr(slash + 1);
  client::ContainerOptions o = options(config);
  o.write = false;
  auto c = client::Container::open(*user.control, config.pool, src->bucket, o);
  if (!c.is_ok()) return error_response(c.status(), "/" + src->bucket, true);
  src->cont = std::move(c).value();
  auto st = client::NamedObjects(*src->cont).stat(src->key);
  if (!st.is_ok()) {
    if (st.status().code() == StatusCode::kNotFound)
      return error_response(404, "NoSuchKey", "The specified key does not exist.", "/" + src->bucket + "/" + src->key);
    return error_response(st.status(), res);
  }
  src->st = std::move(st).value();
  return std::nullopt;
}

// [offset, offset + length) of the source as a StreamSource, a piece (1 MiB at most) per call, each hashed.
// A read of an object's data after its name was read: `read`, or where the data is gone (kNotFound), the error
// that a put replaced the object (or a delete removed it) meanwhile, which a client retries (503). Nothing is
// checked after a read succeeds: a data object is written whole before its name points to it and never changes
// after, and a read of a chunk that was removed fails instead of reading as a hole (one target's removal of
// its part is atomic), so bytes that were read are the old object's, whole (docs/object-layout.md).
Status replaced_under(Status read, std::string_view what) {
  if (read.code() != StatusCode::kNotFound) return read;
  return error(StatusCode::kBusy,
               std::string(what) + " was replaced or removed while it was read: " + read.message() + "; ask again");
}

client::StreamSource copy_reader(CopySource& src, uint64_t offset, uint64_t length, Digest* md5,
                                 Checksum* checksum = nullptr) {
  auto pos = std::make_shared<uint64_t>(offset);
  const uint64_t end = offset + length;
  return [&src, pos, end, md5, checksum](std::span<uint8_t> buf) -> Result<size_t> {
    size_t n = static_cast<size_t>(std::min<uint64_t>({buf.size(), client::kMaxIoBytes, end - *pos}));
    if (n == 0) return size_t{0};
    size_t got = 0;
    RFOS_RETURN_IF_ERROR(replaced_under(client::NamedObjects(*src.cont).read_range(src.st, *pos, n,
                                                                                   [&](std::span<const uint8_t> b) {
                                                                                     std::memcpy(buf.data() + got,
                                                                                                 b.data(), b.size());
                                                                                     got += b.size();
                                                                                     return Status::ok();
                                                                                   }),
                                        "the copy's source"));
    md5->update(std::string_view(reinterpret_cast<const char*>(buf.data()), got));
    if (checksum) checksum->update(std::string_view(reinterpret_cast<const char*>(buf.data()), got));
    *pos += got;
    return got;
  };
}

// What a copy answers (CopyObjectResult, CopyPartResult), with the copy's checksum where one was taken.
Response copy_result(std::string_view tag, const std::string& etag, const ChecksumHeader& checksum = {}) {
  Xml x;
  x.open(tag, kNs).leaf("LastModified", iso_date(now_ms())).leaf("ETag", "\"" + etag + "\"");
  if (checksum) x.leaf(checksum_element(alg_of(*checksum)), checksum->second);
  x.close(tag);
  return xml_response(200, std::move(x));
}

void copy_object(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                 const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  CopySource src;
  if (auto bad = open_copy_source(config, user, req, &src)) return reply(std::move(*bad));
  const std::string* directive = req.header("x-amz-metadata-directive");
  const bool replace = directive && *directive == "REPLACE";
  if (directive && !replace && *directive != "COPY")
    return reply(error_response(400, "InvalidArgument", "x-amz-metadata-directive must be COPY or REPLACE", res));
  if (src.bucket == req.bucket && src.key == req.key && !replace)
    return reply(error_response(400, "InvalidRequest",
                                "This copy request is illegal because it is trying to copy an object to itself "
                                "without changing the object's metadata, storage class, website redirect location or "
                                "encryption attributes.",
                                res));
  Attrs attrs;
  if (replace) {
    if (auto bad = request_attrs(req, &attrs)) return reply(std::move(*bad));
  } else {
    for (auto& [k, v] : decode_attrs(src.st.attrs))
      if (k != "etag" && !k.starts_with("x-amz-checksum-")) attrs.emplace_back(k, v);
  }
  std::string etag;
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) {
    Digest md5("md5");
    client::PutOptions o;
    o.attrs = [&](uint64_t) -> Result<std::string> {
      etag = hex_of(md5.finish());
      Attrs all = attrs;
      all.emplace_back("etag", etag);
      return encode_attrs(all);
    };
    return client::NamedObjects(c).put(req.key, copy_reader(src, 0, src.st.size, &md5), {}, o);
  });
  if (!s.is_ok()) return reply(error_response(s, res));
  reply(copy_result("CopyObjectResult", etag));
}

void upload_part(const ServiceConfig& config, const User& user, Handles& handles, Request& req,
                 const std::function<void(Response)>& reply) {
  const std::string upload_id = *req.param("uploadId");
  auto n = part_number(req);
  if (!n) return reply(bad_part_number(req));
  std::optional<Response> failure;
  ChecksumHeader checksum;
  auto md5 = store_body(
      config, user, handles, req,
      [&](client::Container& c, const client::StreamSource& source, const auto& finish) -> Status {
        client::NamedObjects::Upload upload;
        RFOS_RETURN_IF_ERROR(check_upload(c, req, upload_id, &failure, &upload));
        const UploadChecksum uc = upload_checksum_of(decode_attrs(upload.attrs));
        // A part of an upload with a checksum, whose request names none: the gateway takes it of the bytes.
        std::optional<Checksum> own;
        if (!uc.alg.empty() && !names_checksum(req)) own = Checksum::of(uc.alg);
        client::StreamSource summed = [&](std::span<uint8_t> b) -> Result<size_t> {
          RFOS_ASSIGN_OR_RETURN(size_t got, source(b));
          own->update(std::string_view(reinterpret_cast<const char*>(b.data()), got));
          return got;
        };
        return write_part(c, upload_id, *n, from_source(c, own ? summed : source),
                          [&](uint64_t size) -> Result<std::string> {
                            RFOS_ASSIGN_OR_RETURN(std::string md5, finish(size));
                            if (own) checksum.emplace(own->header(), own->finish());
                            RFOS_RETURN_IF_ERROR(check_part_checksum(req, uc, checksum, &failure));
                            return part_tag_text(md5, checksum);
                          })
            .status();
      },
      &failure, &checksum);
  if (!md5.is_ok()) return reply(std::move(*failure));
  reply(stored("\"" + *md5 + "\"", checksum));
}

void upload_part_copy(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                      const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  const std::string upload_id = *req.param("uploadId");
  auto n = part_number(req);
  if (!n) return reply(bad_part_number(req));
  CopySource src;
  if (auto bad = open_copy_source(config, user, req, &src)) return reply(std::move(*bad));
  uint64_t first = 0, length = src.st.size;
  if (const std::string* r = req.header("x-amz-copy-source-range")) {
    // Only "bytes=A-B", inside the source.
    auto range = parse_range(*r, src.st.size);
    if (!range || !*range || r->find("=-") != std::string::npos || r->back() == '-')
      return reply(error_response(400, "InvalidArgument",
                                  "The x-amz-copy-source-range value must be of the form bytes=first-last where first "
                                  "and last are the zero-based offsets of the first and last bytes to copy",
                                  res));
    first = (*range)->first;
    length = (*range)->last - first + 1;
  }
  std::optional<Response> failure;
  std::string etag;
  ChecksumHeader checksum;
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) -> Status {
    client::NamedObjects::Upload upload;
    RFOS_RETURN_IF_ERROR(check_upload(c, req, upload_id, &failure, &upload));
    // The part's checksum where its upload asked for one: taken of the bytes as they are copied.
    const UploadChecksum uc = upload_checksum_of(decode_attrs(upload.attrs));
    std::optional<Checksum> sum;
    if (!uc.alg.empty()) sum = Checksum::of(uc.alg);
    Digest md5("md5");
    auto reader = copy_reader(src, first, length, &md5, sum ? &*sum : nullptr);
    RFOS_ASSIGN_OR_RETURN(std::string tag,
                          write_part(c, upload_id, *n, from_source(c, reader), [&](uint64_t) -> Result<std::string> {
                            etag = hex_of(md5.finish());
                            if (sum) checksum.emplace(sum->header(), sum->finish());
                            return part_tag_text(etag, checksum);
                          }));
    return Status::ok();
  });
  if (failure) return reply(std::move(*failure));
  if (!s.is_ok()) return reply(error_response(s, res));
  reply(copy_result("CopyPartResult", etag, checksum));
}

void complete_upload(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                     const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  const std::string upload_id = *req.param("uploadId");
  auto doc = parse_xml(req.body);
  if (!doc.is_ok() || doc->name != "CompleteMultipartUpload")
    return reply(error_response(400, "MalformedXML",
                                "The XML you provided was not well-formed or did not validate against our published "
                                "schema.",
                                res));
  struct Listed {
    uint32_t number;
    std::string etag;
    std::vector<std::pair<std::string, std::string>> checksums;  // (algorithm, value) the client gave
  };
  std::vector<Listed> listed;
  for (const XmlElement& p : doc->children) {
    if (p.name != "Part") continue;
    const XmlElement *num = p.child("PartNumber"), *etag = p.child("ETag");
    if (!num || !etag || num->text.empty() || num->text.size() > 5 ||
        num->text.find_first_not_of("0123456789") != std::string::npos)
      return reply(error_response(400, "MalformedXML", "A Part needs a PartNumber and an ETag.", res));
    std::string e = etag->text;
    if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
    Listed l{static_cast<uint32_t>(std::stoul(num->text)), e, {}};
    for (const char* alg : {"crc32", "crc32c", "crc64nvme", "sha1", "sha256"})
      if (const XmlElement* c = p.child(checksum_element(alg))) l.checksums.emplace_back(alg, c->text);
    listed.push_back(std::move(l));
  }
  if (listed.empty()) return reply(error_response(400, "MalformedXML", "You must specify at least one part.", res));
  for (size_t i = 1; i < listed.size(); ++i)
    if (listed[i].number <= listed[i - 1].number)
      return reply(error_response(400, "InvalidPartOrder",
                                  "The list of parts was not in ascending order. Parts must be ordered by part number.",
                                  res));
  std::optional<Response> failure;
  std::string final_etag;
  ChecksumHeader checksum;
  std::string checksum_type;
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) -> Status {
    client::NamedObjects objects(c);
    client::NamedObjects::Upload upload;
    RFOS_RETURN_IF_ERROR(check_upload(c, req, upload_id, &failure, &upload));
    RFOS_ASSIGN_OR_RETURN(auto parts, objects.parts(upload_id));
    const UploadChecksum uc = upload_checksum_of(decode_attrs(upload.attrs));
    auto refuse = [&](Response r) {
      failure = std::move(r);
      return error(StatusCode::kInvalidArgument, "refused");
    };
    for (const Listed& l : listed) {
      auto it = parts.find(l.number);
      const PartTag tag = it == parts.end() ? PartTag{} : part_tag(it->second.etag);
      bool sums_match = true;  // each checksum the client gave is the one the part was stored with
      for (const auto& [alg, value] : l.checksums) sums_match = sums_match && alg == tag.alg && value == tag.value;
      if (it == parts.end() || tag.etag != l.etag || !sums_match)
        return refuse(error_response(400, "InvalidPart",
                                     "One or more of the specified parts could not be found. The part may not have "
                                     "been uploaded, or the specified entity tag may not match the part's entity "
                                     "tag.",
                                     res));
      if (!uc.alg.empty() && tag.alg != uc.alg)
        return refuse(error_response(400, "InvalidRequest",
                                     "The upload was created using a " + uc.alg + " checksum; part " +
                                         std::to_string(l.number) + " was uploaded without one",
                                     res));
    }
    std::string md5s;
    // The object's checksum: of the parts' checksums (COMPOSITE), or the whole object's CRC (FULL_OBJECT).
    std::optional<Checksum> sum;
    if (!uc.alg.empty()) sum = Checksum::of(uc.alg);
    const bool composite = uc.type == "COMPOSITE";
    std::vector<client::NamedObjects::Part> chosen;
    std::set<ObjectId> keep;
    for (size_t i = 0; i < listed.size(); ++i) {
      auto it = parts.find(listed[i].number);
      if (i + 1 < listed.size() && it->second.part.size < kMinPartBytes)
        return refuse(error_response(400, "EntityTooSmall",
                                     "Your proposed upload is smaller than the minimum allowed size", res));
      chosen.push_back(it->second.part);
      keep.insert(it->second.part.data);
      const PartTag tag = part_tag(it->second.etag);
      md5s += from_hex(tag.etag).value_or("");  // a part's ETag is the hex MD5 this gateway took
      if (!sum) continue;
      auto raw = from_base64(tag.value);  // the gateway's own: what it computed of the part
      bool taken = raw.has_value();
      if (taken && composite)
        sum->update(*raw);
      else if (taken)
        taken = sum->follow_with(*raw, it->second.part.size);
      if (!taken) return error(StatusCode::kCorruption, "a part's stored checksum is malformed");
    }
    Digest d("md5");
    d.update(md5s);
    final_etag = hex_of(d.finish()) + "-" + std::to_string(listed.size());
    if (sum) {
      const std::string value = sum->finish() + (composite ? "-" + std::to_string(listed.size()) : "");
      checksum.emplace(sum->header(), value);
      checksum_type = uc.type;
      // The whole object's checksum the client may send with the completion (FULL_OBJECT's): it must agree.
      if (const std::string* given = req.header(checksum->first); given && *given != value)
        return refuse(error_response(400, "BadDigest",
                                     "The " + uc.alg + " you specified did not match the calculated checksum.", res));
    }
    client::PutOptions o;
    o.attrs = [&](uint64_t) -> Result<std::string> {
      Attrs all;
      for (auto& [k, v] : decode_attrs(upload.attrs))
        if (k != kAlgAttr && k != kTypeAttr) all.emplace_back(k, v);
      all.emplace_back("etag", final_etag);
      if (checksum) {
        all.push_back(*checksum);
        all.emplace_back(kTypeAttr, checksum_type);
      }
      return encode_attrs(all);
    };
    RFOS_RETURN_IF_ERROR(objects.put_parts(req.key, chosen, o));
    // The parts are the object's now; those not listed go with the upload.
    return objects.drop_upload(upload_id, keep);
  });
  if (failure) return reply(std::move(*failure));
  if (!s.is_ok()) return reply(error_response(s, res));
  Xml x;
  x.open("CompleteMultipartUploadResult", kNs).leaf("Location", res).leaf("Bucket", req.bucket);
  x.leaf("Key", req.key).leaf("ETag", "\"" + final_etag + "\"");
  if (checksum) x.leaf(checksum_element(alg_of(*checksum)), checksum->second).leaf("ChecksumType", checksum_type);
  x.close("CompleteMultipartUploadResult");
  reply(xml_response(200, std::move(x)));
}

void abort_upload(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                  const std::function<void(Response)>& reply) {
  std::optional<Response> failure;
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) -> Status {
    RFOS_RETURN_IF_ERROR(check_upload(c, req, *req.param("uploadId"), &failure));
    return client::NamedObjects(c).drop_upload(*req.param("uploadId"), {});
  });
  if (failure) return reply(std::move(*failure));
  if (!s.is_ok()) return reply(error_response(s, resource_of(req)));
  Response r;
  r.status = 204;
  reply(std::move(r));
}

void list_parts(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                const std::function<void(Response)>& reply) {
  std::optional<Response> failure;
  std::map<uint32_t, client::NamedObjects::StagedPart> parts;
  client::NamedObjects::Upload upload;
  Status s = with_bucket(config, user, handles, req.bucket, false, [&](client::Container& c) -> Status {
    RFOS_RETURN_IF_ERROR(check_upload(c, req, *req.param("uploadId"), &failure, &upload));
    RFOS_ASSIGN_OR_RETURN(parts, client::NamedObjects(c).parts(*req.param("uploadId")));
    return Status::ok();
  });
  if (failure) return reply(std::move(*failure));
  if (!s.is_ok()) return reply(error_response(s, resource_of(req)));
  uint32_t marker = 0;
  if (const std::string* m = req.param("part-number-marker");
      m && !m->empty() && m->size() <= 5 && m->find_first_not_of("0123456789") == std::string::npos)
    marker = static_cast<uint32_t>(std::stoul(*m));
  size_t max_parts = 1000;
  if (const std::string* m = req.param("max-parts");
      m && !m->empty() && m->size() <= 5 && m->find_first_not_of("0123456789") == std::string::npos)
    max_parts = std::min<size_t>(std::stoul(*m), 1000);
  Xml x;
  x.open("ListPartsResult", kNs).leaf("Bucket", req.bucket).leaf("Key", req.key);
  x.leaf("UploadId", *req.param("uploadId")).leaf("PartNumberMarker", std::to_string(marker));
  if (const UploadChecksum uc = upload_checksum_of(decode_attrs(upload.attrs)); !uc.alg.empty())
    x.leaf("ChecksumAlgorithm", upper(uc.alg)).leaf("ChecksumType", uc.type);
  std::string body;
  size_t given = 0;
  uint32_t last = marker;
  bool truncated = false;
  for (const auto& [n, p] : parts) {
    if (n <= marker) continue;
    if (given == max_parts) {
      truncated = true;
      break;
    }
    Xml part;
    part.s.clear();
    const PartTag tag = part_tag(p.etag);
    part.open("Part").leaf("PartNumber", std::to_string(n)).leaf("ETag", "\"" + tag.etag + "\"");
    part.leaf("Size", std::to_string(p.part.size));
    if (!tag.alg.empty()) part.leaf(checksum_element(tag.alg), tag.value);
    part.close("Part");
    body += part.s;
    last = n;
    ++given;
  }
  x.leaf("NextPartNumberMarker", std::to_string(last)).leaf("MaxParts", std::to_string(max_parts));
  x.leaf("IsTruncated", truncated ? "true" : "false");
  x.s += body;
  x.close("ListPartsResult");
  reply(xml_response(200, std::move(x)));
}

void list_uploads(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                  const std::function<void(Response)>& reply) {
  auto p = [&](std::string_view name) { return req.param(name) ? *req.param(name) : std::string(); };
  ListingParams lp;
  if (auto bad = lp.parse(req, "max-uploads")) return reply(std::move(*bad));
  const std::string &prefix = lp.prefix, &delimiter = lp.delimiter, &encoding = lp.encoding;
  const size_t max_uploads = lp.max;
  const std::string key_marker = p("key-marker"), id_marker = key_marker.empty() ? "" : p("upload-id-marker");
  auto uploads = with_bucket(config, user, handles, req.bucket, false,
                             [&](client::Container& c) { return client::NamedObjects(c).uploads(prefix); });
  if (!uploads.is_ok()) return reply(error_response(uploads.status(), resource_of(req), true));
  // After the markers. Uploads come by key, then id: past the key marker and, where the marker is a common prefix
  // (the page before ended with one, so it gave no upload id marker), every key under it; or at the key marker,
  // past the upload id marker.
  const bool marker_prefix =
      id_marker.empty() && !delimiter.empty() && key_marker.starts_with(prefix) && lp.folded(key_marker) == key_marker;
  std::vector<const client::NamedObjects::Upload*> listed;
  std::vector<std::string> prefixes;
  std::string next_key, next_id;  // the last upload or common prefix given
  bool truncated = false;
  for (const client::NamedObjects::Upload& u : *uploads) {
    if (!key_marker.empty()) {
      if (marker_prefix && u.name.starts_with(key_marker)) continue;
      if (u.name < key_marker || (u.name == key_marker && (id_marker.empty() || u.id <= id_marker))) continue;
    }
    std::string cp = lp.folded(u.name);
    if (!cp.empty() && !prefixes.empty() && prefixes.back() == cp) continue;
    if (listed.size() + prefixes.size() >= max_uploads) {
      truncated = max_uploads > 0;  // as ListObjects: max-uploads 0 asks for nothing, and is given all of it
      break;
    }
    next_key = cp.empty() ? u.name : cp;
    next_id = cp.empty() ? u.id : std::string();
    if (cp.empty())
      listed.push_back(&u);
    else
      prefixes.push_back(std::move(cp));
  }
  Xml x;
  x.open("ListMultipartUploadsResult", kNs).leaf("Bucket", req.bucket).leaf("KeyMarker", lp.encode(key_marker));
  x.leaf("UploadIdMarker", id_marker).leaf("Prefix", lp.encode(prefix));
  if (!delimiter.empty()) x.leaf("Delimiter", lp.encode(delimiter));
  if (!encoding.empty()) x.leaf("EncodingType", encoding);
  x.leaf("MaxUploads", std::to_string(max_uploads)).leaf("IsTruncated", truncated ? "true" : "false");
  if (truncated) x.leaf("NextKeyMarker", lp.encode(next_key)).leaf("NextUploadIdMarker", next_id);
  for (const client::NamedObjects::Upload* u : listed)
    x.open("Upload")
        .leaf("Key", lp.encode(u->name))
        .leaf("UploadId", u->id)
        .leaf("StorageClass", "STANDARD")
        .close("Upload");
  for (const std::string& cp : prefixes) x.open("CommonPrefixes").leaf("Prefix", lp.encode(cp)).close("CommonPrefixes");
  x.close("ListMultipartUploadsResult");
  reply(xml_response(200, std::move(x)));
}

// --- DeleteObjects -------------------------------------------------------------------------------------------

void delete_objects(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                    const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  if (const std::string* md5 = req.header("content-md5")) {
    Digest d("md5");
    d.update(req.body);
    if (!equal_secret(base64(d.finish()), *md5))
      return reply(
          error_response(400, "BadDigest", "The Content-MD5 you specified did not match what we received.", res));
  }
  auto doc = parse_xml(req.body);
  if (!doc.is_ok() || doc->name != "Delete")
    return reply(error_response(400, "MalformedXML",
                                "The XML you provided was not well-formed or did not validate against our published "
                                "schema.",
                                res));
  const bool quiet = doc->child("Quiet") && doc->child("Quiet")->text == "true";
  std::vector<std::string> keys;
  for (const XmlElement& o : doc->children)
    if (o.name == "Object") {
      const XmlElement* k = o.child("Key");
      if (!k || k->text.empty()) return reply(error_response(400, "MalformedXML", "An Object needs a Key.", res));
      keys.push_back(k->text);
    }
  if (keys.empty() || keys.size() > 1000)
    return reply(error_response(400, "MalformedXML", "Delete takes 1 to 1000 objects.", res));
  Xml x;
  x.open("DeleteResult", kNs);
  for (const std::string& k : keys) {
    Status s = with_bucket(config, user, handles, req.bucket, true,
                           [&](client::Container& c) { return client::NamedObjects(c).remove(k); });
    if (s.is_ok() || s.code() == StatusCode::kNotFound) {
      if (!quiet) x.open("Deleted").leaf("Key", k).close("Deleted");
    } else {
      Response e = error_response(s, res);
      std::string code = e.body.substr(e.body.find("<Code>") + 6);
      code = code.substr(0, code.find('<'));
      x.open("Error").leaf("Key", k).leaf("Code", code).leaf("Message", s.message()).close("Error");
    }
  }
  x.close("DeleteResult");
  reply(xml_response(200, std::move(x)));
}

// --- the RDMA path (docs/s3.md, "RDMA") -----------------------------------------------------------------------

// A request that carries x-amz-rdma-token: the grant it names, and the use this request makes of it.
struct RdmaRequest {
  RdmaToken token;
  client::GrantRef grant;
};

// The answer of a request the RDMA path does not serve: S3's NotImplemented, and x-amz-rdma-reply 501, so a
// client sends it again with its body.
Response rdma_decline(std::string_view why, std::string_view res) {
  Response r = error_response(501, "NotImplemented", why, res);
  r.headers.emplace_back(std::string(kRdmaReplyHeader), "501");
  return r;
}

// The token of `req`, checked: signed, well formed, no body beside it; nullopt and *rdma set when it may go on.
std::optional<Response> rdma_check(const Request& req, RdmaRequest* rdma) {
  const std::string res = resource_of(req);
  const auto& signed_headers = req.auth.signed_headers;
  if (req.auth.access_key.empty() ||
      std::find(signed_headers.begin(), signed_headers.end(), kRdmaTokenHeader) == signed_headers.end())
    return error_response(403, "AccessDenied", "x-amz-rdma-token must be among the headers the request signs", res);
  auto token = parse_rdma_token(*req.header(kRdmaTokenHeader));
  if (!token.is_ok()) return error_response(400, "InvalidToken", token.status().message(), res);
  const std::string* length = req.header("content-length");
  if ((length && *length != "0") || req.header("transfer-encoding") || !req.body.empty() ||
      req.payload_hash.starts_with("STREAMING-"))
    return error_response(400, "InvalidRequest", "a request with x-amz-rdma-token carries no body", res);
  for (const auto& [k, v] : req.headers)
    if (k == "content-md5" || k.starts_with("x-amz-checksum-") || k == "x-amz-sdk-checksum-algorithm" ||
        k == "x-amz-trailer")
      return rdma_decline("the RDMA path takes no checksum of the body (" + k + "): its bytes never reach the gateway",
                          res);
  rdma->token = std::move(token).value();
  rdma->grant.id = rdma->token.grant_id;
  rdma->grant.use = random_bytes(16);
  auto param = [&](std::string_view name) {
    const std::string* v = req.param(name);
    return v ? *v : std::string();
  };
  const std::string* range = req.header("range");
  rdma->grant.scope =
      rdma_scope(req.method, req.bucket, req.key, range ? *range : "", param("uploadId"), param("partNumber"));
  return std::nullopt;
}

// A GET's bytes [first, first + length) of `st`, moved by the targets into the token's buffer; `r` is the answer
// get_object made (headers), given with an empty body.
Response rdma_read(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                   const client::ObjectStat& st, uint64_t first, uint64_t length, const RdmaRequest& rdma, Response r) {
  const std::string res = resource_of(req);
  if (length > rdma.token.length)
    return error_response(400, "InvalidRequest",
                          "the " + std::to_string(length) + " bytes asked for do not fit the " +
                              std::to_string(rdma.token.length) + "-byte RDMA buffer",
                          res);
  if (length > 0) {
    Status s = with_bucket(config, user, handles, req.bucket, false, [&](client::Container& c) {
      client::NamedObjects objects(c);
      return replaced_under(objects.read_granted(st, first, length, rdma.grant, 0), "the object");
    });
    // What the targets cannot move (an object kept in its name's record) is declined: the client GETs it plainly.
    if (s.code() == StatusCode::kNotSupported) return rdma_decline(s.message(), res);
    if (!s.is_ok()) return error_response(s, res);
  }
  r.headers.emplace_back(std::string(kRdmaReplyHeader), std::to_string(r.status));
  r.headers.emplace_back(std::string(kRdmaBytesHeader), std::to_string(length));
  r.status = 200;
  r.length = 0;
  return r;
}

// A PUT's bytes: all of the token's buffer, read by the targets, swapped in as a PUT's body is. The gateway never
// sees them, so the ETag is not an MD5: the data object's id, as for an object `rfos put` stored.
void rdma_put(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
              const RdmaRequest& rdma, const std::function<void(Response)>& reply) {
  Attrs attrs;
  if (auto bad = request_attrs(req, &attrs)) return reply(std::move(*bad));
  client::ObjectStat st;
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) {
    client::PutOptions o;
    o.attrs = [&](uint64_t) -> Result<std::string> { return encode_attrs(attrs); };
    auto data = client::NamedObjects(c).put_granted(req.key, rdma.token.length, rdma.grant, o);
    if (data.is_ok()) st.data = *data;
    return data.status();
  });
  if (!s.is_ok()) return reply(error_response(s, resource_of(req)));
  reply(stored(etag_of(st, {}), std::make_pair(std::string(kRdmaReplyHeader), std::string("204"))));
}

// An UploadPart's bytes, as rdma_put's. Its ETag is 32 random hex digits (no MD5 was taken), which
// CompleteMultipartUpload takes as any part's.
void rdma_upload_part(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                      const RdmaRequest& rdma, const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  auto n = part_number(req);
  if (!n) return reply(bad_part_number(req));
  std::optional<Response> failure;
  std::string etag;
  Status s = with_bucket(config, user, handles, req.bucket, true, [&](client::Container& c) -> Status {
    client::NamedObjects::Upload upload;
    RFOS_RETURN_IF_ERROR(check_upload(c, req, *req.param("uploadId"), &failure, &upload));
    if (!upload_checksum_of(decode_attrs(upload.attrs)).alg.empty()) {
      failure = rdma_decline(
          "this upload keeps a checksum of every part, and the RDMA path's bytes never reach the "
          "gateway to take it",
          res);
      return error(StatusCode::kNotSupported, "a checksummed upload");
    }
    auto write = [&](client::NamedObjects& objects, const ObjectId& data, uint64_t* size) {
      *size = rdma.token.length;
      return objects.write_granted(data, *size, rdma.grant);
    };
    RFOS_ASSIGN_OR_RETURN(etag, write_part(c, *req.param("uploadId"), *n, write,
                                           [](uint64_t) -> Result<std::string> { return hex_of(random_bytes(16)); }));
    return Status::ok();
  });
  if (!s.is_ok()) return reply(failure ? std::move(*failure) : error_response(s, res));
  reply(stored("\"" + etag + "\"", std::make_pair(std::string(kRdmaReplyHeader), std::string("204"))));
}

void get_object(const ServiceConfig& config, const User& user, Handles& handles, const Request& req, bool head,
                const std::function<void(Response)>& reply, const RdmaRequest* rdma = nullptr) {
  const std::string res = resource_of(req);
  auto st = with_bucket(config, user, handles, req.bucket, false,
                        [&](client::Container& c) { return client::NamedObjects(c).stat(req.key); });
  if (!st.is_ok()) {
    if (st.status().code() == StatusCode::kNotFound)
      return reply(error_response(404, "NoSuchKey", "The specified key does not exist.", res));
    return reply(error_response(st.status(), res));
  }
  const Attrs a = decode_attrs(st->attrs);
  const std::string etag = etag_of(*st, a);
  const int64_t mtime_s = static_cast<int64_t>(st->mtime_ms / 1000);
  Response r;
  r.headers.emplace_back("etag", etag);
  r.headers.emplace_back("last-modified", http_date(st->mtime_ms));
  // Conditions, in the order RFC 7232 takes them.
  auto matches = [&](const std::string& list) {
    for (std::string_view rest = list; !rest.empty();) {
      size_t comma = std::min(rest.find(','), rest.size());
      std::string_view one = rest.substr(0, comma);
      while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
      while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
      if (one == "*" || one == etag || "\"" + std::string(one) + "\"" == etag) return true;
      rest.remove_prefix(std::min(comma + 1, rest.size()));
    }
    return false;
  };
  const std::string *if_match = req.header("if-match"), *if_none = req.header("if-none-match"),
                    *if_since = req.header("if-modified-since"), *if_unmod = req.header("if-unmodified-since");
  if (if_match && !matches(*if_match))
    return reply(error_response(412, "PreconditionFailed",
                                "At least one of the pre-conditions you specified did not hold", res));
  if (!if_match && if_unmod)
    if (auto t = parse_http_date(*if_unmod); t && mtime_s > *t)
      return reply(error_response(412, "PreconditionFailed",
                                  "At least one of the pre-conditions you specified did not hold", res));
  if (if_none && matches(*if_none)) {
    r.status = 304;
    return reply(std::move(r));
  }
  if (!if_none && if_since)
    if (auto t = parse_http_date(*if_since); t && mtime_s <= *t) {
      r.status = 304;
      return reply(std::move(r));
    }
  uint64_t first = 0, length = st->size;
  if (const std::string* h = req.header("range")) {
    auto range = parse_range(*h, st->size);
    if (!range) {
      Response e = error_response(416, "InvalidRange", "The requested range is not satisfiable", res);
      e.headers.emplace_back("content-range", "bytes */" + std::to_string(st->size));
      return reply(std::move(e));
    }
    if (*range) {
      first = (*range)->first;
      length = (*range)->last - first + 1;
      r.status = 206;
      r.headers.emplace_back("content-range", "bytes " + std::to_string(first) + "-" + std::to_string((*range)->last) +
                                                  "/" + std::to_string(st->size));
    }
  }
  r.headers.emplace_back("accept-ranges", "bytes");
  // A stored checksum is the whole object's: given when asked for (x-amz-checksum-mode) and the whole object is.
  const std::string* mode = req.header("x-amz-checksum-mode");
  const bool checksums = mode && (*mode == "ENABLED" || *mode == "enabled") && r.status == 200;
  for (const auto& [k, v] : a)
    if (k != "etag" && (checksums || !k.starts_with("x-amz-checksum-"))) r.headers.emplace_back(k, v);
  if (!attr(a, "content-type")) r.headers.emplace_back("content-type", "binary/octet-stream");
  // Overrides of the stored headers, as a signed request may ask.
  for (const auto& [param, header] : std::initializer_list<std::pair<std::string_view, std::string_view>>{
           {"response-content-type", "content-type"},
           {"response-content-language", "content-language"},
           {"response-expires", "expires"},
           {"response-cache-control", "cache-control"},
           {"response-content-disposition", "content-disposition"},
           {"response-content-encoding", "content-encoding"}}) {
    if (const std::string* v = req.param(param)) {
      std::erase_if(r.headers, [&](const auto& h) { return h.first == header; });
      r.headers.emplace_back(std::string(header), *v);
    }
  }
  if (rdma) return reply(rdma_read(config, user, handles, req, *st, first, length, *rdma, std::move(r)));
  r.length = length;
  if (head || length == 0) {
    r.headers.emplace_back("content-length", std::to_string(length));
    r.length = 0;
    r.body.clear();
    // HEAD answers with the length a GET would send and no body (gateway.cc keeps the header as given).
    return reply(std::move(r));
  }
  if (st->inlined) {  // read with its name: one round trip in all, and nothing to re-check
    r.length = 0;
    r.body = st->bytes.substr(first, length);
    return reply(std::move(r));
  }
  auto ch = std::make_shared<Channel>(4u << 20);
  r.download = ch;
  reply(std::move(r));
  // Each piece goes to the socket from the buffer it was read into. A put that replaces the object meanwhile
  // (replaced_under) cuts the connection short: the reader sees a short body, never wrong bytes.
  uint64_t sent = 0;
  Status s = with_bucket(config, user, handles, req.bucket, false, [&](client::Container& c) -> Status {
    auto push = [&](client::StreamPiece piece) {
      sent += piece.size();
      return ch->push_wait(Chunk(std::move(piece)));
    };
    Status read = replaced_under(client::NamedObjects(c).read_range_pieces(*st, first, length, push), "the object");
    // A handle gone stale after bytes went out is not tried again: the client would get them twice.
    if (sent > 0 && stale_handle(read.code()))
      return error(StatusCode::kIoError, read.message() + " (after " + std::to_string(sent) + " bytes were sent)");
    return read;
  });
  ch->finish(s);
}

void delete_object(const ServiceConfig& config, const User& user, Handles& handles, const Request& req,
                   const std::function<void(Response)>& reply) {
  Status s = with_bucket(config, user, handles, req.bucket, true,
                         [&](client::Container& c) { return client::NamedObjects(c).remove(req.key); });
  if (!s.is_ok() && s.code() != StatusCode::kNotFound) return reply(error_response(s, resource_of(req)));
  Response r;
  r.status = 204;
  reply(std::move(r));
}

// Subresources S3 has and this gateway does not (yet): a request naming one gets NotImplemented, never the
// answer of the plain request.
constexpr std::string_view kUnsupported[] = {"acl",
                                             "tagging",
                                             "versions",
                                             "policy",
                                             "cors",
                                             "lifecycle",
                                             "website",
                                             "logging",
                                             "notification",
                                             "replication",
                                             "encryption",
                                             "lock",
                                             "object-lock",
                                             "retention",
                                             "legal-hold",
                                             "restore",
                                             "select",
                                             "torrent",
                                             "accelerate",
                                             "requestPayment",
                                             "analytics",
                                             "inventory",
                                             "metrics",
                                             "ownershipControls",
                                             "publicAccessBlock",
                                             "intelligent-tiering",
                                             "attributes",
                                             "policyStatus"};

}  // namespace

void Channel::set_wake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = std::move(wake);
}

void Channel::wake_locked(std::unique_lock<std::mutex>& lock) {
  std::function<void()> w = wake_;
  lock.unlock();
  if (w) w();
  lock.lock();
}

Status Channel::push_wait(Chunk chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return abandoned_ || bytes_ < limit_; });
  if (abandoned_) return error(StatusCode::kShutdown, "the client went away");
  bytes_ += chunk.size();
  chunks_.push_back(std::move(chunk));
  wake_locked(lock);
  return Status::ok();
}

Result<Chunk> Channel::pop_wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !chunks_.empty() || finished_; });
  if (chunks_.empty()) {
    if (!finished_->is_ok()) return *finished_;
    return Chunk();
  }
  Chunk c = std::move(chunks_.front());
  chunks_.pop_front();
  bytes_ -= c.size();
  wake_locked(lock);
  return c;
}

void Channel::push(Chunk chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  if (chunk.size() == 0) return;
  bytes_ += chunk.size();
  chunks_.push_back(std::move(chunk));
  cv_.notify_all();
}

std::optional<Chunk> Channel::pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (chunks_.empty()) return std::nullopt;
  Chunk c = std::move(chunks_.front());
  chunks_.pop_front();
  bytes_ -= c.size();
  cv_.notify_all();
  return c;
}

bool Channel::full() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_ >= limit_;
}

void Channel::finish(Status s) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!finished_) finished_ = std::move(s);
  cv_.notify_all();
  wake_locked(lock);
}

void Channel::abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_ = true;
  cv_.notify_all();
}

std::optional<Status> Channel::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!chunks_.empty() || !finished_) return std::nullopt;
  return *finished_;
}

const std::string* Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

const std::string* Request::param(std::string_view name) const {
  for (const auto& [k, v] : query)
    if (k == name) return &v;
  return nullptr;
}

Response error_response(unsigned status, std::string_view code, std::string_view message, std::string_view resource) {
  Xml x;
  x.open("Error").leaf("Code", code).leaf("Message", message).leaf("Resource", resource).close("Error");
  return xml_response(status, std::move(x));
}

Response error_response(const Status& s, std::string_view resource, bool bucket_level) {
  switch (s.code()) {
    case StatusCode::kUnknownContainer:
      return error_response(404, "NoSuchBucket", "The specified bucket does not exist", resource);
    case StatusCode::kNotFound:
      return bucket_level ? error_response(404, "NoSuchBucket", "The specified bucket does not exist", resource)
                          : error_response(404, "NoSuchKey", "The specified key does not exist.", resource);
    case StatusCode::kPermissionDenied:
    case StatusCode::kNotPermitted:
      return error_response(403, "AccessDenied", "Access Denied: " + s.message(), resource);
    case StatusCode::kUnknownPool:
      return error_response(500, "InternalError", "the gateway's pool is missing: " + s.message(), resource);
    case StatusCode::kNoSpace:
      return error_response(507, "InsufficientStorage", "The storage is full: " + s.message(), resource);
    case StatusCode::kBusy:
    case StatusCode::kShutdown:
    case StatusCode::kTimeout:
      return error_response(503, "ServiceUnavailable", "Please reduce your request rate: " + s.message(), resource);
    case StatusCode::kNotSupported:
      return error_response(501, "NotImplemented", s.message(), resource);
    case StatusCode::kTooLarge:
      return error_response(400, "EntityTooLarge", s.message(), resource);
    case StatusCode::kInvalidArgument:
      return error_response(400, "InvalidArgument", s.message(), resource);
    default:
      return error_response(500, "InternalError", s.to_string(), resource);
  }
}

// A handle's name in the cache: the key's, the bucket's, and whether it may write.
static std::string handle_id(const User& user, const std::string& bucket, bool write) {
  std::string id = user.key.access_key;
  id.push_back('\0');
  id += bucket;
  id.push_back('\0');
  id.push_back(write ? 'w' : 'r');
  return id;
}

Result<client::Container*> Handles::get(const User& user, const std::string& pool, const std::string& bucket,
                                        const client::ContainerOptions& options) {
  const std::string id = handle_id(user, bucket, options.write);
  auto it = conts_.find(id);
  if (it != conts_.end()) return it->second.get();
  RFOS_ASSIGN_OR_RETURN(auto c, client::Container::open(*user.control, pool, bucket, options));
  // A bucket's name index of an earlier version moves once a handle may write (listings merge it until then).
  if (options.write)
    if (Status s = client::NamedObjects(*c).settle_index(); !s.is_ok())
      spdlog::warn("bucket {}: the name index of an earlier version stays: {}", bucket, s.to_string());
  return conts_.emplace(id, std::move(c)).first->second.get();
}

void Handles::drop(const User& user, const std::string& bucket) {
  conts_.erase(handle_id(user, bucket, true));
  conts_.erase(handle_id(user, bucket, false));
}

// A request with x-amz-rdma-token: GetObject, PutObject and UploadPart move their bytes by the RDMA path; any
// other is declined (never served as if the token were not there).
void serve_rdma(const ServiceConfig& config, const User& user, Handles& handles, Request& req,
                const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  const std::string& m = req.method;
  const bool object = !req.bucket.empty() && !req.key.empty() && !req.header("x-amz-copy-source") &&
                      !req.param("uploads") && (!req.param("partNumber") == !req.param("uploadId"));
  const bool other = std::any_of(req.query.begin(), req.query.end(), [](const auto& q) {
    return q.first != "uploadId" && q.first != "partNumber" && !q.first.starts_with("X-Amz-") &&
           !q.first.starts_with("response-");
  });
  const bool part = req.param("uploadId") != nullptr;
  if (!object || other || !(m == "PUT" || (m == "GET" && !part)))
    return reply(rdma_decline("the RDMA path serves GetObject, PutObject and UploadPart only", res));
  RdmaRequest rdma;
  if (auto bad = rdma_check(req, &rdma)) return reply(std::move(*bad));
  if (m == "GET") return get_object(config, user, handles, req, false, reply, &rdma);
  if (part) return rdma_upload_part(config, user, handles, req, rdma, reply);
  rdma_put(config, user, handles, req, rdma, reply);
}

void serve(const ServiceConfig& config, const User& user, Handles& handles, Request& req,
           const std::function<void(Response)>& reply) {
  const std::string res = resource_of(req);
  for (const auto& [k, v] : req.query)
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), k) != std::end(kUnsupported))
      return reply(error_response(501, "NotImplemented", "'" + k + "' is not implemented by rfos s3 yet.", res));
  if (req.header(kRdmaTokenHeader)) return serve_rdma(config, user, handles, req, reply);
  const std::string& m = req.method;
  if (req.bucket.empty()) {
    if (m == "GET") return list_buckets(config, user, reply);
    return reply(
        error_response(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", res));
  }
  if (req.key.empty()) {
    if (req.param("location") && m == "GET") {
      auto info = user.control->cont_query(config.pool, req.bucket);
      if (!info.is_ok()) return reply(error_response(info.status(), res, true));
      Xml x;
      x.open("LocationConstraint", kNs)
          .text(config.region == "us-east-1" ? "" : config.region)
          .close("LocationConstraint");
      return reply(xml_response(200, std::move(x)));
    }
    if (req.param("uploads") && m == "GET") return list_uploads(config, user, handles, req, reply);
    if (req.param("versioning")) {
      if (m != "GET")
        return reply(error_response(501, "NotImplemented", "Versioning is not implemented by rfos s3 yet.", res));
      // Never versioned: S3's answer for a bucket versioning was never enabled on.
      auto info = user.control->cont_query(config.pool, req.bucket);
      if (!info.is_ok()) return reply(error_response(info.status(), res, true));
      Xml x;
      x.open("VersioningConfiguration", kNs).close("VersioningConfiguration");
      return reply(xml_response(200, std::move(x)));
    }
    if (req.param("delete") && m == "POST") return delete_objects(config, user, handles, req, reply);
    if (!req.query.empty() &&
        !(m == "GET" && (req.param("list-type") || req.param("prefix") || req.param("delimiter") ||
                         req.param("marker") || req.param("max-keys") || req.param("encoding-type") ||
                         req.param("start-after") || req.param("continuation-token") || req.param("fetch-owner"))))
      return reply(
          error_response(501, "NotImplemented", "This bucket request is not implemented by rfos s3 yet.", res));
    if (m == "PUT") return create_bucket(config, user, req, reply);
    if (m == "HEAD") return head_bucket(config, user, handles, req, reply);
    if (m == "DELETE") return delete_bucket(config, user, handles, req, reply);
    if (m == "GET") return list_objects(config, user, handles, req, reply);
    return reply(
        error_response(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", res));
  }
  if (req.param("uploads")) {
    if (m == "POST") return create_upload(config, user, handles, req, reply);
    return reply(
        error_response(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", res));
  }
  if (req.param("uploadId")) {
    if (m == "PUT" && req.header("x-amz-copy-source")) return upload_part_copy(config, user, handles, req, reply);
    if (m == "PUT") return upload_part(config, user, handles, req, reply);
    if (m == "POST") return complete_upload(config, user, handles, req, reply);
    if (m == "DELETE") return abort_upload(config, user, handles, req, reply);
    if (m == "GET") return list_parts(config, user, handles, req, reply);
    return reply(
        error_response(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", res));
  }
  if (req.param("partNumber"))
    return reply(error_response(501, "NotImplemented", "Reading one part of an object is not implemented yet.", res));
  if (m == "PUT") {
    if (req.header("x-amz-copy-source")) return copy_object(config, user, handles, req, reply);
    return put_object(config, user, handles, req, reply);
  }
  if (m == "GET") return get_object(config, user, handles, req, false, reply);
  if (m == "HEAD") return get_object(config, user, handles, req, true, reply);
  if (m == "DELETE") return delete_object(config, user, handles, req, reply);
  reply(error_response(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", res));
}

}  // namespace rfos::s3
