#include "s3/rdma_token.h"

#include "s3/sigv4.h"

namespace rfos::s3 {

namespace {
constexpr std::string_view kPrefix = "rfos1:";
constexpr uint64_t kMaxLength = uint64_t{1} << 40;
}  // namespace

std::string format_rdma_token(const RdmaToken& t) {
  return std::string(kPrefix) + hex_of(t.grant_id) + ":" + std::to_string(t.length);
}

Result<RdmaToken> parse_rdma_token(std::string_view s) {
  auto bad = [] { return error(StatusCode::kInvalidArgument, "not an rfos RDMA token (rfos1:<32 hex>:<length>)"); };
  if (!s.starts_with(kPrefix)) return bad();
  s.remove_prefix(kPrefix.size());
  if (s.size() < 34 || s[32] != ':') return bad();
  auto id = from_hex(s.substr(0, 32));
  if (!id) return bad();
  std::string_view len = s.substr(33);
  if (len.empty() || len.size() > 13 || len[0] == '0' || len.find_first_not_of("0123456789") != std::string_view::npos)
    return bad();
  RdmaToken t;
  t.grant_id = std::move(*id);
  t.length = std::stoull(std::string(len));
  if (t.length == 0 || t.length > kMaxLength) return bad();
  return t;
}

std::string rdma_scope(std::string_view method, std::string_view bucket, std::string_view key, std::string_view range,
                       std::string_view upload_id, std::string_view part_number) {
  // Each field's length first, so that no two requests share a scope by moving bytes between fields.
  std::string s = "rfos-s3-rdma-1";
  for (std::string_view f : {method, bucket, key, range, upload_id, part_number})
    s += std::to_string(f.size()) + ":" + std::string(f);
  return sha256(s);
}

}  // namespace rfos::s3
