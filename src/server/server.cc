#include "server/server.h"
#include "common/clock.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "engine/engine.h"
#include "server/acl.h"
#include "server/data_dir.h"
#include "server/local_listener.h"
#include "server/principal.h"
#include "server/target.h"
#include "wire/capability.h"
#include "wire/control.grpc.pb.h"

namespace rfos::server {

namespace fs = std::filesystem;
using engine::Engine;
using grpc::ServerContext;

namespace {

grpc::StatusCode grpc_code(StatusCode c) {
  switch (c) {
    case StatusCode::kOk:
      return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kWrongValueKind:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound:
    case StatusCode::kUnknownContainer:
    case StatusCode::kUnknownPool:
      return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case StatusCode::kNoSpace:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::kBusy:
      return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kTimeout:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kNotSupported:
      return grpc::StatusCode::UNIMPLEMENTED;
    case StatusCode::kEpochTooOld:
      return grpc::StatusCode::FAILED_PRECONDITION;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

// rfos Status -> gRPC status; the numeric rfos code travels in trailing metadata "rfos-code".
grpc::Status to_grpc(ServerContext* ctx, const Status& s) {
  if (s.is_ok()) return grpc::Status::OK;
  ctx->AddTrailingMetadata("rfos-code", std::to_string(static_cast<int>(s.code())));
  return grpc::Status(grpc_code(s.code()), s.to_string());
}

// The management store: control-plane records in their own RocksDB, values are serialized wire messages.
//   pool/<uuid> -> PoolInfo        cont/<pool-uuid>/<uuid> -> ContInfo        secret -> 32 bytes
class MgmtStore {
 public:
  Status open(const std::string& dir) {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.info_log_level = rocksdb::WARN_LEVEL;
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, dir, &raw);
    if (!s.ok()) return error(StatusCode::kIoError, "open management store " + dir + ": " + s.ToString());
    db_.reset(raw);
    return Status::ok();
  }
  Status put(const std::string& key, const std::string& value) {
    rocksdb::WriteOptions w;
    w.sync = true;
    rocksdb::Status s = db_->Put(w, key, value);
    return s.ok() ? Status::ok() : error(StatusCode::kIoError, "management store: " + s.ToString());
  }
  Status del(const std::string& key) {
    rocksdb::WriteOptions w;
    w.sync = true;
    rocksdb::Status s = db_->Delete(w, key);
    return s.ok() ? Status::ok() : error(StatusCode::kIoError, "management store: " + s.ToString());
  }
  bool get(const std::string& key, std::string* value) { return db_->Get(rocksdb::ReadOptions(), key, value).ok(); }
  std::vector<std::pair<std::string, std::string>> scan(const std::string& prefix) {
    std::vector<std::pair<std::string, std::string>> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
      out.push_back({it->key().ToString(), it->value().ToString()});
    return out;
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

namespace {
std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

// What a pool's or a container's record says about access.
template <typename Info>
acl::Acl acl_of(const Info& info) {
  acl::Acl a;
  a.owner = info.owner();
  a.owner_group = info.owner_group();
  for (const std::string& text : info.acl())
    if (auto e = acl::parse_entry(text); e.is_ok()) a.entries.push_back(*e);  // stored entries parsed when set
  return a;
}
template <typename Info>
void set_acl(Info* info, const acl::Acl& a) {
  info->set_owner(a.owner);
  info->set_owner_group(a.owner_group);
  info->clear_acl();
  for (const acl::Entry& e : a.entries) info->add_acl(acl::format_entry(e));
}

Result<std::vector<acl::Entry>> parse_entries(const google::protobuf::RepeatedPtrField<std::string>& texts) {
  std::vector<acl::Entry> out;
  for (const std::string& t : texts) {
    RFOS_ASSIGN_OR_RETURN(acl::Entry e, acl::parse_entry(t));
    out.push_back(std::move(e));
  }
  if (out.size() > 256) return error(StatusCode::kInvalidArgument, "at most 256 ACL entries");
  return out;
}

Principal principal_of(const wire::SessionRecord& r) {
  Principal p;
  p.via = static_cast<Principal::Via>(r.via());
  p.name = r.name();
  p.groups.assign(r.groups().begin(), r.groups().end());
  p.uid = r.uid();
  p.admin = r.admin();
  return p;
}

bool same_principal(const wire::SessionRecord& r, const Principal& p) {
  return r.via() == static_cast<uint32_t>(p.via) && r.name() == p.name &&
         (p.via != Principal::Via::kLocal || r.uid() == p.uid);
}

Status denied(const Principal& who, const std::string& what, uint32_t want, uint32_t have) {
  return error(StatusCode::kPermissionDenied, who.describe() + " may not " + what + " (needs " +
                                                  acl::rights_string(want) + ", has " +
                                                  (have ? acl::rights_string(have) : std::string("none")) + ")");
}

bool slurp(const std::string& path, std::string* out) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return f.good() || !out->empty();
}
}  // namespace

class Server::Impl final : public wire::Control::Service {
 public:
  explicit Impl(const ServerConfig& c) : config_(c), started_ms_(wall_ms()) {}

  Status open();
  ServerConfig config_;
  std::vector<std::unique_ptr<Engine>> targets_;
  std::vector<std::unique_ptr<Target>> data_;  // one data-plane thread per target
  MgmtStore mgmt_;
  std::string secret_;
  std::unique_ptr<LocalListener> local_;  // outlives grpc_: handlers ask it who called
  std::unique_ptr<grpc::Server> grpc_;
  std::string bound_;      // the address clients should use: the local socket when there is one
  std::string tcp_bound_;  // the TCP listener, if any
  uint64_t started_ms_;
  std::mutex mu_;  // control operations are rare: one at a time
  // Sessions whose capability has not expired yet, ended ones included (their revocation must hold until then),
  // by session id bytes; each is in the management store too.
  std::map<std::string, wire::SessionRecord> sessions_;
  std::shared_ptr<Revocations> revocations_ = std::make_shared<Revocations>();  // shared with the targets
  static constexpr size_t kMaxSessionsPerPrincipal = 1024;

  // Who called: the kernel's word on the local socket, the verified certificate on TLS, else anonymous.
  Principal caller(ServerContext* ctx) const;
  // Finds a pool by uuid or label.
  Result<wire::PoolInfo> find_pool(const std::string& id);
  Result<wire::ContInfo> find_cont(const wire::PoolInfo& pool, const std::string& id);
  void fill_space(wire::PoolInfo* info);
  // The capability rights (read, write) `who` may hold on a container of a pool, as their ACLs say now.
  uint32_t capability_rights(const Principal& who, const wire::PoolInfo& pool, const wire::ContInfo& cont) {
    uint32_t p = acl::rights_of(acl_of(pool), who), c = acl::rights_of(acl_of(cont), who);
    if (!(p & acl::kRead) || !(c & acl::kRead)) return 0;
    return wire::Capability::kRead | (c & acl::kWrite ? wire::Capability::kWrite : 0);
  }
  std::string sign(const wire::Capability& cap) const {
    return wire::encode_capability(cap, {reinterpret_cast<const uint8_t*>(secret_.data()), secret_.size()});
  }
  Status save_session(const wire::SessionRecord& r) {
    return mgmt_.put("session/" + hex(r.session_id()), r.SerializeAsString());
  }
  // Ends a session now: its capability stops working on every target, and stays refused across a restart.
  Status end_session(wire::SessionRecord* r) {
    r->set_ended(true);
    Uuid session;
    std::memcpy(session.bytes.data(), r->session_id().data(), 16);
    revocations_->revoke(session, r->expires_unix_ms());
    return save_session(*r);
  }
  // Drops the records of sessions whose capability expired (nothing can use them any more).
  void prune_sessions() {
    uint64_t now = wall_ms();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second.expires_unix_ms() > now) {
        ++it;
        continue;
      }
      (void)mgmt_.del("session/" + hex(it->first));
      it = sessions_.erase(it);
    }
  }
  // After an ACL or owner change: sessions on `pool_uuid` (and `cont_uuid` when not empty) whose principal no
  // longer has every right its capability carries end now, not at expiry.
  Status revoke_lost_rights(const std::string& pool_uuid, const std::string& cont_uuid);

  grpc::Status PoolCreate(ServerContext*, const wire::PoolCreateRequest*, wire::PoolCreateResponse*) override;
  grpc::Status PoolList(ServerContext*, const wire::PoolListRequest*, wire::PoolListResponse*) override;
  grpc::Status PoolQuery(ServerContext*, const wire::PoolQueryRequest*, wire::PoolQueryResponse*) override;
  grpc::Status PoolDestroy(ServerContext*, const wire::PoolDestroyRequest*, wire::PoolDestroyResponse*) override;
  grpc::Status ContCreate(ServerContext*, const wire::ContCreateRequest*, wire::ContCreateResponse*) override;
  grpc::Status ContList(ServerContext*, const wire::ContListRequest*, wire::ContListResponse*) override;
  grpc::Status ContQuery(ServerContext*, const wire::ContQueryRequest*, wire::ContQueryResponse*) override;
  grpc::Status ContDestroy(ServerContext*, const wire::ContDestroyRequest*, wire::ContDestroyResponse*) override;
  grpc::Status SnapshotCreate(ServerContext*, const wire::SnapshotCreateRequest*,
                              wire::SnapshotCreateResponse*) override;
  grpc::Status SnapshotDestroy(ServerContext*, const wire::SnapshotDestroyRequest*,
                               wire::SnapshotDestroyResponse*) override;
  grpc::Status Connect(ServerContext*, const wire::ConnectRequest*, wire::ConnectResponse*) override;
  grpc::Status Disconnect(ServerContext*, const wire::DisconnectRequest*, wire::DisconnectResponse*) override;
  grpc::Status Renew(ServerContext*, const wire::RenewRequest*, wire::RenewResponse*) override;
  grpc::Status AclGet(ServerContext*, const wire::AclGetRequest*, wire::AclResponse*) override;
  grpc::Status AclModify(ServerContext*, const wire::AclModifyRequest*, wire::AclResponse*) override;
  grpc::Status ServerInfo(ServerContext*, const wire::ServerInfoRequest*, wire::ServerInfoResponse*) override;
  grpc::Status Health(ServerContext*, const wire::HealthRequest*, wire::HealthResponse*) override;
};

Principal Server::Impl::caller(ServerContext* ctx) const {
  Principal p;
  if (local_) {
    if (auto local = local_->who(ctx->peer())) p = *local;
  }
  if (p.anonymous() && !config_.tls_cert.empty()) {
    auto auth = ctx->auth_context();
    // With mutual TLS required, gRPC ends the handshake of a client whose certificate the CA did not sign.
    if (auth && auth->IsPeerAuthenticated()) {
      auto cn = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
      if (!cn.empty()) {
        std::string name(cn.front().data(), cn.front().size());
        if (acl::check_name(name).is_ok()) {
          p.via = Principal::Via::kTls;
          p.name = name;
        }
      }
    }
  }
  if (!p.anonymous() && std::find(config_.admins.begin(), config_.admins.end(), p.name) != config_.admins.end())
    p.admin = true;
  return p;
}

Status Server::Impl::open() {
  RFOS_RETURN_IF_ERROR(validate(config_));
  RFOS_RETURN_IF_ERROR(prepare_data_dir(config_.data_dir));
  RFOS_RETURN_IF_ERROR(mgmt_.open(config_.data_dir + "/mgmt"));

  // The number of targets is fixed at the first start: a restart finds them on disk.
  std::string stored;
  uint32_t n = config_.targets ? config_.targets : std::max(1u, std::thread::hardware_concurrency());
  if (mgmt_.get("targets", &stored)) {
    n = static_cast<uint32_t>(std::stoul(stored));
  } else {
    RFOS_RETURN_IF_ERROR(mgmt_.put("targets", std::to_string(n)));
  }
  for (uint32_t i = 0; i < n; ++i) {
    engine::EngineOptions o;
    o.dir = config_.data_dir + "/target-" + std::to_string(i);
    o.block_file_bytes = config_.target_bytes;
    o.data_sync =
        config_.data_sync == "auto" ? engine::EngineOptions::DataSync::kAuto : engine::EngineOptions::DataSync::kAlways;
    auto e = Engine::open(o);
    if (!e.is_ok()) return error(e.status().code(), "target " + std::to_string(i) + ": " + e.status().to_string());
    targets_.push_back(std::move(e).value());
  }

  if (!mgmt_.get("secret", &secret_)) {
    secret_.resize(32);
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    if (!urandom.read(secret_.data(), 32)) return error(StatusCode::kIoError, "cannot read /dev/urandom");
    RFOS_RETURN_IF_ERROR(mgmt_.put("secret", secret_));
  }

  // Reconcile: a crash between creating a pool or container on the targets and recording it leaves shards
  // nobody knows; a crash while destroying leaves records without shards. Records win; shards follow.
  // Records from before access control get an owner: the server's user, who then grants access.
  std::map<std::string, wire::PoolInfo> pools;
  const acl::Acl legacy = acl::default_acl(user_name(geteuid()), group_name(getegid()));
  for (auto& [k, v] : mgmt_.scan("pool/")) {
    wire::PoolInfo p;
    if (!p.ParseFromString(v)) return error(StatusCode::kCorruption, "management record " + k + " is malformed");
    if (p.owner().empty()) {
      set_acl(&p, legacy);
      RFOS_RETURN_IF_ERROR(mgmt_.put(k, p.SerializeAsString()));
    }
    pools[p.uuid()] = p;
  }
  for (auto& t : targets_) {
    for (const Uuid& pool : t->pool_list()) {
      if (!pools.count(pool.to_string())) RFOS_RETURN_IF_ERROR(t->pool_destroy(pool));
    }
    for (const auto& [uuid, info] : pools) {
      Uuid pu = *Uuid::parse(uuid);
      if (t->cont_list(pu).is_ok()) continue;
      RFOS_RETURN_IF_ERROR(t->pool_create(pu));
    }
  }
  for (const auto& [uuid, info] : pools) {
    Uuid pu = *Uuid::parse(uuid);
    std::map<std::string, wire::ContInfo> conts;
    for (auto& [k, v] : mgmt_.scan("cont/" + uuid + "/")) {
      wire::ContInfo c;
      if (!c.ParseFromString(v)) return error(StatusCode::kCorruption, "management record " + k + " is malformed");
      if (c.owner().empty()) {
        set_acl(&c, legacy);
        RFOS_RETURN_IF_ERROR(mgmt_.put(k, c.SerializeAsString()));
      }
      conts[c.uuid()] = c;
    }
    for (auto& t : targets_) {
      auto have = t->cont_list(pu);
      if (!have.is_ok()) return have.status();
      for (const auto& c : *have)
        if (!conts.count(c.uuid.to_string())) RFOS_RETURN_IF_ERROR(t->cont_destroy(pu, c.uuid));
      for (const auto& [cu, ci] : conts) {
        Uuid cuu = *Uuid::parse(cu);
        if (t->cont_open(pu, cuu).is_ok()) continue;
        engine::ContainerProps props;
        if (ci.props().csum_chunk_bytes()) props.csum_chunk_bytes = ci.props().csum_chunk_bytes();
        props.csum = !ci.props().csum_off();
        RFOS_RETURN_IF_ERROR(t->cont_create(pu, cuu, props));
      }
    }
  }

  // Sessions: ended ones stay refused until their capability expires, across restarts.
  for (auto& [k, v] : mgmt_.scan("session/")) {
    wire::SessionRecord r;
    if (!r.ParseFromString(v) || r.session_id().size() != 16)
      return error(StatusCode::kCorruption, "management record " + k + " is malformed");
    if (r.ended()) {
      Uuid session;
      std::memcpy(session.bytes.data(), r.session_id().data(), 16);
      revocations_->revoke(session, r.expires_unix_ms());
    }
    sessions_[r.session_id()] = r;
  }
  prune_sessions();

  for (uint32_t i = 0; i < targets_.size(); ++i) {
    auto t = Target::start(i, targets_[i].get(), config_, secret_, revocations_);
    if (!t.is_ok()) return error(t.status().code(), "data plane (" + config_.provider + "): " + t.status().to_string());
    data_.push_back(std::move(t).value());
  }

  grpc::ServerBuilder builder;
  // gRPC shares a port between processes by default (SO_REUSEPORT): a second server on the same address would
  // start and take half the new clients. One server per address.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  if (!config_.control_addr.empty()) {
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (!config_.tls_cert.empty()) {
      // Mutual TLS: a client without a certificate the CA signed does not get past the handshake.
      grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
      if (!slurp(config_.tls_cert, &pair.cert_chain) || !slurp(config_.tls_key, &pair.private_key) ||
          !slurp(config_.tls_ca, &ssl.pem_root_certs))
        return error(StatusCode::kInvalidArgument, "cannot read the TLS certificate, key or CA");
      ssl.pem_key_cert_pairs.push_back(pair);
      creds = grpc::SslServerCredentials(ssl);
    }
    builder.AddListeningPort(config_.control_addr, creds, &port);
  }
  if (!config_.control_socket.empty()) {
    auto local = LocalListener::bind(config_.control_socket);
    if (!local.is_ok()) return local.status();
    local_ = std::move(local).value();
  }
  builder.RegisterService(this);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || (!config_.control_addr.empty() && port == 0))
    return error(StatusCode::kIoError, "cannot listen on " + config_.control_addr + " (address in use?)");
  if (port != 0)
    tcp_bound_ = config_.control_addr.substr(0, config_.control_addr.rfind(':')) + ":" + std::to_string(port);
  if (local_) local_->start(grpc_.get());
  bound_ = local_ ? "unix:" + config_.control_socket : tcp_bound_;
  return Status::ok();
}

