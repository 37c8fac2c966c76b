#include "client/control_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "wire/control.grpc.pb.h"

namespace rfos::client {

class ControlClient::Impl {
 public:
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<wire::Control::Stub> stub;
  std::string address;
  uint32_t timeout_ms;
  Status setup;                 // a TLS file that could not be read: every call fails with it
  std::string act_for;          // "uid:gid[:groups]" when acting for a user (server/principal.h, act_for)
  std::string qos;              // the user's tenant and its limits (server/principal.h, tenant_limits)
  ControlClient::Relay relay;   // set: every call goes through it (an agent) instead of the channel
  bool wait_for_ready = false;  // a probe's: calls wait for the channel to connect, within their deadline

  // Runs one RPC with a deadline and maps its failure to an rfos Status.
  template <typename Req, typename Resp, typename Fn>
  Status call(Fn fn, const Req& req, Resp* resp) {
    if (relay) {
      RFOS_ASSIGN_OR_RETURN(std::string bytes, relay(Req::descriptor()->full_name(), req.SerializeAsString()));
      if (!resp->ParseFromString(bytes))
        return error(StatusCode::kInvalidArgument, "a relayed answer that does not parse");
      return Status::ok();
    }
    if (!setup.is_ok()) return setup;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!act_for.empty()) ctx.AddMetadata("rfos-act-for", act_for);
    if (!qos.empty()) ctx.AddMetadata("rfos-qos", qos);
    if (wait_for_ready) ctx.set_wait_for_ready(true);
    grpc::Status s = (stub.get()->*fn)(&ctx, req, resp);
    if (s.ok()) return Status::ok();
    auto md = ctx.GetServerTrailingMetadata();
    auto it = md.find("rfos-code");
    if (it != md.end()) {
      int code = std::stoi(std::string(it->second.data(), it->second.size()));
      std::string msg = s.error_message();
      // The message reads "<Name>: <text>"; keep only the text.
      size_t colon = msg.find(": ");
      return error(static_cast<StatusCode>(code), colon == std::string::npos ? msg : msg.substr(colon + 2));
    }
    switch (s.error_code()) {
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return error(StatusCode::kTimeout,
                     "no answer from the rfos server at " + address + " within " + std::to_string(timeout_ms) + " ms");
      case grpc::StatusCode::UNAVAILABLE:
        return error(StatusCode::kShutdown, "cannot reach an rfos server at " + address + ": " + s.error_message());
      default:
        return error(StatusCode::kInternal, "control call failed: " + s.error_message());
    }
  }
};

namespace {
PoolInfo from_wire(const wire::PoolInfo& p) {
  return {p.uuid(),  p.label(),       p.targets(), p.total_bytes(),      p.free_bytes(),   p.containers(),
          p.owner(), p.owner_group(), p.epoch(),   p.aggregated_epoch(), p.buffer_bytes(), p.buffer_bytes_in_use()};
}
Acl from_wire(const wire::AclResponse& a) {
  return {a.owner(), a.owner_group(), std::vector<std::string>(a.entries().begin(), a.entries().end())};
}
bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return !out->empty();
}
ContInfo from_wire(const wire::ContInfo& c) {
  ContInfo out{c.uuid(), c.label(), c.pool_uuid(), {}, {}, c.owner(), c.owner_group(), c.created_unix_ms()};
  out.props = {c.props().csum_chunk_bytes(), c.props().csum_off(), c.props().oclass(), c.props().chunk_bytes()};
  out.snapshots.assign(c.snapshots().begin(), c.snapshots().end());
  out.open_sessions = c.open_sessions();
  return out;
}
}  // namespace

TlsFiles TlsFiles::from_env() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  return {env("RFOS_TLS_CA"), env("RFOS_TLS_CERT"), env("RFOS_TLS_KEY")};
}

std::string default_control_address() {
  const char* env = std::getenv("RFOS_ADDR");
  if (env && *env) return env;
  return "unix:/run/rfos/control.sock";
}

std::unique_ptr<ControlClient> ControlClient::create(const std::string& address, uint32_t timeout_ms,
                                                     const TlsFiles& tls) {
  auto impl = std::make_unique<Impl>();
  std::string target = !address.empty() && address[0] == '/' ? "unix:" + address : address;
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!tls.empty()) {
    grpc::SslCredentialsOptions o;
    if (!read_file(tls.ca, &o.pem_root_certs) || !read_file(tls.cert, &o.pem_cert_chain) ||
        !read_file(tls.key, &o.pem_private_key))
      impl->setup = error(StatusCode::kInvalidArgument,
                          "TLS needs readable PEM files for the CA, the client certificate and its key (--tls-ca, "
                          "--tls-cert, --tls-key or RFOS_TLS_CA, RFOS_TLS_CERT, RFOS_TLS_KEY)");
    creds = grpc::SslCredentials(o);
  }
  impl->channel = grpc::CreateChannel(target, creds);
  impl->stub = wire::Control::NewStub(impl->channel);
  impl->address = target;
  impl->timeout_ms = timeout_ms;
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

