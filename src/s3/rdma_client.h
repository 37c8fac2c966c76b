// The client side of `rfos s3`'s RDMA path (docs/s3.md, "RDMA"): get_into and put_from a gateway, the bytes
// moving between the server's targets and the caller's buffer by the data plane, never through the gateway or
// an HTTP body. The caller's own session (a Container handle) lends the buffer to the targets for one request
// (Container::grant_memory, scoped to that request); this signs the request (SigV4) with the token that names
// the grant, sends it, serves the transfers while it waits (over tcp and shm the lending side takes part), and
// revokes the grant when the answer came.
//
// The caller's session may be in this process (a Container) or in `rfos agent` (an AgentClient's handle: the
// agent lends bytes of the app's shared buffer, and the app holds no key or address of it).
//
// Thread-safety: as the Container or AgentClient it lends through: one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "s3/sigv4.h"

namespace rfos::client {
class Container;
}
namespace rfos::agent {
class AgentClient;
}

namespace rfos::s3 {

// What lends the caller's memory to the server's targets: its own session.
class Lender {
 public:
  virtual ~Lender() = default;
  // Lends `buffer` for the one request of `scope` (rdma_scope) for ttl_ms: the grant's id (16 bytes).
  virtual Result<std::string> lend(std::span<const uint8_t> buffer, bool targets_write, std::string_view scope,
                                   uint32_t ttl_ms) = 0;
  virtual Status revoke(std::string_view id) = 0;
  // Returns once `done` holds, keeping the lent memory's transfers moving where this side must take part.
  virtual void serve_until(const std::atomic<bool>& done) = 0;
};

// In this process: grants through the Container's session, registering the buffer for as long as it is lent
// unless the caller registered it (or memory around it) already.
std::unique_ptr<Lender> lender_of(client::Container& session);
// Through `rfos agent`: grants through the agent's session of an opened container handle, of bytes inside the
// app's shared buffer (AgentClient::buffer()); the agent serves the transfers.
std::unique_ptr<Lender> lender_of(agent::AgentClient& agent, uint32_t handle);

struct S3Endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 9000;
  std::string access_key;
  std::string secret_key;
  std::string region = "us-east-1";
};

struct HttpReply {
  unsigned status = 0;
  Headers headers;  // lowercase names
  std::string body;
  const std::string* header(std::string_view name) const;
};

class RdmaClient {
 public:
  RdmaClient(std::unique_ptr<Lender> lender, S3Endpoint endpoint)
      : lender_(std::move(lender)), endpoint_(std::move(endpoint)) {}
  RdmaClient(client::Container& session, S3Endpoint endpoint) : RdmaClient(lender_of(session), std::move(endpoint)) {}

  // The object, or its `range` (a Range header's value: "bytes=A-B", "bytes=A-", "bytes=-N"), into the start of
  // `buffer`: the bytes moved. Errors: the gateway's, as codes (kNotFound: NoSuchKey or NoSuchBucket;
  // kPermissionDenied: AccessDenied; kInvalidArgument: the object does not fit; kNotSupported: the gateway
  // declined the RDMA path), or the transport's. An object the gateway keeps in its name's record (NamedObjects::
  // kInlineBytes at most), which it declines to move by RDMA, is fetched over HTTP and copied into the buffer.
  Result<uint64_t> get_into(std::string_view bucket, std::string_view key, std::span<uint8_t> buffer,
                            std::string_view range = {});
  // All of `buffer` (1 byte or more) as the object `key`: its ETag (quoted).
  Result<std::string> put_from(std::string_view bucket, std::string_view key, std::span<const uint8_t> buffer);
  // All of `buffer` as part `part` of a multipart upload: its ETag (quoted), for CompleteMultipartUpload.
  Result<std::string> upload_part_from(std::string_view bucket, std::string_view key, std::string_view upload_id,
                                       uint32_t part, std::span<const uint8_t> buffer);

  // The parts, for callers that need them apart (and tests of what a gateway refuses): lends `buffer` to the
  // targets for the request of `scope` (rdma_scope) for ttl_ms, and gives the token that names the grant.
  Result<std::string> lend(std::span<const uint8_t> buffer, bool targets_write, std::string_view scope, uint32_t ttl_ms,
                           std::string* grant_id);
  // Sends a request signed with the endpoint's key (`headers` signed too, `unsigned_headers` not), while this
  // thread keeps the session's transfers moving: the gateway's answer.
  Result<HttpReply> send(std::string_view method, std::string_view bucket, std::string_view key, const Params& query,
                         const Headers& headers, std::string body = {}, const Headers& unsigned_headers = {});

  static constexpr uint32_t kGrantMs = 60000;

 private:
  // Lends `buffer` for one request, sends it, then revokes the grant: the answer.
  Result<HttpReply> lend_and_send(std::span<const uint8_t> buffer, bool targets_write, std::string_view method,
                                  std::string_view bucket, std::string_view key, const Params& query,
                                  std::string_view range);

  std::unique_ptr<Lender> lender_;
  S3Endpoint endpoint_;
};

// A gateway's answer as a Status: OK for 2xx, else the S3 error's code as the closest StatusCode.
Status status_of(const HttpReply& r);

}  // namespace rfos::s3
