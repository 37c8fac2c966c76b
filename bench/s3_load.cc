// s3_load: an S3 load generator in fio's vocabulary (docs/BENCHMARKS.md, "S3 under load"): GETs or PUTs of
// objects of one size over many keep-alive connections at once, each request SigV4-signed as a real client signs it
// (the payload's SHA-256 in x-amz-content-sha256, which the gateway checks against the body; the hash of the one
// body is computed once here, as a client sending the same bytes again could), on one Asio event loop.
//
//   s3_load --endpoint 127.0.0.1:9000 --access-key AK --secret-key SK --bucket b --rw read|write --bs 4k
//           --iodepth 16 --runtime 5 [--nrfiles 64] [--gateway-pid PID] [--create-bucket] [--output-format json]
//
// --iodepth is the number of connections, each with one request in flight. A read first writes the --nrfiles
// objects it reads (not timed). With --gateway-pid the gateway's CPU time over the run (/proc/PID/stat) is
// reported per request, beside this process's own.
//
// It costs the machine it shares with the gateway as little as a client can: a PUT sends its body from the one
// buffer it signed, and a GET's body goes from the socket straight into a buffer each connection keeps (as a
// client reading into where the data is wanted), not through a parser's buffer into a fresh string, which added
// a zeroing, page faults and a copy of every byte.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/proc_stat.h"
#include "s3/sigv4.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string endpoint = "127.0.0.1:9000";
  std::string access_key, secret_key, bucket, rw = "read", region = "us-east-1", output = "normal";
  uint64_t bs = 4096;
  uint32_t iodepth = 1, nrfiles = 64;
  double runtime = 5;
  int gateway_pid = 0;
  bool create_bucket = false;
};

// What one phase (the fill, or the timed run) did.
struct Tally {
  uint64_t ops = 0, errors = 0;
  std::vector<double> lat_us;
  std::string first_error;
};

class Load {
 public:
  using Req = http::request<http::span_body<const char>>;  // a body sent from where it lies

  Load(const Options& o, tcp::resolver::results_type where)
      : o_(o), where_(std::move(where)), body_(o.bs, '\0'), host_(o.endpoint) {
    for (size_t i = 0; i < body_.size(); ++i) body_[i] = static_cast<char>('a' + i % 26);
    body_hash_ = rfos::s3::hex_of(rfos::s3::sha256(body_));
  }

  // `method` on the bucket's keys by `conns` connections, until `count` requests were answered (0: none) or
  // `deadline`.
  Tally run(http::verb method, uint32_t conns, uint64_t count, Clock::time_point deadline) {
    method_ = method;
    count_ = count;
    deadline_ = deadline;
    issued_ = 0;
    tally_ = Tally{};
    std::vector<std::shared_ptr<Conn>> all;
    for (uint32_t i = 0; i < conns; ++i) {
      all.push_back(std::make_shared<Conn>(*this));
      all.back()->start();
    }
    io_.restart();
    io_.run();
    return std::move(tally_);
  }

  // PUT /bucket (an existing one of ours is no error).
  bool make_bucket() {
    Req req;
    prepare(&req, http::verb::put, "/" + o_.bucket, {});
    beast::tcp_stream s(io_);
    beast::error_code ec;
    s.connect(where_, ec);
    if (ec) return false;
    http::write(s, req, ec);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    if (!ec) http::read(s, b, res, ec);
    io_.restart();
    return !ec && (res.result_int() == 200 || res.body().find("BucketAlreadyOwnedByYou") != std::string::npos);
  }

 private:
  class Conn : public std::enable_shared_from_this<Conn> {
   public:
    // 64 KiB of buffer: Beast reads at most what the buffer has room for, so a buffer the size of a header
    // would take a large body a few KiB per system call.
    explicit Conn(Load& l) : l_(l), stream_(l.io_) {
      buffer_.reserve(64 << 10);
      if (l.method_ == http::verb::get) into_.resize(l.o_.bs);
    }
    void start() {
      stream_.async_connect(l_.where_, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
        if (ec) return self->l_.failed("connect: " + ec.message());
        self->next();
      });
    }

