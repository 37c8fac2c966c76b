// The RDMA path of `rfos s3` (docs/s3.md, "RDMA") against a real server process and a gateway, over ucx+tcp and
// ucx+shm: GET, ranged GET into the middle of a buffer, PUT and UploadPart through tokens, with the bytes moved
// by the targets to and from the caller's buffer; and the tokens a hostile caller could send (replayed, altered,
// forged, garbage, expired, of a closed session, for the other direction), each refused with nothing moved.
// The same through `rfos agent` (the agent lends the app's shared buffer; the app holds no key) and through the
// C API (include/rfos/rfos_s3.h) in both modes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_client.h"
#include "client/container.h"
#include "client/control_client.h"
#include "engine/engine_testing.h"
#include "rfos/rfos.h"
#include "rfos/rfos_s3.h"
#include "s3/gateway.h"
#include "s3/rdma_client.h"
#include "s3/rdma_token.h"
#include "server_process.h"

namespace rfos {
namespace {

using client::Container;
using client::ControlClient;
using s3::HttpReply;
using s3::RdmaClient;

std::vector<uint8_t> pattern(size_t n, uint64_t tag) {
  std::string p = engine::testing::pattern(tag, n);
  return std::vector<uint8_t>(p.begin(), p.end());
}

std::string xml_field(const std::string& body, const std::string& name) {
  size_t a = body.find("<" + name + ">");
  if (a == std::string::npos) return {};
  a += name.size() + 2;
  return body.substr(a, body.find("</" + name + ">", a) - a);
}

class S3Rdma : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // Trusting this process's user (root) as an agent for itself: the agent cases.
    server_ = std::make_unique<testing::ServerProcess>(
        dir_.path(), std::vector<std::string>{"--provider", GetParam(), "--trust-agent", "root=root"});
    ASSERT_TRUE(server_->start());
    control_ = ControlClient::create(server_->address());
    ASSERT_TRUE(control_->pool_create("p").is_ok());
    s3::GatewayConfig g;
    g.listen = "127.0.0.1:0";
    g.control_address = server_->address();
    g.pool = "p";
    g.keys = {{"AKRDMATEST", "rdma-test-secret", ""}};
    g.workers = 2;
    auto gw = s3::Gateway::start(g);
    ASSERT_TRUE(gw.is_ok()) << gw.status().to_string();
    gateway_ = std::move(gw).value();
    endpoint_.port = gateway_->port();
    endpoint_.access_key = "AKRDMATEST";
    endpoint_.secret_key = "rdma-test-secret";
    session_ = open_session();
    ASSERT_TRUE(session_);
    client_ = std::make_unique<RdmaClient>(*session_, endpoint_);
    ASSERT_EQ(send("PUT", "").status, 200u);  // CreateBucket
    session_ = open_session("bkt");           // the caller's session: any container it may open
    client_ = std::make_unique<RdmaClient>(*session_, endpoint_);
  }
  void TearDown() override {
    client_.reset();
    session_.reset();
    if (gateway_) gateway_->stop();
  }
  std::unique_ptr<Container> open_session(const std::string& cont = "") {
    if (cont.empty()) {
      EXPECT_TRUE(control_->cont_create("p", "caller", {}).is_ok());
      return open_session("caller");
    }
    client::ContainerOptions o;
    o.timeout_ms = 20000;
    auto c = Container::open(*control_, "p", cont, o);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c.is_ok() ? std::move(c).value() : nullptr;
  }
  HttpReply send(const std::string& method, const std::string& key, const s3::Params& query = {},
                 const s3::Headers& headers = {}, std::string body = {}, const s3::Headers& unsigned_headers = {}) {
    auto r = client_->send(method, "bkt", key, query, headers, std::move(body), unsigned_headers);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : HttpReply{};
  }
  // A plain PUT (the body over HTTP), and a plain GET's body.
  void put_plain(const std::string& key, const std::vector<uint8_t>& data) {
    ASSERT_EQ(send("PUT", key, {}, {}, std::string(data.begin(), data.end())).status, 200u);
  }
  std::string get_plain(const std::string& key) {
    HttpReply r = send("GET", key);
    EXPECT_EQ(r.status, 200u) << r.body;
    return r.body;
  }
  // A token lent from `buf` for `method` on `key` (and `range`), then the request sent with it as `token_key`'s.
  HttpReply with_token(const std::string& method, const std::string& lent_for_key, const std::string& key,
                       std::span<uint8_t> buf, bool targets_write, const std::string& lent_range = "",
                       const std::string& range = "", uint32_t ttl_ms = 60000, std::string* token_out = nullptr) {
    std::string token = lend(method, lent_for_key, buf, targets_write, lent_range, ttl_ms);
    if (token_out) *token_out = token;
    s3::Headers h{{"x-amz-rdma-token", token}};
    if (!range.empty()) h.emplace_back("range", range);
    return send(method, key, {}, h);
  }
  std::string lend(const std::string& method, const std::string& key, std::span<uint8_t> buf, bool targets_write,
                   const std::string& range = "", uint32_t ttl_ms = 60000) {
    if (!registered_.count(buf.data())) {
      EXPECT_TRUE(session_->register_memory(buf).is_ok());
      registered_.insert(buf.data());
    }
    auto token = client_->lend(buf, targets_write, s3::rdma_scope(method, "bkt", key, range, "", ""), ttl_ms, nullptr);
    EXPECT_TRUE(token.is_ok()) << token.status().to_string();
    return token.is_ok() ? *token : "";
  }

