// The control plane's logic, apart from the protocol that carries it: pools and containers with their owners
// and ACLs, snapshots, sessions and capabilities, all in the management store (a RocksDB of its own under
// data_dir/mgmt), over the targets it owns (one engine and one data-plane thread each). Every operation takes
// the caller (server/principal.h) and checks it against the ACLs (server/acl.h); the gRPC service
// (server.cc) only says who called and adapts messages and errors. Tests drive it directly, without gRPC.
//
// Thread-safety: every operation is safe from any thread (one at a time inside: they are rare).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/config.h"
#include "server/principal.h"
#include "server/target.h"
#include "wire/control.pb.h"

namespace rfos::engine {
class Engine;
}
namespace rfos::wire {
struct Capability;
}

namespace rfos::server {

class MgmtStore;

class Management {
 public:
  // Checks the data directory, opens (creating on first start) the targets and the store,
  // reconciles them (records win; shards follow), restores ended sessions, and starts the data plane.
  // The config must have passed validate() (server/config.h), or name the
  // provider "sim" (tests). Errors: kPermissionDenied (data directory), kIoError, kCorruption.
  static Result<std::unique_ptr<Management>> open(const ServerConfig& config);
  ~Management();

  Status pool_create(const Principal& who, const wire::PoolCreateRequest& req, wire::PoolCreateResponse* resp);
  Status pool_list(const Principal& who, const wire::PoolListRequest& req, wire::PoolListResponse* resp);
  Status pool_query(const Principal& who, const wire::PoolQueryRequest& req, wire::PoolQueryResponse* resp);
  Status pool_destroy(const Principal& who, const wire::PoolDestroyRequest& req, wire::PoolDestroyResponse* resp);
  Status cont_create(const Principal& who, const wire::ContCreateRequest& req, wire::ContCreateResponse* resp);
  Status cont_list(const Principal& who, const wire::ContListRequest& req, wire::ContListResponse* resp);
  Status cont_query(const Principal& who, const wire::ContQueryRequest& req, wire::ContQueryResponse* resp);
  Status cont_destroy(const Principal& who, const wire::ContDestroyRequest& req, wire::ContDestroyResponse* resp);
  Status snapshot_create(const Principal& who, const wire::SnapshotCreateRequest& req,
                         wire::SnapshotCreateResponse* resp);
  Status snapshot_destroy(const Principal& who, const wire::SnapshotDestroyRequest& req,
                          wire::SnapshotDestroyResponse* resp);
  // A session on a container: a signed capability for the rights the ACLs grant now, and the pool map.
  Status connect(const Principal& who, const wire::ConnectRequest& req, wire::ConnectResponse* resp);
  Status disconnect(const Principal& who, const wire::DisconnectRequest& req, wire::DisconnectResponse* resp);
  Status renew(const Principal& who, const wire::RenewRequest& req, wire::RenewResponse* resp);
  Status acl_get(const Principal& who, const wire::AclGetRequest& req, wire::AclResponse* resp);
  Status acl_modify(const Principal& who, const wire::AclModifyRequest& req, wire::AclResponse* resp);

  uint32_t targets() const;
  // The targets' durability mode in words (Engine::durability).
  std::string durability() const;
  // This server process's instance (wire PoolMap.instance): 16 random bytes drawn at start.
  const std::string& instance() const { return instance_; }

 private:
  explicit Management(const ServerConfig& config);
  Status open_store();
  Result<wire::PoolInfo> find_pool(const std::string& id);  // by uuid or label
  Result<wire::ContInfo> find_cont(const wire::PoolInfo& pool, const std::string& id);
  void fill_space(wire::PoolInfo* info);
  // The capability rights (read, write) `who` may hold on a container of a pool, as their ACLs say now.
  uint32_t capability_rights(const Principal& who, const wire::PoolInfo& pool, const wire::ContInfo& cont);
  std::string sign(const wire::Capability& cap) const;
  Status save_session(const wire::SessionRecord& r);
  // Ends a session now: its capability stops working on every target, and stays refused across a restart.
  Status end_session(wire::SessionRecord* r);
  // Drops the records of sessions whose capability expired (nothing can use them any more).
  void prune_sessions();
  // After an ACL or owner change: sessions on `pool_uuid` (and `cont_uuid` when not empty) whose principal no
  // longer has every right its capability carries end now, not at expiry.
  Status revoke_lost_rights(const std::string& pool_uuid, const std::string& cont_uuid);

  ServerConfig config_;
  std::unique_ptr<MgmtStore> mgmt_;
  std::vector<std::unique_ptr<engine::Engine>> targets_;
  std::vector<std::unique_ptr<Target>> data_;  // one data-plane thread per target
  std::string secret_;
  std::mutex mu_;
  // Sessions whose capability has not expired yet, ended ones included (their revocation must hold until then),
  // by session id bytes; each is in the management store too.
  std::map<std::string, wire::SessionRecord> sessions_;
  std::shared_ptr<Revocations> revocations_ = std::make_shared<Revocations>();  // shared with the targets
  std::shared_ptr<QosLedger> qos_ = std::make_shared<QosLedger>();              // shared with the targets
  std::shared_ptr<GrantClaims> claims_ = std::make_shared<GrantClaims>();       // shared with the targets
  static constexpr size_t kMaxSessionsPerPrincipal = 1024;
  std::string instance_;
};

}  // namespace rfos::server
