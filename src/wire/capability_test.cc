#include "wire/capability.h"

#include <gtest/gtest.h>

namespace rfos::wire {
namespace {

TEST(Capability, SignVerifyAndRefuse) {
  std::string secret(32, 's');
  std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
  Capability cap{Uuid::random(), Uuid::random(), Uuid::random(), Capability::kRead | Capability::kWrite, 5000, {}};
  std::string token = encode_capability(cap, key);
  ASSERT_EQ(token.size(), Capability::kEncodedBytes);
  auto ok = verify_capability(token, key, 4999);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->pool, cap.pool);
  EXPECT_EQ(ok->cont, cap.cont);
  EXPECT_EQ(ok->rights, cap.rights);
  EXPECT_EQ(verify_capability(token, key, 5000).status().code(), StatusCode::kPermissionDenied);  // expired
  std::string other(32, 'o');
  EXPECT_EQ(verify_capability(token, {reinterpret_cast<const uint8_t*>(other.data()), 32}, 1).status().code(),
            StatusCode::kPermissionDenied);
  for (size_t i = 0; i < token.size(); ++i) {  // any flipped bit is refused
    std::string bad = token;
    bad[i] ^= 1;
    EXPECT_FALSE(verify_capability(bad, key, 1).is_ok()) << "byte " << i;
  }
  EXPECT_EQ(verify_capability(token.substr(1), key, 1).status().code(), StatusCode::kInvalidArgument);
}

// A tenant's limits travel signed: they cannot be changed or stripped (a version 1 token made of a version 2
// one, by cutting its limits off and relabelling it, does not verify).
TEST(Capability, QosLimitsAreSignedIn) {
  std::string secret(32, 's');
  std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
  Capability cap{Uuid::random(), Uuid::random(), Uuid::random(), Capability::kRead, 5000, {}};
  cap.qos = {qos_key_of("tenant-a"), 5000, 50, 100 << 20, 0};
  std::string token = encode_capability(cap, key);
  ASSERT_EQ(token.size(), Capability::kEncodedBytesWithQos);
  auto ok = verify_capability(token, key, 1);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->qos, cap.qos);
  EXPECT_EQ(qos_key_of("tenant-a"), cap.qos.key);
  EXPECT_NE(qos_key_of("tenant-b"), cap.qos.key);
  for (size_t i = 0; i < token.size(); ++i) {
    std::string bad = token;
    bad[i] ^= 1;
    EXPECT_FALSE(verify_capability(bad, key, 1).is_ok()) << "byte " << i;
  }
  std::string stripped = token.substr(0, 58) + token.substr(98);
  stripped[0] = Capability::kVersion;
  EXPECT_EQ(verify_capability(stripped, key, 1).status().code(), StatusCode::kPermissionDenied);
  std::string relabelled = token;
  relabelled[0] = Capability::kVersion;
  EXPECT_EQ(decode_capability(relabelled).status().code(), StatusCode::kInvalidArgument);
  // Without limits a capability stays version 1.
  cap.qos = {};
  EXPECT_EQ(encode_capability(cap, key).size(), Capability::kEncodedBytes);
}

}  // namespace
}  // namespace rfos::wire

#include "wire/data_plane.h"

namespace rfos::wire {
namespace {

TEST(DataPlane, RequestAndReplyRoundTripAndRefuseDamage) {
  Request q;
  q.op = Op::kUpdate;
  q.request_id = 42;
  q.capability = std::string(Capability::kEncodedBytes, 'c');
  q.oid = {1, 2};
  q.length = 8192;
  q.dkey = "dk";
  q.akey = "ak";
  q.csums = {1, 2};
  std::string h = encode_request(q);
  auto d = decode_request(h);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->request_id, 42u);
  EXPECT_EQ(d->dkey, "dk");
  EXPECT_EQ(d->csums, q.csums);
  for (size_t cut = 0; cut < h.size(); ++cut) EXPECT_FALSE(decode_request(h.substr(0, cut)).is_ok());
  EXPECT_FALSE(decode_request(h + "x").is_ok());
  std::string bad_version = h;
  bad_version[4] = 9;
  EXPECT_EQ(decode_request(bad_version).status().code(), StatusCode::kNotSupported);

