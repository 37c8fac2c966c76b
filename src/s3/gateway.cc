// The gateway's HTTP side (Boost.Beast over Asio) and its start: keys, users, workers. The S3 operations are
// service.cc's.
#include "s3/gateway.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <thread>

#include "common/yaml_file.h"
#include "s3/service.h"

namespace rfos::s3 {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kBodyChunk = 256u << 10;         // read from a socket at a time
constexpr size_t kChannelBytes = 4u << 20;        // queued between the loop and a worker
constexpr size_t kMaxSmallBody = 4u << 20;        // a request body read whole (XML: 1000 keys to delete)
constexpr int64_t kMaxSkewS = 15 * 60;            // as S3
constexpr auto kIdle = std::chrono::seconds(60);  // a connection silent this long is closed

// A worker thread's loop: jobs in order of arrival, each with this thread's container handles.
class Workers {
 public:
  using Job = std::function<void(Handles&)>;
  explicit Workers(uint32_t n) {
    for (uint32_t i = 0; i < std::max(n, 1u); ++i) threads_.emplace_back([this] { run(); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void post(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    Handles handles;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job(handles);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

class Gateway::Impl {
 public:
  GatewayConfig config;
  ServiceConfig service;
  std::vector<std::unique_ptr<User>> users;
  std::unique_ptr<asio::io_context> io = std::make_unique<asio::io_context>(1);
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::ssl::context> tls;  // HTTPS when configured
  std::mutex post_mu;
  bool alive = true;  // the loop still runs: workers may post to it

  // From a worker: runs `f` on the loop, unless the gateway is stopping.
  template <typename F>
  void post(F&& f) {
    std::lock_guard<std::mutex> lock(post_mu);
    if (alive) asio::post(*io, std::forward<F>(f));
  }
  std::unique_ptr<Workers> workers;
  std::thread loop;

  std::unique_ptr<User> anonymous;  // who unsigned requests act as; none: they are refused

  const User* user_of(std::string_view access_key) const {
    for (const auto& u : users)
      if (equal_secret(u->key.access_key, access_key)) return u.get();
    return nullptr;
  }

  void accept();
  // The signature of `req` checked: its user, or the S3 error to answer.
  std::variant<const User*, Response> authenticate(Request& req) const;
};

namespace {

// One client's connection: plain (Stream = beast::tcp_stream) or TLS (beast::ssl_stream over one).
template <typename Stream>
class Connection : public std::enable_shared_from_this<Connection<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  using std::enable_shared_from_this<Connection<Stream>>::shared_from_this;

 public:
  Connection(Gateway::Impl& gw, tcp::socket socket) requires(!kTls) : gw_(gw), stream_(std::move(socket)) { reserve(); }
  Connection(Gateway::Impl& gw, tcp::socket socket, asio::ssl::context& tls) requires(kTls)
      : gw_(gw), stream_(std::move(socket), tls) {
    reserve();
  }
  // The gateway stopping, or the last handler gone: a worker waiting on a body is let go.
  ~Connection() {
    if (download_) download_->abandon();
    if (req_upload_ && !body_done_) req_upload_->finish(error(StatusCode::kShutdown, "the connection closed"));
  }

  void start() {
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(kIdle);
      stream_.async_handshake(asio::ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
        if (ec) return self->close();  // not TLS, or a certificate the client refused
        self->read_header();
      });
    } else {
      read_header();
    }
  }

 private:
  void read_header() {
    parser_.emplace();
    parser_->header_limit(64u << 10);
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::get_lowest_layer(stream_).expires_after(kIdle);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return close();
    auto& msg = parser_->get();
    req_ = Request{};
    req_.method = std::string(msg.method_string());
    head_ = msg.method() == http::verb::head;
    for (const auto& f : msg)
      req_.headers.emplace_back(ascii_lower(std::string_view(f.name_string().data(), f.name_string().size())),
                                std::string(f.value().data(), f.value().size()));
    keep_alive_ = msg.keep_alive();
    const std::string_view target(msg.target().data(), msg.target().size());
    auto parsed = parse_target(target);
    if (!parsed.is_ok()) return fail(error_response(400, "InvalidURI", "Couldn't parse the specified URI.", target));
    req_.path = std::move(parsed->path);
    req_.query = std::move(parsed->query);
    req_.bucket = std::move(parsed->bucket);
    req_.key = std::move(parsed->key);
    if (const std::string* host = req_.header("host"))
      if (auto bucket = bucket_of_host(*host, gw_.config.domains)) {
        req_.bucket = std::move(*bucket);
        req_.key = req_.path.substr(1);
      }
    auto who = gw_.authenticate(req_);
    if (auto* r = std::get_if<Response>(&who)) return fail(std::move(*r));
    user_ = std::get<const User*>(who);
    const bool has_body = !parser_->is_done();
    const bool streams = has_body && req_.method == "PUT" && !req_.key.empty();
    // A small body's length, where declared, is checked up front; a chunked one as it is read.
    if (has_body && !streams && parser_->content_length() && *parser_->content_length() > kMaxSmallBody)
      return fail(error_response(400, "InvalidRequest", "This request's body is too large.", req_.path));
    if (has_body) {
      if (const std::string* e = req_.header("expect"); e && ascii_lower(*e) == "100-continue") {
        auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
        return http::async_write(stream_, *cont,
                                 [self = shared_from_this(), cont, streams](beast::error_code ec, size_t) {
                                   if (ec) return self->close();
                                   self->begin_body(streams);
                                 });
      }
    }
    begin_body(streams);
  }

  void begin_body(bool streams) {
    if (streams) {
      req_.upload = std::make_shared<Channel>(kChannelBytes);
      req_.upload->set_wake(waker());
      dispatch();
      return pump_body();
    }
    if (parser_->is_done()) return dispatch();
    read_small_body();
  }

  // Beast reads into buffer_ as much as it has room for, up to 64 KiB: a buffer that stays small after a
  // header would have a large body read a few KiB per system call.
  void reserve() { buffer_.reserve(64u << 10); }

  // Reads the body's next bytes (up to kBodyChunk) into chunk_, then calls then(self, ec, bytes read).
  template <typename F>
  void read_body_chunk(F then) {
    chunk_.resize(kBodyChunk);
    auto& b = parser_->get().body();
    b.data = chunk_.data();
    b.size = chunk_.size();
    beast::get_lowest_layer(stream_).expires_after(kIdle);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this(), then](beast::error_code ec, size_t) {
      if (ec == http::error::need_buffer) ec = {};  // chunk_ is full: more to come
      then(self, ec, ec ? 0 : self->chunk_.size() - self->parser_->get().body().size);
    });
  }

  // A small body, read whole, then the request goes to a worker.
  void read_small_body() {
    read_body_chunk([](const std::shared_ptr<Connection>& self, beast::error_code ec, size_t got) {
      if (ec) return self->close();
      self->req_.body.append(self->chunk_.data(), got);
      if (self->req_.body.size() > kMaxSmallBody)
        return self->fail(error_response(400, "InvalidRequest", "This request's body is too large.", self->req_.path));
      if (self->parser_->is_done()) return self->dispatch();
      self->read_small_body();
    });
  }

  // A streamed body: read while the channel has room; the worker's takes wake us (on_wake) when it was full.
  void pump_body() {
    if (body_done_) return;
    if (parser_->is_done()) {
      body_done_ = true;
      req_upload_->finish(Status::ok());
      return;
    }
    if (req_upload_->full()) {
      waiting_room_ = true;
      return;
    }
    read_body_chunk([](const std::shared_ptr<Connection>& self, beast::error_code ec, size_t got) {
      if (ec) {
        // The client went away mid-body: the put fails and nothing of it is kept.
        self->body_done_ = true;
        self->keep_alive_ = false;
        self->req_upload_->finish(error(StatusCode::kShutdown, "the client's body ended early: " + ec.message()));
        return;
      }
      self->req_upload_->push(Chunk(std::string(self->chunk_.data(), got)));
      self->pump_body();
    });
  }

  void on_wake() {
    if (waiting_room_ && !req_upload_->full()) {
      waiting_room_ = false;
      pump_body();
    }
    if (waiting_data_) {
      waiting_data_ = false;
      send_stream();
    }
  }

  // What a worker calls when the loop may go on with a channel.
  std::function<void()> waker() {
    std::weak_ptr<Connection> weak = shared_from_this();
    Gateway::Impl* gw = &gw_;
    return [weak, gw] {
      gw->post([weak] {
        if (auto self = weak.lock()) self->on_wake();
      });
    };
  }

  void dispatch() {
    req_upload_ = req_.upload;
    auto req = std::make_shared<Request>(std::move(req_));
    // The job holds the connection (nothing else may while no read or write is pending); its reply, posted to
    // the loop, holds it from there.
    auto self = shared_from_this();
    const User* user = user_;
    Gateway::Impl* gw = &gw_;
    gw_.workers->post([gw, req, user, self](Handles& handles) mutable {
      serve(gw->service, *user, handles, *req,
            [&](Response r) { gw->post([self, r = std::move(r)]() mutable { self->respond(std::move(r)); }); });
      // The last reference goes on the loop, where the socket lives.
      gw->post([self = std::move(self)] {});
    });
  }

  // An error before the request reached a worker: answered, and the connection closed (its body unread).
  void fail(Response r) {
    keep_alive_ = false;
    respond(std::move(r));
  }

  void respond(Response r) {
    // A put answered before its body was all read (an error): the rest of the body is not read.
    if (req_upload_ && !body_done_) {
      keep_alive_ = false;
      req_upload_->abandon();
    }
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
    res->set(http::field::server, "rfos");
    bool length_set = false;
    for (const auto& [k, v] : r.headers) {
      res->insert(k, v);
      length_set = length_set || k == "content-length";
    }
    res->keep_alive(keep_alive_);
    if (r.download) {
      res->set(http::field::content_length, std::to_string(r.length));
      download_ = r.download;
      download_->set_wake(waker());
      left_ = r.length;
      auto sr = std::make_shared<http::response_serializer<http::string_body>>(*res);
      return http::async_write_header(stream_, *sr, [self = shared_from_this(), res, sr](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->send_stream();
      });
    }
    // A HEAD's answer has no body, errors included (a client would take it for the next response).
    if (!head_) res->body() = std::move(r.body);
    if (!length_set) res->prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(kIdle);
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->next();
    });
  }

