#include "wire/capability.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

#include "common/coding.h"

namespace rfos::wire {
namespace {

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

Uuid qos_key_of(std::string_view tenant) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::string in = "rfos-qos-tenant:" + std::string(tenant);
  EVP_Digest(in.data(), in.size(), digest, &len, EVP_sha256(), nullptr);
  Uuid u;
  std::memcpy(u.bytes.data(), digest, 16);
  return u;
}

std::string encode_capability(const Capability& cap, std::span<const uint8_t> key) {
  bool qos = cap.qos.limited();
  std::string s;
  s.reserve(qos ? Capability::kEncodedBytesWithQos : Capability::kEncodedBytes);
  put_le<uint8_t>(&s, qos ? Capability::kVersionWithQos : Capability::kVersion);
  put_le<uint8_t>(&s, cap.rights);
  put_uuid(&s, cap.session);
  put_uuid(&s, cap.pool);
  put_uuid(&s, cap.cont);
  put_le<uint64_t>(&s, cap.expires_unix_ms);
  if (qos) {
    put_uuid(&s, cap.qos.key);
    put_le<uint32_t>(&s, cap.qos.iops);
    put_le<uint32_t>(&s, cap.qos.burst_ios);
    put_le<uint64_t>(&s, cap.qos.bytes_per_s);
    put_le<uint64_t>(&s, cap.qos.burst_bytes);
  }
  s += mac(s, key);
  return s;
}

Result<Capability> decode_capability(std::string_view token) {
  if (token.size() != Capability::kEncodedBytes && token.size() != Capability::kEncodedBytesWithQos)
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
  size_t want = version == Capability::kVersion          ? Capability::kEncodedBytes
                : version == Capability::kVersionWithQos ? Capability::kEncodedBytesWithQos
                                                         : 0;
  if (want == 0)
    return error(StatusCode::kInvalidArgument, "capability version " + std::to_string(version) + " is unknown");
  if (token.size() != want)
    return error(StatusCode::kInvalidArgument, "capability version " + std::to_string(version) + " has " +
                                                   std::to_string(want) + " bytes, not " +
                                                   std::to_string(token.size()));
  if (version == Capability::kVersionWithQos) {
    in.get_bytes(16, &u);
    std::memcpy(cap.qos.key.bytes.data(), u.data(), 16);
    in.get_le(&cap.qos.iops);
    in.get_le(&cap.qos.burst_ios);
    in.get_le(&cap.qos.bytes_per_s);
    in.get_le(&cap.qos.burst_bytes);
    if (!cap.qos.limited()) return error(StatusCode::kInvalidArgument, "capability QoS without a limit");
  }
  if (cap.rights == 0 || (cap.rights & ~(Capability::kRead | Capability::kWrite)) != 0)
    return error(StatusCode::kInvalidArgument, "capability rights are malformed");
  return cap;
}

Result<Capability> verify_capability(std::string_view token, std::span<const uint8_t> key, uint64_t now_unix_ms) {
  RFOS_ASSIGN_OR_RETURN(Capability cap, decode_capability(token));
  size_t body = token.size() - kMacBytes;
  std::string want = mac(token.substr(0, body), key);
  if (want.size() != kMacBytes || CRYPTO_memcmp(want.data(), token.data() + body, kMacBytes) != 0)
    return error(StatusCode::kPermissionDenied, "capability signature is invalid");
  if (cap.expires_unix_ms <= now_unix_ms) return error(StatusCode::kPermissionDenied, "capability has expired");
  return cap;
}

}  // namespace rfos::wire
