#include "s3/rdma_client.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <ctime>
#include <thread>

#include "agent/agent_client.h"
#include "client/container.h"
#include "s3/rdma_token.h"
#include "s3/xml.h"

namespace rfos::s3 {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

// One request and its answer over a connection of its own.
Result<HttpReply> round_trip(const S3Endpoint& e, http::request<http::string_body>& req) {
  try {
    boost::asio::io_context io;
    tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.connect(resolver.resolve(e.host, std::to_string(e.port)));
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(uint64_t{1} << 30);
    if (req.method() == http::verb::head) parser.skip(true);
    http::read(stream, buffer, parser);
    const auto& res = parser.get();
    HttpReply r;
    r.status = res.result_int();
    for (const auto& f : res) {
      r.headers.emplace_back(ascii_lower(std::string(f.name_string())), std::string(f.value()));
    }
    r.body = res.body();
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return r;
  } catch (const std::exception& ex) {
    return error(StatusCode::kIoError,
                 std::string("S3 request to ") + e.host + ":" + std::to_string(e.port) + " failed: " + ex.what());
  }
}

// A PUT's or UploadPart's answer on the RDMA path: its ETag.
Result<std::string> put_etag(Result<HttpReply> reply) {
  RFOS_RETURN_IF_ERROR(reply.status());
  RFOS_RETURN_IF_ERROR(status_of(*reply));
  const std::string* served = reply->header(kRdmaReplyHeader);
  const std::string* etag = reply->header("etag");
  if (!served || *served != "204" || !etag)
    return error(StatusCode::kNotSupported, "the gateway did not serve the RDMA path");
  return *etag;
}

class ContainerLender final : public Lender {
 public:
  explicit ContainerLender(client::Container& session) : session_(session) {}
  ~ContainerLender() override {  // what is still lent ends before its memory is unregistered
    for (const auto& [id, p] : registered_) {
      (void)session_.revoke_grant(id);
      (void)session_.unregister_memory(p);
    }
  }

  Result<std::string> lend(std::span<const uint8_t> buffer, bool targets_write, std::string_view scope,
                           uint32_t ttl_ms) override {
    // Registered for as long as it is lent, unless the caller registered it (or memory around it).
    const bool ours = session_.register_memory(buffer).is_ok();
    std::string id = random_bytes(16);
    Status s = session_.grant_memory(buffer, targets_write, id, scope, ttl_ms);
    if (!s.is_ok()) {
      if (ours) (void)session_.unregister_memory(buffer.data());
      return s;
    }
    if (ours) registered_[id] = buffer.data();
    return id;
  }

  Status revoke(std::string_view id) override {
    Status s = session_.revoke_grant(id);
    if (auto it = registered_.find(std::string(id)); it != registered_.end()) {
      (void)session_.unregister_memory(it->second);
      registered_.erase(it);
    }
    return s;
  }

  void serve_until(const std::atomic<bool>& done) override {
    while (!done) session_.wait(5);
  }

 private:
  client::Container& session_;
  std::map<std::string, const void*> registered_;  // grant id -> the memory registered for it
};

class AgentLender final : public Lender {
 public:
  AgentLender(agent::AgentClient& agent, uint32_t handle) : agent_(agent), handle_(handle) {}

  Result<std::string> lend(std::span<const uint8_t> buffer, bool targets_write, std::string_view scope,
                           uint32_t ttl_ms) override {
    return agent_.grant(handle_, buffer, targets_write, scope, ttl_ms);
  }
  Status revoke(std::string_view id) override { return agent_.revoke_grant(handle_, id); }
  void serve_until(const std::atomic<bool>&) override {}  // the agent's thread serves them

 private:
  agent::AgentClient& agent_;
  uint32_t handle_;
};

}  // namespace

std::unique_ptr<Lender> lender_of(client::Container& session) { return std::make_unique<ContainerLender>(session); }
std::unique_ptr<Lender> lender_of(agent::AgentClient& agent, uint32_t handle) {
  return std::make_unique<AgentLender>(agent, handle);
}

const std::string* HttpReply::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

