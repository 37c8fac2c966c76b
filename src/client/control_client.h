// The client side of the control plane: pools, containers, sessions, server info, over gRPC.
// gRPC and protobuf types stay inside control_client.cc.
//
// Every call has a deadline (`timeout_ms`); a server that is gone gives kTimeout or kShutdown ("unavailable"),
// never a hang. Errors carry the server's rfos status code and message.
//
// Thread-safety: a ControlClient may be used from many threads at once.
#pragma once

#include <cstdint>
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
};

struct Session {
  std::string session_id;  // 16 bytes
  std::string capability;  // opaque token for the data plane
  uint64_t expires_unix_ms = 0;
  std::string provider;
  std::vector<std::string> target_addresses;  // index = target
  PoolInfo pool;
  ContInfo cont;
};

struct ServerInfo {
  std::string version;
  std::string control_address;
  std::string provider;
  uint32_t targets = 0;
  uint64_t uptime_s = 0;
  std::string data_dir;
};

class ControlClient {
 public:
  // `address` is HOST:PORT. Does not connect yet. TLS: pass the server's CA certificate (PEM) in `tls_ca_pem`.
  static std::unique_ptr<ControlClient> create(const std::string& address, uint32_t timeout_ms = 5000,
                                               const std::string& tls_ca_pem = "");
  ~ControlClient();

  Result<PoolInfo> pool_create(const std::string& label);
  Result<std::vector<PoolInfo>> pool_list();
  Result<PoolInfo> pool_query(const std::string& pool);
  Status pool_destroy(const std::string& pool, bool force);
  Result<ContInfo> cont_create(const std::string& pool, const std::string& label, const ContProps& props);
  Result<std::vector<ContInfo>> cont_list(const std::string& pool);
  Result<ContInfo> cont_query(const std::string& pool, const std::string& cont);
  Status cont_destroy(const std::string& pool, const std::string& cont);
  // Snapshots of a container, named by their epoch: create pins the container's current state on every
  // target (read it with Container::set_read_epoch), list gives them oldest first, destroy lets aggregation
  // reclaim what only it kept. Errors: kUnknownPool, kUnknownContainer, kNotFound (destroy: no such epoch).
  Result<uint64_t> snapshot_create(const std::string& pool, const std::string& cont);
  Result<std::vector<uint64_t>> snapshot_list(const std::string& pool, const std::string& cont);
  Status snapshot_destroy(const std::string& pool, const std::string& cont, uint64_t epoch);
  Result<Session> connect(const std::string& pool, const std::string& cont, bool write, uint32_t ttl_s = 0);
  Status disconnect(const std::string& session_id);
  Result<ServerInfo> server_info();
  Status health();

  class Impl;

 private:
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::client
