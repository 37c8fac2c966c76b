#include "wire/capability.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

#include "common/coding.h"

namespace rfos::wire {
namespace {

constexpr size_t kBodyBytes = 58;
constexpr size_t kMacBytes = 32;

std::string mac(std::string_view body, std::span<const uint8_t> key) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(body.data()),
       body.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

void put_uuid(std::string* s, const Uuid& u) { s->append(reinterpret_cast<const char*>(u.bytes.data()), 16); }

}  // namespace

std::string encode_capability(const Capability& cap, std::span<const uint8_t> key) {
  std::string s;
  s.reserve(Capability::kEncodedBytes);
  put_le<uint8_t>(&s, Capability::kVersion);
  put_le<uint8_t>(&s, cap.rights);
  put_uuid(&s, cap.session);
  put_uuid(&s, cap.pool);
  put_uuid(&s, cap.cont);
  put_le<uint64_t>(&s, cap.expires_unix_ms);
  s += mac(s, key);
  return s;
}

Result<Capability> decode_capability(std::string_view token) {
  if (token.size() != Capability::kEncodedBytes)
    return error(StatusCode::kInvalidArgument, "capability token has " + std::to_string(token.size()) + " bytes");
  ByteReader in(token);
  Capability cap;
  uint8_t version;
  std::string_view u;
  in.get_le(&version);
  in.get_le(&cap.rights);
  for (Uuid* id : {&cap.session, &cap.pool, &cap.cont}) {
    in.get_bytes(16, &u);
    std::memcpy(id->bytes.data(), u.data(), 16);
  }
  in.get_le(&cap.expires_unix_ms);
  if (version != Capability::kVersion)
    return error(StatusCode::kInvalidArgument, "capability version " + std::to_string(version) + " is unknown");
  if (cap.rights == 0 || (cap.rights & ~(Capability::kRead | Capability::kWrite)) != 0)
    return error(StatusCode::kInvalidArgument, "capability rights are malformed");
  return cap;
}

Result<Capability> verify_capability(std::string_view token, std::span<const uint8_t> key, uint64_t now_unix_ms) {
  RFOS_ASSIGN_OR_RETURN(Capability cap, decode_capability(token));
  std::string want = mac(token.substr(0, kBodyBytes), key);
  if (want.size() != kMacBytes || CRYPTO_memcmp(want.data(), token.data() + kBodyBytes, kMacBytes) != 0)
    return error(StatusCode::kPermissionDenied, "capability signature is invalid");
  if (cap.expires_unix_ms <= now_unix_ms) return error(StatusCode::kPermissionDenied, "capability has expired");
  return cap;
}

}  // namespace rfos::wire
