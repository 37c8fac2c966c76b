// rfos server configuration: embedded defaults, overridden by a YAML file, overridden by flags.
//
// YAML keys (all optional): data_dir, data_sync, control_socket, control_addr, insecure, tls_cert, tls_key, tls_ca,
// admins, provider, targets, target_bytes, capability_ttl_s, media_threads, payload_timeout_ms, session_buffer_bytes,
// bypass_media. Unknown keys are an error (a typo must not silently fall back to a default).
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace rfos::server {

// Where a server's control socket is unless configured otherwise, and where clients look for it.
inline constexpr const char* kDefaultControlSocket = "/run/rfos/control.sock";

struct ServerConfig {
  // Targets, the management store and the capability secret: a directory only the server's user may enter
  // (0700, files 0600); the server refuses one that someone else owns or others may read.
  std::string data_dir = "/var/lib/rfos";
  // Local callers, known by their kernel credentials ("" for none).
  std::string control_socket = kDefaultControlSocket;
  // Remote callers, HOST:PORT ("" for none): with mutual TLS (tls_cert, tls_key and tls_ca), or with `insecure`,
  // when its callers are anonymous (rights only where an ACL grants EVERYONE@).
  std::string control_addr;
  bool insecure = false;
  // Names (local users, certificate common names) with every right, beside root and the server's own user.
  std::vector<std::string> admins;
  // Agents that may act for local users (principal.h, act_for): the agent's principal -> the users it may act
  // for ("alice", "group:ml", "*": any but an administrator).
  std::map<std::string, std::vector<std::string>> trusted_agents;
  std::string provider = "ucx+tcp";
  uint32_t targets = 0;                // 0: one per core
  uint64_t target_bytes = 1ull << 30;  // block file size of each target
  // "always": block data synced before every commit; "auto": left to the index's sync when the engine has checked
  // that this suffices (engine.h, EngineOptions::DataSync); the server says at start which mode runs.
  std::string data_sync = "always";
  // Diagnostics on stderr (common/log.h): trace, debug, info, warn, error, off; "" leaves the level
  // RFOS_LOG_LEVEL set (or info).
  std::string log_level;
  uint32_t capability_ttl_s = 3600;
  uint32_t media_threads = 2;  // per target: helper threads for engine calls that block (punches, aggregation)
  // How long a target waits for an update's payload whose sender went silent before it gives the update up
  // (transport::WorkerOptions: libfabric providers; UCX ends such a receive when it reports the peer dead).
  uint32_t payload_timeout_ms = 30000;
  // Engine buffers one session may hold on a target at once (its requests' bytes while they land, reach the
  // media or go back); a request past it is answered Busy, which clients retry. A request always goes when its
  // session holds nothing there. It keeps one session (a hostile one, or one whose peer stopped moving bytes)
  // from taking a target's 64 MiB of buffers from everyone else. 0: no limit.
  uint64_t session_buffer_bytes = 16ull << 20;
  std::string tls_cert;  // PEM files: the server's certificate and key, and the CA that signs client certificates
  std::string tls_key;
  std::string tls_ca;
  // Benchmarks only: targets answer reads with zeros and drop written bytes, never touching the engine, so the
  // data plane alone is measured (3FS's bypass_disk_io). Nothing written is kept.
  bool bypass_media = false;
};

// The data-plane providers rfos knows; the verbs ones need RDMA hardware.
const std::vector<std::string>& known_providers();

// Applies a YAML file over `config`. Errors: kNotFound, kInvalidArgument (syntax, unknown key, bad value).
Status load_config_file(const std::string& path, ServerConfig* config);
// Checks values: provider known, a listener (a TCP one with mutual TLS or `insecure`), sizes sane.
// kInvalidArgument with what is wrong.
Status validate(const ServerConfig& config);

}  // namespace rfos::server
