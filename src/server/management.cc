#include "server/management.h"

#include <rocksdb/db.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/clock.h"
#include "engine/engine.h"
#include "server/acl.h"
#include "server/data_dir.h"
#include "wire/capability.h"

namespace rfos::server {

using engine::Engine;

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

Result<std::unique_ptr<Management>> Management::open(const ServerConfig& config) {
  RFOS_RETURN_IF_ERROR(prepare_data_dir(config.data_dir));
  std::unique_ptr<Management> m(new Management(config));
  RFOS_RETURN_IF_ERROR(m->open_store());
  return m;
}

Management::Management(const ServerConfig& config) : config_(config), mgmt_(std::make_unique<MgmtStore>()) {
  Uuid id = Uuid::random();
  instance_.assign(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
}
Management::~Management() { data_.clear(); }  // data-plane threads stop before the engines close

Status Management::open_store() {
  RFOS_RETURN_IF_ERROR(mgmt_->open(config_.data_dir + "/mgmt"));

  // The number of targets is fixed at the first start: a restart finds them on disk.
  std::string stored;
  uint32_t n = config_.targets ? config_.targets : std::max(1u, std::thread::hardware_concurrency());
  if (mgmt_->get("targets", &stored)) {
    n = static_cast<uint32_t>(std::stoul(stored));
  } else {
    RFOS_RETURN_IF_ERROR(mgmt_->put("targets", std::to_string(n)));
  }
  for (uint32_t i = 0; i < n; ++i) {
    engine::EngineOptions o;
    o.dir = config_.data_dir + "/target-" + std::to_string(i);
    o.block_file_bytes = config_.target_bytes;
    o.data_sync =
        config_.data_sync == "auto" ? engine::EngineOptions::DataSync::kAuto : engine::EngineOptions::DataSync::kAlways;
    auto e = Engine::open(o);
    if (!e.is_ok()) return error(e.status().code(), "target " + std::to_string(i) + ": " + e.status().to_string());
    if (auto r = (*e)->lazy_recovery(); r.checked > 0)
      std::fprintf(stderr,
                   "rfos server: target %u: %llu unsynced writes checked after an unclean stop, %llu dropped "
                   "(their data had not reached the media)\n",
                   i, static_cast<unsigned long long>(r.checked), static_cast<unsigned long long>(r.dropped));
    targets_.push_back(std::move(e).value());
  }

  if (!mgmt_->get("secret", &secret_)) {
    secret_.resize(32);
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    if (!urandom.read(secret_.data(), 32)) return error(StatusCode::kIoError, "cannot read /dev/urandom");
    RFOS_RETURN_IF_ERROR(mgmt_->put("secret", secret_));
  }

  // Reconcile: a crash between creating a pool or container on the targets and recording it leaves shards
  // nobody knows; a crash while destroying leaves records without shards. Records win; shards follow.
  // Records from before access control get an owner: the server's user, who then grants access.
  std::map<std::string, wire::PoolInfo> pools;
  const acl::Acl legacy = acl::default_acl(user_name(geteuid()), group_name(getegid()));
  for (auto& [k, v] : mgmt_->scan("pool/")) {
    wire::PoolInfo p;
    if (!p.ParseFromString(v)) return error(StatusCode::kCorruption, "management record " + k + " is malformed");
    if (p.owner().empty()) {
      set_acl(&p, legacy);
      RFOS_RETURN_IF_ERROR(mgmt_->put(k, p.SerializeAsString()));
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
    for (auto& [k, v] : mgmt_->scan("cont/" + uuid + "/")) {
      wire::ContInfo c;
      if (!c.ParseFromString(v)) return error(StatusCode::kCorruption, "management record " + k + " is malformed");
      if (c.owner().empty()) {
        set_acl(&c, legacy);
        RFOS_RETURN_IF_ERROR(mgmt_->put(k, c.SerializeAsString()));
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
  for (auto& [k, v] : mgmt_->scan("session/")) {
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
    auto t = Target::start(i, static_cast<uint32_t>(targets_.size()), targets_[i].get(), config_, secret_, revocations_,
                           qos_, claims_);
    if (!t.is_ok()) return error(t.status().code(), "data plane (" + config_.provider + "): " + t.status().to_string());
    data_.push_back(std::move(t).value());
  }

  return Status::ok();
}

uint32_t Management::capability_rights(const Principal& who, const wire::PoolInfo& pool, const wire::ContInfo& cont) {
  uint32_t p = acl::rights_of(acl_of(pool), who), c = acl::rights_of(acl_of(cont), who);
  if (!(p & acl::kRead) || !(c & acl::kRead)) return 0;
  return wire::Capability::kRead | (c & acl::kWrite ? wire::Capability::kWrite : 0);
}

std::string Management::sign(const wire::Capability& cap) const {
  return wire::encode_capability(cap, {reinterpret_cast<const uint8_t*>(secret_.data()), secret_.size()});
}

Status Management::save_session(const wire::SessionRecord& r) {
  return mgmt_->put("session/" + hex(r.session_id()), r.SerializeAsString());
}

Status Management::end_session(wire::SessionRecord* r) {
  r->set_ended(true);
  Uuid session;
  std::memcpy(session.bytes.data(), r->session_id().data(), 16);
  revocations_->revoke(session, r->expires_unix_ms());
  return save_session(*r);
}

void Management::prune_sessions() {
  uint64_t now = wall_ms();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.expires_unix_ms() > now) {
      ++it;
      continue;
    }
    (void)mgmt_->del("session/" + hex(it->first));
    it = sessions_.erase(it);
  }
}

void Management::fill_space(wire::PoolInfo* info) {
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
  info->set_containers(static_cast<uint32_t>(mgmt_->scan("cont/" + info->uuid() + "/").size()));
  uint64_t epoch = 0, aggregated = UINT64_MAX;
  for (auto& d : data_) {
    epoch = std::max(epoch, d->last_epoch());
    aggregated = std::min(aggregated, d->aggregated_epoch());
  }
  info->set_epoch(epoch);
  info->set_aggregated_epoch(data_.empty() ? 0 : aggregated);
}

Result<wire::PoolInfo> Management::find_pool(const std::string& id) {
  if (id.empty()) return error(StatusCode::kInvalidArgument, "no pool given");
  for (auto& [k, v] : mgmt_->scan("pool/")) {
    wire::PoolInfo p;
    if (p.ParseFromString(v) && (p.uuid() == id || (!p.label().empty() && p.label() == id))) return p;
  }
  return error(StatusCode::kUnknownPool, "pool '" + id + "' does not exist");
}

Result<wire::ContInfo> Management::find_cont(const wire::PoolInfo& pool, const std::string& id) {
  if (id.empty()) return error(StatusCode::kInvalidArgument, "no container given");
  for (auto& [k, v] : mgmt_->scan("cont/" + pool.uuid() + "/")) {
    wire::ContInfo c;
    if (c.ParseFromString(v) && (c.uuid() == id || (!c.label().empty() && c.label() == id))) return c;
  }
  return error(StatusCode::kUnknownContainer,
               "container '" + id + "' does not exist in pool " + (pool.label().empty() ? pool.uuid() : pool.label()));
}

Status Management::revoke_lost_rights(const std::string& pool_uuid, const std::string& cont_uuid) {
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

Status Management::pool_create(const Principal& who, const wire::PoolCreateRequest& req,
                               wire::PoolCreateResponse* resp) {
  if (!who.admin)
    return error(StatusCode::kPermissionDenied,
                 who.describe() +
                     " may not create pools (administrators only: root, the server's user "
                     "and the names in the server's `admins`)");
  std::lock_guard lock(mu_);
  Status s = check_label(req.label());
  if (s.is_ok() && !req.label().empty() && find_pool(req.label()).is_ok())
    s = error(StatusCode::kAlreadyExists, "a pool labelled '" + req.label() + "' exists");
  acl::Acl a =
      acl::default_acl(req.owner().empty() ? who.name : req.owner(),
                       req.owner_group().empty() ? (who.groups.empty() ? "" : who.groups[0]) : req.owner_group());
  if (s.is_ok()) s = acl::check_name(a.owner);
  if (s.is_ok() && !a.owner_group.empty()) s = acl::check_name(a.owner_group);
  if (s.is_ok() && req.acl_size() > 0) {
    auto entries = parse_entries(req.acl());
    if (entries.is_ok())
      a.entries = std::move(entries).value();
    else
      s = entries.status();
  }
  if (!s.is_ok()) return s;
  Uuid uuid = Uuid::random();
  for (auto& t : targets_) {
    s = t->pool_create(uuid);
    if (!s.is_ok()) return s;  // reconciled away at the next start
  }
  wire::PoolInfo info;
  info.set_uuid(uuid.to_string());
  info.set_label(req.label());
  info.set_created_unix_ms(wall_ms());
  set_acl(&info, a);
  s = mgmt_->put("pool/" + info.uuid(), info.SerializeAsString());
  if (!s.is_ok()) return s;
  fill_space(&info);
  *resp->mutable_pool() = info;
  return Status::ok();
}

Status Management::pool_list(const Principal& who, const wire::PoolListRequest&, wire::PoolListResponse* resp) {
  std::lock_guard lock(mu_);
  for (auto& [k, v] : mgmt_->scan("pool/")) {
    wire::PoolInfo p;
    if (!p.ParseFromString(v) || !(acl::rights_of(acl_of(p), who) & acl::kRead)) continue;  // only what it may read
    fill_space(&p);
    *resp->add_pools() = p;
  }
  return Status::ok();
}

Status Management::pool_query(const Principal& who, const wire::PoolQueryRequest& req, wire::PoolQueryResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  uint32_t have = acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kRead)) return denied(who, "query pool " + req.pool(), acl::kRead, have);
  fill_space(&*p);
  *resp->mutable_pool() = *p;
  return Status::ok();
}

Status Management::pool_destroy(const Principal& who, const wire::PoolDestroyRequest& req, wire::PoolDestroyResponse*) {
  if (!who.admin)
    return error(StatusCode::kPermissionDenied, who.describe() + " may not destroy pools (administrators only)");
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  auto conts = mgmt_->scan("cont/" + p->uuid() + "/");
  if (!conts.empty() && !req.force())
    return error(StatusCode::kBusy,
                 "pool holds " + std::to_string(conts.size()) + " container(s); destroy them first or use --force");
  // Records first: a crash half-way leaves shards without records, which the next start destroys.
  for (auto& [k, v] : conts) {
    Status s = mgmt_->del(k);
    if (!s.is_ok()) return s;
  }
  Status s = mgmt_->del("pool/" + p->uuid());
  if (!s.is_ok()) return s;
  for (auto& t : targets_) {
    s = t->pool_destroy(*Uuid::parse(p->uuid()));
    if (!s.is_ok() && s.code() != StatusCode::kUnknownPool) return s;
  }
  return Status::ok();
}

Status Management::cont_create(const Principal& who, const wire::ContCreateRequest& req,
                               wire::ContCreateResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  uint32_t have = acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kWrite)) return denied(who, "create containers in pool " + req.pool(), acl::kWrite, have);
  if (who.anonymous()) return error(StatusCode::kPermissionDenied, "anonymous callers cannot own containers");
  Status s = check_label(req.label());
  if (s.is_ok() && !req.label().empty() && find_cont(*p, req.label()).is_ok())
    s = error(StatusCode::kAlreadyExists, "a container labelled '" + req.label() + "' exists in this pool");
  wire::ContProps props = req.props();
  if (props.csum_chunk_bytes() == 0) props.set_csum_chunk_bytes(4096);
  if (props.chunk_bytes() == 0) props.set_chunk_bytes(1u << 20);
  if (props.oclass().empty()) props.set_oclass("SX");
  if (s.is_ok() && props.oclass() != "S1" && props.oclass() != "SX")
    s = error(StatusCode::kInvalidArgument, "object class '" + props.oclass() + "' is not supported (S1, SX)");
  acl::Acl a = acl::default_acl(who.name, who.groups.empty() ? "" : who.groups[0]);
  if (s.is_ok() && req.acl_size() > 0) {
    auto entries = parse_entries(req.acl());
    if (entries.is_ok())
      a.entries = std::move(entries).value();
    else
      s = entries.status();
  }
  if (!s.is_ok()) return s;
  Uuid pu = *Uuid::parse(p->uuid()), cu = Uuid::random();
  engine::ContainerProps ep;
  ep.csum_chunk_bytes = props.csum_chunk_bytes();
  ep.csum = !props.csum_off();
  for (auto& t : targets_) {
    s = t->cont_create(pu, cu, ep);
    if (!s.is_ok()) return s;
  }
  wire::ContInfo info;
  info.set_uuid(cu.to_string());
  info.set_label(req.label());
  info.set_pool_uuid(p->uuid());
  *info.mutable_props() = props;
  info.set_created_unix_ms(wall_ms());
  set_acl(&info, a);
  s = mgmt_->put("cont/" + p->uuid() + "/" + info.uuid(), info.SerializeAsString());
  if (!s.is_ok()) return s;
  *resp->mutable_cont() = info;
  return Status::ok();
}

Status Management::cont_list(const Principal& who, const wire::ContListRequest& req, wire::ContListResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  uint32_t have = acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kRead)) return denied(who, "list pool " + req.pool(), acl::kRead, have);
  for (auto& [k, v] : mgmt_->scan("cont/" + p->uuid() + "/")) {
    wire::ContInfo c;
    if (c.ParseFromString(v) && (acl::rights_of(acl_of(c), who) & acl::kRead)) *resp->add_conts() = c;
  }
  return Status::ok();
}

