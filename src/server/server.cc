#include "server/server.h"

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
#include "server/target.h"
#include "wire/capability.h"
#include "wire/control.grpc.pb.h"

namespace rfos::server {

namespace fs = std::filesystem;
using engine::Engine;
using grpc::ServerContext;

namespace {

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
uint64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

class Server::Impl final : public wire::Control::Service {
 public:
  explicit Impl(const ServerConfig& c) : config_(c), started_ms_(now_ms()) {}

  Status open();
  ServerConfig config_;
  std::vector<std::unique_ptr<Engine>> targets_;
  std::vector<std::unique_ptr<Target>> data_;  // one data-plane thread per target
  MgmtStore mgmt_;
  std::string secret_;
  std::unique_ptr<grpc::Server> grpc_;
  std::string bound_;
  uint64_t started_ms_;
  std::mutex mu_;                             // control operations are rare: one at a time
  std::map<std::string, uint64_t> sessions_;  // session id bytes -> expiry of its capability
  std::shared_ptr<Revocations> revocations_ = std::make_shared<Revocations>();  // shared with the targets

  // Finds a pool by uuid or label.
  Result<wire::PoolInfo> find_pool(const std::string& id);
  Result<wire::ContInfo> find_cont(const wire::PoolInfo& pool, const std::string& id);
  void fill_space(wire::PoolInfo* info);

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
  grpc::Status ServerInfo(ServerContext*, const wire::ServerInfoRequest*, wire::ServerInfoResponse*) override;
  grpc::Status Health(ServerContext*, const wire::HealthRequest*, wire::HealthResponse*) override;
};

Status Server::Impl::open() {
  RFOS_RETURN_IF_ERROR(validate(config_));
  std::error_code ec;
  fs::create_directories(config_.data_dir, ec);
  if (ec) return error(StatusCode::kIoError, "create " + config_.data_dir + ": " + ec.message());
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
  std::map<std::string, wire::PoolInfo> pools;
  for (auto& [k, v] : mgmt_.scan("pool/")) {
    wire::PoolInfo p;
    if (!p.ParseFromString(v)) return error(StatusCode::kCorruption, "management record " + k + " is malformed");
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

  for (uint32_t i = 0; i < targets_.size(); ++i) {
    auto t = Target::start(i, targets_[i].get(), config_, secret_, revocations_);
    if (!t.is_ok()) return error(t.status().code(), "data plane (" + config_.provider + "): " + t.status().to_string());
    data_.push_back(std::move(t).value());
  }

  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!config_.tls_cert.empty()) {
    auto slurp = [](const std::string& path, std::string* out) {
      std::ifstream f(path);
      std::stringstream ss;
      ss << f.rdbuf();
      *out = ss.str();
      return f.good() || !out->empty();
    };
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!slurp(config_.tls_cert, &pair.cert_chain) || !slurp(config_.tls_key, &pair.private_key))
      return error(StatusCode::kInvalidArgument, "cannot read the TLS certificate or key");
    ssl.pem_key_cert_pairs.push_back(pair);
    creds = grpc::SslServerCredentials(ssl);
  }
  int port = 0;
  // gRPC shares a port between processes by default (SO_REUSEPORT): a second server on the same address would
  // start and take half the new clients. One server per address.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(config_.control_addr, creds, &port);
  builder.RegisterService(this);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || port == 0)
    return error(StatusCode::kIoError, "cannot listen on " + config_.control_addr + " (address in use?)");
  bound_ = config_.control_addr.substr(0, config_.control_addr.rfind(':')) + ":" + std::to_string(port);
  return Status::ok();
}

