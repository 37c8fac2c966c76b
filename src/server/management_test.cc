// The control plane's logic without gRPC: principals made by the test, the management layer called directly,
// its targets on the simulated fabric, and a real client over the sessions it grants.
#include "server/management.h"

#include <gtest/gtest.h>

#include <cstring>

#include "client/container.h"
#include "engine/engine_testing.h"

namespace rfos::server {
namespace {

Principal local(const std::string& name, uint32_t uid, bool admin = false) {
  Principal p;
  p.via = Principal::Via::kLocal;
  p.name = name;
  p.uid = uid;
  p.gid = uid;
  p.groups = {name};
  p.admin = admin;
  return p;
}

class ManagementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    config_.data_dir = dir_.path() + "/data";
    config_.provider = "sim";
    config_.targets = 2;
    config_.target_bytes = 64ull << 20;
    config_.media_threads = 1;
    reopen();
  }
  void reopen() {
    m_.reset();
    auto m = Management::open(config_);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    m_ = std::move(m).value();
  }

  // A pool owned by alice, holding a container of hers.
  void pool_and_container() {
    wire::PoolCreateRequest pq;
    pq.set_label("p");
    pq.set_owner("alice");
    wire::PoolCreateResponse pr;
    ASSERT_TRUE(m_->pool_create(admin_, pq, &pr).is_ok());
    wire::ContCreateRequest cq;
    cq.set_pool("p");
    cq.set_label("c");
    wire::ContCreateResponse cr;
    Status s = m_->cont_create(alice_, cq, &cr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }

  Result<wire::ConnectResponse> connect(const Principal& who, bool write) {
    wire::ConnectRequest q;
    q.set_pool("p");
    q.set_cont("c");
    q.set_write(write);
    wire::ConnectResponse r;
    RFOS_RETURN_IF_ERROR(m_->connect(who, q, &r));
    return r;
  }

  Status grant(const std::string& entry) {
    wire::AclModifyRequest q;
    q.set_pool("p");
    q.set_cont("c");
    q.set_op(wire::AclModifyRequest::UPDATE);
    q.add_entries(entry);
    wire::AclResponse r;
    return m_->acl_modify(alice_, q, &r);
  }

  Status renew(const Principal& who, const wire::ConnectResponse& session) {
    wire::RenewRequest q;
    q.set_session_id(session.session_id());
    wire::RenewResponse r;
    return m_->renew(who, q, &r);
  }

  engine::testing::TempDir dir_;
  ServerConfig config_;
  std::unique_ptr<Management> m_;
  Principal admin_ = local("root", 0, true), alice_ = local("alice", 1001), bob_ = local("bob", 1002);
};

TEST_F(ManagementTest, OnlyAdministratorsCreateAndDestroyPools) {
  wire::PoolCreateRequest q;
  q.set_label("p");
  wire::PoolCreateResponse r;
  EXPECT_EQ(m_->pool_create(alice_, q, &r).code(), StatusCode::kPermissionDenied);
  Principal nobody;
  EXPECT_EQ(m_->pool_create(nobody, q, &r).code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(m_->pool_create(admin_, q, &r).is_ok());
  EXPECT_EQ(r.pool().targets(), 2u);
  EXPECT_EQ(m_->pool_create(admin_, q, &r).code(), StatusCode::kAlreadyExists) << "labels are unique";
  wire::PoolDestroyRequest d;
  d.set_pool("p");
  wire::PoolDestroyResponse dr;
  EXPECT_EQ(m_->pool_destroy(alice_, d, &dr).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(m_->pool_destroy(admin_, d, &dr).is_ok());
  wire::PoolQueryRequest pq;
  pq.set_pool("p");
  wire::PoolQueryResponse pr;
  EXPECT_EQ(m_->pool_query(admin_, pq, &pr).code(), StatusCode::kUnknownPool);
}

TEST_F(ManagementTest, AclsDecideWhoConnectsAndWithWhichRights) {
  ASSERT_NO_FATAL_FAILURE(pool_and_container());
  auto mine = connect(alice_, true);
  ASSERT_TRUE(mine.is_ok()) << mine.status().to_string();
  EXPECT_EQ(mine->map().provider(), "sim");
  EXPECT_EQ(mine->map().targets_size(), 2);
  EXPECT_EQ(connect(bob_, false).status().code(), StatusCode::kPermissionDenied);
  // Bob may read the pool only once it says so too; then read, not write, the container.
  ASSERT_TRUE(grant("A::bob@:r").is_ok());
  EXPECT_EQ(connect(bob_, false).status().code(), StatusCode::kPermissionDenied) << "the pool's ACL is not bob's";
  wire::AclModifyRequest pool_grant;
  pool_grant.set_pool("p");
  pool_grant.set_op(wire::AclModifyRequest::UPDATE);
  pool_grant.add_entries("A::bob@:r");
  wire::AclResponse ar;
  ASSERT_TRUE(m_->acl_modify(alice_, pool_grant, &ar).is_ok());
  auto bobs = connect(bob_, false);
  ASSERT_TRUE(bobs.is_ok()) << bobs.status().to_string();
  EXPECT_EQ(connect(bob_, true).status().code(), StatusCode::kPermissionDenied);
  // Bob cannot change the ACL, nor end alice's session.
  wire::AclModifyRequest take;
  take.set_pool("p");
  take.set_cont("c");
  take.set_op(wire::AclModifyRequest::UPDATE);
  take.add_entries("A::bob@:rwa");
  EXPECT_EQ(m_->acl_modify(bob_, take, &ar).code(), StatusCode::kPermissionDenied);
  wire::DisconnectRequest end;
  end.set_session_id(mine->session_id());
  wire::DisconnectResponse er;
  EXPECT_EQ(m_->disconnect(bob_, end, &er).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(renew(alice_, *mine).is_ok());
  EXPECT_EQ(renew(bob_, *mine).code(), StatusCode::kPermissionDenied) << "a session belongs to its principal";

  // Taking bob's right away ends his session now, and across a restart.
  wire::AclModifyRequest revoke;
  revoke.set_pool("p");
  revoke.set_cont("c");
  revoke.set_op(wire::AclModifyRequest::DELETE);
  revoke.add_principals("bob@");
  ASSERT_TRUE(m_->acl_modify(alice_, revoke, &ar).is_ok());
  EXPECT_EQ(renew(bob_, *bobs).code(), StatusCode::kPermissionDenied);
  ASSERT_NO_FATAL_FAILURE(reopen());
  EXPECT_EQ(renew(bob_, *bobs).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(renew(alice_, *mine).is_ok()) << "a restart keeps the sessions that were not ended";
}

// The session a connect grants works on the data plane, with the rights it names.
TEST_F(ManagementTest, GrantedSessionsOpenContainers) {
  ASSERT_NO_FATAL_FAILURE(pool_and_container());
  auto granted = connect(alice_, true);
  ASSERT_TRUE(granted.is_ok());
  client::Session s;
  s.session_id = granted->session_id();
  s.capability = granted->capability();
  s.expires_unix_ms = granted->expires_unix_ms();
  s.provider = granted->map().provider();
  for (const auto& t : granted->map().targets()) s.target_addresses.push_back(t.address());
  s.pool.uuid = granted->pool().uuid();
  s.cont.uuid = granted->cont().uuid();
  auto c = client::Container::open(s);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  std::string data = "through a granted session";
  ASSERT_TRUE((*c)->put_value({1, 1}, "d", "v", data).is_ok());
  EXPECT_EQ(*(*c)->get_value({1, 1}, "d", "v"), data);
  wire::DisconnectRequest end;
  end.set_session_id(granted->session_id());
  wire::DisconnectResponse er;
  ASSERT_TRUE(m_->disconnect(alice_, end, &er).is_ok());
  EXPECT_EQ((*c)->put_value({1, 1}, "d", "v", data).code(), StatusCode::kPermissionDenied)
      << "an ended session is refused by every target";
}

}  // namespace
}  // namespace rfos::server