Status Management::cont_query(const Principal& who, const wire::ContQueryRequest& req, wire::ContQueryResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  auto c = find_cont(*p, req.cont());
  if (!c.is_ok()) return c.status();
  uint32_t have = acl::rights_of(acl_of(*c), who);
  if (!(have & acl::kRead)) return denied(who, "query container " + req.cont(), acl::kRead, have);
  auto info = targets_[0]->cont_open(*Uuid::parse(p->uuid()), *Uuid::parse(c->uuid()));
  if (info.is_ok())
    for (uint64_t e : info->snapshots) c->add_snapshots(e);
  uint32_t open = 0;
  uint64_t now = wall_ms();
  for (const auto& [id, r] : sessions_) open += !r.ended() && r.expires_unix_ms() > now && r.cont_uuid() == c->uuid();
  c->set_open_sessions(open);
  *resp->mutable_cont() = *c;
  return Status::ok();
}

Status Management::cont_destroy(const Principal& who, const wire::ContDestroyRequest& req, wire::ContDestroyResponse*) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  auto c = find_cont(*p, req.cont());
  if (!c.is_ok()) return c.status();
  uint32_t have = acl::rights_of(acl_of(*c), who) | acl::rights_of(acl_of(*p), who);
  if (!(have & acl::kAdmin)) return denied(who, "destroy container " + req.cont(), acl::kAdmin, have);
  Status s = mgmt_->del("cont/" + p->uuid() + "/" + c->uuid());
  if (!s.is_ok()) return s;
  for (auto& t : targets_) {
    s = t->cont_destroy(*Uuid::parse(p->uuid()), *Uuid::parse(c->uuid()));
    if (!s.is_ok() && s.code() != StatusCode::kUnknownContainer) return s;
  }
  return Status::ok();
}