  // A GET's body, chunk by chunk as the worker reads them.
  void send_stream() {
    if (auto chunk = download_->pop()) {
      if (chunk->size() > left_) return close();  // more than the length said: never send it
      left_ -= chunk->size();
      auto buf = std::make_shared<Chunk>(std::move(*chunk));
      beast::get_lowest_layer(stream_).expires_after(kIdle);
      return asio::async_write(stream_, asio::buffer(buf->view().data(), buf->size()),
                               [self = shared_from_this(), buf](beast::error_code ec, size_t) {
                                 if (ec) {
                                   self->download_->abandon();
                                   return self->close();
                                 }
                                 self->send_stream();
                               });
    }
    if (auto end = download_->ended()) {
      download_.reset();
      // A read that failed half-way, or a short one, cuts the connection: the client sees a short body.
      if (!end->is_ok() || left_ != 0) return close();
      return next();
    }
    waiting_data_ = true;
  }

  void next() {
    if (!keep_alive_ || (req_upload_ && !body_done_)) return close();
    req_upload_.reset();
    body_done_ = false;
    read_header();
  }

  void close() {
    if (download_) download_->abandon();
    if (req_upload_ && !body_done_) {
      body_done_ = true;
      req_upload_->finish(error(StatusCode::kShutdown, "the connection closed"));
    }
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).close();
  }

  Gateway::Impl& gw_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::buffer_body>> parser_;
  Request req_;
  const User* user_ = nullptr;
  bool keep_alive_ = true;
  bool head_ = false;
  std::vector<char> chunk_;
  std::shared_ptr<Channel> req_upload_;  // the body being streamed to a worker
  bool body_done_ = false;
  bool waiting_room_ = false;
  std::shared_ptr<Channel> download_;
  uint64_t left_ = 0;
  bool waiting_data_ = false;
};

}  // namespace