void Server::Impl::fill_space(wire::PoolInfo* info) {
  uint64_t total = 0, free = 0, buffers = 0, buffers_in_use = 0;
  for (auto& t : targets_) {
    auto s = t->space();
    total += s.total_bytes;
    free += s.free_bytes;
    auto b = t->buffers();
    buffers += b.total_bytes;
    buffers_in_use += b.in_use_bytes;
  }
  info->set_buffer_bytes(buffers);
  info->set_buffer_bytes_in_use(buffers_in_use);
  info->set_targets(static_cast<uint32_t>(targets_.size()));
  info->set_total_bytes(total);
  info->set_free_bytes(free);
  info->set_containers(static_cast<uint32_t>(mgmt_.scan("cont/" + info->uuid() + "/").size()));
  uint64_t epoch = 0, aggregated = UINT64_MAX;
  for (auto& d : data_) {
    epoch = std::max(epoch, d->last_epoch());
    aggregated = std::min(aggregated, d->aggregated_epoch());
  }
  info->set_epoch(epoch);
  info->set_aggregated_epoch(data_.empty() ? 0 : aggregated);
}

Result<wire::PoolInfo> Server::Impl::find_pool(const std::string& id) {
  if (id.empty()) return error(StatusCode::kInvalidArgument, "no pool given");
  for (auto& [k, v] : mgmt_.scan("pool/")) {
    wire::PoolInfo p;
    if (p.ParseFromString(v) && (p.uuid() == id || (!p.label().empty() && p.label() == id))) return p;
  }
  return error(StatusCode::kUnknownPool, "pool '" + id + "' does not exist");
}