void Server::Impl::fill_space(wire::PoolInfo* info) {
  uint64_t total = 0, free = 0;
  for (auto& t : targets_) {
    auto s = t->space();
    total += s.total_bytes;
    free += s.free_bytes;
  }
  info->set_targets(static_cast<uint32_t>(targets_.size()));
  info->set_total_bytes(total);
  info->set_free_bytes(free);
  info->set_containers(static_cast<uint32_t>(mgmt_.scan("cont/" + info->uuid() + "/").size()));
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
  std::lock_guard lock(mu_);
  Status s = check_label(req->label());
  if (s.is_ok() && !req->label().empty() && find_pool(req->label()).is_ok())
    s = error(StatusCode::kAlreadyExists, "a pool labelled '" + req->label() + "' exists");
  if (!s.is_ok()) return to_grpc(ctx, s);
  Uuid uuid = Uuid::random();
  for (auto& t : targets_) {
    s = t->pool_create(uuid);
    if (!s.is_ok()) return to_grpc(ctx, s);  // reconciled away at the next start
  }
  wire::PoolInfo info;
  info.set_uuid(uuid.to_string());
  info.set_label(req->label());
  info.set_created_unix_ms(now_ms());
  s = mgmt_.put("pool/" + info.uuid(), info.SerializeAsString());
  if (!s.is_ok()) return to_grpc(ctx, s);
  fill_space(&info);
  *resp->mutable_pool() = info;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::PoolList(ServerContext*, const wire::PoolListRequest*, wire::PoolListResponse* resp) {
  std::lock_guard lock(mu_);
  for (auto& [k, v] : mgmt_.scan("pool/")) {
    wire::PoolInfo* p = resp->add_pools();
    p->ParseFromString(v);
    fill_space(p);
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::PoolQuery(ServerContext* ctx, const wire::PoolQueryRequest* req,
                                     wire::PoolQueryResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  fill_space(&*p);
  *resp->mutable_pool() = *p;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::PoolDestroy(ServerContext* ctx, const wire::PoolDestroyRequest* req,
                                       wire::PoolDestroyResponse*) {
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
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  Status s = check_label(req->label());
  if (s.is_ok() && !req->label().empty() && find_cont(*p, req->label()).is_ok())
    s = error(StatusCode::kAlreadyExists, "a container labelled '" + req->label() + "' exists in this pool");
  wire::ContProps props = req->props();
  if (props.csum_chunk_bytes() == 0) props.set_csum_chunk_bytes(4096);
  if (props.chunk_bytes() == 0) props.set_chunk_bytes(1u << 20);
  if (props.oclass().empty()) props.set_oclass("SX");
  if (s.is_ok() && props.oclass() != "S1" && props.oclass() != "SX")
    s = error(StatusCode::kInvalidArgument, "object class '" + props.oclass() + "' is not supported (S1, SX)");
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
  info.set_created_unix_ms(now_ms());
  s = mgmt_.put("cont/" + p->uuid() + "/" + info.uuid(), info.SerializeAsString());
  if (!s.is_ok()) return to_grpc(ctx, s);
  *resp->mutable_cont() = info;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContList(ServerContext* ctx, const wire::ContListRequest* req,
                                    wire::ContListResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  for (auto& [k, v] : mgmt_.scan("cont/" + p->uuid() + "/")) resp->add_conts()->ParseFromString(v);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContQuery(ServerContext* ctx, const wire::ContQueryRequest* req,
                                     wire::ContQueryResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  auto info = targets_[0]->cont_open(*Uuid::parse(p->uuid()), *Uuid::parse(c->uuid()));
  if (info.is_ok())
    for (uint64_t e : info->snapshots) c->add_snapshots(e);
  *resp->mutable_cont() = *c;
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ContDestroy(ServerContext* ctx, const wire::ContDestroyRequest* req,
                                       wire::ContDestroyResponse*) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
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
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  Uuid pu = *Uuid::parse(p->uuid()), cu = *Uuid::parse(c->uuid());
  uint64_t epoch = now_ns();
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
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
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
  std::lock_guard lock(mu_);
  auto p = find_pool(req->pool());
  if (!p.is_ok()) return to_grpc(ctx, p.status());
  auto c = find_cont(*p, req->cont());
  if (!c.is_ok()) return to_grpc(ctx, c.status());
  uint32_t ttl = req->ttl_s() ? std::min(req->ttl_s(), config_.capability_ttl_s) : config_.capability_ttl_s;
  wire::Capability cap;
  cap.session = Uuid::random();
  cap.pool = *Uuid::parse(p->uuid());
  cap.cont = *Uuid::parse(c->uuid());
  cap.rights = wire::Capability::kRead | (req->write() ? wire::Capability::kWrite : 0);
  cap.expires_unix_ms = now_ms() + uint64_t{ttl} * 1000;
  std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret_.data()), secret_.size());
  resp->set_session_id(std::string(reinterpret_cast<const char*>(cap.session.bytes.data()), 16));
  resp->set_capability(wire::encode_capability(cap, key));
  resp->set_expires_unix_ms(cap.expires_unix_ms);
  sessions_[resp->session_id()] = cap.expires_unix_ms;
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
  std::lock_guard lock(mu_);
  auto it = sessions_.find(req->session_id());
  if (it == sessions_.end() || req->session_id().size() != 16)
    return to_grpc(ctx, error(StatusCode::kNotFound, "no such session"));
  // Its capability stops working on every target now, not at its expiry.
  Uuid session;
  std::memcpy(session.bytes.data(), req->session_id().data(), 16);
  revocations_->revoke(session, it->second);
  sessions_.erase(it);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ServerInfo(ServerContext*, const wire::ServerInfoRequest*, wire::ServerInfoResponse* resp) {
  resp->set_version("0.1.0");
  resp->set_control_address(bound_);
  resp->set_provider(config_.provider);
  resp->set_targets(static_cast<uint32_t>(targets_.size()));
  resp->set_uptime_s((now_ms() - started_ms_) / 1000);
  resp->set_data_dir(config_.data_dir);
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
void Server::wait() { impl_->grpc_->Wait(); }
void Server::shutdown() {
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
  std::printf("rfos server: control plane listening on %s (provider %s, data in %s)\n",
              (*server)->control_address().c_str(), config.provider.c_str(), config.data_dir.c_str());
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
