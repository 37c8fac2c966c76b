// The RDMA path of `rfos s3` (docs/s3.md, "RDMA"): the token a GET, PUT or UploadPart carries in
// x-amz-rdma-token instead of a body, and the scope its grant is made for.
//
// The caller lends a registered buffer to the server's targets through its own session (Container::grant_memory:
// the buffer's address and remote key go to the targets over the caller's authenticated endpoints, never through
// HTTP), and the token only names that grant: "rfos1:<grant id, 32 hex digits>:<length, decimal>". The grant is
// made for one request, its scope: the SHA-256 of what the request does (method, bucket, key, Range, upload id,
// part number), which the gateway computes again from the request it serves, so a token moves bytes only for the
// request it was signed into.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rfos::s3 {

inline constexpr std::string_view kRdmaTokenHeader = "x-amz-rdma-token";
inline constexpr std::string_view kRdmaReplyHeader = "x-amz-rdma-reply";
inline constexpr std::string_view kRdmaBytesHeader = "x-amz-rdma-bytes-transferred";

struct RdmaToken {
  std::string grant_id;  // 16 bytes
  uint64_t length = 0;   // of the granted buffer
};

std::string format_rdma_token(const RdmaToken& t);
// kInvalidArgument for anything but the form above (a length of 1 B .. 2^40).
Result<RdmaToken> parse_rdma_token(std::string_view s);

// What a request does, as its token's grant is scoped (32 bytes). `range` is the Range header ("" for none);
// upload_id and part_number an UploadPart's ("" otherwise).
std::string rdma_scope(std::string_view method, std::string_view bucket, std::string_view key, std::string_view range,
                       std::string_view upload_id, std::string_view part_number);

}  // namespace rfos::s3