Result<wire::ContInfo> Server::Impl::find_cont(const wire::PoolInfo& pool, const std::string& id) {
  if (id.empty()) return error(StatusCode::kInvalidArgument, "no container given");
  for (auto& [k, v] : mgmt_.scan("cont/" + pool.uuid() + "/")) {
    wire::ContInfo c;
    if (c.ParseFromString(v) && (c.uuid() == id || (!c.label().empty() && c.label() == id))) return c;
  }
  return error(StatusCode::kUnknownContainer,
               "container '" + id + "' does not exist in pool " + (pool.label().empty() ? pool.uuid() : pool.label()));
}

Status Server::Impl::revoke_lost_rights(const std::string& pool_uuid, const std::string& cont_uuid) {
  uint64_t now = wall_ms();
  for (auto& [id, r] : sessions_) {
    if (r.ended() || r.expires_unix_ms() <= now || r.pool_uuid() != pool_uuid) continue;
    if (!cont_uuid.empty() && r.cont_uuid() != cont_uuid) continue;
    auto p = find_pool(r.pool_uuid());
    auto c = p.is_ok() ? find_cont(*p, r.cont_uuid()) : Result<wire::ContInfo>(p.status());
    uint32_t now_rights = c.is_ok() ? capability_rights(principal_of(r), *p, *c) : 0;
    if ((r.rights() & now_rights) != r.rights()) RFOS_RETURN_IF_ERROR(end_session(&r));
  }
  return Status::ok();
}

