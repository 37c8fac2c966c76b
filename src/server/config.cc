#include "server/config.h"

#include "common/yaml_file.h"

#include <algorithm>
#include <set>

namespace rfos::server {

const std::vector<std::string>& known_providers() {
  static const std::vector<std::string> kProviders = {"ucx+tcp", "ucx+shm", "ucx+rc",  "ucx+dc_x",
                                                      "ucx+ud",  "ofi+tcp", "ofi+shm", "ofi+verbs"};
  return kProviders;
}

Status load_config_file(const std::string& path, ServerConfig* config) {
  RFOS_ASSIGN_OR_RETURN(
      YAML::Node root,
      load_yaml_mapping(
          path, {"data_dir", "control_socket", "control_addr", "insecure", "admins", "trusted_agents", "provider",
                 "targets", "target_bytes", "tls_ca", "capability_ttl_s", "media_threads", "tls_cert", "tls_key",
                 "bypass_media", "payload_timeout_ms", "session_buffer_bytes", "data_sync", "log_level"}));
  if (root.IsNull()) return Status::ok();
  try {
    if (root["data_dir"]) config->data_dir = root["data_dir"].as<std::string>();
    if (root["control_addr"]) config->control_addr = root["control_addr"].as<std::string>();
    if (root["data_sync"]) config->data_sync = root["data_sync"].as<std::string>();
    if (root["log_level"]) config->log_level = root["log_level"].as<std::string>();
    if (root["control_socket"]) config->control_socket = root["control_socket"].as<std::string>();
    if (root["insecure"]) config->insecure = root["insecure"].as<bool>();
    if (root["admins"]) config->admins = root["admins"].as<std::vector<std::string>>();
    if (root["trusted_agents"])
      config->trusted_agents = root["trusted_agents"].as<std::map<std::string, std::vector<std::string>>>();
    if (root["tls_ca"]) config->tls_ca = root["tls_ca"].as<std::string>();
    if (root["provider"]) config->provider = root["provider"].as<std::string>();
    if (root["targets"]) config->targets = root["targets"].as<uint32_t>();
    if (root["target_bytes"]) config->target_bytes = root["target_bytes"].as<uint64_t>();
    if (root["capability_ttl_s"]) config->capability_ttl_s = root["capability_ttl_s"].as<uint32_t>();
    if (root["media_threads"]) config->media_threads = root["media_threads"].as<uint32_t>();
    if (root["payload_timeout_ms"]) config->payload_timeout_ms = root["payload_timeout_ms"].as<uint32_t>();
    if (root["tls_cert"]) config->tls_cert = root["tls_cert"].as<std::string>();
    if (root["tls_key"]) config->tls_key = root["tls_key"].as<std::string>();
    if (root["session_buffer_bytes"]) config->session_buffer_bytes = root["session_buffer_bytes"].as<uint64_t>();
    if (root["bypass_media"]) config->bypass_media = root["bypass_media"].as<bool>();
  } catch (const YAML::Exception& e) {
    return error(StatusCode::kInvalidArgument, "config file " + path + ": " + e.what());
  }
  return Status::ok();
}

Status validate(const ServerConfig& c) {
  const auto& p = known_providers();
  if (std::find(p.begin(), p.end(), c.provider) == p.end())
    return error(StatusCode::kInvalidArgument, "unknown provider '" + c.provider +
                                                   "' (one of ucx+tcp, ucx+shm, "
                                                   "ucx+rc, ucx+dc_x, ucx+ud, ofi+tcp, ofi+shm, ofi+verbs)");
  if (c.control_socket.empty() && c.control_addr.empty())
    return error(StatusCode::kInvalidArgument, "no control listener: set control_socket or control_addr");
  if (!c.control_addr.empty()) {
    size_t colon = c.control_addr.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == c.control_addr.size())
      return error(StatusCode::kInvalidArgument, "control address '" + c.control_addr + "' is not HOST:PORT");
    bool tls = !c.tls_cert.empty();
    if (!tls && !c.insecure)
      return error(StatusCode::kInvalidArgument,
                   "a TCP control listener (" + c.control_addr +
                       ") needs mutual TLS (tls_cert, tls_key, tls_ca) or, knowingly, insecure: true / --insecure "
                       "(its callers are then anonymous)");
    if (tls && c.insecure) return error(StatusCode::kInvalidArgument, "insecure and TLS exclude each other");
  }
  if (c.data_dir.empty()) return error(StatusCode::kInvalidArgument, "data directory is empty");
  if (c.data_sync != "always" && c.data_sync != "auto")
    return error(StatusCode::kInvalidArgument, "data_sync is 'always' or 'auto', not '" + c.data_sync + "'");
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "off"};
  if (!c.log_level.empty() && !kLevels.count(c.log_level))
    return error(StatusCode::kInvalidArgument,
                 "log_level is one of trace, debug, info, warn, error, off, not '" + c.log_level + "'");
  if (c.target_bytes < (16ull << 20)) return error(StatusCode::kInvalidArgument, "target_bytes must be >= 16 MiB");
  if (c.targets > 256) return error(StatusCode::kInvalidArgument, "at most 256 targets");
  if (c.media_threads == 0 || c.media_threads > 256)
    return error(StatusCode::kInvalidArgument, "media_threads must be 1..256");
  if (c.payload_timeout_ms < 100 || c.payload_timeout_ms > 3600000)
    return error(StatusCode::kInvalidArgument, "payload_timeout_ms must be 100..3600000");
  if (c.session_buffer_bytes != 0 && c.session_buffer_bytes < (1ull << 20))
    return error(StatusCode::kInvalidArgument, "session_buffer_bytes must be 0 (no limit) or >= 1 MiB");
  if (c.tls_cert.empty() != c.tls_key.empty() || c.tls_cert.empty() != c.tls_ca.empty())
    return error(StatusCode::kInvalidArgument,
                 "tls_cert, tls_key and tls_ca go together (the server's certificate and key, and the CA of its "
                 "clients' certificates: TLS here is always mutual)");
  return Status::ok();
}

}  // namespace rfos::server