ControlClient::ControlClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlClient::~ControlClient() = default;

std::unique_ptr<ControlClient> ControlClient::clone(uint32_t timeout_ms) const {
  auto impl = std::make_unique<Impl>();
  impl->channel = impl_->channel;
  impl->stub = wire::Control::NewStub(impl->channel);
  impl->address = impl_->address;
  impl->timeout_ms = timeout_ms ? timeout_ms : impl_->timeout_ms;
  impl->setup = impl_->setup;
  impl->act_for = impl_->act_for;
  impl->qos = impl_->qos;
  impl->relay = impl_->relay;
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

std::unique_ptr<ControlClient> ControlClient::acting_for(uint32_t uid, uint32_t gid,
                                                         const std::vector<uint32_t>& groups,
                                                         const std::string& tenant_limits) const {
  auto c = clone();
  c->impl_->qos = tenant_limits;
  c->impl_->act_for = std::to_string(uid) + ":" + std::to_string(gid);
  for (size_t i = 0; i < groups.size(); ++i) c->impl_->act_for += (i == 0 ? ":" : ",") + std::to_string(groups[i]);
  return c;
}

using Stub = wire::Control::Stub;

std::unique_ptr<ControlClient> ControlClient::relayed(Relay relay, uint32_t timeout_ms) {
  auto impl = std::make_unique<Impl>();
  impl->relay = std::move(relay);
  impl->address = "the agent";
  impl->timeout_ms = timeout_ms;
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

namespace {
// One RPC of the relay table: parses the request, calls, serializes the answer.
template <typename Req, typename Resp, typename Fn>
Result<std::string> relay_one(ControlClient::Impl& impl, Fn fn, const std::string& request) {
  Req req;
  if (!req.ParseFromString(request))
    return error(StatusCode::kInvalidArgument, "a relayed request that does not parse");
  Resp resp;
  RFOS_RETURN_IF_ERROR(impl.call(fn, req, &resp));
  return resp.SerializeAsString();
}
}  // namespace

Result<std::string> ControlClient::forward(const std::string& type, const std::string& request) const {
  using Fn = Result<std::string> (*)(Impl&, const std::string&);
#define RFOS_RELAY(Rpc, Req, Resp)                                                                       \
  {                                                                                                      \
    wire::Req::descriptor()->full_name(),                                                                \
        [](Impl& i, const std::string& r) { return relay_one<wire::Req, wire::Resp>(i, &Stub::Rpc, r); } \
  }
  // Sessions are not here: a relayed client never holds a capability (Connect and Renew would hand it one).
  static const std::map<std::string, Fn> table = {
      RFOS_RELAY(PoolCreate, PoolCreateRequest, PoolCreateResponse),
      RFOS_RELAY(PoolList, PoolListRequest, PoolListResponse),
      RFOS_RELAY(PoolQuery, PoolQueryRequest, PoolQueryResponse),
      RFOS_RELAY(PoolDestroy, PoolDestroyRequest, PoolDestroyResponse),
      RFOS_RELAY(ContCreate, ContCreateRequest, ContCreateResponse),
      RFOS_RELAY(ContList, ContListRequest, ContListResponse),
      RFOS_RELAY(ContQuery, ContQueryRequest, ContQueryResponse),
      RFOS_RELAY(ContDestroy, ContDestroyRequest, ContDestroyResponse),
      RFOS_RELAY(SnapshotCreate, SnapshotCreateRequest, SnapshotCreateResponse),
      RFOS_RELAY(SnapshotDestroy, SnapshotDestroyRequest, SnapshotDestroyResponse),
      RFOS_RELAY(AclGet, AclGetRequest, AclResponse),
      RFOS_RELAY(AclModify, AclModifyRequest, AclResponse),
      RFOS_RELAY(ServerInfo, ServerInfoRequest, ServerInfoResponse),
      RFOS_RELAY(Health, HealthRequest, HealthResponse),
  };
#undef RFOS_RELAY
  auto it = table.find(type);
  if (it != table.end()) return it->second(*impl_, request);
  if (type == wire::ConnectRequest::descriptor()->full_name() ||
      type == wire::RenewRequest::descriptor()->full_name() ||
      type == wire::DisconnectRequest::descriptor()->full_name())
    return error(StatusCode::kNotSupported,
                 "sessions through the agent are the agent's own: this command does not run through the agent yet "
                 "(rfos mount --agent, rfos bench --agent and the control commands do)");
  return error(StatusCode::kInvalidArgument, "no control call '" + type.substr(0, 128) + "'");
}

Result<PoolInfo> ControlClient::pool_create(const std::string& label, const PoolCreateOptions& options) {
  wire::PoolCreateRequest req;
  wire::PoolCreateResponse resp;
  req.set_label(label);
  req.set_owner(options.owner);
  req.set_owner_group(options.owner_group);
  for (const std::string& e : options.acl) req.add_acl(e);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::PoolCreate, req, &resp));
  return from_wire(resp.pool());
}

