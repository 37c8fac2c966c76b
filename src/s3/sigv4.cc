#include "s3/sigv4.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

namespace rfos::s3 {

namespace {

constexpr size_t kMaxLine = 4096;  // a chunk's size line, a trailer line

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_hex64(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  for (size_t at = 0;;) {
    size_t next = s.find(sep, at);
    out.emplace_back(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

Status malformed(std::string what) { return error(StatusCode::kInvalidArgument, std::move(what)); }

// "AK/DATE/REGION/SERVICE/aws4_request" into auth.
Status parse_credential(std::string_view cred, Auth* auth) {
  std::vector<std::string> parts = split(cred, '/');
  if (parts.size() != 5 || parts[0].empty() || parts[1].size() != 8 || parts[2].empty() || parts[3].empty() ||
      parts[4] != "aws4_request" || parts[1].find_first_not_of("0123456789") != std::string::npos)
    return malformed("the credential is not ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request");
  auth->access_key = parts[0];
  auth->date = parts[1];
  auth->region = parts[2];
  auth->service = parts[3];
  return Status::ok();
}

Status parse_signed_headers(std::string_view list, Auth* auth) {
  auth->signed_headers = split(list, ';');
  for (const std::string& h : auth->signed_headers)
    if (h.empty() || h.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ \t") != std::string::npos)
      return malformed("SignedHeaders is not a ';'-separated list of lowercase names");
  if (!std::is_sorted(auth->signed_headers.begin(), auth->signed_headers.end()))
    return malformed("SignedHeaders is not sorted");
  return Status::ok();
}

}  // namespace

std::string hex_of(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2)
    out.push_back(static_cast<char>(hex_value(hex[i]) * 16 + hex_value(hex[i + 1])));
  return out;
}

std::string sha256(std::string_view data) {
  Digest d("sha256");
  d.update(data);
  return d.finish();
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string random_bytes(size_t n) {
  std::string b(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(b.data()), static_cast<int>(n)) != 1) std::abort();
  return b;
}

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> from_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock keeps the zero bytes the padding stands for, and takes blanks and sloppy padding: what
  // encodes back to the same text is canonical.
  size_t pad = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  out.resize(static_cast<size_t>(n) - pad);
  if (base64(out) != text) return std::nullopt;
  return out;
}

bool equal_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Digest::Digest(const char* name) : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_get_digestbyname(name), nullptr);
}
Digest::~Digest() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Digest::update(std::string_view bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}
std::string Digest::finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(digits[c >> 4]);
      out.push_back(digits[c & 15]);
    }
  }
  return out;
}

Result<std::string> uri_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return malformed("a '%' escape is cut short");
    int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return malformed("a '%' escape is not two hexadecimal digits");
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