  engine::testing::TempDir dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<ControlClient> control_;
  std::unique_ptr<s3::Gateway> gateway_;
  s3::S3Endpoint endpoint_;
  std::unique_ptr<Container> session_;
  std::unique_ptr<RdmaClient> client_;
  std::set<const void*> registered_;
};

// 3.5 MiB: pieces on several targets, a partial last chunk.
constexpr size_t kObject = (7u << 20) / 2;

TEST_P(S3Rdma, PutFromAndGetIntoMoveWholeObjects) {
  std::vector<uint8_t> data = pattern(kObject, 1);
  auto etag = client_->put_from("bkt", "a/obj", data);
  ASSERT_TRUE(etag.is_ok()) << etag.status().to_string();
  EXPECT_EQ(etag->back(), '"');
  // An object put over RDMA is an object as any other: a plain GET reads it.
  EXPECT_TRUE(get_plain("a/obj") == std::string(data.begin(), data.end()));
  std::vector<uint8_t> back(kObject, 0);
  auto n = client_->get_into("bkt", "a/obj", back);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(*n, kObject);
  EXPECT_TRUE(back == data);
  // And the other way: a plain PUT, read into a larger buffer. 5000 bytes are kept in the name's record, which
  // the targets do not move: a token for it is declined, nothing moved, and get_into GETs it over HTTP instead.
  std::vector<uint8_t> small = pattern(5000, 2);
  put_plain("b", small);
  std::vector<uint8_t> big(1u << 20, 0xEE);
  HttpReply declined = with_token("GET", "b", "b", big, true);
  EXPECT_EQ(declined.status, 501u) << declined.body;
  ASSERT_NE(declined.header("x-amz-rdma-reply"), nullptr);
  EXPECT_EQ(*declined.header("x-amz-rdma-reply"), "501");
  EXPECT_TRUE(std::all_of(big.begin(), big.end(), [](uint8_t b) { return b == 0xEE; }));
  n = client_->get_into("bkt", "b", big);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(*n, small.size());
  EXPECT_TRUE(std::equal(small.begin(), small.end(), big.begin()));
  EXPECT_TRUE(std::all_of(big.begin() + small.size(), big.end(), [](uint8_t b) { return b == 0xEE; }));
  // A key that is not there: NoSuchKey, nothing moved.
  n = client_->get_into("bkt", "missing", big);
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound) << n.status().to_string();
}