void Gateway::Impl::accept() {
  acceptor->async_accept(asio::make_strand(*io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true));
      if (tls)
        std::make_shared<Connection<beast::ssl_stream<beast::tcp_stream>>>(*this, std::move(socket), *tls)->start();
      else
        std::make_shared<Connection<beast::tcp_stream>>(*this, std::move(socket))->start();
    }
    accept();
  });
}

std::variant<const User*, Response> Gateway::Impl::authenticate(Request& req) const {
  const std::string res = req.path;
  auto deny = [&](unsigned status, std::string_view code, std::string_view message) {
    return error_response(status, code, message, res);
  };
  Auth auth;
  if (const std::string* h = req.header("authorization")) {
    if (h->starts_with("AWS "))
      return deny(400, "InvalidRequest", "Signature Version 2 is not supported: sign with AWS Signature V4");
    auto a = parse_authorization(*h);
    if (!a.is_ok()) return deny(400, "AuthorizationHeaderMalformed", a.status().message());
    auth = std::move(a).value();
    if (const std::string* d = req.header("x-amz-date")) {
      auth.amz_date = *d;
    } else {
      return deny(403, "AccessDenied", "AWS authentication requires a valid x-amz-date header");
    }
    const std::string* p = req.header("x-amz-content-sha256");
    if (!p) return deny(400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256");
    req.payload_hash = *p;
    if (*p != kUnsignedPayload && *p != kStreamingSigned && *p != kStreamingUnsignedTrailer &&
        (p->size() != 64 || p->find_first_not_of("0123456789abcdef") != std::string::npos))
      return deny(400, "InvalidArgument",
                  "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-"
                  "PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER or a SHA-256 in hex");
  } else {
    auto a = parse_presigned(req.query);
    if (!a.is_ok()) return deny(400, "AuthorizationQueryParametersError", a.status().message());
    if (!*a) {
      for (const auto& [k, v] : req.query)
        if (k == "AWSAccessKeyId" || k == "Signature")
          return deny(400, "InvalidRequest", "Signature Version 2 is not supported: sign with AWS Signature V4");
      // Unsigned: as the anonymous user where one is configured (the server's ACLs then say what it may: what
      // EVERYONE@ is granted), refused otherwise.
      if (!anonymous)
        return deny(403, "AccessDenied", "Anonymous access is not allowed: sign the request (AWS Signature V4)");
      req.payload_hash = std::string(kUnsignedPayload);
      return anonymous.get();
    }
    auth = std::move(**a);
    req.payload_hash = std::string(kUnsignedPayload);
  }
  const User* user = user_of(auth.access_key);
  if (!user)
    return deny(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.");
  if (auth.service != "s3" || auth.region != config.region)
    return deny(400, "AuthorizationHeaderMalformed",
                "the credential's scope must be region '" + config.region + "', service 's3'");
  auto t = parse_amz_date(auth.amz_date);
  if (!t.is_ok() || !auth.amz_date.starts_with(auth.date))
    return deny(403, "AccessDenied", "the request's date is malformed or not the credential's date");
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (auth.presigned) {
    if (now > *t + static_cast<int64_t>(auth.expires_s)) return deny(403, "AccessDenied", "Request has expired");
    if (*t > now + kMaxSkewS) return deny(403, "AccessDenied", "Request is not valid yet");
  } else if (*t > now + kMaxSkewS || *t < now - kMaxSkewS) {
    return deny(403, "RequestTimeTooSkewed",
                "The difference between the request time and the server's time is too large.");
  }
  if (std::find(auth.signed_headers.begin(), auth.signed_headers.end(), "host") == auth.signed_headers.end())
    return deny(403, "AccessDenied", "the signature must cover the host header");
  auto canonical =
      canonical_request(req.method, req.path, req.query, req.headers, auth.signed_headers, req.payload_hash);
  if (!canonical.is_ok()) return deny(403, "AccessDenied", canonical.status().message());
  std::string key = signing_key(user->key.secret_key, auth.date, auth.region, auth.service);
  std::string want = signature_of(key, string_to_sign(auth.amz_date, auth.scope(), *canonical));
  if (!equal_secret(want, auth.signature))
    return deny(403, "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. Check your key and "
                "signing method.");
  req.auth = std::move(auth);
  req.signing_key = std::move(key);
  return user;
}

namespace {

Result<std::unique_ptr<User>> make_user(const AccessKey& key, const client::ControlClient& control) {
  auto u = std::make_unique<User>();
  u->key = key;
  if (key.user.empty()) {
    u->control = control.clone();
    auto info = u->control->server_info();
    if (!info.is_ok()) return info.status();
    // "alice (uid 1000)", "tls:alice": the name ACLs and owners know.
    std::string_view c = info->caller;
    if (c.starts_with("tls:")) c.remove_prefix(4);
    u->name = std::string(c.substr(0, c.find(" (")));
    if (u->name.empty() || u->name == "anonymous")
      return error(StatusCode::kPermissionDenied, "the server takes the gateway for an anonymous caller");
    return u;
  }
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(key.user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found)
    return error(StatusCode::kInvalidArgument,
                 (key.access_key.empty() ? "anonymous_user" : "access key " + key.access_key) + ": no local user '" +
                     key.user + "'");
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  u->name = pw.pw_name;
  u->uid = pw.pw_uid;
  if (pw.pw_uid == geteuid()) {
    u->control = control.clone();
  } else {
    u->control = control.acting_for(pw.pw_uid, pw.pw_gid, std::vector<uint32_t>(groups.begin(), groups.end()));
  }
  return u;
}

std::string random_key(size_t n, std::string_view alphabet) {
  std::string out;
  while (out.size() < n) {
    for (unsigned char c : random_bytes(64))
      if (out.size() < n && c < 256 - 256 % alphabet.size()) out.push_back(alphabet[c % alphabet.size()]);
  }
  return out;
}

// A file that holds secret keys must be its owner's alone.
Status owner_only(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    return error(StatusCode::kPermissionDenied, path + " holds secret keys and others may read it (chmod 600)");
  return Status::ok();
}

// A `keys:` list (of a config or a keys file): {access_key, secret_key, user}. Throws YAML::Exception as yaml-cpp
// does; the callers turn it into kInvalidArgument.
Result<std::vector<AccessKey>> parse_keys(const YAML::Node& keys, const std::string& path) {
  std::vector<AccessKey> out;
  for (const auto& k : keys) {
    RFOS_RETURN_IF_ERROR(check_yaml_keys(k, {"access_key", "secret_key", "user"}, path, "key"));
    AccessKey a;
    a.access_key = k["access_key"].as<std::string>();
    a.secret_key = k["secret_key"].as<std::string>();
    if (k["user"]) a.user = k["user"].as<std::string>();
    if (a.access_key.empty() || a.secret_key.size() < 8)
      return error(StatusCode::kInvalidArgument, path + ": a key needs an access_key and a secret_key of 8+ bytes");
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

Status load_gateway_config(const std::string& path, GatewayConfig* config) {
  RFOS_ASSIGN_OR_RETURN(YAML::Node root,
                        load_yaml_mapping(path, {"listen", "control_address", "tls_ca", "tls_cert", "tls_key", "pool",
                                                 "provider", "region", "keys", "keys_file", "workers", "timeout_ms",
                                                 "https_cert", "https_key", "anonymous_user", "domains"}));
  if (root.IsNull()) return Status::ok();
  try {
    if (root["listen"]) config->listen = root["listen"].as<std::string>();
    if (root["control_address"]) config->control_address = root["control_address"].as<std::string>();
    if (root["tls_ca"]) config->tls.ca = root["tls_ca"].as<std::string>();
    if (root["tls_cert"]) config->tls.cert = root["tls_cert"].as<std::string>();
    if (root["tls_key"]) config->tls.key = root["tls_key"].as<std::string>();
    if (root["pool"]) config->pool = root["pool"].as<std::string>();
    if (root["https_cert"]) config->https_cert = root["https_cert"].as<std::string>();
    if (root["anonymous_user"]) config->anonymous_user = root["anonymous_user"].as<std::string>();
    if (root["https_key"]) config->https_key = root["https_key"].as<std::string>();
    if (root["provider"]) config->provider = root["provider"].as<std::string>();
    if (root["region"]) config->region = root["region"].as<std::string>();
    if (root["domains"])
      config->domains = root["domains"].IsSequence() ? root["domains"].as<std::vector<std::string>>()
                                                     : std::vector<std::string>{root["domains"].as<std::string>()};
    if (root["keys_file"]) config->keys_file = root["keys_file"].as<std::string>();
    if (root["workers"]) config->workers = root["workers"].as<uint32_t>();
    if (root["timeout_ms"]) config->timeout_ms = root["timeout_ms"].as<uint32_t>();
    if (root["keys"]) {
      RFOS_RETURN_IF_ERROR(owner_only(path));  // secrets in the config: private, as a keys file is
      RFOS_ASSIGN_OR_RETURN(config->keys, parse_keys(root["keys"], path));
    }
  } catch (const YAML::Exception& e) {
    return error(StatusCode::kInvalidArgument, "config file " + path + ": " + e.what());
  }
  return Status::ok();
}

Result<std::vector<AccessKey>> load_or_make_keys(const std::string& path, bool create, bool* created) {
  *created = false;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    RFOS_RETURN_IF_ERROR(owner_only(path));
    RFOS_ASSIGN_OR_RETURN(YAML::Node root, load_yaml_mapping(path, {"keys"}));
    std::vector<AccessKey> keys;
    try {
      if (!root.IsNull() && root["keys"]) {
        RFOS_ASSIGN_OR_RETURN(keys, parse_keys(root["keys"], path));
      }
    } catch (const YAML::Exception& e) {
      return error(StatusCode::kInvalidArgument, "keys file " + path + ": " + e.what());
    }
    if (!keys.empty() || !create) return keys;
  } else if (!create) {
    return error(StatusCode::kNotFound, "no keys file " + path);
  }
  // The directory (and its parent, ~/.config) private to this user.
  std::string dir = path.substr(0, path.rfind('/'));
  for (size_t at = 1; !dir.empty() && at != std::string::npos;) {
    at = dir.find('/', at + 1);
    std::string part = dir.substr(0, at);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      return error(StatusCode::kIoError, "create " + part + ": " + std::strerror(errno));
  }
  AccessKey k;
  k.access_key = "RFOS" + random_key(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
  k.secret_key = random_key(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
  std::string text =
      "# rfos s3: the gateway's keys (made at its first start; docs/s3.md)\nkeys:\n  - access_key: " + k.access_key +
      "\n    secret_key: \"" + k.secret_key + "\"\n";
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return error(StatusCode::kIoError, "create " + tmp + ": " + std::strerror(errno));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return error(StatusCode::kIoError, "write " + path + ": " + std::strerror(errno));
  }
  *created = true;
  return std::vector<AccessKey>{k};
}

Result<std::unique_ptr<Gateway>> Gateway::start(const GatewayConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->service = ServiceConfig{config.pool, config.provider, config.region, config.timeout_ms};
  if (config.keys.empty()) return error(StatusCode::kInvalidArgument, "the gateway has no access keys");
  auto control = client::ControlClient::create(
      config.control_address.empty() ? client::default_control_address() : config.control_address, config.timeout_ms,
      config.tls);
  for (const AccessKey& k : config.keys) {
    RFOS_ASSIGN_OR_RETURN(auto u, make_user(k, *control));
    impl->users.push_back(std::move(u));
  }
  if (!config.anonymous_user.empty()) {
    RFOS_ASSIGN_OR_RETURN(impl->anonymous, make_user(AccessKey{"", "", config.anonymous_user}, *control));
    // Never with the gateway's rights (or root's): unsigned requests would have every key's.
    if (impl->anonymous->uid == 0 || impl->anonymous->uid == geteuid())
      return error(StatusCode::kInvalidArgument,
                   "anonymous_user must be a user of its own (nobody), not root or the gateway's user");
  }
  RFOS_RETURN_IF_ERROR(control->pool_query(config.pool).status());
  if (config.https_cert.empty() != config.https_key.empty())
    return error(StatusCode::kInvalidArgument, "HTTPS needs both a certificate and its key");
  if (!config.https_cert.empty()) {
    impl->tls.emplace(asio::ssl::context::tls_server);
    impl->tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1);
    beast::error_code tls_ec;
    impl->tls->use_certificate_chain_file(config.https_cert, tls_ec);
    if (!tls_ec) impl->tls->use_private_key_file(config.https_key, asio::ssl::context::pem, tls_ec);
    if (tls_ec) return error(StatusCode::kInvalidArgument, "HTTPS certificate or key: " + tls_ec.message());
  }
  const size_t colon = config.listen.rfind(':');
  if (colon == std::string::npos) return error(StatusCode::kInvalidArgument, "--listen wants HOST:PORT");
  beast::error_code ec;
  auto addr = asio::ip::make_address(config.listen.substr(0, colon), ec);
  if (ec) return error(StatusCode::kInvalidArgument, "--listen " + config.listen + ": " + ec.message());
  int port = 0;
  try {
    port = std::stoi(config.listen.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) return error(StatusCode::kInvalidArgument, "--listen " + config.listen + ": bad port");
  impl->acceptor.emplace(*impl->io);
  tcp::endpoint ep(addr, static_cast<uint16_t>(port));
  impl->acceptor->open(ep.protocol(), ec);
  if (!ec) impl->acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor->bind(ep, ec);
  if (!ec) impl->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error(StatusCode::kAlreadyExists, "listen on " + config.listen + ": " + ec.message());
  impl->workers = std::make_unique<Workers>(config.workers);
  impl->accept();
  Impl* raw = impl.get();
  impl->loop = std::thread([raw] { raw->io->run(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { stop(); }

uint16_t Gateway::port() const { return impl_->acceptor->local_endpoint().port(); }

void Gateway::stop() {
  if (!impl_->loop.joinable()) return;
  impl_->io->stop();
  impl_->loop.join();
  {
    std::lock_guard<std::mutex> lock(impl_->post_mu);
    impl_->alive = false;
  }
  // The connections go with the loop's handlers, letting go of the workers waiting on their bodies; then the
  // workers finish.
  impl_->acceptor.reset();
  impl_->io.reset();
  impl_->workers.reset();
}

}  // namespace rfos::s3