Result<std::vector<PoolInfo>> ControlClient::pool_list() {
  wire::PoolListResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::PoolList, wire::PoolListRequest(), &resp));
  std::vector<PoolInfo> out;
  for (const auto& p : resp.pools()) out.push_back(from_wire(p));
  return out;
}

Result<PoolInfo> ControlClient::pool_query(const std::string& pool) {
  wire::PoolQueryRequest req;
  wire::PoolQueryResponse resp;
  req.set_pool(pool);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::PoolQuery, req, &resp));
  return from_wire(resp.pool());
}

Status ControlClient::pool_destroy(const std::string& pool, bool force) {
  wire::PoolDestroyRequest req;
  wire::PoolDestroyResponse resp;
  req.set_pool(pool);
  req.set_force(force);
  return impl_->call(&Stub::PoolDestroy, req, &resp);
}

Result<ContInfo> ControlClient::cont_create(const std::string& pool, const std::string& label, const ContProps& props,
                                            const std::vector<std::string>& acl) {
  wire::ContCreateRequest req;
  wire::ContCreateResponse resp;
  for (const std::string& e : acl) req.add_acl(e);
  req.set_pool(pool);
  req.set_label(label);
  req.mutable_props()->set_csum_chunk_bytes(props.csum_chunk_bytes);
  req.mutable_props()->set_csum_off(props.csum_off);
  req.mutable_props()->set_oclass(props.oclass);
  req.mutable_props()->set_chunk_bytes(props.chunk_bytes);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::ContCreate, req, &resp));
  return from_wire(resp.cont());
}

Result<std::vector<ContInfo>> ControlClient::cont_list(const std::string& pool) {
  wire::ContListRequest req;
  wire::ContListResponse resp;
  req.set_pool(pool);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::ContList, req, &resp));
  std::vector<ContInfo> out;
  for (const auto& c : resp.conts()) out.push_back(from_wire(c));
  return out;
}

Result<ContInfo> ControlClient::cont_query(const std::string& pool, const std::string& cont) {
  wire::ContQueryRequest req;
  wire::ContQueryResponse resp;
  req.set_pool(pool);
  req.set_cont(cont);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::ContQuery, req, &resp));
  return from_wire(resp.cont());
}

Status ControlClient::cont_destroy(const std::string& pool, const std::string& cont) {
  wire::ContDestroyRequest req;
  wire::ContDestroyResponse resp;
  req.set_pool(pool);
  req.set_cont(cont);
  return impl_->call(&Stub::ContDestroy, req, &resp);
}

Result<uint64_t> ControlClient::snapshot_create(const std::string& pool, const std::string& cont) {
  wire::SnapshotCreateRequest req;
  wire::SnapshotCreateResponse resp;
  req.set_pool(pool);
  req.set_cont(cont);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::SnapshotCreate, req, &resp));
  return resp.epoch();
}

Result<std::vector<uint64_t>> ControlClient::snapshot_list(const std::string& pool, const std::string& cont) {
  RFOS_ASSIGN_OR_RETURN(ContInfo info, cont_query(pool, cont));
  return info.snapshots;
}

Status ControlClient::snapshot_destroy(const std::string& pool, const std::string& cont, uint64_t epoch) {
  wire::SnapshotDestroyRequest req;
  wire::SnapshotDestroyResponse resp;
  req.set_pool(pool);
  req.set_cont(cont);
  req.set_epoch(epoch);
  return impl_->call(&Stub::SnapshotDestroy, req, &resp);
}