TEST_P(S3Rdma, RangeLandsInTheMiddleOfABuffer) {
  std::vector<uint8_t> data = pattern(kObject, 3);
  put_plain("r", data);
  std::vector<uint8_t> buf(4u << 20, 0xEE);
  ASSERT_TRUE(session_->register_memory(buf).is_ok());  // the whole buffer; the range lands inside it
  const size_t at = 1000 + (1u << 20), first = 1048000, last = 3145000, len = last - first + 1;
  auto n = client_->get_into("bkt", "r", std::span<uint8_t>(buf).subspan(at, len),
                             "bytes=" + std::to_string(first) + "-" + std::to_string(last));
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(*n, len);
  EXPECT_TRUE(std::equal(data.begin() + first, data.begin() + last + 1, buf.begin() + at));
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + at, [](uint8_t b) { return b == 0xEE; }));
  EXPECT_TRUE(std::all_of(buf.begin() + at + len, buf.end(), [](uint8_t b) { return b == 0xEE; }));
  // The suffix form.
  n = client_->get_into("bkt", "r", std::span<uint8_t>(buf).subspan(0, 100), "bytes=-100");
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_TRUE(std::equal(data.end() - 100, data.end(), buf.begin()));
  EXPECT_TRUE(session_->unregister_memory(buf.data()).is_ok());
}

TEST_P(S3Rdma, MultipartPartsComeFromBuffers) {
  HttpReply created = send("POST", "mp", {{"uploads", ""}});
  ASSERT_EQ(created.status, 200u) << created.body;
  const std::string id = xml_field(created.body, "UploadId");
  ASSERT_FALSE(id.empty());
  std::vector<uint8_t> one = pattern(5u << 20, 4), two = pattern(300000, 5);
  auto e1 = client_->upload_part_from("bkt", "mp", id, 1, one);
  ASSERT_TRUE(e1.is_ok()) << e1.status().to_string();
  auto e2 = client_->upload_part_from("bkt", "mp", id, 2, two);
  ASSERT_TRUE(e2.is_ok()) << e2.status().to_string();
  std::string xml = "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>" + *e1 +
                    "</ETag></Part><Part><PartNumber>2</PartNumber><ETag>" + *e2 +
                    "</ETag></Part></CompleteMultipartUpload>";
  HttpReply done = send("POST", "mp", {{"uploadId", id}}, {}, xml);
  ASSERT_EQ(done.status, 200u) << done.body;
  EXPECT_TRUE(xml_field(done.body, "ETag").ends_with("-2&quot;") || xml_field(done.body, "ETag").ends_with("-2\""))
      << done.body;
  std::vector<uint8_t> whole(one);
  whole.insert(whole.end(), two.begin(), two.end());
  std::vector<uint8_t> back(whole.size());
  auto n = client_->get_into("bkt", "mp", back);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_TRUE(back == whole);
  // A range across the parts' seam.
  std::vector<uint8_t> seam(2000);
  n = client_->get_into("bkt", "mp", seam,
                        "bytes=" + std::to_string((5u << 20) - 1000) + "-" + std::to_string((5u << 20) + 999));
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_TRUE(std::equal(seam.begin(), seam.end(), whole.begin() + (5u << 20) - 1000));
  // An upload that keeps a checksum of every part takes none by RDMA (the gateway never sees those bytes): the
  // part is declined, nothing is staged.
  HttpReply summed = send("POST", "mp2", {{"uploads", ""}}, {{"x-amz-checksum-algorithm", "CRC32"}});
  ASSERT_EQ(summed.status, 200u) << summed.body;
  const std::string id2 = xml_field(summed.body, "UploadId");
  auto declined = client_->upload_part_from("bkt", "mp2", id2, 1, two);
  ASSERT_FALSE(declined.is_ok());
  EXPECT_EQ(declined.status().code(), StatusCode::kNotSupported) << declined.status().to_string();
  HttpReply parts = send("GET", "mp2", {{"uploadId", id2}});
  ASSERT_EQ(parts.status, 200u) << parts.body;
  EXPECT_EQ(parts.body.find("<Part>"), std::string::npos) << parts.body;
}