// The snapshot's epoch is above every epoch any target has stamped (each target's clock is strictly
// increasing), so every update acknowledged before this call is at or below it, and the engines refuse an
// update stamped at or below it afterwards: a client whose update raced with the snapshot gets it stamped
// again by the target (Container retries EpochTooOld for target-stamped updates).
Status Management::snapshot_create(const Principal& who, const wire::SnapshotCreateRequest& req,
                                   wire::SnapshotCreateResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  auto c = find_cont(*p, req.cont());
  if (!c.is_ok()) return c.status();
  uint32_t have = acl::rights_of(acl_of(*c), who);
  if (!(have & acl::kWrite)) return denied(who, "snapshot container " + req.cont(), acl::kWrite, have);
  Uuid pu = *Uuid::parse(p->uuid()), cu = *Uuid::parse(c->uuid());
  uint64_t epoch = wall_ns();
  for (auto& d : data_) epoch = std::max(epoch, d->last_epoch() + 1);
  if (epoch >= engine::kEpochLatest - 1)  // saturated clocks: see Target's next_epoch
    return error(StatusCode::kEpochTooOld, "the targets' epoch clocks are exhausted");
  for (auto& d : data_) d->advance_clock(epoch);
  for (size_t i = 0; i < targets_.size(); ++i) {
    auto info = targets_[i]->cont_open(pu, cu);
    Status s = info.is_ok() ? targets_[i]->snapshot_create(info->id, epoch) : info.status();
    if (!s.is_ok()) {
      for (size_t j = 0; j < i; ++j)  // all or nothing
        if (auto done = targets_[j]->cont_open(pu, cu); done.is_ok())
          (void)targets_[j]->snapshot_destroy(done->id, epoch);
      return s;
    }
  }
  resp->set_epoch(epoch);
  return Status::ok();
}

