#include "server/server.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "server/acl.h"
#include "server/local_listener.h"
#include "server/management.h"
#include "server/principal.h"
#include "wire/control.grpc.pb.h"

namespace rfos::server {

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

bool slurp(const std::string& path, std::string* out) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return f.good() || !out->empty();
}
}  // namespace

// The gRPC control service: says who called, hands the call to the management layer, and carries its answer
// and its error back.
class Server::Impl final : public wire::Control::Service {
 public:
  explicit Impl(const ServerConfig& c) : config_(c), started_ms_(wall_ms()) {}

  Status open();
  ServerConfig config_;
  std::unique_ptr<Management> management_;
  std::unique_ptr<LocalListener> local_;  // outlives grpc_: handlers ask it who called
  std::unique_ptr<grpc::Server> grpc_;
  std::string bound_;      // the address clients should use: the local socket when there is one
  std::string tcp_bound_;  // the TCP listener, if any
  uint64_t started_ms_;

  // Who called: the kernel's word on the local socket, the verified certificate on TLS, else anonymous.
  Principal caller(ServerContext* ctx) const;
  // Whom the call is for: the caller, or the user a trusted agent acts for (act_for in principal.h).
  Result<Principal> acting(ServerContext* ctx) const;
  // Every call: the caller, the management layer's answer, its error as gRPC's.
  template <typename Req, typename Resp>
  grpc::Status adapt(ServerContext* ctx, Status (Management::*op)(const Principal&, const Req&, Resp*), const Req* req,
                     Resp* resp) {
    Result<Principal> who = acting(ctx);
    return to_grpc(ctx, who.is_ok() ? (management_.get()->*op)(*who, *req, resp) : who.status());
  }

