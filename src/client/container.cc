#include "client/container.h"

#include <chrono>
#include <cstring>
#include <map>

#include "common/crc32c.h"
#include "placement/placement.h"
#include "transport/transport.h"
#include "wire/data_plane.h"

namespace rfos::client {

using transport::Iov;

class Container::Impl {
 public:
  Session session;
  ContainerOptions options;
  std::unique_ptr<transport::Worker> worker;
  std::vector<transport::EpHandle> eps;
  uint64_t next_id = 1;
  uint32_t csum_chunk = 4096;

  // The one request in flight and what its reply fills in.
  struct Call {
    uint64_t id = 0;
    bool done = false;
    Status status;
    wire::Reply reply;
    std::span<uint8_t> into;                // fetch destination of a known size
    std::string* sized_by_reply = nullptr;  // or a string sized from the reply (single values)
  } call;

  void on_message(transport::Incoming& in) {
    auto r = wire::decode_reply(in.header);
    if (!r.is_ok() || r->request_id != call.id || call.done) return;  // stale or foreign: dropped
    call.reply = std::move(r).value();
    if (call.reply.status != StatusCode::kOk) {
      call.status = error(call.reply.status, call.reply.message);
      call.done = true;
      return;
    }
    if (in.payload_bytes == 0) {
      call.done = true;
      return;
    }
    if (call.sized_by_reply) {
      call.sized_by_reply->resize(in.payload_bytes);
      call.into = {reinterpret_cast<uint8_t*>(call.sized_by_reply->data()), call.sized_by_reply->size()};
    }
    if (in.payload_bytes != call.into.size() || call.reply.length != in.payload_bytes) {
      call.status = error(StatusCode::kInternal, "the server sent " + std::to_string(in.payload_bytes) +
                                                     " bytes for a read of " + std::to_string(call.into.size()));
      call.done = true;
      return;
    }
    Iov dst{call.into.data(), call.into.size()};
    Status s = worker->fetch_payload(in, {&dst, 1}, [this, id = call.id](Status got) {
      if (id != call.id) return;
      call.status = got;
      call.done = true;
    });
    if (!s.is_ok()) {
      call.status = s;
      call.done = true;
    }
  }

  uint32_t target_of(const wire::Request& q) const {
    return placement::target_of(q.oid, q.dkey, static_cast<uint32_t>(eps.size()));
  }

  // Sends one request to target `t` and waits for its reply. A fetch's payload lands in `into`, or in
  // `sized` resized to what arrives.
  Status roundtrip(uint32_t t, wire::Request& q, std::span<const Iov> payload, std::span<uint8_t> into,
                   wire::Reply* out, std::string* sized = nullptr) {
    q.request_id = next_id++;
    q.capability = session.capability;
    call = Call{};
    call.id = q.request_id;
    call.into = into;
    call.sized_by_reply = sized;
    bool sent_done = false;
    Status sent;
    Status s = worker->send(eps[t], wire::encode_request(q), payload, [&](Status st) {
      sent_done = true;
      sent = st;
    });
    if (!s.is_ok()) return s;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
    while (!(call.done && sent_done)) {
      if (worker->progress() == 0) worker->wait(10);
      if (!sent_done || !call.done) {
        if (sent_done && !sent.is_ok()) return sent;
        if (std::chrono::steady_clock::now() > deadline) {
          call.id = 0;  // a late reply will be dropped
          return error(StatusCode::kTimeout, "target " + std::to_string(t) + " did not answer within " +
                                                 std::to_string(options.timeout_ms) + " ms");
        }
      }
    }
    if (!sent.is_ok()) return sent;
    RFOS_RETURN_IF_ERROR(call.status);
    if (out) *out = std::move(call.reply);
    return Status::ok();
  }
};

Result<std::unique_ptr<Container>> Container::open(ControlClient& control, const std::string& pool,
                                                   const std::string& cont, const ContainerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  RFOS_ASSIGN_OR_RETURN(impl->session, control.connect(pool, cont, options.write));
  impl->csum_chunk = impl->session.cont.props.csum_chunk_bytes ? impl->session.cont.props.csum_chunk_bytes : 4096;
  std::string provider = options.provider.empty() ? impl->session.provider : options.provider;
  RFOS_ASSIGN_OR_RETURN(impl->worker, transport::Worker::create(provider));
  Impl* raw = impl.get();
  impl->worker->on_message([raw](transport::Incoming& in) { raw->on_message(in); });
  for (const std::string& addr : impl->session.target_addresses) {
    if (addr.empty()) return error(StatusCode::kNotSupported, "the server has no data plane for this pool");
    auto ep = impl->worker->connect(addr);
    if (!ep.is_ok())
      return error(ep.status().code(), "cannot reach target " + std::to_string(impl->eps.size()) + " over " +
                                           provider + " (the server speaks " + impl->session.provider +
                                           "): " + ep.status().message());
    impl->eps.push_back(*ep);
  }
  if (impl->eps.empty()) return error(StatusCode::kInternal, "the pool map has no targets");
  return std::unique_ptr<Container>(new Container(std::move(impl)));
}

Container::Container(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Container::~Container() = default;
const Session& Container::session() const { return impl_->session; }

namespace {
constexpr size_t kMaxRequestBytes = 1u << 20;  // one engine grain per request
}

Status Container::write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                        std::span<const uint8_t> data) {
  for (size_t pos = 0; pos < data.size();) {
    // Split at 1 MiB boundaries of the offset: each request is one engine piece.
    uint64_t at = offset + pos;
    size_t n =
        static_cast<size_t>(std::min<uint64_t>(data.size() - pos, (at / kMaxRequestBytes + 1) * kMaxRequestBytes - at));
    wire::Request q;
    q.op = wire::Op::kUpdate;
    q.kind = wire::Kind::kArray;
    q.oid = oid;
    q.dkey = dkey;
    q.akey = akey;
    q.offset = at;
    q.length = n;
    chunk_crcs(at, data.subspan(pos, n), impl_->csum_chunk, &q.csums);
    Iov v{const_cast<uint8_t*>(data.data() + pos), n};
    RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {&v, 1}, {}, nullptr));
    pos += n;
  }
  return Status::ok();
}