Status Management::snapshot_destroy(const Principal& who, const wire::SnapshotDestroyRequest& req,
                                    wire::SnapshotDestroyResponse*) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  auto c = find_cont(*p, req.cont());
  if (!c.is_ok()) return c.status();
  uint32_t have = acl::rights_of(acl_of(*c), who);
  if (!(have & acl::kWrite)) return denied(who, "destroy snapshots of container " + req.cont(), acl::kWrite, have);
  Uuid pu = *Uuid::parse(p->uuid()), cu = *Uuid::parse(c->uuid());
  bool any = false;
  for (auto& t : targets_) {
    auto info = t->cont_open(pu, cu);
    Status s = info.is_ok() ? t->snapshot_destroy(info->id, req.epoch()) : info.status();
    if (s.is_ok())
      any = true;
    else if (s.code() != StatusCode::kNotFound)  // a target that lost it in a crash mid-destroy is fine
      return s;
  }
  if (!any) return error(StatusCode::kNotFound, "no snapshot at epoch " + std::to_string(req.epoch()));
  return Status::ok();
}

Status Management::connect(const Principal& who, const wire::ConnectRequest& req, wire::ConnectResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  auto c = find_cont(*p, req.cont());
  if (!c.is_ok()) return c.status();
  uint32_t granted = capability_rights(who, *p, *c);
  uint32_t want = wire::Capability::kRead | (req.write() ? wire::Capability::kWrite : 0);
  if ((granted & want) != want) {
    uint32_t pool_rights = acl::rights_of(acl_of(*p), who);
    if (!(pool_rights & acl::kRead)) return denied(who, "connect to pool " + req.pool(), acl::kRead, pool_rights);
    return denied(who, std::string(req.write() ? "write" : "read") + " container " + req.cont(), want,
                  acl::rights_of(acl_of(*c), who));
  }
  prune_sessions();
  size_t mine = 0;
  for (const auto& [id, r] : sessions_) mine += !r.ended() && same_principal(r, who);
  if (mine >= kMaxSessionsPerPrincipal)
    return error(StatusCode::kBusy, who.describe() + " holds " + std::to_string(mine) +
                                        " sessions already; disconnect some or wait for them to expire");
  uint32_t ttl = req.ttl_s() ? std::min(req.ttl_s(), config_.capability_ttl_s) : config_.capability_ttl_s;
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
  if (who.qos.limited()) {
    cap.qos = who.qos;
    rec.set_qos_key(std::string(reinterpret_cast<const char*>(cap.qos.key.bytes.data()), 16));
    rec.set_qos_iops(cap.qos.iops);
    rec.set_qos_burst_ios(cap.qos.burst_ios);
    rec.set_qos_bytes_per_s(cap.qos.bytes_per_s);
    rec.set_qos_burst_bytes(cap.qos.burst_bytes);
  }
  Status s = save_session(rec);
  if (!s.is_ok()) return s;
  sessions_[rec.session_id()] = rec;
  resp->set_session_id(rec.session_id());
  resp->set_capability(sign(cap));
  resp->set_expires_unix_ms(cap.expires_unix_ms);
  wire::PoolMap* map = resp->mutable_map();
  map->set_version(1);
  map->set_provider(config_.provider);
  map->set_instance(instance_);
  map->set_session_buffer_bytes(config_.session_buffer_bytes);
  for (uint32_t i = 0; i < targets_.size(); ++i) {
    wire::TargetInfo* t = map->add_targets();
    t->set_index(i);
    t->set_address(data_[i]->address());
  }
  fill_space(&*p);
  *resp->mutable_pool() = *p;
  *resp->mutable_cont() = *c;
  return Status::ok();
}