Result<Params> parse_query(std::string_view raw) {
  Params out;
  if (raw.empty()) return out;
  for (const std::string& part : split(raw, '&')) {
    if (part.empty()) continue;
    size_t eq = part.find('=');
    RFOS_ASSIGN_OR_RETURN(std::string name, uri_decode(std::string_view(part).substr(0, eq)));
    std::string value;
    if (eq != std::string::npos) {
      RFOS_ASSIGN_OR_RETURN(value, uri_decode(std::string_view(part).substr(eq + 1)));
    }
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

Result<Target> parse_target(std::string_view target) {
  if (!target.starts_with("/")) return malformed("a request target must start with '/'");
  const size_t q = target.find('?');
  Target t;
  RFOS_ASSIGN_OR_RETURN(t.path, uri_decode(target.substr(0, q)));
  RFOS_ASSIGN_OR_RETURN(t.query, parse_query(q == std::string_view::npos ? std::string_view() : target.substr(q + 1)));
  if (t.path.empty() || t.path[0] != '/') return malformed("a request path must start with '/'");
  const size_t slash = t.path.find('/', 1);
  t.bucket = t.path.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  if (slash != std::string::npos) t.key = t.path.substr(slash + 1);
  return t;
}

std::optional<std::string> bucket_of_host(std::string_view host, const std::vector<std::string>& domains) {
  if (host.empty() || host.front() == '[') return std::nullopt;  // an IPv6 literal names no bucket
  if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) host = host.substr(0, colon);
  const std::string h = ascii_lower(host);
  for (const std::string& domain : domains) {
    const std::string suffix = "." + ascii_lower(domain);
    if (!domain.empty() && h.size() > suffix.size() && h.ends_with(suffix))
      return h.substr(0, h.size() - suffix.size());
  }
  return std::nullopt;
}

Result<Auth> parse_authorization(std::string_view header) {
  constexpr std::string_view kAlgo = "AWS4-HMAC-SHA256 ";
  if (!header.starts_with(kAlgo)) return malformed("the Authorization header is not AWS4-HMAC-SHA256");
  Auth auth;
  bool cred = false, signed_headers = false, sig = false;
  for (const std::string& field : split(header.substr(kAlgo.size()), ',')) {
    std::string_view f = trim(field);
    size_t eq = f.find('=');
    if (eq == std::string_view::npos) return malformed("an Authorization field without '='");
    std::string_view name = f.substr(0, eq), value = f.substr(eq + 1);
    if (name == "Credential" && !cred) {
      RFOS_RETURN_IF_ERROR(parse_credential(value, &auth));
      cred = true;
    } else if (name == "SignedHeaders" && !signed_headers) {
      RFOS_RETURN_IF_ERROR(parse_signed_headers(value, &auth));
      signed_headers = true;
    } else if (name == "Signature" && !sig) {
      if (!is_hex64(value)) return malformed("the Signature is not 64 lowercase hexadecimal digits");
      auth.signature = value;
      sig = true;
    } else {
      return malformed("an unknown or repeated Authorization field '" + std::string(name) + "'");
    }
  }
  if (!cred || !signed_headers || !sig)
    return malformed("the Authorization header lacks Credential, SignedHeaders or Signature");
  return auth;
}

Result<std::optional<Auth>> parse_presigned(const Params& query) {
  auto get = [&](std::string_view name) -> const std::string* {
    const std::string* found = nullptr;
    for (const auto& [k, v] : query)
      if (k == name) {
        if (found) return nullptr;  // repeated: as if missing, which fails below
        found = &v;
      }
    return found;
  };
  bool any = false;
  for (const auto& [k, v] : query) any = any || k == "X-Amz-Algorithm";
  if (!any) return std::optional<Auth>();
  const std::string *algo = get("X-Amz-Algorithm"), *cred = get("X-Amz-Credential"), *date = get("X-Amz-Date"),
                    *expires = get("X-Amz-Expires"), *headers = get("X-Amz-SignedHeaders"),
                    *sig = get("X-Amz-Signature");
  if (!algo || *algo != "AWS4-HMAC-SHA256") return malformed("X-Amz-Algorithm is not AWS4-HMAC-SHA256");
  if (!cred || !date || !expires || !headers || !sig)
    return malformed("a presigned URL needs X-Amz-Credential, -Date, -Expires, -SignedHeaders and -Signature");
  Auth auth;
  auth.presigned = true;
  RFOS_RETURN_IF_ERROR(parse_credential(*cred, &auth));
  RFOS_RETURN_IF_ERROR(parse_signed_headers(*headers, &auth));
  if (!is_hex64(*sig)) return malformed("X-Amz-Signature is not 64 lowercase hexadecimal digits");
  auth.signature = *sig;
  auth.amz_date = *date;
  if (expires->empty() || expires->size() > 6 || expires->find_first_not_of("0123456789") != std::string::npos)
    return malformed("X-Amz-Expires is not a number of seconds");
  auth.expires_s = std::stoull(*expires);
  if (auth.expires_s < 1 || auth.expires_s > 7 * 24 * 3600)
    return malformed("X-Amz-Expires must be between 1 second and 7 days");
  return std::optional<Auth>(std::move(auth));
}

Result<int64_t> parse_amz_date(std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z' ||
      s.substr(0, 8).find_first_not_of("0123456789") != std::string_view::npos ||
      s.substr(9, 6).find_first_not_of("0123456789") != std::string_view::npos)
    return malformed("a date that is not YYYYMMDDTHHMMSSZ");
  auto num = [&](size_t at, size_t len) { return std::stoi(std::string(s.substr(at, len))); };
  std::tm tm{};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(4, 2) - 1;
  tm.tm_mday = num(6, 2);
  tm.tm_hour = num(9, 2);
  tm.tm_min = num(11, 2);
  tm.tm_sec = num(13, 2);
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
    return malformed("a date out of range");
  return static_cast<int64_t>(timegm(&tm));
}