Result<Session> ControlClient::connect(const std::string& pool, const std::string& cont, bool write, uint32_t ttl_s) {
  wire::ConnectRequest req;
  wire::ConnectResponse resp;
  req.set_pool(pool);
  req.set_cont(cont);
  req.set_write(write);
  req.set_ttl_s(ttl_s);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::Connect, req, &resp));
  Session s;
  s.session_id = resp.session_id();
  s.capability = resp.capability();
  s.expires_unix_ms = resp.expires_unix_ms();
  s.provider = resp.map().provider();
  for (const auto& t : resp.map().targets()) s.target_addresses.push_back(t.address());
  s.server_instance = resp.map().instance();
  s.target_share_bytes = resp.map().session_buffer_bytes();
  s.pool = from_wire(resp.pool());
  s.cont = from_wire(resp.cont());
  return s;
}

Status ControlClient::disconnect(const std::string& session_id) {
  wire::DisconnectRequest req;
  wire::DisconnectResponse resp;
  req.set_session_id(session_id);
  return impl_->call(&Stub::Disconnect, req, &resp);
}

std::unique_ptr<ControlClient> ControlClient::probe(uint32_t timeout_ms) const {
  if (impl_->channel) grpc::experimental::ChannelResetConnectionBackoff(impl_->channel.get());
  auto p = clone(timeout_ms);
  p->impl_->wait_for_ready = true;
  return p;
}

Result<ServerInfo> ControlClient::server_info() {
  wire::ServerInfoResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::ServerInfo, wire::ServerInfoRequest(), &resp));
  return ServerInfo{resp.version(),  resp.control_address(), resp.provider(), resp.targets(),
                    resp.uptime_s(), resp.data_dir(),        resp.caller(),   resp.instance()};
}

Status ControlClient::renew(Session* session, uint32_t ttl_s) {
  wire::RenewRequest req;
  wire::RenewResponse resp;
  req.set_session_id(session->session_id);
  req.set_ttl_s(ttl_s);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::Renew, req, &resp));
  session->capability = resp.capability();
  session->expires_unix_ms = resp.expires_unix_ms();
  return Status::ok();
}

Result<Acl> ControlClient::acl_get(const std::string& pool, const std::string& cont) {
  wire::AclGetRequest req;
  wire::AclResponse resp;
  req.set_pool(pool);
  req.set_cont(cont);
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::AclGet, req, &resp));
  return from_wire(resp);
}

namespace {
wire::AclModifyRequest acl_request(const std::string& pool, const std::string& cont, wire::AclModifyRequest::Op op) {
  wire::AclModifyRequest req;
  req.set_pool(pool);
  req.set_cont(cont);
  req.set_op(op);
  return req;
}
}  // namespace

Result<Acl> ControlClient::acl_set(const std::string& pool, const std::string& cont,
                                   const std::vector<std::string>& entries) {
  auto req = acl_request(pool, cont, wire::AclModifyRequest::SET);
  for (const std::string& e : entries) req.add_entries(e);
  wire::AclResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::AclModify, req, &resp));
  return from_wire(resp);
}

Result<Acl> ControlClient::acl_update(const std::string& pool, const std::string& cont,
                                      const std::vector<std::string>& entries) {
  auto req = acl_request(pool, cont, wire::AclModifyRequest::UPDATE);
  for (const std::string& e : entries) req.add_entries(e);
  wire::AclResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::AclModify, req, &resp));
  return from_wire(resp);
}

Result<Acl> ControlClient::acl_remove(const std::string& pool, const std::string& cont,
                                      const std::vector<std::string>& principals) {
  auto req = acl_request(pool, cont, wire::AclModifyRequest::DELETE);
  for (const std::string& p : principals) req.add_principals(p);
  wire::AclResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::AclModify, req, &resp));
  return from_wire(resp);
}

Result<Acl> ControlClient::set_owner(const std::string& pool, const std::string& cont, const std::string& owner,
                                     const std::string& owner_group) {
  auto req = acl_request(pool, cont, wire::AclModifyRequest::OWNER);
  req.set_owner(owner);
  req.set_owner_group(owner_group);
  wire::AclResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::AclModify, req, &resp));
  return from_wire(resp);
}

Status ControlClient::health() {
  wire::HealthResponse resp;
  RFOS_RETURN_IF_ERROR(impl_->call(&Stub::Health, wire::HealthRequest(), &resp));
  return resp.ok() ? Status::ok() : error(StatusCode::kBusy, resp.detail());
}

}  // namespace rfos::client