Status Management::disconnect(const Principal& who, const wire::DisconnectRequest& req, wire::DisconnectResponse*) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(req.session_id());
  if (it == sessions_.end() || it->second.ended() || it->second.expires_unix_ms() <= wall_ms())
    return error(StatusCode::kNotFound, "no such session");
  // A session id is no secret (every capability carries it in clear): only its owner may end it.
  if (!same_principal(it->second, who) && !who.admin)
    return error(StatusCode::kPermissionDenied, who.describe() + " may not end another principal's session");
  Status s = end_session(&it->second);
  return s;
}

Status Management::renew(const Principal& who, const wire::RenewRequest& req, wire::RenewResponse* resp) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(req.session_id());
  if (it == sessions_.end() || it->second.ended() || it->second.expires_unix_ms() <= wall_ms())
    return error(StatusCode::kPermissionDenied, "the session has ended or expired; connect again");
  wire::SessionRecord& r = it->second;
  if (!same_principal(r, who))
    return error(StatusCode::kPermissionDenied, who.describe() + " may not renew another principal's session");
  auto p = find_pool(r.pool_uuid());
  auto c = p.is_ok() ? find_cont(*p, r.cont_uuid()) : Result<wire::ContInfo>(p.status());
  uint32_t rights = c.is_ok() ? (r.rights() & capability_rights(who, *p, *c)) : 0;
  if (!(rights & wire::Capability::kRead)) {
    Status s = end_session(&r);
    return s.is_ok()
               ? error(StatusCode::kPermissionDenied, who.describe() + " no longer has read access; the session ended")
               : s;
  }
  uint32_t ttl = req.ttl_s() ? std::min(req.ttl_s(), config_.capability_ttl_s) : config_.capability_ttl_s;
  wire::Capability cap;
  std::memcpy(cap.session.bytes.data(), r.session_id().data(), 16);
  cap.pool = *Uuid::parse(r.pool_uuid());
  cap.cont = *Uuid::parse(r.cont_uuid());
  cap.rights = static_cast<uint8_t>(rights);
  cap.expires_unix_ms = std::max(r.expires_unix_ms(), wall_ms() + uint64_t{ttl} * 1000);
  if (r.qos_key().size() == 16) {  // the limits the session was opened under
    std::memcpy(cap.qos.key.bytes.data(), r.qos_key().data(), 16);
    cap.qos.iops = r.qos_iops();
    cap.qos.burst_ios = r.qos_burst_ios();
    cap.qos.bytes_per_s = r.qos_bytes_per_s();
    cap.qos.burst_bytes = r.qos_burst_bytes();
  }
  wire::SessionRecord updated = r;
  updated.set_rights(rights);
  updated.set_expires_unix_ms(cap.expires_unix_ms);
  Status s = save_session(updated);
  if (!s.is_ok()) return s;
  r = updated;
  resp->set_capability(sign(cap));
  resp->set_expires_unix_ms(cap.expires_unix_ms);
  return Status::ok();
}