std::string format_amz_date(int64_t unix_s) {
  time_t t = static_cast<time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof(b), "%Y%m%dT%H%M%SZ", &tm);
  return b;
}

Result<std::string> canonical_request(std::string_view method, std::string_view path, const Params& query,
                                      const Headers& headers, const std::vector<std::string>& signed_headers,
                                      std::string_view payload_hash) {
  std::string out(method);
  out += '\n';
  out += uri_encode(path.empty() ? "/" : path, true);
  out += '\n';
  std::vector<std::pair<std::string, std::string>> q;
  for (const auto& [k, v] : query)
    if (k != "X-Amz-Signature") q.emplace_back(uri_encode(k, false), uri_encode(v, false));
  std::sort(q.begin(), q.end());
  for (size_t i = 0; i < q.size(); ++i) {
    if (i) out += '&';
    out += q[i].first + "=" + q[i].second;
  }
  out += '\n';
  for (const std::string& name : signed_headers) {
    std::string value;
    bool found = false;
    for (const auto& [k, v] : headers) {
      if (k != name) continue;
      std::string one;
      for (char c : trim(v)) {  // inner runs of spaces become one
        if (c == ' ' && !one.empty() && one.back() == ' ') continue;
        one.push_back(c);
      }
      if (found) value += ',';
      value += one;
      found = true;
    }
    if (!found) return malformed("the signed header '" + name + "' is not in the request");
    out += name + ":" + value + "\n";
  }
  out += '\n';
  for (size_t i = 0; i < signed_headers.size(); ++i) {
    if (i) out += ';';
    out += signed_headers[i];
  }
  out += '\n';
  out += payload_hash;
  return out;
}

std::string string_to_sign(std::string_view amz_date, std::string_view scope, std::string_view canonical) {
  std::string out = "AWS4-HMAC-SHA256\n";
  out.append(amz_date).append("\n").append(scope).append("\n").append(hex_of(sha256(canonical)));
  return out;
}

std::string signing_key(std::string_view secret, std::string_view date, std::string_view region,
                        std::string_view service) {
  std::string k = hmac_sha256("AWS4" + std::string(secret), date);
  k = hmac_sha256(k, region);
  k = hmac_sha256(k, service);
  return hmac_sha256(k, "aws4_request");
}

std::string signature_of(std::string_view key, std::string_view to_sign) { return hex_of(hmac_sha256(key, to_sign)); }

Result<std::string> authorization_for(std::string_view method, std::string_view path, const Params& query,
                                      const Headers& headers, std::string_view payload_hash,
                                      std::string_view access_key, std::string_view key, std::string_view amz_date,
                                      std::string_view region) {
  std::vector<std::string> names;
  for (const auto& h : headers) names.push_back(h.first);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  RFOS_ASSIGN_OR_RETURN(std::string canonical, canonical_request(method, path, query, headers, names, payload_hash));
  const std::string scope = std::string(amz_date.substr(0, 8)) + "/" + std::string(region) + "/s3/aws4_request";
  std::string signed_list;
  for (const std::string& n : names) signed_list += (signed_list.empty() ? "" : ";") + n;
  return "AWS4-HMAC-SHA256 Credential=" + std::string(access_key) + "/" + scope + ", SignedHeaders=" + signed_list +
         ", Signature=" + signature_of(key, string_to_sign(amz_date, scope, canonical));
}

ChunkDecoder::ChunkDecoder(std::string key, std::string amz_date, std::string scope, std::string seed_signature)
    : signed_(true),
      key_(std::move(key)),
      amz_date_(std::move(amz_date)),
      scope_(std::move(scope)),
      prev_signature_(std::move(seed_signature)) {}

Status ChunkDecoder::fail(StatusCode code, std::string message) {
  state_ = State::kFailed;
  return error(code, "aws-chunked body: " + message);
}