namespace {
// Labels name things in CLIs and paths: keep them printable and unambiguous with uuids.
Status check_label(const std::string& label) {
  if (label.size() > 127) return error(StatusCode::kInvalidArgument, "labels are at most 127 characters");
  for (char c : label)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return error(StatusCode::kInvalidArgument, "label '" + label + "' may hold only letters, digits, '-', '_', '.'");
  if (Uuid::parse(label)) return error(StatusCode::kInvalidArgument, "a label must not look like a uuid");
  return Status::ok();
}
}  // namespace

grpc::Status Server::Impl::PoolCreate(ServerContext* ctx, const wire::PoolCreateRequest* req,
                                      wire::PoolCreateResponse* resp) {
  Principal who = caller(ctx);
  if (!who.admin)
    return to_grpc(ctx, error(StatusCode::kPermissionDenied,
                              who.describe() + " may not create pools (administrators only: root, the server's user "
                                               "and the names in the server's `admins`)"));
  std::lock_guard lock(mu_);
  Status s = check_label(req->label());
  if (s.is_ok() && !req->label().empty() && find_pool(req->label()).is_ok())
    s = error(StatusCode::kAlreadyExists, "a pool labelled '" + req->label() + "' exists");
  acl::Acl a =
      acl::default_acl(req->owner().empty() ? who.name : req->owner(),
                       req->owner_group().empty() ? (who.groups.empty() ? "" : who.groups[0]) : req->owner_group());
  if (s.is_ok()) s = acl::check_name(a.owner);
  if (s.is_ok() && !a.owner_group.empty()) s = acl::check_name(a.owner_group);
  if (s.is_ok() && req->acl_size() > 0) {
    auto entries = parse_entries(req->acl());
    if (entries.is_ok())
      a.entries = std::move(entries).value();
    else
      s = entries.status();
  }
  if (!s.is_ok()) return to_grpc(ctx, s);
  Uuid uuid = Uuid::random();
  for (auto& t : targets_) {
    s = t->pool_create(uuid);
    if (!s.is_ok()) return to_grpc(ctx, s);  // reconciled away at the next start
  }
  wire::PoolInfo info;
  info.set_uuid(uuid.to_string());
  info.set_label(req->label());
  info.set_created_unix_ms(wall_ms());
  set_acl(&info, a);
  s = mgmt_.put("pool/" + info.uuid(), info.SerializeAsString());
  if (!s.is_ok()) return to_grpc(ctx, s);
  fill_space(&info);
  *resp->mutable_pool() = info;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::PoolList(ServerContext* ctx, const wire::PoolListRequest*, wire::PoolListResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  for (auto& [k, v] : mgmt_.scan("pool/")) {
    wire::PoolInfo p;
    if (!p.ParseFromString(v) || !(acl::rights_of(acl_of(p), who) & acl::kRead)) continue;  // only what it may read
    fill_space(&p);
    *resp->add_pools() = p;
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::PoolQuery(ServerContext* ctx, const wire::PoolQueryRequest* req,
                                     wire::PoolQueryResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  uint32_t have = acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kRead)) return to_grpc(ctx, denied(who, "query pool " + req->pool(), acl::kRead, have));
  fill_space(&*p);
  *resp->mutable_pool() = *p;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::PoolDestroy(ServerContext* ctx, const wire::PoolDestroyRequest* req,
                                       wire::PoolDestroyResponse*) {
  Principal who = caller(ctx);
  if (!who.admin)
    return to_grpc(
        ctx, error(StatusCode::kPermissionDenied, who.describe() + " may not destroy pools (administrators only)"));
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto conts = mgmt_.scan("cont/" + p->uuid() + "/");
  if (!conts.empty() && !req->force())
    return to_grpc(ctx, error(StatusCode::kBusy, "pool holds " + std::to_string(conts.size()) +
                                                     " container(s); destroy them first or use --force"));
  // Records first: a crash half-way leaves shards without records, which the next start destroys.
  for (auto& [k, v] : conts) {
    Status s = mgmt_.del(k);
    if (!s.is_ok()) return to_grpc(ctx, s);
  }
  Status s = mgmt_.del("pool/" + p->uuid());
  if (!s.is_ok()) return to_grpc(ctx, s);
  for (auto& t : targets_) {
    s = t->pool_destroy(*Uuid::parse(p->uuid()));
    if (!s.is_ok() && s.code() != StatusCode::kUnknownPool) return to_grpc(ctx, s);
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContCreate(ServerContext* ctx, const wire::ContCreateRequest* req,
                                      wire::ContCreateResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  uint32_t have = acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kWrite))
    return to_grpc(ctx, denied(who, "create containers in pool " + req->pool(), acl::kWrite, have));
  if (who.anonymous())
    return to_grpc(ctx, error(StatusCode::kPermissionDenied, "anonymous callers cannot own containers"));
  Status s = check_label(req->label());
  if (s.is_ok() && !req->label().empty() && find_cont(*p, req->label()).is_ok())
    s = error(StatusCode::kAlreadyExists, "a container labelled '" + req->label() + "' exists in this pool");
  wire::ContProps props = req->props();
  if (props.csum_chunk_bytes() == 0) props.set_csum_chunk_bytes(4096);
  if (props.chunk_bytes() == 0) props.set_chunk_bytes(1u << 20);
  if (props.oclass().empty()) props.set_oclass("SX");
  if (s.is_ok() && props.oclass() != "S1" && props.oclass() != "SX")
    s = error(StatusCode::kInvalidArgument, "object class '" + props.oclass() + "' is not supported (S1, SX)");
  acl::Acl a = acl::default_acl(who.name, who.groups.empty() ? "" : who.groups[0]);
  if (s.is_ok() && req->acl_size() > 0) {
    auto entries = parse_entries(req->acl());
    if (entries.is_ok())
      a.entries = std::move(entries).value();
    else
      s = entries.status();
  }
  if (!s.is_ok()) return to_grpc(ctx, s);
  Uuid pu = *Uuid::parse(p->uuid()), cu = Uuid::random();
  engine::ContainerProps ep;
  ep.csum_chunk_bytes = props.csum_chunk_bytes();
  ep.csum = !props.csum_off();
  for (auto& t : targets_) {
    s = t->cont_create(pu, cu, ep);
    if (!s.is_ok()) return to_grpc(ctx, s);
  }
  wire::ContInfo info;
  info.set_uuid(cu.to_string());
  info.set_label(req->label());
  info.set_pool_uuid(p->uuid());
  *info.mutable_props() = props;
  info.set_created_unix_ms(wall_ms());
  set_acl(&info, a);
  s = mgmt_.put("cont/" + p->uuid() + "/" + info.uuid(), info.SerializeAsString());
  if (!s.is_ok()) return to_grpc(ctx, s);
  *resp->mutable_cont() = info;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContList(ServerContext* ctx, const wire::ContListRequest* req,
                                    wire::ContListResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  uint32_t have = acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kRead)) return to_grpc(ctx, denied(who, "list pool " + req->pool(), acl::kRead, have));
  for (auto& [k, v] : mgmt_.scan("cont/" + p->uuid() + "/")) {
    wire::ContInfo c;
    if (c.ParseFromString(v) && (acl::rights_of(acl_of(c), who) & acl::kRead)) *resp->add_conts() = c;
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContQuery(ServerContext* ctx, const wire::ContQueryRequest* req,
                                     wire::ContQueryResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  uint32_t have = acl::rights_of(acl_of(*c), who);
  if (!(have & acl::kRead)) return to_grpc(ctx, denied(who, "query container " + req->cont(), acl::kRead, have));
  auto info = targets_[0]->cont_open(*Uuid::parse(p->uuid()), *Uuid::parse(c->uuid()));
  if (info.is_ok())
    for (uint64_t e : info->snapshots) c->add_snapshots(e);
  *resp->mutable_cont() = *c;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContDestroy(ServerContext* ctx, const wire::ContDestroyRequest* req,
                                       wire::ContDestroyResponse*) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  uint32_t have = acl::rights_of(acl_of(*c), who) | acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kAdmin)) return to_grpc(ctx, denied(who, "destroy container " + req->cont(), acl::kAdmin, have));
  Status s = mgmt_.del("cont/" + p->uuid() + "/" + c->uuid());
  if (!s.is_ok()) return to_grpc(ctx, s);
  for (auto& t : targets_) {
    s = t->cont_destroy(*Uuid::parse(p->uuid()), *Uuid::parse(c->uuid()));
    if (!s.is_ok() && s.code() != StatusCode::kUnknownContainer) return to_grpc(ctx, s);
  }
  return grpc::Status::OK;
}

// The snapshot's epoch is above every epoch any target has stamped (each target's clock is strictly
// increasing), so every update acknowledged before this call is at or below it, and the engines refuse an
// update stamped at or below it afterwards: a client whose update raced with the snapshot gets it stamped
// again by the target (Container retries EpochTooOld for target-stamped updates).
grpc::Status Server::Impl::SnapshotCreate(ServerContext* ctx, const wire::SnapshotCreateRequest* req,
                                          wire::SnapshotCreateResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  uint32_t have = acl::rights_of(acl_of(*c), who);
  if (!(have & acl::kWrite)) return to_grpc(ctx, denied(who, "snapshot container " + req->cont(), acl::kWrite, have));
  Uuid pu = *Uuid::parse(p->uuid()), cu = *Uuid::parse(c->uuid());
  uint64_t epoch = wall_ns();
  for (auto& d : data_) epoch = std::max(epoch, d->last_epoch() + 1);
  if (epoch >= engine::kEpochLatest - 1)  // saturated clocks: see Target's next_epoch
    return to_grpc(ctx, error(StatusCode::kEpochTooOld, "the targets' epoch clocks are exhausted"));
  for (auto& d : data_) d->advance_clock(epoch);
  for (size_t i = 0; i < targets_.size(); ++i) {
    auto info = targets_[i]->cont_open(pu, cu);
    Status s = info.is_ok() ? targets_[i]->snapshot_create(info->id, epoch) : info.status();
    if (!s.is_ok()) {
      for (size_t j = 0; j < i; ++j)  // all or nothing
        if (auto done = targets_[j]->cont_open(pu, cu); done.is_ok())
          (void)targets_[j]->snapshot_destroy(done->id, epoch);
      return to_grpc(ctx, s);
    }
  }
  resp->set_epoch(epoch);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::SnapshotDestroy(ServerContext* ctx, const wire::SnapshotDestroyRequest* req,
                                           wire::SnapshotDestroyResponse*) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  uint32_t have = acl::rights_of(acl_of(*c), who);
  if (!(have & acl::kWrite))
    return to_grpc(ctx, denied(who, "destroy snapshots of container " + req->cont(), acl::kWrite, have));
  Uuid pu = *Uuid::parse(p->uuid()), cu = *Uuid::parse(c->uuid());
  bool any = false;
  for (auto& t : targets_) {
    auto info = t->cont_open(pu, cu);
    Status s = info.is_ok() ? t->snapshot_destroy(info->id, req->epoch()) : info.status();
    if (s.is_ok())
      any = true;
    else if (s.code() != StatusCode::kNotFound)  // a target that lost it in a crash mid-destroy is fine
      return to_grpc(ctx, s);
  }
  if (!any) return to_grpc(ctx, error(StatusCode::kNotFound, "no snapshot at epoch " + std::to_string(req->epoch())));
  return grpc::Status::OK;
}

grpc::Status Server::Impl::Connect(ServerContext* ctx, const wire::ConnectRequest* req, wire::ConnectResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  uint32_t granted = capability_rights(who, *p, *c);
  uint32_t want = wire::Capability::kRead | (req->write() ? wire::Capability::kWrite : 0);
  if ((granted & want) != want) {
    uint32_t pool_rights = acl::rights_of(acl_of(*p), who);
    if (!(pool_rights & acl::kRead))
      return to_grpc(ctx, denied(who, "connect to pool " + req->pool(), acl::kRead, pool_rights));
    return to_grpc(ctx, denied(who, std::string(req->write() ? "write" : "read") + " container " + req->cont(), want,
                               acl::rights_of(acl_of(*c), who)));
  }
  prune_sessions();
  size_t mine = 0;
  for (const auto& [id, r] : sessions_) mine += !r.ended() && same_principal(r, who);
  if (mine >= kMaxSessionsPerPrincipal)
    return to_grpc(ctx, error(StatusCode::kBusy, who.describe() + " holds " + std::to_string(mine) +
                                                     " sessions already; disconnect some or wait for them to expire"));
  uint32_t ttl = req->ttl_s() ? std::min(req->ttl_s(), config_.capability_ttl_s) : config_.capability_ttl_s;
  wire::Capability cap;
  cap.session = Uuid::random();
  cap.pool = *Uuid::parse(p->uuid());
  cap.cont = *Uuid::parse(c->uuid());
  cap.rights = static_cast<uint8_t>(want);
  cap.expires_unix_ms = wall_ms() + uint64_t{ttl} * 1000;
  wire::SessionRecord rec;
  rec.set_session_id(std::string(reinterpret_cast<const char*>(cap.session.bytes.data()), 16));
  rec.set_pool_uuid(p->uuid());
  rec.set_cont_uuid(c->uuid());
  rec.set_rights(cap.rights);
  rec.set_expires_unix_ms(cap.expires_unix_ms);
  rec.set_via(static_cast<uint32_t>(who.via));
  rec.set_name(who.name);
  for (const std::string& g : who.groups) rec.add_groups(g);
  rec.set_uid(who.uid);
  rec.set_admin(who.admin);
  Status s = save_session(rec);
  if (!s.is_ok()) return to_grpc(ctx, s);
  sessions_[rec.session_id()] = rec;
  resp->set_session_id(rec.session_id());
  resp->set_capability(sign(cap));
  resp->set_expires_unix_ms(cap.expires_unix_ms);
  wire::PoolMap* map = resp->mutable_map();
  map->set_version(1);
  map->set_provider(config_.provider);
  for (uint32_t i = 0; i < targets_.size(); ++i) {
    wire::TargetInfo* t = map->add_targets();
    t->set_index(i);
    t->set_address(data_[i]->address());
  }
  fill_space(&*p);
  *resp->mutable_pool() = *p;
  *resp->mutable_cont() = *c;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::Disconnect(ServerContext* ctx, const wire::DisconnectRequest* req,
                                      wire::DisconnectResponse*) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto it = sessions_.find(req->session_id());
  if (it == sessions_.end() || it->second.ended() || it->second.expires_unix_ms() <= wall_ms())
    return to_grpc(ctx, error(StatusCode::kNotFound, "no such session"));
  // A session id is no secret (every capability carries it in clear): only its owner may end it.
  if (!same_principal(it->second, who) && !who.admin)
    return to_grpc(ctx,
                   error(StatusCode::kPermissionDenied, who.describe() + " may not end another principal's session"));
  Status s = end_session(&it->second);
  return s.is_ok() ? grpc::Status::OK : to_grpc(ctx, s);
}

grpc::Status Server::Impl::Renew(ServerContext* ctx, const wire::RenewRequest* req, wire::RenewResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto it = sessions_.find(req->session_id());
  if (it == sessions_.end() || it->second.ended() || it->second.expires_unix_ms() <= wall_ms())
    return to_grpc(ctx, error(StatusCode::kPermissionDenied, "the session has ended or expired; connect again"));
  wire::SessionRecord& r = it->second;
  if (!same_principal(r, who))
    return to_grpc(ctx,
                   error(StatusCode::kPermissionDenied, who.describe() + " may not renew another principal's session"));
  auto p = find_pool(r.pool_uuid());
  auto c = p.is_ok() ? find_cont(*p, r.cont_uuid()) : Result<wire::ContInfo>(p.status());
  uint32_t rights = c.is_ok() ? (r.rights() & capability_rights(who, *p, *c)) : 0;
  if (!(rights & wire::Capability::kRead)) {
    Status s = end_session(&r);
    return to_grpc(ctx, s.is_ok() ? error(StatusCode::kPermissionDenied,
                                          who.describe() + " no longer has read access; the session ended")
                                  : s);
  }
  uint32_t ttl = req->ttl_s() ? std::min(req->ttl_s(), config_.capability_ttl_s) : config_.capability_ttl_s;
  wire::Capability cap;
  std::memcpy(cap.session.bytes.data(), r.session_id().data(), 16);
  cap.pool = *Uuid::parse(r.pool_uuid());
  cap.cont = *Uuid::parse(r.cont_uuid());
  cap.rights = static_cast<uint8_t>(rights);
  cap.expires_unix_ms = std::max(r.expires_unix_ms(), wall_ms() + uint64_t{ttl} * 1000);
  wire::SessionRecord updated = r;
  updated.set_rights(rights);
  updated.set_expires_unix_ms(cap.expires_unix_ms);
  Status s = save_session(updated);
  if (!s.is_ok()) return to_grpc(ctx, s);
  r = updated;
  resp->set_capability(sign(cap));
  resp->set_expires_unix_ms(cap.expires_unix_ms);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::AclGet(ServerContext* ctx, const wire::AclGetRequest* req, wire::AclResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  acl::Acl a = acl_of(*p);
  std::string what = "read the ACL of pool " + req->pool();
  if (!req->cont().empty()) {
    auto c = find_cont(*p, req->cont());
    if (!c.is_ok()) return to_grpc(ctx, c.status());
    a = acl_of(*c);
    what = "read the ACL of container " + req->cont();
  }
  uint32_t have = acl::rights_of(a, who);
  if (!(have & acl::kRead)) return to_grpc(ctx, denied(who, what, acl::kRead, have));
  resp->set_owner(a.owner);
  resp->set_owner_group(a.owner_group);
  for (const acl::Entry& e : a.entries) resp->add_entries(acl::format_entry(e));
  return grpc::Status::OK;
}

grpc::Status Server::Impl::AclModify(ServerContext* ctx, const wire::AclModifyRequest* req, wire::AclResponse* resp) {
  Principal who = caller(ctx);
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  Result<wire::ContInfo> c = error(StatusCode::kNotFound, "");
  if (!req->cont().empty()) {
    c = find_cont(*p, req->cont());
    if (!c.is_ok()) return to_grpc(ctx, c.status());
  }
  acl::Acl a = c.is_ok() ? acl_of(*c) : acl_of(*p);
  std::string what = c.is_ok() ? "container " + req->cont() : "pool " + req->pool();
  uint32_t have = acl::rights_of(a, who);
  Status s = Status::ok();
  switch (req->op()) {
    case wire::AclModifyRequest::SET:
    case wire::AclModifyRequest::UPDATE: {
      if (!(have & acl::kAdmin)) return to_grpc(ctx, denied(who, "change the ACL of " + what, acl::kAdmin, have));
      auto entries = parse_entries(req->entries());
      if (!entries.is_ok()) return to_grpc(ctx, entries.status());
      if (req->op() == wire::AclModifyRequest::SET) a.entries.clear();
      for (const acl::Entry& e : *entries) acl::update(&a, e);
      if (a.entries.size() > 256) return to_grpc(ctx, error(StatusCode::kInvalidArgument, "at most 256 ACL entries"));
      break;
    }
    case wire::AclModifyRequest::DELETE:
      if (!(have & acl::kAdmin)) return to_grpc(ctx, denied(who, "change the ACL of " + what, acl::kAdmin, have));
      for (const std::string& text : req->principals()) {
        auto e = acl::parse_principal(text);
        if (!e.is_ok()) return to_grpc(ctx, e.status());
        s = acl::remove(&a, *e);
        if (!s.is_ok()) return to_grpc(ctx, s);
      }
      break;
    case wire::AclModifyRequest::OWNER:
      if (!who.admin)
        return to_grpc(ctx, error(StatusCode::kPermissionDenied,
                                  who.describe() + " may not change the owner of " + what + " (administrators only)"));
      if (!req->owner().empty()) {
        if (s = acl::check_name(req->owner()); !s.is_ok()) return to_grpc(ctx, s);
        a.owner = req->owner();
      }
      if (!req->owner_group().empty()) {
        if (s = acl::check_name(req->owner_group()); !s.is_ok()) return to_grpc(ctx, s);
        a.owner_group = req->owner_group();
      }
      break;
    default:
      return to_grpc(ctx, error(StatusCode::kInvalidArgument, "unknown ACL operation"));
  }
  if (c.is_ok()) {
    set_acl(&*c, a);
    s = mgmt_.put("cont/" + p->uuid() + "/" + c->uuid(), c->SerializeAsString());
  } else {
    set_acl(&*p, a);
    s = mgmt_.put("pool/" + p->uuid(), p->SerializeAsString());
  }
  if (s.is_ok()) s = revoke_lost_rights(p->uuid(), c.is_ok() ? c->uuid() : "");
  if (!s.is_ok()) return to_grpc(ctx, s);
  resp->set_owner(a.owner);
  resp->set_owner_group(a.owner_group);
  for (const acl::Entry& e : a.entries) resp->add_entries(acl::format_entry(e));
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ServerInfo(ServerContext* ctx, const wire::ServerInfoRequest*,
                                      wire::ServerInfoResponse* resp) {
  Principal who = caller(ctx);
  resp->set_version("0.1.0");
  resp->set_control_address(bound_.empty() || tcp_bound_.empty() || bound_ == tcp_bound_ ? bound_
                                                                                         : bound_ + " " + tcp_bound_);
  resp->set_provider(config_.provider);
  resp->set_targets(static_cast<uint32_t>(targets_.size()));
  resp->set_uptime_s((wall_ms() - started_ms_) / 1000);
  if (who.admin) resp->set_data_dir(config_.data_dir);
  resp->set_caller(who.describe());
  resp->set_caller_rights(who.admin ? acl::kAll : 0);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::Health(ServerContext*, const wire::HealthRequest*, wire::HealthResponse* resp) {
  resp->set_ok(true);
  resp->set_detail(std::to_string(targets_.size()) + " target(s) up");
  return grpc::Status::OK;
}

Result<std::unique_ptr<Server>> Server::start(const ServerConfig& config) {
  auto impl = std::make_unique<Impl>(config);
  RFOS_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  shutdown();
  if (impl_) impl_->data_.clear();  // data-plane threads stop before the engines close
}
std::string Server::control_address() const { return impl_->bound_; }
std::string Server::tcp_address() const { return impl_->tcp_bound_; }
std::string Server::durability() const {
  return impl_->targets_.empty() ? std::string() : impl_->targets_[0]->durability();
}
void Server::wait() { impl_->grpc_->Wait(); }
void Server::shutdown() {
  if (impl_ && impl_->local_) impl_->local_->stop_accepting();
  if (impl_ && impl_->grpc_) impl_->grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

int run_server(const ServerConfig& config, const std::function<void(const std::string&)>& on_started) {
  // Signals are taken by a thread of our own (sigwait), so shutdown runs outside a signal handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto server = Server::start(config);
  if (!server.is_ok()) {
    std::fprintf(stderr, "rfos server: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::string tcp = (*server)->tcp_address();
  std::string also = tcp.empty() || tcp == (*server)->control_address()
                         ? ""
                         : " and " + tcp + (config.insecure ? " (insecure: anonymous callers)" : " (mutual TLS)");
  std::printf("rfos server: control plane listening on %s%s (provider %s, data in %s)\n",
              (*server)->control_address().c_str(), also.c_str(), config.provider.c_str(), config.data_dir.c_str());
  std::printf("rfos server: durability: %s\n", (*server)->durability().c_str());
  std::fflush(stdout);
  if (config.insecure)
    std::fprintf(stderr,
                 "rfos server: WARNING: %s takes calls without TLS; its callers are anonymous and have "
                 "only the rights ACLs grant EVERYONE@\n",
                 tcp.c_str());
  std::fflush(stdout);
  if (on_started) on_started((*server)->control_address());
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    std::printf("rfos server: signal %d, shutting down\n", sig);
    std::fflush(stdout);
    (*server)->shutdown();
  });
  (*server)->wait();
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if the server stopped on its own
  waiter.join();
  return 0;
}

}  // namespace rfos::server