  grpc::Status PoolCreate(ServerContext* ctx, const wire::PoolCreateRequest* req,
                          wire::PoolCreateResponse* resp) override {
    return adapt(ctx, &Management::pool_create, req, resp);
  }
  grpc::Status PoolList(ServerContext* ctx, const wire::PoolListRequest* req, wire::PoolListResponse* resp) override {
    return adapt(ctx, &Management::pool_list, req, resp);
  }
  grpc::Status PoolQuery(ServerContext* ctx, const wire::PoolQueryRequest* req,
                         wire::PoolQueryResponse* resp) override {
    return adapt(ctx, &Management::pool_query, req, resp);
  }
  grpc::Status PoolDestroy(ServerContext* ctx, const wire::PoolDestroyRequest* req,
                           wire::PoolDestroyResponse* resp) override {
    return adapt(ctx, &Management::pool_destroy, req, resp);
  }
  grpc::Status ContCreate(ServerContext* ctx, const wire::ContCreateRequest* req,
                          wire::ContCreateResponse* resp) override {
    return adapt(ctx, &Management::cont_create, req, resp);
  }
  grpc::Status ContList(ServerContext* ctx, const wire::ContListRequest* req, wire::ContListResponse* resp) override {
    return adapt(ctx, &Management::cont_list, req, resp);
  }
  grpc::Status ContQuery(ServerContext* ctx, const wire::ContQueryRequest* req,
                         wire::ContQueryResponse* resp) override {
    return adapt(ctx, &Management::cont_query, req, resp);
  }
  grpc::Status ContDestroy(ServerContext* ctx, const wire::ContDestroyRequest* req,
                           wire::ContDestroyResponse* resp) override {
    return adapt(ctx, &Management::cont_destroy, req, resp);
  }
  grpc::Status SnapshotCreate(ServerContext* ctx, const wire::SnapshotCreateRequest* req,
                              wire::SnapshotCreateResponse* resp) override {
    return adapt(ctx, &Management::snapshot_create, req, resp);
  }
  grpc::Status SnapshotDestroy(ServerContext* ctx, const wire::SnapshotDestroyRequest* req,
                               wire::SnapshotDestroyResponse* resp) override {
    return adapt(ctx, &Management::snapshot_destroy, req, resp);
  }
  grpc::Status Connect(ServerContext* ctx, const wire::ConnectRequest* req, wire::ConnectResponse* resp) override {
    return adapt(ctx, &Management::connect, req, resp);
  }
  grpc::Status Disconnect(ServerContext* ctx, const wire::DisconnectRequest* req,
                          wire::DisconnectResponse* resp) override {
    return adapt(ctx, &Management::disconnect, req, resp);
  }
  grpc::Status Renew(ServerContext* ctx, const wire::RenewRequest* req, wire::RenewResponse* resp) override {
    return adapt(ctx, &Management::renew, req, resp);
  }
  grpc::Status AclGet(ServerContext* ctx, const wire::AclGetRequest* req, wire::AclResponse* resp) override {
    return adapt(ctx, &Management::acl_get, req, resp);
  }
  grpc::Status AclModify(ServerContext* ctx, const wire::AclModifyRequest* req, wire::AclResponse* resp) override {
    return adapt(ctx, &Management::acl_modify, req, resp);
  }
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

Result<Principal> Server::Impl::acting(ServerContext* ctx) const {
  Principal p = caller(ctx);
  const auto& meta = ctx->client_metadata();
  auto it = meta.find(kActForKey);
  auto qos = meta.find(kQosKey);
  if (it == meta.end()) {
    if (qos != meta.end())
      return error(StatusCode::kPermissionDenied,
                   "only a trusted agent, acting for a user, may name its tenant's limits");
    return p;
  }
  RFOS_ASSIGN_OR_RETURN(Principal user, act_for(p, std::string_view(it->second.data(), it->second.size()),
                                                config_.trusted_agents, config_.admins));
  if (qos != meta.end()) {
    RFOS_ASSIGN_OR_RETURN(user.qos, tenant_limits(std::string_view(qos->second.data(), qos->second.size())));
  }
  return user;
}

Status Server::Impl::open() {
  RFOS_RETURN_IF_ERROR(validate(config_));
  RFOS_ASSIGN_OR_RETURN(management_, Management::open(config_));
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

grpc::Status Server::Impl::ServerInfo(ServerContext* ctx, const wire::ServerInfoRequest*,
                                      wire::ServerInfoResponse* resp) {
  // Through an agent, the user it acts for (not the agent: its rights would show, and the data directory).
  Result<Principal> acting_as = acting(ctx);
  if (!acting_as.is_ok()) return to_grpc(ctx, acting_as.status());
  const Principal& who = *acting_as;
  resp->set_version("0.1.0");
  resp->set_control_address(bound_.empty() || tcp_bound_.empty() || bound_ == tcp_bound_ ? bound_
                                                                                         : bound_ + " " + tcp_bound_);
  resp->set_provider(config_.provider);
  resp->set_targets(management_->targets());
  resp->set_uptime_s((wall_ms() - started_ms_) / 1000);
  resp->set_instance(management_->instance());
  if (who.admin) resp->set_data_dir(config_.data_dir);
  resp->set_caller(who.describe());
  resp->set_caller_rights(who.admin ? acl::kAll : 0);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::Health(ServerContext*, const wire::HealthRequest*, wire::HealthResponse* resp) {
  resp->set_ok(true);
  resp->set_detail(std::to_string(management_->targets()) + " target(s) up");
  return grpc::Status::OK;
}

Result<std::unique_ptr<Server>> Server::start(const ServerConfig& config) {
  auto impl = std::make_unique<Impl>(config);
  RFOS_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { shutdown(); }
std::string Server::control_address() const { return impl_->bound_; }
std::string Server::tcp_address() const { return impl_->tcp_bound_; }
std::string Server::durability() const { return impl_->management_->durability(); }
void Server::wait() { impl_->grpc_->Wait(); }
void Server::shutdown() {
  if (impl_ && impl_->local_) impl_->local_->stop_accepting();
  if (impl_ && impl_->grpc_) impl_->grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

int run_server(const ServerConfig& config, const std::function<void(const std::string&)>& on_started) {
  if (Status s = config.log_level.empty() ? Status::ok() : log::set_level(config.log_level); !s.is_ok()) {
    std::fprintf(stderr, "rfos server: %s\n", s.to_string().c_str());
    return 1;
  }
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
    spdlog::warn(
        "{} takes calls without TLS; its callers are anonymous and have only the rights ACLs grant "
        "EVERYONE@",
        tcp);
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