Status Container::read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                       std::span<uint8_t> out) {
  for (size_t pos = 0; pos < out.size();) {
    uint64_t at = offset + pos;
    size_t n =
        static_cast<size_t>(std::min<uint64_t>(out.size() - pos, (at / kMaxRequestBytes + 1) * kMaxRequestBytes - at));
    wire::Request q;
    q.op = wire::Op::kFetch;
    q.kind = wire::Kind::kArray;
    q.oid = oid;
    q.dkey = dkey;
    q.akey = akey;
    q.offset = at;
    q.length = n;
    wire::Reply r;
    std::span<uint8_t> into = out.subspan(pos, n);
    RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, into, &r));
    std::vector<uint32_t> want;
    chunk_crcs(at, into, impl_->csum_chunk, &want);
    if (want != r.csums)
      return error(StatusCode::kChecksumMismatch, "data damaged in transit at offset " + std::to_string(at));
    pos += n;
  }
  return Status::ok();
}

Result<uint64_t> Container::array_size(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  wire::Request q;
  q.op = wire::Op::kArraySize;
  q.oid = oid;
  q.dkey = dkey;
  q.akey = akey;
  wire::Reply r;
  RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, {}, &r));
  return r.length;
}

Status Container::put_value(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::string_view value) {
  wire::Request q;
  q.op = wire::Op::kUpdate;
  q.kind = wire::Kind::kSingle;
  q.oid = oid;
  q.dkey = dkey;
  q.akey = akey;
  q.length = value.size();
  q.csums.push_back(crc32c(value.data(), value.size()));
  Iov v{const_cast<char*>(value.data()), value.size()};
  return impl_->roundtrip(impl_->target_of(q), q, {&v, 1}, {}, nullptr);
}

Result<std::string> Container::get_value(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  wire::Request q;
  q.op = wire::Op::kFetch;
  q.kind = wire::Kind::kSingle;
  q.oid = oid;
  q.dkey = dkey;
  q.akey = akey;
  wire::Reply r;
  std::string value;
  RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, {}, &r, &value));
  if (r.csums.size() != 1 || r.csums[0] != crc32c(value.data(), value.size()))
    return error(StatusCode::kChecksumMismatch, "single value damaged in transit");
  return value;
}

Status Container::punch_dkey(const ObjectId& oid, std::string_view dkey) {
  wire::Request q;
  q.op = wire::Op::kPunchDkey;
  q.oid = oid;
  q.dkey = dkey;
  return impl_->roundtrip(impl_->target_of(q), q, {}, {}, nullptr);
}

Status Container::punch_object(const ObjectId& oid) {
  // A striped object has dkeys on every target: punch it everywhere it may live.
  bool any = false;
  for (uint32_t t = 0; t < impl_->eps.size(); ++t) {
    wire::Request q;
    q.op = wire::Op::kPunchObject;
    q.oid = oid;
    Status s = impl_->roundtrip(t, q, {}, {}, nullptr);
    if (s.is_ok())
      any = true;
    else if (s.code() != StatusCode::kNotFound)
      return s;
  }
  return any ? Status::ok() : error(StatusCode::kNotFound, "object " + oid.to_string() + " has nothing to punch");
}

}  // namespace rfos::client