   private:
    void next() {
      if ((l_.count_ && l_.issued_ >= l_.count_) || (!l_.count_ && Clock::now() >= l_.deadline_)) return;
      const uint64_t n = l_.issued_++;
      req_ = {};
      l_.prepare(&req_, l_.method_, "/" + l_.o_.bucket + "/load/" + std::to_string(n % l_.o_.nrfiles),
                 l_.method_ == http::verb::put ? std::string_view(l_.body_) : std::string_view());
      start_ = Clock::now();
      http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return self->l_.failed("send: " + ec.message());
        self->res_.emplace();
        self->res_->body_limit(uint64_t{1} << 30);
        http::async_read_header(self->stream_, self->buffer_, *self->res_,
                                [self](beast::error_code ec, size_t) { self->headed(ec); });
      });
    }
    void headed(beast::error_code ec) {
      if (ec) return l_.failed("receive: " + ec.message());
      const auto len = res_->content_length();
      if (l_.method_ == http::verb::get && res_->get().result_int() == 200 && len && *len == into_.size()) {
        // The body from the socket into the connection's buffer; the parser gave what it read past the header.
        const size_t have = asio::buffer_copy(asio::buffer(into_), buffer_.data());
        buffer_.consume(have);
        return asio::async_read(
            stream_, asio::buffer(into_.data() + have, into_.size() - have),
            [self = shared_from_this()](beast::error_code ec, size_t) { self->answered(ec, true); });
      }
      http::async_read(stream_, buffer_, *res_,
                       [self = shared_from_this()](beast::error_code ec, size_t) { self->answered(ec, false); });
    }
    // `whole`: a GET's body of the expected length was read into into_.
    void answered(beast::error_code ec, bool whole) {
      if (ec) return l_.failed("receive: " + ec.message());
      const auto& res = res_->get();
      Tally& t = l_.tally_;
      t.lat_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start_).count());
      const bool ok = whole || (res.result_int() == 200 && l_.method_ != http::verb::get);
      if (ok) {
        ++t.ops;
      } else {
        ++t.errors;
        if (t.first_error.empty()) t.first_error = std::to_string(res.result_int()) + " " + res.body().substr(0, 200);
      }
      next();
    }

    Load& l_;
    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    Req req_;
    std::optional<http::response_parser<http::string_body>> res_;
    std::vector<char> into_;  // a GET's body
    Clock::time_point start_;
  };

  void failed(const std::string& why) {
    ++tally_.errors;
    if (tally_.first_error.empty()) tally_.first_error = why;
  }

  // The request signed as a client signs it; the day's signing key is kept, as clients keep it.
  void prepare(Req* req, http::verb method, const std::string& path, std::string_view body) {
    const std::string amz_date = rfos::s3::format_amz_date(static_cast<int64_t>(std::time(nullptr)));
    if (amz_date.compare(0, 8, day_) != 0) {
      day_ = amz_date.substr(0, 8);
      key_ = rfos::s3::signing_key(o_.secret_key, day_, o_.region, "s3");
    }
    static const std::string kEmpty = rfos::s3::hex_of(rfos::s3::sha256(""));
    const std::string& hash = body.empty() ? kEmpty : body_hash_;
    rfos::s3::Headers h{{"host", host_}, {"x-amz-content-sha256", hash}, {"x-amz-date", amz_date}};
    auto auth = rfos::s3::authorization_for(std::string(http::to_string(method)), path, {}, h, hash, o_.access_key,
                                            key_, amz_date, o_.region);
    req->method(method);
    req->target(rfos::s3::uri_encode(path, true));
    req->version(11);
    for (const auto& [k, v] : h) req->set(k, v);
    req->set(http::field::authorization, auth.is_ok() ? *auth : "");
    req->keep_alive(true);
    req->body() = {body.data(), body.size()};
    req->prepare_payload();
  }

  const Options& o_;
  tcp::resolver::results_type where_;
  asio::io_context io_;
  std::string body_, body_hash_, host_, day_, key_;
  http::verb method_ = http::verb::get;
  uint64_t count_ = 0, issued_ = 0;
  Clock::time_point deadline_;
  Tally tally_;
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(i), v.end());
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"an S3 load generator in fio's vocabulary"};
  app.add_option("--endpoint", o.endpoint, "the gateway, HOST:PORT");
  app.add_option("--access-key", o.access_key)->required();
  app.add_option("--secret-key", o.secret_key)->required();
  app.add_option("--bucket", o.bucket)->required();
  app.add_option("--rw", o.rw, "read (GET) or write (PUT)")->check(CLI::IsMember({"read", "write"}));
  app.add_option("--bs", o.bs, "object size")->transform(CLI::AsSizeValue(false));
  app.add_option("--iodepth", o.iodepth, "connections, each with one request in flight")->check(CLI::Range(1, 1024));
  app.add_option("--runtime", o.runtime, "seconds");
  app.add_option("--nrfiles", o.nrfiles, "keys the requests go over")->check(CLI::Range(1, 1 << 20));
  app.add_option("--gateway-pid", o.gateway_pid, "report this process's CPU per request");
  app.add_option("--region", o.region);
  app.add_flag("--create-bucket", o.create_bucket);
  app.add_option("--output-format", o.output)->check(CLI::IsMember({"normal", "json"}));
  CLI11_PARSE(app, argc, argv);
  if (o.bs == 0) {
    std::fprintf(stderr, "s3_load: --bs must be 1 byte or more\n");
    return 2;
  }

  asio::io_context resolve_io;
  tcp::resolver resolver(resolve_io);
  const size_t colon = o.endpoint.rfind(':');
  beast::error_code ec;
  auto where = resolver.resolve(o.endpoint.substr(0, colon), o.endpoint.substr(colon + 1), ec);
  if (ec) {
    std::fprintf(stderr, "s3_load: %s: %s\n", o.endpoint.c_str(), ec.message().c_str());
    return 1;
  }
  Load load(o, where);
  if (o.create_bucket && !load.make_bucket()) {
    std::fprintf(stderr, "s3_load: could not make bucket %s\n", o.bucket.c_str());
    return 1;
  }
  const bool read = o.rw == "read";
  if (read) {  // the objects a read phase reads, written once, not timed
    Tally fill = load.run(http::verb::put, std::min(o.iodepth, o.nrfiles), o.nrfiles, Clock::time_point::max());
    if (fill.errors) {
      std::fprintf(stderr, "s3_load: writing the objects to read failed: %s\n", fill.first_error.c_str());
      return 1;
    }
  }
  const double gw0 = o.gateway_pid ? rfos::cpu_seconds_of(o.gateway_pid) : 0, me0 = rfos::cpu_seconds_of_self();
  const auto t0 = Clock::now();
  Tally t = load.run(read ? http::verb::get : http::verb::put, o.iodepth, 0,
                     t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.runtime)));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double gw = o.gateway_pid ? rfos::cpu_seconds_of(o.gateway_pid) - gw0 : 0,
               me = rfos::cpu_seconds_of_self() - me0;
  const double iops = double(t.ops) / secs, mib = iops * double(o.bs) / double(1 << 20);
  const double p50 = percentile(t.lat_us, 0.5), p99 = percentile(t.lat_us, 0.99);
  const double gw_us = t.ops ? gw / double(t.ops) * 1e6 : 0, me_us = t.ops ? me / double(t.ops) * 1e6 : 0;
  if (o.output == "json") {
    std::printf(
        "{\"rw\": \"%s\", \"bs\": %llu, \"iodepth\": %u, \"seconds\": %.3f, \"ops\": %llu, \"errors\": %llu, "
        "\"iops\": %.1f, \"mib_s\": %.2f, \"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f, \"gateway_cpu_us_per_op\": "
        "%.2f, \"client_cpu_us_per_op\": %.2f}\n",
        o.rw.c_str(), static_cast<unsigned long long>(o.bs), o.iodepth, secs, static_cast<unsigned long long>(t.ops),
        static_cast<unsigned long long>(t.errors), iops, mib, p50, p99, gw_us, me_us);
  } else {
    std::printf("s3 %s: bs=%llu iodepth=%u: IOPS=%.0f, BW=%.1fMiB/s, lat p50=%.0fus p99=%.0fus, errors=%llu\n",
                read ? "get" : "put", static_cast<unsigned long long>(o.bs), o.iodepth, iops, mib, p50, p99,
                static_cast<unsigned long long>(t.errors));
    if (o.gateway_pid) std::printf("  gateway CPU %.1f us per request, this client's %.1f us\n", gw_us, me_us);
  }
  if (t.errors)
    std::fprintf(stderr, "s3_load: %llu errors, the first: %s\n", static_cast<unsigned long long>(t.errors),
                 t.first_error.c_str());
  return t.errors || t.ops == 0 ? 1 : 0;
}
