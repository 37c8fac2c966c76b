// `rfos agent`: the offloaded client (docs/agent.md). It holds every session, endpoint, capability and fabric
// registration; an application holds none of them. Apps connect to its Unix socket (control channel,
// agent/protocol.h), are named by the kernel's peer credentials, mapped to a tenant, and get a ring
// (agent/ring.h) and a shared buffer the agent registered with the fabric, so targets move the app's bytes
// straight from and into it.
//
// Every app connection has a thread of its own with its own ControlClient (acting for the app's user, which
// the server allows only from an agent its config trusts) and its own Containers, each with its own transport
// worker: one app cannot name, read or complete another's buffers, rings, handles or requests. An app that
// goes away (closed socket, killed process) has its I/O finished or failed, its containers closed (their
// sessions ended on the server) and its memory unmapped before its thread ends.
//
// Thread-safety: start/stop from one thread; apps() and socket_path() from any.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/qos.h"
#include "client/control_client.h"
#include "common/status.h"

namespace rfos::agent {

// A tenant: the local users and groups whose apps it takes (names or numbers).
struct TenantConfig {
  std::string name;
  std::vector<std::string> users;
  std::vector<std::string> groups;
  // AES-256 key (32 bytes, or 64 hex digits; readable by its owner only): the tenant's array data is sealed in
  // the agent before it leaves (agent/seal.h). "": not sealed.
  std::string key_file;
  // Its share of what the agent keeps in flight against the other busy tenants' (agent/qos.h, FairShare).
  double weight = 1;
  // Limits shared by the tenant's apps (agent/qos.h); none by default.
  QosLimits qos;
};

struct AgentConfig {
  std::string control_address;  // the server's control plane ("": client::default_control_address())
  client::TlsFiles tls;         // the agent's own certificate, for a remote server (mutual TLS)
  std::string provider;         // data-plane provider ("": the pool's)
  std::string listen = "/run/rfos/agent.sock";
  std::string cpus;                        // a CPU list ("1", "2-3,6") the agent pins itself to; "": no pinning
  uint64_t max_buffer_bytes = 1ull << 30;  // an app's shared buffer, at most
  uint32_t max_apps = 256;
  uint32_t max_apps_per_user = 64;  // connections of one local user at once (each holds a thread)
  uint32_t max_mounts = 64;         // `rfos mount --agent` mounts served at once (each holds threads and buffers)
  uint32_t timeout_ms = 30000;      // per request to the server
  std::string state_dir = "/var/lib/rfos-agent";  // the nonce counters of sealing tenants (0700)
  uint32_t agent_id = 0;  // in every nonce: agents that share a tenant's key need ids of their own
  // What the agent keeps in flight, in FairShare::cost_of units, while tenants share it by weight (while one
  // tenant alone has I/O in flight, nothing bounds it).
  double share_depth = 128;
  // Empty: every local user is a tenant of its own (named after the user). Otherwise an app whose user is in
  // no tenant is refused.
  std::vector<TenantConfig> tenants;
};

// Applies a YAML file over `config`: control_address, provider, listen, cpus, max_buffer_bytes, max_apps,
// max_apps_per_user,
// max_mounts, timeout_ms, tls_ca/tls_cert/tls_key, state_dir, agent_id, share_depth, tenants (a list of {name, users,
// groups, key_file, weight, qos: {iops, bytes_per_s, burst_ios, burst_bytes}}).
// Unknown keys are an error.
Status load_agent_config(const std::string& path, AgentConfig* config);

// Pins the calling thread (and the threads it starts later) to a CPU list. kInvalidArgument for a bad list.
Status pin_to_cpus(const std::string& cpus);

class Agent {
 public:
  // Binds the socket (0666 in a directory it makes 0755 when missing: who may use it is the tenants' and the
  // server's ACLs' decision) and starts accepting. kAlreadyExists when another agent serves the socket.
  static Result<std::unique_ptr<Agent>> start(const AgentConfig& config);
  ~Agent();
  // Stops accepting, ends every app's connection (their I/O failed or finished) and waits for their threads.
  void stop();
  std::string socket_path() const;
  size_t apps() const;  // apps connected now

  class Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::agent