TEST_P(S3Rdma, AReplayedTokenMovesNothing) {
  std::vector<uint8_t> data = pattern(kObject, 6);
  put_plain("k", data);
  std::vector<uint8_t> buf(kObject, 0);
  std::string token;
  HttpReply first = with_token("GET", "k", "k", buf, true, "", "", 60000, &token);
  ASSERT_EQ(first.status, 200u) << first.body;
  EXPECT_TRUE(buf == data);
  std::fill(buf.begin(), buf.end(), 0xAB);
  // The same token in a request signed again (a replay through the gateway): the targets know it was used.
  HttpReply again = send("GET", "k", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(again.status, 403u) << again.body;
  EXPECT_EQ(xml_field(again.body, "Code"), "AccessDenied");
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xAB; }));
  // A PUT replayed: the object stays what the first put made it. Its pieces reach every target, and the replay's
  // data object is a fresh one, placed anew: a target the first use never reached must refuse it too.
  std::vector<uint8_t> src = pattern(kObject, 7);
  HttpReply put = with_token("PUT", "p", "p", src, false, "", "", 60000, &token);
  ASSERT_EQ(put.status, 200u) << put.body;
  std::vector<uint8_t> other = pattern(kObject, 8);
  std::copy(other.begin(), other.end(), src.begin());
  HttpReply replay = send("PUT", "p", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(replay.status, 403u) << replay.body;
  std::vector<uint8_t> want = pattern(kObject, 7);
  EXPECT_TRUE(get_plain("p") == std::string(want.begin(), want.end()));
}

TEST_P(S3Rdma, AlteredTokensAreRefused) {
  std::vector<uint8_t> data = pattern(100000, 9);
  put_plain("x", data);
  put_plain("y", data);
  std::vector<uint8_t> buf(100000, 0xCD);
  auto untouched = [&] { return std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xCD; }); };
  // Lent for x, sent for y: the scope differs.
  HttpReply r = with_token("GET", "x", "y", buf, true);
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(untouched());
  // Lent for a range, sent with another.
  r = with_token("GET", "x", "x", buf, true, "bytes=0-9", "bytes=0-99");
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(untouched());
  // Lent for a GET, sent as a PUT (and the other way): nothing read from a buffer lent to be written.
  r = with_token("PUT", "x", "x", buf, true);
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(get_plain("x") == std::string(data.begin(), data.end()));
  // Not among the signed headers: refused before anything.
  std::string token = lend("GET", "x", buf, true);
  r = send("GET", "x", {}, {}, {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(untouched());
}

TEST_P(S3Rdma, ForgedGarbageAndExpiredTokensAreRefused) {
  std::vector<uint8_t> data = pattern(100000, 10);
  put_plain("f", data);
  // A token naming no grant (another server's, or made up).
  s3::RdmaToken forged{std::string(16, '\x5a'), 100000};
  HttpReply r = send("GET", "f", {}, {{"x-amz-rdma-token", s3::format_rdma_token(forged)}});
  EXPECT_EQ(r.status, 403u) << r.body;
  r = send("PUT", "f", {}, {{"x-amz-rdma-token", s3::format_rdma_token(forged)}});
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(get_plain("f") == std::string(data.begin(), data.end()));  // a refused PUT stores nothing
  for (const std::string& garbage :
       std::vector<std::string>{"", "rfos1:", "rfos1:zz:1", "rfos2:00112233445566778899aabbccddeeff:10",
                                "rfos1:00112233445566778899aabbccddeeff:0", std::string(5000, 'A')}) {
    r = send("GET", "f", {}, {{"x-amz-rdma-token", garbage}});
    EXPECT_EQ(r.status, 400u) << garbage << ": " << r.body;
    EXPECT_EQ(xml_field(r.body, "Code"), "InvalidToken") << garbage;
  }
  // Expired: lent for 1 ms.
  std::vector<uint8_t> buf(100000, 0xCD);
  std::string token = lend("GET", "f", buf, true, "", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // its lifetime passing, not a synchronization
  r = send("GET", "f", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xCD; }));
  // A token whose lending session closed.
  {
    auto other = open_session("bkt");
    ASSERT_TRUE(other);
    std::vector<uint8_t> theirs(100000, 0xCD);
    ASSERT_TRUE(other->register_memory(theirs).is_ok());
    RdmaClient lender(*other, endpoint_);
    auto t = lender.lend(theirs, true, s3::rdma_scope("GET", "bkt", "f", "", "", ""), 60000, nullptr);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    token = *t;
  }
  r = send("GET", "f", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(r.status, 403u) << r.body;
}

TEST_P(S3Rdma, WhatItCannotServeItDeclinesOrRefuses) {
  std::vector<uint8_t> data = pattern(100000, 11);
  put_plain("d", data);
  std::vector<uint8_t> buf(1000, 0xCD);
  std::string token = lend("GET", "d", buf, true);
  // Another operation with a token: declined, never served as if the token were not there.
  HttpReply r = send("DELETE", "d", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(r.status, 501u) << r.body;
  ASSERT_NE(r.header("x-amz-rdma-reply"), nullptr);
  EXPECT_EQ(*r.header("x-amz-rdma-reply"), "501");
  EXPECT_TRUE(get_plain("d") == std::string(data.begin(), data.end()));
  // A buffer too small for the object: nothing moved.
  r = send("GET", "d", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(r.status, 400u) << r.body;
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xCD; }));
  // A checksum of a body the gateway never sees: declined.
  std::vector<uint8_t> src = pattern(1000, 12);
  token = lend("PUT", "d", src, false);
  r = send("PUT", "d", {}, {{"x-amz-rdma-token", token}, {"x-amz-checksum-crc32", "AAAAAA=="}});
  EXPECT_EQ(r.status, 501u) << r.body;
  EXPECT_TRUE(get_plain("d") == std::string(data.begin(), data.end()));
}

