// The client side of the control plane: pools, containers, sessions, server info, over gRPC.
// gRPC and protobuf types stay inside control_client.cc.
//
// Every call has a deadline (`timeout_ms`); a server that is gone gives kTimeout or kShutdown ("unavailable"),
// never a hang. Errors carry the server's rfos status code and message.
//
// Thread-safety: a ControlClient may be used from many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rfos::client {

struct PoolInfo {
  std::string uuid;
  std::string label;
  uint32_t targets = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint32_t containers = 0;
  std::string owner;
  std::string owner_group;
  uint64_t epoch = 0;                // the newest epoch any target has stamped
  uint64_t aggregated_epoch = 0;     // every target has aggregated the versions up to this epoch
  uint64_t buffer_bytes = 0;         // the targets' engine buffers, all pools
  uint64_t buffer_bytes_in_use = 0;  // of those, held by updates and fetches in flight
};

struct ContProps {
  uint32_t csum_chunk_bytes = 0;  // 0: server default (4096)
  bool csum_off = false;
  std::string oclass;        // "S1" or "SX"; "": default
  uint32_t chunk_bytes = 0;  // 0: default (1 MiB)
};

struct ContInfo {
  std::string uuid;
  std::string label;
  std::string pool_uuid;
  ContProps props;
  std::vector<uint64_t> snapshots;
  std::string owner;
  std::string owner_group;
  uint64_t created_unix_ms = 0;
  uint32_t open_sessions = 0;  // cont_query only: sessions open on it now (wire ContInfo.open_sessions)
};

// An ACL as the server keeps it (entries in the form "A::alice@:rw"; see docs/control-plane.md).
struct Acl {
  std::string owner;
  std::string owner_group;
  std::vector<std::string> entries;
};

// A pool's creation by an administrator: its owner (default: the caller), owner group (default: the caller's
// primary group) and ACL entries (default: A::OWNER@:rwa, A:G:GROUP@:r).
struct PoolCreateOptions {
  std::string owner;
  std::string owner_group;
  std::vector<std::string> acl;
};

// Mutual TLS toward a server's TCP listener: PEM files of the CA that signed the server's certificate, and of
// this client's certificate and key. Empty: a plain channel (the local socket, or an --insecure listener).
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
  bool empty() const { return ca.empty() && cert.empty() && key.empty(); }
  // RFOS_TLS_CA, RFOS_TLS_CERT, RFOS_TLS_KEY.
  static TlsFiles from_env();
};

// The control address clients use unless told otherwise: $RFOS_ADDR, else the local server's socket
// (unix:/run/rfos/control.sock). Addresses are "unix:/path" (or a bare absolute path), or HOST:PORT.
std::string default_control_address();

struct Session {
  std::string session_id;  // 16 bytes
  std::string capability;  // opaque token for the data plane
  uint64_t expires_unix_ms = 0;
  std::string provider;
  std::vector<std::string> target_addresses;  // index = target
  std::string server_instance;                // the server process's (wire PoolMap.instance); empty from old ones
  uint64_t target_share_bytes = 0;            // the session's share of each target's buffers (0: no limit)
  PoolInfo pool;
  ContInfo cont;
};

struct ServerInfo {
  std::string version;
  std::string control_address;
  std::string provider;
  uint32_t targets = 0;
  uint64_t uptime_s = 0;
  std::string data_dir;  // administrators only
  std::string caller;    // who the server takes this client for
  std::string instance;  // the server process's (wire PoolMap.instance); empty from servers before it
};

class ControlClient {
 public:
  // `address` as default_control_address() says. Does not connect yet. With `tls`, the channel is mutual TLS
  // (files that cannot be read make every call fail with kInvalidArgument saying which).
  static std::unique_ptr<ControlClient> create(const std::string& address, uint32_t timeout_ms = 5000,
                                               const TlsFiles& tls = {});
  ~ControlClient();
  // Another client over the same channel (for a Container to renew its capability on its own).
  // The same client (channel, credentials, who it acts for); `timeout_ms` its calls' deadline (0: the same).
  std::unique_ptr<ControlClient> clone(uint32_t timeout_ms = 0) const;
  // Another client over the same channel whose calls are made for the local user uid/gid/groups: what an agent
  // (`rfos agent`) uses for its apps. The server honours it only from an agent its config trusts for that user
  // (docs/control-plane.md, "Agents"); its clones act for the same user.
  // `tenant_limits`, when not empty, names the user's tenant and its limits ("IOPS:BURST_IOS:BYTES_PER_S:
  // BURST_BYTES:TENANT", server/principal.h tenant_limits): the server signs them into every capability this
  // client gets, and the targets hold all the tenant's sessions to them together.
  std::unique_ptr<ControlClient> acting_for(uint32_t uid, uint32_t gid, const std::vector<uint32_t>& groups,
                                            const std::string& tenant_limits = "") const;