Status ChunkDecoder::chunk_line(std::string_view line) {
  size_t semi = line.find(';');
  std::string_view size = line.substr(0, semi);
  if (size.empty() || size.size() > 15 || size.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
    return fail(StatusCode::kInvalidArgument, "a chunk size that is not hexadecimal");
  left_ = std::stoull(std::string(size), nullptr, 16);
  last_chunk_ = left_ == 0;
  chunk_signature_.clear();
  if (semi != std::string_view::npos) {
    std::string_view ext = line.substr(semi + 1);
    constexpr std::string_view kSig = "chunk-signature=";
    if (!ext.starts_with(kSig) || !is_hex64(ext.substr(kSig.size())))
      return fail(StatusCode::kInvalidArgument, "a chunk extension other than chunk-signature=HEX");
    chunk_signature_ = ext.substr(kSig.size());
  }
  if (signed_ && chunk_signature_.empty()) return fail(StatusCode::kPermissionDenied, "a chunk without its signature");
  if (!signed_ && !chunk_signature_.empty())
    return fail(StatusCode::kInvalidArgument, "a signed chunk in an unsigned body");
  chunk_hash_.emplace("sha256");
  state_ = last_chunk_ ? (signed_ ? State::kDataEnd : State::kTrailer) : State::kData;
  if (last_chunk_ && signed_) return end_of_chunk();
  return Status::ok();
}

// The chunk's signature: HMAC(key, "AWS4-HMAC-SHA256-PAYLOAD\n" date "\n" scope "\n" previous "\n" hash("") "\n"
// hash(chunk)).
Status ChunkDecoder::end_of_chunk() {
  if (!signed_) return Status::ok();
  std::string to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n" + amz_date_ + "\n" + scope_ + "\n" + prev_signature_ + "\n" +
                        hex_of(sha256("")) + "\n" + hex_of(chunk_hash_->finish());
  std::string want = signature_of(key_, to_sign);
  if (!equal_secret(want, chunk_signature_)) return fail(StatusCode::kPermissionDenied, "a chunk's signature is wrong");
  prev_signature_ = want;
  return Status::ok();
}

Status ChunkDecoder::feed(std::string_view in, std::string* out) {
  while (!in.empty()) {
    switch (state_) {
      case State::kFailed:
        return error(StatusCode::kInvalidArgument, "aws-chunked body: after an error");
      case State::kDone:
        return fail(StatusCode::kInvalidArgument, "bytes after the end of the body");
      case State::kSizeLine:
      case State::kTrailer: {
        size_t nl = in.find('\n');
        size_t take = nl == std::string_view::npos ? in.size() : nl + 1;
        if (line_.size() + take > kMaxLine) return fail(StatusCode::kInvalidArgument, "a line too long");
        line_.append(in.substr(0, take));
        in.remove_prefix(take);
        if (nl == std::string_view::npos) break;
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r')
          return fail(StatusCode::kInvalidArgument, "a line not ended by CRLF");
        std::string line = line_.substr(0, line_.size() - 2);
        line_.clear();
        if (state_ == State::kSizeLine) {
          RFOS_RETURN_IF_ERROR(chunk_line(line));
        } else if (line.empty()) {
          state_ = State::kDone;
        } else {
          size_t colon = line.find(':');
          if (colon == std::string::npos || colon == 0 || trailers_.size() >= 16)
            return fail(StatusCode::kInvalidArgument, "a malformed trailer");
          trailers_.emplace_back(ascii_lower(std::string_view(line).substr(0, colon)),
                                 std::string(trim(std::string_view(line).substr(colon + 1))));
        }
        break;
      }
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(left_, in.size()));
        out->append(in.substr(0, take));
        if (signed_) chunk_hash_->update(in.substr(0, take));
        payload_ += take;
        left_ -= take;
        in.remove_prefix(take);
        if (left_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        line_.push_back(in.front());
        in.remove_prefix(1);
        if (line_.size() < 2) break;
        if (line_ != "\r\n") return fail(StatusCode::kInvalidArgument, "a chunk's data not followed by CRLF");
        line_.clear();
        if (last_chunk_) {
          state_ = State::kDone;  // the signed form: "0;chunk-signature=...\r\n\r\n"
        } else {
          RFOS_RETURN_IF_ERROR(end_of_chunk());
          state_ = State::kSizeLine;
        }
        break;
      }
    }
  }
  return Status::ok();
}

}  // namespace rfos::s3