Status Management::acl_get(const Principal& who, const wire::AclGetRequest& req, wire::AclResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  acl::Acl a = acl_of(*p);
  std::string what = "read the ACL of pool " + req.pool();
  if (!req.cont().empty()) {
    auto c = find_cont(*p, req.cont());
    if (!c.is_ok()) return c.status();
    a = acl_of(*c);
    what = "read the ACL of container " + req.cont();
  }
  uint32_t have = acl::rights_of(a, who);
  if (!(have & acl::kRead)) return denied(who, what, acl::kRead, have);
  resp->set_owner(a.owner);
  resp->set_owner_group(a.owner_group);
  for (const acl::Entry& e : a.entries) resp->add_entries(acl::format_entry(e));
  return Status::ok();
}

Status Management::acl_modify(const Principal& who, const wire::AclModifyRequest& req, wire::AclResponse* resp) {
  std::lock_guard lock(mu_);
  auto p = find_pool(req.pool());
  if (!p.is_ok()) return p.status();
  Result<wire::ContInfo> c = error(StatusCode::kNotFound, "");
  if (!req.cont().empty()) {
    c = find_cont(*p, req.cont());
    if (!c.is_ok()) return c.status();
  }
  acl::Acl a = c.is_ok() ? acl_of(*c) : acl_of(*p);
  std::string what = c.is_ok() ? "container " + req.cont() : "pool " + req.pool();
  uint32_t have = acl::rights_of(a, who);
  Status s = Status::ok();
  switch (req.op()) {
    case wire::AclModifyRequest::SET:
    case wire::AclModifyRequest::UPDATE: {
      if (!(have & acl::kAdmin)) return denied(who, "change the ACL of " + what, acl::kAdmin, have);
      auto entries = parse_entries(req.entries());
      if (!entries.is_ok()) return entries.status();
      if (req.op() == wire::AclModifyRequest::SET) a.entries.clear();
      for (const acl::Entry& e : *entries) acl::update(&a, e);
      if (a.entries.size() > 256) return error(StatusCode::kInvalidArgument, "at most 256 ACL entries");
      break;
    }
    case wire::AclModifyRequest::DELETE:
      if (!(have & acl::kAdmin)) return denied(who, "change the ACL of " + what, acl::kAdmin, have);
      for (const std::string& text : req.principals()) {
        auto e = acl::parse_principal(text);
        if (!e.is_ok()) return e.status();
        s = acl::remove(&a, *e);
        if (!s.is_ok()) return s;
      }
      break;
    case wire::AclModifyRequest::OWNER:
      if (!who.admin)
        return error(StatusCode::kPermissionDenied,
                     who.describe() + " may not change the owner of " + what + " (administrators only)");
      if (!req.owner().empty()) {
        if (s = acl::check_name(req.owner()); !s.is_ok()) return s;
        a.owner = req.owner();
      }
      if (!req.owner_group().empty()) {
        if (s = acl::check_name(req.owner_group()); !s.is_ok()) return s;
        a.owner_group = req.owner_group();
      }
      break;
    default:
      return error(StatusCode::kInvalidArgument, "unknown ACL operation");
  }
  if (c.is_ok()) {
    set_acl(&*c, a);
    s = mgmt_->put("cont/" + p->uuid() + "/" + c->uuid(), c->SerializeAsString());
  } else {
    set_acl(&*p, a);
    s = mgmt_->put("pool/" + p->uuid(), p->SerializeAsString());
  }
  if (s.is_ok()) s = revoke_lost_rights(p->uuid(), c.is_ok() ? c->uuid() : "");
  if (!s.is_ok()) return s;
  resp->set_owner(a.owner);
  resp->set_owner_group(a.owner_group);
  for (const acl::Entry& e : a.entries) resp->add_entries(acl::format_entry(e));
  return Status::ok();
}

uint32_t Management::targets() const { return static_cast<uint32_t>(targets_.size()); }
std::string Management::durability() const { return targets_.empty() ? std::string() : targets_[0]->durability(); }

}  // namespace rfos::server