Status status_of(const HttpReply& r) {
  if (r.status >= 200 && r.status < 300) return Status::ok();
  // S3's <Error><Code>..</Code><Message>..</Message>..</Error> (a body that is not one leaves them empty).
  std::string code, message;
  if (auto doc = parse_xml(r.body); doc.is_ok()) {
    if (const XmlElement* c = doc->child("Code")) code = c->text;
    if (const XmlElement* m = doc->child("Message")) message = m->text;
  }
  const std::string what = "S3 " + std::to_string(r.status) + " " + code + ": " + message;
  StatusCode c = StatusCode::kIoError;
  if (code == "NoSuchKey" || code == "NoSuchBucket" || code == "NoSuchUpload")
    c = StatusCode::kNotFound;
  else if (code == "AccessDenied" || code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId")
    c = StatusCode::kPermissionDenied;
  else if (r.status == 400 || r.status == 416)
    c = StatusCode::kInvalidArgument;
  else if (r.status == 501)
    c = StatusCode::kNotSupported;
  else if (r.status == 503)
    c = StatusCode::kBusy;
  else if (r.status == 507)
    c = StatusCode::kNoSpace;
  return error(c, what);
}

Result<HttpReply> RdmaClient::send(std::string_view method, std::string_view bucket, std::string_view key,
                                   const Params& query, const Headers& headers, std::string body,
                                   const Headers& unsigned_headers) {
  const std::string path = "/" + std::string(bucket) + (key.empty() ? "" : "/" + std::string(key));
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const std::string amz_date = format_amz_date(now);
  const std::string payload_hash = hex_of(sha256(body));
  Headers all = headers;
  all.emplace_back("host", endpoint_.host + ":" + std::to_string(endpoint_.port));
  all.emplace_back("x-amz-date", amz_date);
  all.emplace_back("x-amz-content-sha256", payload_hash);
  RFOS_ASSIGN_OR_RETURN(
      std::string authorization,
      authorization_for(method, path, query, all, payload_hash, endpoint_.access_key,
                        signing_key(endpoint_.secret_key, amz_date.substr(0, 8), endpoint_.region, "s3"), amz_date,
                        endpoint_.region));

  std::string target = uri_encode(path, true);
  for (size_t i = 0; i < query.size(); ++i)
    target += (i ? "&" : "?") + uri_encode(query[i].first, false) + "=" + uri_encode(query[i].second, false);
  http::request<http::string_body> req(http::string_to_verb(std::string(method)), target, 11);
  for (const auto& [k, v] : all) req.set(k, v);
  for (const auto& [k, v] : unsigned_headers) req.set(k, v);
  req.set(http::field::authorization, authorization);
  req.body() = std::move(body);
  req.prepare_payload();

  // The exchange runs on a thread of its own while this one serves the lent memory: over tcp and shm the
  // targets' reads and writes of it need the lending side's worker to move.
  std::atomic<bool> done{false};
  Result<HttpReply> reply = error(StatusCode::kInternal, "no answer");
  std::thread http([&] {
    reply = round_trip(endpoint_, req);
    done = true;
  });
  lender_->serve_until(done);
  http.join();
  return reply;
}

Result<std::string> RdmaClient::lend(std::span<const uint8_t> buffer, bool targets_write, std::string_view scope,
                                     uint32_t ttl_ms, std::string* grant_id) {
  RdmaToken t;
  RFOS_ASSIGN_OR_RETURN(t.grant_id, lender_->lend(buffer, targets_write, scope, ttl_ms));
  t.length = buffer.size();
  if (grant_id) *grant_id = t.grant_id;
  return format_rdma_token(t);
}

Result<HttpReply> RdmaClient::lend_and_send(std::span<const uint8_t> buffer, bool targets_write,
                                            std::string_view method, std::string_view bucket, std::string_view key,
                                            const Params& query, std::string_view range) {
  if (buffer.empty()) return error(StatusCode::kInvalidArgument, "the RDMA path needs a buffer of 1 byte or more");
  auto param = [&](std::string_view name) {
    for (const auto& [k, v] : query)
      if (k == name) return v;
    return std::string();
  };
  const std::string scope = rdma_scope(method, bucket, key, range, param("uploadId"), param("partNumber"));
  std::string grant_id;
  RFOS_ASSIGN_OR_RETURN(std::string token, lend(buffer, targets_write, scope, kGrantMs, &grant_id));
  Headers headers{{std::string(kRdmaTokenHeader), token}};
  if (!range.empty()) headers.emplace_back("range", std::string(range));
  Result<HttpReply> reply = send(method, bucket, key, query, headers);
  // Nothing may move into the buffer once the caller has it back.
  Status revoked = lender_->revoke(grant_id);
  if (reply.is_ok() && !revoked.is_ok()) reply = revoked;
  return reply;
}

Result<uint64_t> RdmaClient::get_into(std::string_view bucket, std::string_view key, std::span<uint8_t> buffer,
                                      std::string_view range) {
  RFOS_ASSIGN_OR_RETURN(HttpReply r, lend_and_send(buffer, true, "GET", bucket, key, {}, range));
  const std::string* declined = r.header(kRdmaReplyHeader);
  if (r.status == 501 && declined && *declined == "501") {
    // A small object, kept in its name's record, comes in a reply's body instead, copied into the buffer.
    Headers headers;
    if (!range.empty()) headers.emplace_back("range", std::string(range));
    RFOS_ASSIGN_OR_RETURN(r, send("GET", bucket, key, {}, headers));
    RFOS_RETURN_IF_ERROR(status_of(r));
    if (r.body.size() > buffer.size())
      return error(StatusCode::kInvalidArgument, "the " + std::to_string(r.body.size()) +
                                                     " bytes asked for do not fit the " +
                                                     std::to_string(buffer.size()) + "-byte buffer");
    std::memcpy(buffer.data(), r.body.data(), r.body.size());
    return r.body.size();
  }
  RFOS_RETURN_IF_ERROR(status_of(r));
  const std::string* moved = r.header(kRdmaBytesHeader);
  const std::string* served = r.header(kRdmaReplyHeader);
  if (!moved || !served || (*served != "200" && *served != "206"))
    return error(StatusCode::kNotSupported, "the gateway did not serve the RDMA path");
  return std::stoull(*moved);
}

Result<std::string> RdmaClient::put_from(std::string_view bucket, std::string_view key,
                                         std::span<const uint8_t> buffer) {
  return put_etag(lend_and_send(buffer, false, "PUT", bucket, key, {}, {}));
}

Result<std::string> RdmaClient::upload_part_from(std::string_view bucket, std::string_view key,
                                                 std::string_view upload_id, uint32_t part,
                                                 std::span<const uint8_t> buffer) {
  Params query{{"partNumber", std::to_string(part)}, {"uploadId", std::string(upload_id)}};
  return put_etag(lend_and_send(buffer, false, "PUT", bucket, key, query, {}));
}

}  // namespace rfos::s3