  // The explicit path's memory descriptor rides at the end; only array updates and fetches may carry one.
  q.remote_addr = 0x7f0012345000;
  q.rkey = std::string(200, 'k');
  h = encode_request(q);
  d = decode_request(h);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->remote_addr, q.remote_addr);
  EXPECT_EQ(d->rkey, q.rkey);
  for (size_t cut = 0; cut < h.size(); ++cut) EXPECT_FALSE(decode_request(h.substr(0, cut)).is_ok());
  q.kind = Kind::kSingle;
  EXPECT_EQ(decode_request(encode_request(q)).status().code(), StatusCode::kInvalidArgument);
  q.kind = Kind::kArray;
  q.op = Op::kPunchDkey;
  EXPECT_EQ(decode_request(encode_request(q)).status().code(), StatusCode::kInvalidArgument);
  q.op = Op::kUpdate;
  q.rkey = std::string(kMaxRkeyBytes + 1, 'k');
  EXPECT_EQ(decode_request(encode_request(q)).status().code(), StatusCode::kInvalidArgument);
  // A watch names its client's tag in the offset and carries nothing.
  Request w;
  w.op = Op::kWatch;
  w.kind = Kind::kSingle;
  w.offset = 0x1234;
  auto dw = decode_request(encode_request(w));
  ASSERT_TRUE(dw.is_ok()) << dw.status().to_string();
  EXPECT_EQ(dw->offset, 0x1234u);
  w.length = 1;
  EXPECT_EQ(decode_request(encode_request(w)).status().code(), StatusCode::kInvalidArgument);

  Reply p;
  p.request_id = 42;
  p.status = StatusCode::kChecksumMismatch;
  p.message = "bad";
  std::string r = encode_reply(p);
  auto dp = decode_reply(r);
  ASSERT_TRUE(dp.is_ok());
  EXPECT_EQ(dp->status, StatusCode::kChecksumMismatch);
  EXPECT_EQ(dp->message, "bad");
  EXPECT_FALSE(decode_reply(h).is_ok());
}

TEST(DataPlane, ExtentPagesRoundTripAndRefuseDamage) {
  ExtentPage page;
  page.anchor = std::string("\0\1anchor", 8);
  page.extents = {{0, 4096}, {1 << 20, 17}, {(1ull << 62) - 8, 8}};
  std::string s = encode_extent_page(page);
  auto back = decode_extent_page(s);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->anchor, page.anchor);
  EXPECT_FALSE(back->done);
  EXPECT_EQ(back->extents, page.extents);
  for (size_t cut = 0; cut < s.size(); ++cut) EXPECT_FALSE(decode_extent_page(s.substr(0, cut)).is_ok());
  EXPECT_FALSE(decode_extent_page(s + "x").is_ok());
  page.extents.push_back({5, 0});  // empty extents never come from a target
  EXPECT_FALSE(decode_extent_page(encode_extent_page(page)).is_ok());
  page.extents.back() = {UINT64_MAX, 2};  // nor ones that wrap around
  EXPECT_FALSE(decode_extent_page(encode_extent_page(page)).is_ok());
}

TEST(DataPlane, ObjectPagesRoundTripAndRefuseDamage) {
  ObjectPage page;
  page.anchor = "resume";
  page.done = true;
  page.oids = {{1, 2}, {UINT64_MAX, 7}};
  std::string s = encode_object_page(page);
  auto back = decode_object_page(s);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->anchor, page.anchor);
  EXPECT_TRUE(back->done);
  EXPECT_EQ(back->oids, page.oids);
  for (size_t cut = 0; cut < s.size(); ++cut) EXPECT_FALSE(decode_object_page(s.substr(0, cut)).is_ok());
  EXPECT_FALSE(decode_object_page(s + "x").is_ok());
  s[0] = 2;  // done is 0 or 1
  EXPECT_FALSE(decode_object_page(s).is_ok());
}

}  // namespace
}  // namespace rfos::wire