// An agent on a socket in the test's directory; `sealing_key`: its one tenant (root's apps) seals its data.
std::unique_ptr<agent::Agent> start_agent(const std::string& dir, const std::string& control,
                                          const std::string& provider, bool sealing = false) {
  agent::AgentConfig c;
  c.control_address = control;
  c.provider = provider;
  c.listen = dir + "/agent.sock";
  c.timeout_ms = 20000;
  c.state_dir = dir + "/agent-state";
  if (sealing) {
    std::string key = dir + "/tenant.key";
    std::ofstream(key) << std::string(64, 'c');
    chmod(key.c_str(), 0600);
    c.tenants = {{"sealed", {"root"}, {}, key, 1, {}}};
  }
  auto a = agent::Agent::start(c);
  EXPECT_TRUE(a.is_ok()) << a.status().to_string();
  return a.is_ok() ? std::move(a).value() : nullptr;
}

std::unique_ptr<agent::AgentClient> connect_app(const std::string& dir) {
  agent::AgentClientOptions o;
  o.buffer_bytes = 16 << 20;
  o.entries = 16;
  auto c = agent::AgentClient::connect(dir + "/agent.sock", o);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

TEST_P(S3Rdma, ThroughTheAgentTheTargetsMoveTheAppsSharedBuffer) {
  auto agent = start_agent(dir_.path(), server_->address(), GetParam());
  ASSERT_TRUE(agent);
  auto app = connect_app(dir_.path());
  ASSERT_TRUE(app);
  auto h = app->open("p", "bkt", false);  // the app's session in the agent: any container it may open
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  RdmaClient rdma(s3::lender_of(*app, *h), endpoint_);
  auto buf = app->buffer();
  std::vector<uint8_t> data = pattern(kObject, 21);
  std::memcpy(buf.data(), data.data(), data.size());
  auto etag = rdma.put_from("bkt", "via-agent", buf.subspan(0, kObject));
  ASSERT_TRUE(etag.is_ok()) << etag.status().to_string();
  EXPECT_TRUE(get_plain("via-agent") == std::string(data.begin(), data.end()));
  // Into another place of the shared buffer, whole and a range.
  auto into = buf.subspan(8 << 20, kObject);
  std::fill(into.begin(), into.end(), 0);
  auto n = rdma.get_into("bkt", "via-agent", into);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(*n, kObject);
  EXPECT_EQ(std::memcmp(into.data(), data.data(), kObject), 0);
  n = rdma.get_into("bkt", "via-agent", into.subspan(0, 1000), "bytes=2000000-2000999");
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(std::memcmp(into.data(), data.data() + 2000000, 1000), 0);
  // Memory outside the shared buffer is not the agent's to lend: refused, nothing sent.
  std::vector<uint8_t> mine(1000);
  EXPECT_EQ(rdma.get_into("bkt", "via-agent", mine).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(app->grant(*h, buf.subspan(buf.size() - 10, 10), true, std::string(32, 's'), 1000).status().code(),
            StatusCode::kOk);
  EXPECT_EQ(app->grant(*h + 100, buf.subspan(0, 10), true, std::string(32, 's'), 1000).status().code(),
            StatusCode::kInvalidArgument);  // a handle the app was never given
  // A grant ends with the handle that made it: its token moves nothing after the app closes the handle.
  std::fill(into.begin(), into.end(), 0xCD);
  std::string token;
  {
    auto t = rdma.lend(into.subspan(0, kObject), true, s3::rdma_scope("GET", "bkt", "via-agent", "", "", ""), 60000,
                       nullptr);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    token = *t;
  }
  ASSERT_TRUE(app->close(*h).is_ok());
  HttpReply r = send("GET", "via-agent", {}, {{"x-amz-rdma-token", token}});
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(std::all_of(into.begin(), into.begin() + kObject, [](uint8_t b) { return b == 0xCD; }));
}

TEST_P(S3Rdma, ASealingTenantsAgentLendsNothing) {
  auto agent = start_agent(dir_.path(), server_->address(), GetParam(), true);
  ASSERT_TRUE(agent);
  auto app = connect_app(dir_.path());
  ASSERT_TRUE(app);
  auto h = app->open("p", "bkt", false);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  // The targets would write the stored (sealed) bytes into the app's buffer, or store its plaintext unsealed.
  RdmaClient rdma(s3::lender_of(*app, *h), endpoint_);
  EXPECT_EQ(rdma.put_from("bkt", "sealed", app->buffer().subspan(0, 4096)).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(send("HEAD", "sealed").status, 404u);
}

TEST_P(S3Rdma, TheCApiLendsInProcessAndThroughTheAgent) {
  auto agent = start_agent(dir_.path(), server_->address(), GetParam());
  ASSERT_TRUE(agent);
  rfos_s3_endpoint_t s3{"127.0.0.1", endpoint_.port, "AKRDMATEST", "rdma-test-secret", nullptr};
  std::vector<uint8_t> data = pattern(kObject, 31);
  for (const std::string& addr : {server_->address(), "agent://" + dir_.path() + "/agent.sock"}) {
    SCOPED_TRACE(addr);
    rfos_client_t* client = nullptr;
    ASSERT_EQ(rfos_connect(addr.c_str(), 20000, &client), 0) << rfos_last_error();
    rfos_cont_t* cont = nullptr;
    ASSERT_EQ(rfos_cont_open(client, "p", "bkt", 0, GetParam().c_str(), &cont), 0) << rfos_last_error();
    void* mem = nullptr;
    ASSERT_EQ(rfos_alloc(cont, 2 * kObject, &mem), 0) << rfos_last_error();
    auto* bytes = static_cast<uint8_t*>(mem);
    std::memcpy(bytes, data.data(), kObject);
    char etag[RFOS_S3_ETAG_LEN];
    ASSERT_EQ(rfos_s3_put_from(cont, &s3, "bkt", "c-api", bytes, kObject, etag, sizeof(etag)), 0) << rfos_last_error();
    EXPECT_EQ(etag[0], '"');
    EXPECT_TRUE(get_plain("c-api") == std::string(data.begin(), data.end()));
    uint64_t moved = 0;
    ASSERT_EQ(rfos_s3_get_into(cont, &s3, "bkt", "c-api", bytes + kObject, kObject, "bytes=-4096", &moved), 0)
        << rfos_last_error();
    EXPECT_EQ(moved, 4096u);
    EXPECT_EQ(std::memcmp(bytes + kObject, data.data() + kObject - 4096, 4096), 0);
    EXPECT_EQ(rfos_s3_get_into(cont, &s3, "bkt", "no-such-key", bytes, kObject, nullptr, &moved), -ENOENT);
    EXPECT_EQ(rfos_s3_put_from(cont, &s3, "bkt", "nothing", bytes, kObject, etag, 4), -EINVAL);          // no room
    EXPECT_EQ(rfos_s3_get_into(cont, &s3, "bkt", "nothing", bytes, kObject, nullptr, &moved), -ENOENT);  // not sent
    EXPECT_EQ(rfos_s3_put_from(cont, nullptr, "bkt", "c-api", bytes, kObject, nullptr, 0), -EINVAL);
    EXPECT_EQ(rfos_free(cont, mem), 0);
    rfos_cont_close(cont);
    rfos_disconnect(client);
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, S3Rdma, ::testing::Values("ucx+tcp", "ucx+shm"),
                         [](const auto& info) { return info.param == "ucx+tcp" ? "ucx_tcp" : "ucx_shm"; });

}  // namespace
}  // namespace rfos