  // A client whose calls go through `relay` (an agent, `rfos --agent`) instead of a channel: each as its request
  // type's full name and serialized bytes, answered with the serialized response. The relay's side is forward().
  using Relay = std::function<Result<std::string>(const std::string& type, const std::string& request)>;
  static std::unique_ptr<ControlClient> relayed(Relay relay, uint32_t timeout_ms = 5000);
  // Makes a relayed call on this client (an agent's, acting for its app's user). Every control call but the
  // session ones (Connect, Renew, Disconnect: kNotSupported, since the relayed side must never hold a
  // capability); kInvalidArgument for an unknown type or bytes that do not parse.
  Result<std::string> forward(const std::string& type, const std::string& request) const;

  Result<PoolInfo> pool_create(const std::string& label, const PoolCreateOptions& options = {});
  Result<std::vector<PoolInfo>> pool_list();
  Result<PoolInfo> pool_query(const std::string& pool);
  Status pool_destroy(const std::string& pool, bool force);
  Result<ContInfo> cont_create(const std::string& pool, const std::string& label, const ContProps& props,
                               const std::vector<std::string>& acl = {});
  Result<std::vector<ContInfo>> cont_list(const std::string& pool);
  Result<ContInfo> cont_query(const std::string& pool, const std::string& cont);
  Status cont_destroy(const std::string& pool, const std::string& cont);
  // Snapshots of a container, named by their epoch: create pins the container's current state on every
  // target (read it with Container::set_read_epoch), list gives them oldest first, destroy lets aggregation
  // reclaim what only it kept. Errors: kUnknownPool, kUnknownContainer, kNotFound (destroy: no such epoch).
  Result<uint64_t> snapshot_create(const std::string& pool, const std::string& cont);
  Result<std::vector<uint64_t>> snapshot_list(const std::string& pool, const std::string& cont);
  Status snapshot_destroy(const std::string& pool, const std::string& cont, uint64_t epoch);
  // A session on a container: kPermissionDenied unless the caller may read the pool and read (write: and
  // write) the container.
  Result<Session> connect(const std::string& pool, const std::string& cont, bool write, uint32_t ttl_s = 0);
  Status disconnect(const std::string& session_id);
  // A fresh capability for a live session of this caller's (into session->capability and expires_unix_ms).
  // kPermissionDenied when it ended or expired, or the caller lost read access.
  Status renew(Session* session, uint32_t ttl_s = 0);
  // ACLs of a pool (cont empty) or a container. get needs r; set, update and remove need a (owners have it);
  // set_owner is for administrators (empty owner or group: unchanged).
  Result<Acl> acl_get(const std::string& pool, const std::string& cont);
  Result<Acl> acl_set(const std::string& pool, const std::string& cont, const std::vector<std::string>& entries);
  Result<Acl> acl_update(const std::string& pool, const std::string& cont, const std::vector<std::string>& entries);
  Result<Acl> acl_remove(const std::string& pool, const std::string& cont, const std::vector<std::string>& principals);
  Result<Acl> set_owner(const std::string& pool, const std::string& cont, const std::string& owner,
                        const std::string& owner_group);
  Result<ServerInfo> server_info();
  // A clone for looking whether a server that went away is back: its calls connect at once (not when gRPC's
  // reconnect backoff after the failures ends) and wait for the connection within `timeout_ms`, rather than
  // fail at once while the channel reconnects.
  std::unique_ptr<ControlClient> probe(uint32_t timeout_ms) const;
  Status health();

  class Impl;

 private:
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::client
