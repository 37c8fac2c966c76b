#include "agent/agent.h"

#include <fcntl.h>
#include <grp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "agent/protocol.h"
#include "agent/ring.h"
#include "agent/seal.h"
#include "client/container.h"
#include "client/named_objects.h"
#include "common/coding.h"
#include "common/local_socket.h"
#include "common/yaml_file.h"
#include "fuse/mount.h"
#include "posix/namespace.h"
#include "wire/data_plane.h"

namespace rfos::agent {

namespace {

Status sys_error(const std::string& what) { return error(StatusCode::kIoError, what + ": " + std::strerror(errno)); }

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

bool parse_u32(std::string_view s, uint32_t* v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

uint32_t uid_of(const std::string& user) {
  uint32_t v;
  if (parse_u32(user, &v)) return v;
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  return getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found ? pw.pw_uid : UINT32_MAX;
}

uint32_t gid_of(const std::string& group) {
  uint32_t v;
  if (parse_u32(group, &v)) return v;
  std::vector<char> buf(16384);
  struct group gr {
  }, *found = nullptr;
  return getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &found) == 0 && found ? gr.gr_gid : UINT32_MAX;
}

std::string user_name(uint32_t uid) {
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  return getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found ? pw.pw_name : std::to_string(uid);
}

// The app's side of the socket, as the kernel says.
struct Peer : PeerCred {
  std::string describe() const {
    return user_name(uid) + " (uid " + std::to_string(uid) + ", pid " + std::to_string(pid) + ")";
  }
};

Status send_message(int fd, const Message& m, const std::vector<int>& fds = {}) {
  std::string bytes = encode_message(m);
  iovec iov{bytes.data(), bytes.size()};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  if (!fds.empty()) {
    h.msg_control = control;
    h.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  if (sendmsg(fd, &h, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) return sys_error("send to the app");
  return Status::ok();
}

// What the apps of one tenant share in the agent.
struct Tenant {
  std::string name;
  std::shared_ptr<Sealer> sealer;  // when it seals its data
  std::shared_ptr<TenantQos> qos;  // when it has limits
  std::string server_limits;       // the same limits, for the server to sign into its capabilities
  FairShare::Member share = nullptr;
};

// One app's connection: its thread runs everything the app asked for, from the socket and from its ring.
class AppConn {
 public:
  AppConn(const AgentConfig& config, const client::ControlClient& control, int fd, Peer peer, const Tenant& tenant,
          FairShare& share, std::atomic<uint32_t>& mounts)
      : config_(config),
        fd_(fd),
        peer_(std::move(peer)),
        tenant_(tenant.name),
        sealer_(tenant.sealer),
        qos_(tenant.qos),
        share_(share),
        member_(tenant.share),
        control_(control.acting_for(peer_.uid, peer_.gid, peer_.groups, tenant.server_limits)),
        mounts_(mounts) {}
  ~AppConn() {
    share_.unwatch(member_, this);  // before its ring goes
    if (served_) {                  // the app is gone: so is its mount's service (the kernel fails what waits on it)
      served_->stop->store(true);
      served_->thread.join();
      served_.reset();
    }
    if (counted_) --mounts_;
    if (shared_ > 0) share_.done(member_, shared_);  // what timed out in drain()
    conts_.clear();  // their sessions end before the memory their registrations named goes
    if (buffer_) munmap(buffer_, buffer_bytes_);
    if (buffer_fd_ >= 0) close(buffer_fd_);
  }

  // Until the app goes (or the agent shuts the socket down).
  void run() {
    Status end = serve();
    takes_.store(false, std::memory_order_relaxed);  // what is left in its ring waits for no turn
    if (!end.is_ok() && end.code() != StatusCode::kShutdown)
      spdlog::info("agent: app {} of tenant {}: {}", peer_.describe(), tenant_, end.to_string());
    // What it started ends first: the app may reuse its buffers once it hears the agent is gone, and a target
    // must not write into or read from them after that. Then the app hears of it (a broken ring, a bad message,
    // the agent stopping), before this thread is joined.
    drain(std::chrono::milliseconds(config_.timeout_ms));
    shutdown(fd_, SHUT_RDWR);
  }

 private:
  struct Open {
    std::unique_ptr<client::Container> cont;
  };

  Status serve() {
    for (uint32_t turn = 0;; ++turn) {
      bool busy = false;
      // The socket is looked at every 32nd turn while the ring is busy (a system call each time), and always
      // before the thread sleeps.
      if (turn % 32 == 0 || !ends_) RFOS_RETURN_IF_ERROR(read_control(&busy));
      if (ends_) {
        RFOS_RETURN_IF_ERROR(take_submissions(&busy));
        reap(0, &busy);
        RFOS_RETURN_IF_ERROR(post_completions());
      }
      if (held_) {
        // Held back by the tenants' sharing (its tenant is ahead, or the agent has its depth in flight): it
        // sleeps until the tenants behind have caught up or room is made (or its posted completions are due to
        // be rung for), rather than spin over its own completions, so that the cores the agent shares go to the
        // tenants behind and to the targets, not to its apps' threads. The app's socket is still heard, and the
        // memory it lends served.
        held_ = false;
        if (turn % 32 != 0) RFOS_RETURN_IF_ERROR(read_control(&busy));
        if (!grants_.empty()) serve_grants(0);
        auto most = std::chrono::microseconds(200);
        if (unrung_ > 0)
          most = std::min(most, std::chrono::duration_cast<std::chrono::microseconds>(
                                    unrung_since_ + kRingAfter - std::chrono::steady_clock::now()));
        if (most.count() > 0) share_.wait_turn(member_, most);
        continue;
      }
      if (busy) {
        busy_at_ = std::chrono::steady_clock::now();
        continue;
      }
      if (blocked_ && tickets_.empty()) {
        // Left in the ring for blocks other I/O of the tenant holds, with none of its own in flight here: wait
        // for a release rather than for the app.
        blocked_ = false;
        sealer_->locks().wait(seen_, std::chrono::milliseconds(1));
        continue;
      }
      blocked_ = false;
      if (!grants_.empty()) serve_grants(tickets_.empty() ? 1 : 0);
      if (!tickets_.empty()) {
        // Spin over the ring and the containers for 100 us after the last thing that happened (a wait inside a
        // container would leave new submissions unseen until its next completion); then the first container
        // with I/O in flight waits up to 1 ms (not while a wake-up is due). The clock is read every 16th turn.
        // Each empty turn yields the core, as the transport's own spins do: where the agent shares its cores
        // (with the targets, on a small host), the thread that will answer is often waiting for this one's
        // core, and a spin that kept it would hold back the very completion it waits for
        // (docs/BENCHMARKS.md, "Host mode against agent mode").
        if (turn % 16 == 0 && unrung_ == 0 &&
            busy_at_ + std::chrono::microseconds(100) < std::chrono::steady_clock::now())
          reap(1, &busy);
        else
          sched_yield();
        continue;
      }
      if (ends_ && pending_.empty() && std::chrono::steady_clock::now() < busy_at_ + kIdleSpin) {
        // Nothing in flight, but the app was just answered and is likely to submit again soon: a little longer
        // on the ring (yielding, as above) spares the app the system call that would wake this thread, which
        // on a host is the app's CPU the agent is there to save (io_uring's SQPOLL idles the same way).
        sched_yield();
        continue;
      }
      // Before the thread sleeps (or waits for the app to take its completions): the socket. Whatever the app
      // leaves in the ring while it sleeps waits for no turn (it takes nothing until the app rings it).
      takes_.store(false, std::memory_order_relaxed);
      RFOS_RETURN_IF_ERROR(read_control(&busy));
      if (busy || !grants_.empty()) continue;  // no sleep while memory is lent (served above)
      if (!pending_.empty()) {                 // the app is not taking its completions: look again soon
        pollfd p{fd_, POLLIN, 0};
        poll(&p, 1, 1);
        continue;
      }
      if (uint64_t now = now_ns(), until = throttled_until_.load(std::memory_order_relaxed); ends_ && now < until) {
        // Held by the tenant's limits: submissions wait in the ring; the socket is still heard.
        uint64_t wait = until - now;
        timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
        pollfd p{fd_, POLLIN, 0};
        if (ppoll(&p, 1, &ts, nullptr) < 0 && errno != EINTR) return sys_error("poll");
      } else if (ends_) {
        RFOS_RETURN_IF_ERROR(ends_->sq.wait(-1, fd_));
      } else {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, -1) < 0 && errno != EINTR) return sys_error("poll");
      }
    }
  }

  Status read_control(bool* busy) {
    for (;;) {
      char buf[kMaxMessageBytes + 1];
      iovec iov{buf, sizeof(buf)};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];  // room for the one descriptor of kMount
      msghdr h{};
      h.msg_iov = &iov;
      h.msg_iovlen = 1;
      h.msg_control = control;
      h.msg_controllen = sizeof(control);
      ssize_t n = recvmsg(fd_, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::ok();
      if (n < 0) return sys_error("receive from the app");
      if (n == 0) return error(StatusCode::kShutdown, "the app closed its connection");
      *busy = true;
      int passed = -1;  // owned here until handed on
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          if (passed >= 0) close(passed);
          passed = fd;
        }
      }
      auto m = decode_message(std::string_view(buf, static_cast<size_t>(n)));
      bool takes_one = m.is_ok() && m->type == MsgType::kMount;
      if ((h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || !m.is_ok() || (passed >= 0 && !takes_one)) {
        if (passed >= 0) close(passed);
        if (!m.is_ok()) return m.status();
        return error(StatusCode::kInvalidArgument,
                     "a message too long, or with descriptors it does not take: connection closed");
      }
      std::vector<int> fds;
      takes_.store(false, std::memory_order_relaxed);  // its ring waits for no turn while this is served
      Message reply = answer(*m, &fds, passed);
      reply.id = m->id;
      RFOS_RETURN_IF_ERROR(send_message(fd_, reply, fds));
    }
  }

  // `passed`: a descriptor that came with the message (kMount's), which this takes.
  Message answer(const Message& m, std::vector<int>* fds, int passed) {
    Message r;
    r.type = MsgType::kDone;
    if (m.type == MsgType::kMount) {
      Status s = hello_ ? serve_mount(m, passed) : error(StatusCode::kInvalidArgument, "say hello first");
      if (!hello_ && passed >= 0) close(passed);
      return s.is_ok() ? r : error_message(m.id, s);
    }
    if (m.type == MsgType::kHello) {
      if (m.version != kProtocolVersion)
        return error_message(m.id, error(StatusCode::kNotSupported,
                                         "agent protocol version " + std::to_string(m.version) +
                                             " (this agent speaks " + std::to_string(kProtocolVersion) + ")"));
      hello_ = true;
      r.type = MsgType::kWelcome;
      r.version = kProtocolVersion;
      r.text = tenant_;
      return r;
    }
    if (!hello_) return error_message(m.id, error(StatusCode::kInvalidArgument, "say hello first"));
    switch (m.type) {
      case MsgType::kSetup: {
        Status s = setup(m, fds);
        if (!s.is_ok()) return error_message(m.id, s);
        r.type = MsgType::kReady;
        r.sq_entries = ring_->sq_entries();
        r.cq_entries = ring_->cq_entries();
        r.buffer_bytes = buffer_bytes_;
        return r;
      }
      case MsgType::kOpen: {
        auto h = open(m);
        if (!h.is_ok()) return error_message(m.id, h.status());
        r.type = MsgType::kOpened;
        r.handle = *h;
        return r;
      }
      case MsgType::kClose: {
        auto c = container(m.handle);
        if (!c.is_ok()) return error_message(m.id, c.status());
        if ((*c)->in_flight() > 0)
          return error_message(m.id, error(StatusCode::kBusy, "the container has I/O in flight"));
        conts_.erase(m.handle);  // its grants are revoked as it closes
        std::erase_if(grants_, [&](const auto& g) { return g.second.handle == m.handle; });
        return r;
      }
      case MsgType::kGrant: {
        auto id = grant(m);
        if (!id.is_ok()) return error_message(m.id, id.status());
        r.text = std::move(id).value();
        return r;
      }
      case MsgType::kRevoke: {
        auto c = container(m.handle);
        if (!c.is_ok()) return error_message(m.id, c.status());
        auto g = grants_.find(m.dkey);
        if (g == grants_.end() || g->second.handle != m.handle) return r;  // gone already (or never this app's)
        Status s = (*c)->revoke_grant(m.dkey);
        grants_.erase(g);
        return s.is_ok() ? r : error_message(m.id, s);
      }
      case MsgType::kObject:
        return object(m);
      case MsgType::kControl: {
        // A control call made for the app's user (its ACLs), as any client of that user could make it.
        auto answer = control_->forward(m.text, m.blob);
        if (!answer.is_ok()) return error_message(m.id, answer.status());
        if (answer->size() > kMaxMessageBytes - 16)
          return error_message(m.id, error(StatusCode::kTooLarge, "the answer is too long to relay (" +
                                                                      std::to_string(answer->size()) + " bytes)"));
        r.type = MsgType::kControlled;
        r.blob = std::move(answer).value();
        return r;
      }
      case MsgType::kKeys: {
        auto v = keys(m);
        if (!v.is_ok()) return error_message(m.id, v.status());
        r.value = *v;
        return r;
      }
      default:
        return error_message(m.id, error(StatusCode::kInvalidArgument, "not a request an app sends"));
    }
  }

  // An operation on an opened container's object or keys (protocol.h, KeyOp): its answer's value. Bytes go
  // through the start of the shared buffer, copied out before they are used (the app can change them).
  Result<uint64_t> keys(const Message& m) {
    RFOS_ASSIGN_OR_RETURN(client::Container * opened, container(m.handle));
    client::Container& c = *opened;
    ObjectId oid;
    std::memcpy(&oid.hi, m.oid, 8);
    std::memcpy(&oid.lo, m.oid + 8, 8);
    auto op = static_cast<KeyOp>(m.value);
    bool bytes = op == KeyOp::kPutValue || op == KeyOp::kGetValue || op == KeyOp::kListExtents;
    if (bytes && (!buffer_ || m.buffer_bytes > buffer_bytes_))
      return error(StatusCode::kInvalidArgument, "the bytes lie past the shared buffer (or it is not set up)");
    // A sealing tenant's values are sealed whole (seal.h), 32 bytes longer on the media.
    const SealPlace place = sealer_ ? SealPlace::of(c.session().cont.uuid, oid, m.dkey, m.akey) : SealPlace{};
    switch (op) {
      case KeyOp::kArraySize:
        return c.array_size(oid, m.dkey, m.akey);
      case KeyOp::kPutValue: {
        if (m.buffer_bytes > client::kMaxIoBytes)
          return error(StatusCode::kTooLarge, "a single value is at most 1 MiB");
        std::string value(reinterpret_cast<const char*>(buffer_), m.buffer_bytes);
        if (sealer_) {
          if (value.empty()) return error(StatusCode::kInvalidArgument, "a single value must not be empty");
          if (value.size() > client::kMaxIoBytes - kSealRecord)
            return error(StatusCode::kTooLarge, "a sealed single value is at most 1 MiB less 32 bytes");
          RFOS_ASSIGN_OR_RETURN(value, sealer_->seal_value(value, place));
        }
        RFOS_RETURN_IF_ERROR(c.put_value(oid, m.dkey, m.akey, value));
        return 0;
      }
      case KeyOp::kGetValue: {
        RFOS_ASSIGN_OR_RETURN(std::string value, c.get_value(oid, m.dkey, m.akey));
        if (sealer_) {
          RFOS_ASSIGN_OR_RETURN(value, sealer_->open_value(value, place));
        }
        if (value.size() <= m.buffer_bytes) std::memcpy(buffer_, value.data(), value.size());
        return value.size();
      }
      case KeyOp::kPunchDkey:
        RFOS_RETURN_IF_ERROR(c.punch_dkey(oid, m.dkey));
        return 0;
      case KeyOp::kPunchObject:
        RFOS_RETURN_IF_ERROR(c.punch_object(oid));
        return 0;
      case KeyOp::kListExtents: {
        RFOS_ASSIGN_OR_RETURN(std::vector<client::Extent> all, c.list_extents(oid, m.dkey, m.akey));
        std::string out;
        for (size_t i = 0; i < all.size() && (i + 1) * 16 <= m.buffer_bytes; ++i) {
          put_le<uint64_t>(&out, all[i].offset);
          put_le<uint64_t>(&out, all[i].length);
        }
        std::memcpy(buffer_, out.data(), out.size());
        return all.size();
      }
      case KeyOp::kReadEpoch:
        c.set_read_epoch(m.buffer_bytes);
        return 0;
    }
    return error(StatusCode::kInvalidArgument, "not a key operation");
  }

  // How the agent opens a container for this app: its provider and request timeout.
  client::ContainerOptions container_options(bool write) const {
    client::ContainerOptions o;
    o.write = write;
    o.provider = config_.provider;
    o.timeout_ms = config_.timeout_ms;
    return o;
  }
  // For the layouts the agent runs itself (named objects, files, the mount): a sealing tenant's bytes sealed in
  // the container, at any offset (client/sealed_io.h). The ring's handles seal whole blocks here instead.
  client::ContainerOptions layout_options(bool write) const {
    client::ContainerOptions o = container_options(write);
    o.sealer = sealer_;
    return o;
  }

  // The next message of an exchange inside a request (a put's chunks, a get's acknowledgements): `want` with the
  // request's id, within the request timeout; anything else fails the request.
  Result<Message> await(MsgType want, uint32_t id) {
    pollfd p{fd_, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(config_.timeout_ms));
    if (n == 0) return error(StatusCode::kTimeout, "the app did not go on with its request");
    if (n < 0) return sys_error("poll");
    std::vector<char> buf(kMaxMessageBytes + 1);
    ssize_t got = recv(fd_, buf.data(), buf.size(), 0);
    if (got == 0) return error(StatusCode::kShutdown, "the app closed its connection");
    if (got < 0) return sys_error("receive from the app");
    RFOS_ASSIGN_OR_RETURN(Message m, decode_message(std::string_view(buf.data(), static_cast<size_t>(got))));
    if (m.type == MsgType::kError && m.id == id) return status_of(m);  // the app gave the request up
    if (m.type != want || m.id != id) return error(StatusCode::kInvalidArgument, "not the message the request needs");
    return m;
  }

  // A named object, or a file of the namespace, for the app's user: stat, remove, list, or a put or get whose
  // bytes go through the shared buffer a chunk at a time (protocol.h, kObject).
  Message object(const Message& m) {
    auto fail = [&](const Status& s) { return error_message(m.id, s); };
    // A sealing tenant's layouts hold the blocks they move (client/sealed_io.h): this app's ring I/O, which holds
    // its own until this thread reaps it, ends first, or the request would wait on this very thread.
    if (sealer_) drain(std::chrono::milliseconds(config_.timeout_ms));
    auto op = static_cast<ObjectOp>(m.value);
    if (m.epoch != 0 && op != ObjectOp::kGet && op != ObjectOp::kStat && op != ObjectOp::kList)
      return fail(error(StatusCode::kInvalidArgument, "a snapshot is read-only"));
    if (m.epoch != 0 && m.text.starts_with("/"))  // as the native CLI says
      return fail(error(StatusCode::kNotSupported, "--snapshot reads named objects, not paths yet"));
    if ((op == ObjectOp::kPut || op == ObjectOp::kGet) && !buffer_)
      return fail(error(StatusCode::kInvalidArgument, "a put or get needs the shared buffer (set up the ring)"));
    client::ContainerOptions co = layout_options(op == ObjectOp::kPut || op == ObjectOp::kRemove);
    uint64_t have = 0, at = 0;
    bool ended = false;
    // A put's bytes: each chunk the app leaves at the start of the buffer, asked for once the last is taken.
    client::StreamSource source = [&](std::span<uint8_t> out) -> Result<size_t> {
      if (have == 0) {
        if (ended) return 0;
        Message next;
        next.type = MsgType::kNext;
        next.id = m.id;
        RFOS_RETURN_IF_ERROR(send_message(fd_, next));
        RFOS_ASSIGN_OR_RETURN(Message c, await(MsgType::kChunk, m.id));
        if (c.value > buffer_bytes_) return error(StatusCode::kInvalidArgument, "a chunk past the shared buffer");
        if (c.value == 0) {
          ended = true;
          return 0;
        }
        have = c.value;
        at = 0;
      }
      size_t n = std::min<uint64_t>(out.size(), have);
      std::memcpy(out.data(), buffer_ + at, n);
      at += n;
      have -= n;
      return n;
    };
    // A get's bytes: a chunk at a time, each taken by the app before the next overwrites it.
    client::StreamSink sink = [&](std::span<const uint8_t> bytes) -> Status {
      while (!bytes.empty()) {
        size_t n = std::min(bytes.size(), buffer_bytes_);
        std::memcpy(buffer_, bytes.data(), n);
        Message c;
        c.type = MsgType::kChunk;
        c.id = m.id;
        c.value = n;
        RFOS_RETURN_IF_ERROR(send_message(fd_, c));
        RFOS_RETURN_IF_ERROR(await(MsgType::kNext, m.id).status());
        bytes = bytes.subspan(n);
      }
      return Status::ok();
    };
    Message done;
    done.type = MsgType::kDone;
    Status s = op >= ObjectOp::kMkdir    ? namespace_op(m, op, &done)
               : m.text.starts_with("/") ? file_op(m, op, co, source, sink, &done)
                                         : named_op(m, op, co, source, sink, &done);
    return s.is_ok() ? done : fail(s);
  }

  // The namespace of a container, opened for this app's user once and kept for its later requests (a few).
  Result<posix::Namespace*> namespace_of(const std::string& pool, const std::string& cont) {
    std::string key = pool + '\n' + cont;
    auto it = namespaces_.find(key);
    if (it != namespaces_.end()) return it->second.get();
    if (namespaces_.size() >= 8) namespaces_.erase(namespaces_.begin());
    RFOS_ASSIGN_OR_RETURN(auto ns, posix::Namespace::open(*control_, pool, cont, layout_options(true)));
    return (namespaces_[key] = std::move(ns)).get();
  }

  // The C API's namespace calls (rfos_fs_*): a directory, or a batch of whole files laid out in the shared
  // buffer, whose results come back one per file (and a get's bytes in the buffer).
  Status namespace_op(const Message& m, ObjectOp op, Message* done) {
    RFOS_ASSIGN_OR_RETURN(posix::Namespace * ns, namespace_of(m.pool, m.cont));
    posix::Cred cred(peer_.uid, peer_.gid, peer_.groups);
    if (op == ObjectOp::kSync) return ns->sync();
    if (op == ObjectOp::kCheck) {  // read-only; a report too long for a message is cut, and says so
      RFOS_ASSIGN_OR_RETURN(posix::Namespace::CheckReport report, ns->check());
      std::string text = report.describe();
      if (text.size() > kMaxMessageBytes - 256) {
        std::string verdict = text.substr(text.rfind('\n', text.size() - 2) + 1);
        text.resize(text.rfind('\n', kMaxMessageBytes - 512) + 1);
        text += "... (the findings are cut at 64 KiB through the agent)\n" + verdict;
      }
      done->type = MsgType::kControlled;
      done->blob = std::move(text);
      return Status::ok();
    }
    if (op == ObjectOp::kListDir) {  // a page (posix::encode_dir_page), 128 entries at most: it fits a message
      RFOS_ASSIGN_OR_RETURN(posix::Attr dir, ns->resolve(m.text, cred));
      if (!S_ISDIR(dir.mode)) return error(StatusCode::kNotDirectory, m.text + " is not a directory");
      if (!posix::Namespace::permits(dir, cred, R_OK))
        return error(StatusCode::kPermissionDenied, m.text + ": no read permission");
      RFOS_ASSIGN_OR_RETURN(posix::DirPlusPage page, ns->list(dir.oid, m.dkey, 128));
      done->type = MsgType::kControlled;
      done->blob = posix::encode_dir_page(page);
      if (done->blob.size() > kMaxMessageBytes - 16)
        return error(StatusCode::kTooLarge, "a directory page too long to relay");
      return Status::ok();
    }
    if (op == ObjectOp::kReadlink) {
      RFOS_ASSIGN_OR_RETURN(posix::Attr link, ns->resolve(m.text, cred));
      if (!S_ISLNK(link.mode)) return error(StatusCode::kInvalidArgument, m.text + " is not a symlink");
      RFOS_ASSIGN_OR_RETURN(done->text, ns->readlink(link.oid));
      return Status::ok();
    }
    if (op == ObjectOp::kMkdir || op == ObjectOp::kSymlink) {
      std::string_view p = m.text;
      while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
      size_t slash = p.rfind('/');
      if (slash == std::string_view::npos || p.size() <= 1)
        return error(StatusCode::kInvalidArgument, "an absolute path below the root");
      RFOS_ASSIGN_OR_RETURN(posix::Attr parent, ns->resolve(std::string(p.substr(0, slash)), cred));
      if (op == ObjectOp::kSymlink) return ns->symlink(parent.oid, p.substr(slash + 1), m.dkey, cred).status();
      return ns->mkdir(parent.oid, p.substr(slash + 1), m.handle & 07777, cred).status();
    }
    if (!buffer_ || m.buffer_bytes > buffer_bytes_)
      return error(StatusCode::kInvalidArgument, "a batch past the shared buffer");
    RFOS_ASSIGN_OR_RETURN(posix::Attr dir, ns->resolve(m.text, cred));
    if (!S_ISDIR(dir.mode)) return error(StatusCode::kNotDirectory, m.text + " is not a directory");
    // Decoded (copied out) first: the app may write its buffer while this reads it.
    RFOS_ASSIGN_OR_RETURN(std::vector<BatchFile> batch,
                          decode_file_batch(std::string_view(reinterpret_cast<const char*>(buffer_), m.buffer_bytes),
                                            op == ObjectOp::kPutFiles, buffer_bytes_));
    std::string results;  // per file: code u16 (and for a get, its size u64)
    if (op == ObjectOp::kPutFiles) {
      std::vector<posix::Namespace::NewFile> files(batch.size());
      for (size_t i = 0; i < batch.size(); ++i)
        files[i] = {std::move(batch[i].name), batch[i].mode & 07777, std::move(batch[i].data)};
      for (const auto& r : ns->put_files(dir.oid, files, cred, 32))
        put_le<uint16_t>(&results, static_cast<uint16_t>(r.status().code()));
    } else {
      std::vector<std::string> names;
      for (const BatchFile& f : batch) names.push_back(f.name);
      // Each file's bytes at the sum of the capacities before it.
      uint64_t at = 0;
      auto got = ns->get_files(dir.oid, names, cred, 32);
      for (size_t i = 0; i < batch.size(); ++i) {
        StatusCode code = got[i].status().code();
        uint64_t size = got[i].is_ok() ? got[i]->size() : 0;
        if (got[i].is_ok() && size > batch[i].capacity) code = StatusCode::kTooLarge;
        if (code == StatusCode::kOk && size > 0) std::memcpy(buffer_ + at, got[i]->data(), size);
        put_le<uint16_t>(&results, static_cast<uint16_t>(code));
        put_le<uint64_t>(&results, size);
        at += batch[i].capacity;
      }
    }
    if (results.size() > kMaxMessageBytes - 16)
      return error(StatusCode::kTooLarge, "a batch whose results do not fit a message");
    done->type = MsgType::kControlled;
    done->blob = std::move(results);
    return Status::ok();
  }

  Status named_op(const Message& m, ObjectOp op, const client::ContainerOptions& co, const client::StreamSource& source,
                  const client::StreamSink& sink, Message* done) {
    RFOS_ASSIGN_OR_RETURN(auto c, client::Container::open(*control_, m.pool, m.cont, co));
    c->set_read_epoch(m.epoch);
    client::NamedObjects objects(*c);
    switch (op) {
      case ObjectOp::kPut:
        RFOS_RETURN_IF_ERROR(objects.put(m.text, source, [&](uint64_t b) { done->value = b; }));
        return Status::ok();
      case ObjectOp::kGet: {
        RFOS_ASSIGN_OR_RETURN(client::ObjectStat st, objects.stat(m.text));
        done->value = st.size;
        return objects.read(st, sink);
      }
      case ObjectOp::kStat: {
        RFOS_ASSIGN_OR_RETURN(client::ObjectStat st, objects.stat(m.text));
        done->value = st.size;
        done->text = st.data.to_string() + (st.legacy ? " legacy" : st.inlined ? " inline" : "");
        return Status::ok();
      }
      case ObjectOp::kRemove:
        return objects.remove(m.text);
      case ObjectOp::kList: {
        // "N size name" per named object, "O id" per object with no name, "I count" for the namespace's inodes.
        RFOS_ASSIGN_OR_RETURN(client::NamedObjects::Listing listing, objects.list());
        std::string out;
        for (const auto& o : listing.named) out += "N " + std::to_string(o.size) + " " + o.name + "\n";
        size_t inodes = 0;
        for (const ObjectId& oid : listing.other) {
          RFOS_ASSIGN_OR_RETURN(bool inode, posix::Namespace::holds_inode(*c, oid));
          if (inode)
            ++inodes;
          else
            out += "O " + oid.to_string() + "\n";
        }
        if (inodes) out += "I " + std::to_string(inodes) + "\n";
        if (out.size() > kMaxMessageBytes - 64)
          return error(StatusCode::kTooLarge, "the listing is too long to relay (" + std::to_string(out.size()) +
                                                  " bytes): list it with the native client");
        done->type = MsgType::kControlled;
        done->blob = std::move(out);
        return Status::ok();
      }
      default:
        return error(StatusCode::kInvalidArgument, "no such object operation");
    }
  }

  Status file_op(const Message& m, ObjectOp op, const client::ContainerOptions& co, const client::StreamSource& source,
                 const client::StreamSink& sink, Message* done) {
    if (op == ObjectOp::kList)
      return error(StatusCode::kInvalidArgument, "list takes no path (rfos fs ls lists a tree)");
    RFOS_ASSIGN_OR_RETURN(auto ns, posix::Namespace::open(*control_, m.pool, m.cont, co));
    posix::Cred cred(peer_.uid, peer_.gid, peer_.groups);
    std::string_view path = m.text;
    while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
    size_t slash = path.rfind('/');
    std::string dir(path.substr(0, slash)), name(path.substr(slash + 1));
    switch (op) {
      case ObjectOp::kPut: {
        RFOS_ASSIGN_OR_RETURN(posix::Attr d, ns->resolve(dir, cred));
        RFOS_ASSIGN_OR_RETURN(posix::Attr f, ns->put_file(d.oid, name, m.handle & 07777, source, cred));
        done->value = f.size;
        return ns->sync();  // durable when the app is told it is done
      }
      case ObjectOp::kGet: {
        RFOS_ASSIGN_OR_RETURN(posix::Attr f, ns->resolve(path, cred));
        if (!posix::Namespace::permits(f, cred, R_OK))
          return error(StatusCode::kPermissionDenied, std::string(path) + ": no read permission");
        done->value = f.size;
        return ns->get_file(f, sink);
      }
      case ObjectOp::kStat: {
        RFOS_ASSIGN_OR_RETURN(posix::Attr f, ns->resolve(path, cred));
        char mode[16];
        std::snprintf(mode, sizeof(mode), "%06o", f.mode);
        done->value = f.size;
        done->text = f.oid.to_string() + " " + mode + " " + std::to_string(f.uid) + " " + std::to_string(f.gid);
        return Status::ok();
      }
      case ObjectOp::kRemove: {
        RFOS_ASSIGN_OR_RETURN(posix::Attr d, ns->resolve(dir, cred));
        RFOS_ASSIGN_OR_RETURN(posix::Attr gone, ns->unlink(d.oid, name, cred));
        if (gone.nlink == 0) (void)ns->forget(gone.oid);
        return ns->sync();
      }
      default:
        return error(StatusCode::kInvalidArgument, "no such object operation");
    }
  }

  // The app mounted a FUSE device and hands it over: the namespace of the container, opened for the app's
  // user, serves it on threads of its own (fuse::run_mount) until the mount goes away or the app does. A
  // failure leaves nothing behind (the device is closed).
  Status serve_mount(const Message& m, int fuse_fd) {
    auto refuse = [&](Status s) {
      if (fuse_fd >= 0) close(fuse_fd);
      return s;
    };
    if (fuse_fd < 0) return refuse(error(StatusCode::kInvalidArgument, "a mount comes with its FUSE device"));
    if (served_) return refuse(error(StatusCode::kAlreadyExists, "this connection serves a mount already"));
    struct stat st {};
    if (fstat(fuse_fd, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 10 || minor(st.st_rdev) != 229)
      return refuse(error(StatusCode::kInvalidArgument, "the descriptor is not a FUSE device (/dev/fuse)"));
    fuse::MountOptions o;
    o.fsname = "rfos:" + m.pool + "/" + m.cont;
    if (Status s = fuse::decode_served_settings(m.text, &o); !s.is_ok()) return refuse(s);
    // Threads and request buffers are the agent's: an app gets the defaults at most.
    o.request_threads = std::min(o.request_threads, fuse::MountOptions{}.request_threads);
    o.writer_threads = std::min(o.writer_threads, fuse::MountOptions{}.writer_threads);
    auto ns = posix::Namespace::open(*control_, m.pool, m.cont, layout_options(true));
    if (!ns.is_ok()) return refuse(ns.status());
    if (mounts_.fetch_add(1) + 1 > config_.max_mounts) {
      --mounts_;
      return refuse(error(StatusCode::kBusy,
                          "the agent serves its most mounts (max_mounts " + std::to_string(config_.max_mounts) + ")"));
    }
    counted_ = true;  // until this connection ends (one mount per connection)
    o.fuse_fd = fuse_fd;
    o.stop = std::make_shared<std::atomic<bool>>(false);
    served_ = std::make_unique<Served>();
    served_->ns = std::move(ns).value();
    served_->stop = o.stop;
    served_->thread = std::thread([this, o, ns = served_->ns.get()] {
      Status s = fuse::run_mount(*ns, o);
      if (!s.is_ok()) spdlog::info("agent: mount of app {}: {}", peer_.describe(), s.to_string());
      // The app's shim hears the mount ended: how (a last word, id 0), then the hang-up.
      Message last;
      last.type = MsgType::kDone;
      (void)send_message(fd_, s.is_ok() ? last : error_message(0, s));
      shutdown(fd_, SHUT_RDWR);
    });
    return Status::ok();
  }

  // kGrant: bytes of the shared buffer lent to the targets through the handle's session for one request
  // (client::Container::grant_memory; the S3 gateway's RDMA path, docs/s3.md): the grant's id, made here, so an
  // app can name no other's. The app never sees the registration's key or address.
  Result<std::string> grant(const Message& m) {
    RFOS_ASSIGN_OR_RETURN(client::Container * c, container(m.handle));
    if (sealer_)
      return error(StatusCode::kNotSupported, "tenant " + tenant_ +
                                                  " seals its data in the agent: its memory is not lent to the "
                                                  "targets, which would move the bytes unsealed");
    if (!buffer_ || m.buffer_bytes == 0 || m.value > buffer_bytes_ || m.buffer_bytes > buffer_bytes_ - m.value)
      return error(StatusCode::kInvalidArgument, "a grant lends bytes of the shared buffer only (set up the ring)");
    if (m.epoch == 0 || m.epoch > wire::kMaxGrantMs)
      return error(StatusCode::kInvalidArgument, "a grant lives 1 ms .. " + std::to_string(wire::kMaxGrantMs) + " ms");
    if (grants_.size() >= kMaxGrants)
      return error(StatusCode::kNoSpace, std::to_string(kMaxGrants) + " grants held; revoke some");
    // A grant's bytes never pass the ring: the tenant's limits count them here, as one I/O of its length (a
    // request over the burst waits for a full bucket and is paid for by the time after, as in the ring).
    if (qos_)
      while (uint64_t wait = qos_->admit(m.buffer_bytes, now_ns()))
        std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    std::string id(wire::kGrantIdBytes, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), static_cast<int>(id.size())) != 1)
      return error(StatusCode::kInternal, "no random bytes (RAND_bytes)");
    RFOS_RETURN_IF_ERROR(
        c->grant_memory({buffer_ + m.value, m.buffer_bytes}, m.write, id, m.akey, static_cast<uint32_t>(m.epoch)));
    grants_[id] = {m.handle, now_ns() / 1000000 + m.epoch};
    return id;
  }

  // While memory is lent, the lending containers are progressed: over tcp and shm UCX emulates the targets' one-
  // sided reads and writes with messages this side serves. Expired grants end here as they did on the targets.
  void serve_grants(int timeout_ms) {
    const uint64_t now_ms = now_ns() / 1000000;
    std::erase_if(grants_, [&](const auto& g) { return g.second.until_ms <= now_ms; });
    std::set<uint32_t> lending;
    for (const auto& [id, g] : grants_) lending.insert(g.handle);
    for (uint32_t h : lending) {
      auto it = conts_.find(h);
      if (it == conts_.end()) continue;
      it->second.cont->wait(timeout_ms);
      timeout_ms = 0;
    }
  }

  // A container handle the app opened (and has not closed): the app names only its own.
  Result<client::Container*> container(uint32_t handle) {
    auto it = conts_.find(handle);
    if (it == conts_.end()) return error(StatusCode::kInvalidArgument, "no container handle " + std::to_string(handle));
    return it->second.cont.get();
  }

  // A failure leaves nothing set up: the app may ask again.
  Status setup(const Message& m, std::vector<int>* fds) {
    if (ring_) return error(StatusCode::kAlreadyExists, "the ring is set up already");
    if (m.buffer_bytes == 0 || m.buffer_bytes > config_.max_buffer_bytes)
      return error(StatusCode::kTooLarge, "a shared buffer of 1 B .. " + std::to_string(config_.max_buffer_bytes) +
                                              " bytes (max_buffer_bytes)");
    RFOS_ASSIGN_OR_RETURN(auto ring, RingRegion::create(m.sq_entries, m.cq_entries));
    size_t bytes = (m.buffer_bytes + 4095) & ~uint64_t{4095};
    int fd = memfd_create("rfos-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return sys_error("memfd_create");
    // Sealed: the app may write its bytes into it but cannot shrink it under the agent or the fabric.
    void* p = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        (p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED) {
      Status s = sys_error("make the shared buffer");
      close(fd);
      return s;
    }
    for (auto& [h, o] : conts_) {
      if (Status s = o.cont->register_memory({static_cast<uint8_t*>(p), bytes}); !s.is_ok()) {
        for (auto& [h2, o2] : conts_) (void)o2.cont->unregister_memory(p);
        munmap(p, bytes);
        close(fd);
        return s;
      }
    }
    ring_ = std::move(ring);
    buffer_fd_ = fd;
    buffer_ = static_cast<uint8_t*>(p);
    buffer_bytes_ = bytes;
    ends_ = std::make_unique<AgentEnds>(*ring_);
    // Submissions this app's thread would take now but for its tenant's turn: while it serves the ring, not the
    // socket, has room for their completions and no blocks to wait for, and its limits do not hold it.
    share_.watch(member_, this, [sq = &ends_->sq, takes = &takes_, until = &throttled_until_] {
      return takes->load(std::memory_order_relaxed) && sq->waiting() &&
             now_ns() >= until->load(std::memory_order_relaxed);
    });
    *fds = {ring_->memfd(), buffer_fd_, ring_->sq_event(), ring_->cq_event()};
    return Status::ok();
  }

  Result<uint32_t> open(const Message& m) {
    if (conts_.size() >= 64) return error(StatusCode::kBusy, "64 containers open already");
    RFOS_ASSIGN_OR_RETURN(auto c, client::Container::open(*control_, m.pool, m.cont, container_options(m.write)));
    if (buffer_) RFOS_RETURN_IF_ERROR(c->register_memory({buffer_, buffer_bytes_}));
    uint32_t h = next_handle_++;
    conts_[h].cont = std::move(c);
    return h;
  }

  // Takes what the app submitted while the completion queue has room for all it may answer.
  Status take_submissions(bool* busy) {
    RFOS_ASSIGN_OR_RETURN(uint32_t n, ends_->sq.ready());
    size_t room = ring_->cq_entries();
    uint32_t took = 0;
    for (; took < n && tickets_.size() + ready_.size() + pending_.size() < room; ++took) {
      Sqe e = ends_->sq.peek();  // a copy: the app cannot change it under the checks
      // A sealing tenant's I/O holds its blocks against the tenant's other I/O here (the mount's, objects', other
      // apps'): left in the ring while another holds them.
      client::BlockLocks::Hold hold;
      if (sealer_ && e.op != static_cast<uint8_t>(RingOp::kNop) && !hold_blocks(e, &hold)) {
        // Not for longer than a request may take: then it completes Busy, and what is behind it goes on.
        auto now = std::chrono::steady_clock::now();
        if (!blocked_since_) blocked_since_ = now;
        if (now - *blocked_since_ < std::chrono::milliseconds(config_.timeout_ms)) {
          blocked_ = true;
          break;
        }
        blocked_since_.reset();
        want_.release();
        ends_->sq.skip();
        pending_.push_back({e.user_data, static_cast<uint16_t>(StatusCode::kBusy), 0, 0});
        continue;
      }
      blocked_since_.reset();
      want_.release();
      // Left in the ring when the tenants' sharing holds it (until the tenants behind catch up or completions
      // make room) or its limits do (until they allow it).
      double cost = 0;
      if (e.op != static_cast<uint8_t>(RingOp::kNop)) {
        cost = FairShare::cost_of(std::min<uint64_t>(e.length, client::kMaxIoBytes));
        if (share_.take(member_, cost) != FairShare::Take::kTaken) {
          held_ = true;
          break;
        }
        uint64_t now = qos_ ? now_ns() : 0;
        uint64_t until = throttled_until_.load(std::memory_order_relaxed);
        uint64_t wait = !qos_ ? 0 : now < until ? until - now : qos_->admit(e.length, now);
        if (wait > 0) {
          share_.cancel(member_, cost);
          throttled_until_.store(now + wait, std::memory_order_relaxed);
          break;
        }
      }
      ends_->sq.skip();
      Status s = submit(e, cost, std::move(hold));
      if (s.is_ok()) {
        shared_ += cost;
      } else {
        if (cost > 0) share_.done(member_, cost);
        pending_.push_back({e.user_data, static_cast<uint16_t>(s.code()), 0, 0});
      }
    }
    if (took > 0) {
      ends_->sq.release();
      *busy = true;
    }
    // Left with room for completions and no blocks to wait for: what is still in the ring waits for its turn.
    takes_.store(tickets_.size() + ready_.size() + pending_.size() < room && !blocked_, std::memory_order_relaxed);
    return Status::ok();
  }

  // One I/O of the app's: one request to a container, or two (data and records) for a sealing tenant.
  struct Op {
    uint64_t user_data = 0;
    uint32_t length = 0;
    double cost = 0;  // its part of the tenant's share (FairShare)
    int remaining = 0;
    Status status;
    bool read = false;
    std::span<uint8_t> app;             // the app's bytes, where a sealed read's plaintext goes
    std::unique_ptr<uint8_t[]> bounce;  // a sealing tenant's: ciphertext, then records (from bounces_)
    std::span<uint8_t> cipher, records;
    SealPlace place;
    uint64_t first_block = 0;
    client::BlockLocks::Hold hold;  // a sealing tenant's blocks, until done
    // A sealed write's halves, which are sent again when one fails (while the op holds its blocks).
    ObjectId oid;
    std::string dkey, akey;
    client::Ticket records_ticket = 0;
    bool records_unsent = false;
    int resends = 0;
  };
  static constexpr int kMaxResends = 2;

  // Sends a sealed write's ciphertext or its records; tickets_ maps it to the op.
  Status send_half(uint32_t handle, const std::shared_ptr<Op>& op, bool records) {
    RFOS_ASSIGN_OR_RETURN(client::Container * c, container(handle));
    auto t = records ? c->submit_write(op->oid, op->dkey, op->akey + std::string(kRecordsSuffix),
                                       op->first_block * kSealRecord, op->records)
                     : c->submit_write(op->oid, op->dkey, op->akey, op->first_block * kSealBlock, op->cipher);
    if (!t.is_ok()) return t.status();
    if (records) op->records_ticket = *t;
    tickets_[{handle, *t}] = op;
    ++op->remaining;
    return Status::ok();
  }

  // Takes the blocks a sealing tenant's read (with other reads) or write (alone) moves; false when other I/O of
  // the tenant holds some of them (*seen_ for the wait). A submission that names no container or blocks holds
  // nothing: submit refuses it.
  bool hold_blocks(const Sqe& e, client::BlockLocks::Hold* hold) {
    auto c = container(e.cont);
    if (!c.is_ok() || !check_sqe(e, buffer_bytes_, client::kMaxIoBytes).is_ok()) return true;
    ObjectId oid;
    std::memcpy(&oid.hi, e.oid, 8);
    std::memcpy(&oid.lo, e.oid + 8, 8);
    const uint64_t first = e.offset / kSealBlock, end = (e.offset + e.length + kSealBlock - 1) / kSealBlock;
    const uint64_t array = client::sealed_array((*c)->session().cont.uuid, oid, e.dkey(), e.akey());
    const bool read = e.op == static_cast<uint8_t>(RingOp::kRead);
    *hold = sealer_->locks().try_lock(array, first, end, read, &seen_);
    // A write kept out says so, so that readers coming after it wait behind it rather than keep it out for good.
    if (!*hold && !read && !want_) want_ = sealer_->locks().want(array, first, end);
    return static_cast<bool>(*hold);
  }

  Status submit(const Sqe& e, double cost, client::BlockLocks::Hold hold) {
    RFOS_RETURN_IF_ERROR(check_sqe(e, buffer_bytes_, client::kMaxIoBytes));
    if (e.op == static_cast<uint8_t>(RingOp::kNop)) {
      pending_.push_back({e.user_data, 0, 0, 0});
      return Status::ok();
    }
    RFOS_ASSIGN_OR_RETURN(client::Container * opened, container(e.cont));
    client::Container& c = *opened;
    ObjectId oid;
    std::memcpy(&oid.hi, e.oid, 8);
    std::memcpy(&oid.lo, e.oid + 8, 8);
    auto op = std::make_shared<Op>();
    op->user_data = e.user_data;
    op->length = static_cast<uint32_t>(e.length);
    op->cost = cost;
    op->read = e.op == static_cast<uint8_t>(RingOp::kRead);
    op->app = std::span<uint8_t>(buffer_ + e.buf, e.length);
    if (!sealer_) {
      Result<client::Ticket> t = op->read ? c.submit_read(oid, e.dkey(), e.akey(), e.offset, op->app)
                                          : c.submit_write(oid, e.dkey(), e.akey(), e.offset, op->app);
      if (!t.is_ok()) return t.status();
      op->remaining = 1;
      tickets_[{e.cont, *t}] = op;
      return Status::ok();
    }
    // Sealed: the ciphertext where the plaintext would be, each block's nonce and tag in the records array
    // (the akey with kRecordsSuffix) at 32 bytes a block.
    if (e.offset % kSealBlock != 0 || e.length % kSealBlock != 0)
      return error(StatusCode::kInvalidArgument, "a sealing tenant's I/O is whole 4 KiB blocks");
    op->first_block = e.offset / kSealBlock;
    op->place = SealPlace::of(c.session().cont.uuid, oid, e.dkey(), e.akey());
    op->hold = std::move(hold);
    op->bounce = take_bounce();
    // A read's ciphertext lands in the app's buffer and is opened in place (one buffer through the cache, not
    // two): the app's own bytes, which tell it nothing, and a block that does not open is cleansed there.
    op->cipher = op->read ? op->app : std::span<uint8_t>(op->bounce.get(), e.length);
    op->records = {op->bounce.get() + client::kMaxIoBytes, e.length / kSealBlock * kSealRecord};
    std::string records_akey = std::string(e.akey()) + std::string(kRecordsSuffix);
    uint64_t records_offset = op->first_block * kSealRecord;
    if (!op->read) {
      RFOS_RETURN_IF_ERROR(crypt_in_slices(*op, true));
      op->oid = oid;
      op->dkey = e.dkey();
      op->akey = e.akey();
      RFOS_RETURN_IF_ERROR(send_half(e.cont, op, false));
      // Records whose send fails now go once the ciphertext's call has ended (collect).
      op->records_unsent = !send_half(e.cont, op, true).is_ok();
      return Status::ok();
    }
    Result<client::Ticket> t1 = c.submit_read(oid, e.dkey(), e.akey(), e.offset, op->cipher);
    if (!t1.is_ok()) return t1.status();
    op->remaining = 1;
    tickets_[{e.cont, *t1}] = op;
    Result<client::Ticket> t2 = c.submit_read(oid, e.dkey(), records_akey, records_offset, op->records);
    if (!t2.is_ok()) {
      op->status = t2.status();  // the first ends the op when it completes
      return Status::ok();
    }
    op->remaining = 2;
    tickets_[{e.cont, *t2}] = op;
    return Status::ok();
  }

  // A bounce buffer for one sealed I/O (1 MiB of ciphertext and its records), kept for the next once done: fresh
  // ones would cost their page faults every time.
  std::unique_ptr<uint8_t[]> take_bounce() {
    if (bounces_.empty())
      return std::unique_ptr<uint8_t[]>(
          new uint8_t[client::kMaxIoBytes + client::kMaxIoBytes / kSealBlock * kSealRecord]);
    auto b = std::move(bounces_.back());
    bounces_.pop_back();
    return b;
  }

  // Seals (a write's) or opens (a read's) an op's blocks a slice at a time, moving the fabric between slices:
  // over shared memory and TCP it is this thread that pushes and pulls the other requests' bytes, which would
  // otherwise wait for the whole 1 MiB's cipher, and the targets with them.
  Status crypt_in_slices(Op& op, bool seal) {
    constexpr size_t kSlice = 16;  // blocks
    size_t blocks = op.length / kSealBlock;
    for (size_t b = 0; b < blocks; b += kSlice) {
      if (b > 0) {
        bool busy = false;
        collect(0, &busy);
      }
      size_t n = std::min(kSlice, blocks - b);
      auto bytes = [&](std::span<uint8_t> x) { return x.subspan(b * kSealBlock, n * kSealBlock); };
      std::span<uint8_t> records = op.records.subspan(b * kSealRecord, n * kSealRecord);
      RFOS_RETURN_IF_ERROR(seal
                               ? sealer_->seal(bytes(op.app), op.place, op.first_block + b, bytes(op.cipher), records)
                               : sealer_->open(bytes(op.cipher), records, op.place, op.first_block + b, bytes(op.app)));
    }
    return Status::ok();
  }

  // Completions of the containers' I/O: the ops they end are done once the app has their completions (a sealed
  // read once opened).
  void reap(int timeout_ms, bool* busy) {
    collect(timeout_ms, busy);
    while (!ready_.empty()) {
      std::shared_ptr<Op> op = std::move(ready_.front());
      ready_.pop_front();
      if (op->status.is_ok() && op->read && sealer_) op->status = crypt_in_slices(*op, false);
      pending_.push_back(
          {op->user_data, static_cast<uint16_t>(op->status.code()), 0, op->status.is_ok() ? op->length : 0});
      share_.done(member_, op->cost);
      shared_ -= op->cost;
      op->hold.release();
      if (op->bounce) bounces_.push_back(std::move(op->bounce));
    }
  }

  // Takes the containers' completions; an op whose requests have all completed goes to ready_.
  void collect(int timeout_ms, bool* busy) {
    for (auto& [h, o] : conts_) {
      if (o.cont->in_flight() == 0) continue;
      for (const client::Completion& c : o.cont->poll(64, timeout_ms)) {
        auto it = tickets_.find({h, c.ticket});
        if (it == tickets_.end()) continue;
        std::shared_ptr<Op> op = std::move(it->second);
        tickets_.erase(it);
        *busy = true;
        --op->remaining;
        Status s = c.status;
        if (!op->read && op->records.size() > 0) {
          // A sealed write: a half that failed is sent again while the op holds its blocks (else the block would
          // not open), and records that could not be sent go once the ciphertext's call has ended.
          const bool records = c.ticket == op->records_ticket;
          while (!s.is_ok() && op->resends < kMaxResends) {
            ++op->resends;
            s = send_half(h, op, records);
          }
          while (s.is_ok() && !records && op->records_unsent && op->resends < kMaxResends) {
            ++op->resends;
            op->records_unsent = !send_half(h, op, true).is_ok();
          }
          if (s.is_ok() && op->records_unsent && op->remaining == 0)
            s = error(StatusCode::kIoError, "a sealed write's records could not be sent");
        }
        if (op->status.is_ok() && !s.is_ok()) op->status = s;
        if (op->remaining == 0) ready_.push_back(std::move(op));
      }
      timeout_ms = 0;
    }
  }

  // Completions go into the ring as they come; a sleeping app is woken (a system call on each side) once a
  // half of what it has in flight is done, when nothing more is in flight, or 50 us after the first
  // completion it has not been woken for: interrupt moderation, so an app at depth pays one wake-up for several
  // completions, and never waits long for one.
  Status post_completions() {
    uint32_t posted = 0;
    while (!pending_.empty()) {
      RFOS_ASSIGN_OR_RETURN(bool room, ends_->cq.has_room());
      if (!room) break;
      ends_->cq.push(pending_.front());
      pending_.pop_front();
      ++posted;
    }
    if (posted > 0) {
      ends_->cq.publish(false);
      if (unrung_ == 0) unrung_since_ = std::chrono::steady_clock::now();
      unrung_ += posted;
    }
    if (unrung_ > 0 && (unrung_ * 2 >= tickets_.size() + unrung_ || tickets_.empty() ||
                        std::chrono::steady_clock::now() - unrung_since_ >= kRingAfter)) {
      ends_->cq.ring();
      unrung_ = 0;
    }
    return Status::ok();
  }

  // The app is gone: what it left in flight ends (the targets may still be moving bytes into its buffer, which
  // stays mapped here until they are done), then everything goes.
  void drain(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!tickets_.empty() && std::chrono::steady_clock::now() < deadline) {
      bool busy = false;
      reap(10, &busy);
    }
  }

  const AgentConfig& config_;
  int fd_;  // the agent's: closed when this thread was joined
  Peer peer_;
  std::string tenant_;
  std::shared_ptr<Sealer> sealer_;  // the tenant's, when it seals its data
  std::shared_ptr<TenantQos> qos_;  // the tenant's limits, when it has some
  FairShare& share_;                // the agent's, between tenants
  FairShare::Member member_;        // this app's tenant in it
  double shared_ = 0;               // this app's ops' part of member_'s in-flight share
  bool held_ = false;               // the tenants' sharing held a submission back on this turn
  bool blocked_ = false;            // a submission was left in the ring for blocks other I/O holds (sealing tenants)
  uint64_t seen_ = 0;               // the block locks' releases then
  std::optional<std::chrono::steady_clock::time_point> blocked_since_;  // the ring's first submission, blocked
  client::BlockLocks::Want want_;                                       // its blocks, when it writes
  // Read by other apps' threads (FairShare::watch): now_ns() before which the limits let nothing more go, and
  // whether this thread would take from the ring now (set as take_submissions ends, cleared while it serves a
  // message of the socket).
  std::atomic<uint64_t> throttled_until_{0};
  std::atomic<bool> takes_{false};
  std::vector<std::unique_ptr<uint8_t[]>> bounces_;  // free bounce buffers of sealed I/O
  std::unique_ptr<client::ControlClient> control_;
  struct Served {  // the app's mount, served here (serve_mount)
    std::unique_ptr<posix::Namespace> ns;
    std::shared_ptr<std::atomic<bool>> stop;
    std::thread thread;
  };
  std::unique_ptr<Served> served_;
  std::atomic<uint32_t>& mounts_;  // the agent's, served now
  bool counted_ = false;           // this app's mount is in mounts_
  bool hello_ = false;
  std::unique_ptr<RingRegion> ring_;
  std::unique_ptr<AgentEnds> ends_;
  int buffer_fd_ = -1;
  uint8_t* buffer_ = nullptr;
  size_t buffer_bytes_ = 0;
  std::map<uint32_t, Open> conts_;
  struct Lent {
    uint32_t handle = 0;
    uint64_t until_ms = 0;  // of now_ns()'s clock
  };
  static constexpr size_t kMaxGrants = 16;
  std::map<std::string, Lent> grants_;  // by id: the grants this app's containers made (kGrant)
  std::map<std::string, std::unique_ptr<posix::Namespace>> namespaces_;  // namespace_of's
  uint32_t next_handle_ = 1;
  std::map<std::pair<uint32_t, client::Ticket>, std::shared_ptr<Op>> tickets_;  // requests in flight
  std::deque<std::shared_ptr<Op>> ready_;                     // ops whose requests have all completed, not yet answered
  std::deque<Cqe> pending_;                                   // completions not yet in the ring
  static constexpr std::chrono::microseconds kRingAfter{50};  // the longest a completion waits for its wake-up
  static constexpr std::chrono::microseconds kIdleSpin{200};  // on the ring after the last event, before sleeping
  uint32_t unrung_ = 0;                                       // completions in the ring the app was not woken for
  std::chrono::steady_clock::time_point busy_at_;             // when the loop last found something to do
  std::chrono::steady_clock::time_point unrung_since_;
};

}  // namespace

class Agent::Impl {
 public:
  AgentConfig config;
  std::unique_ptr<client::ControlClient> control;
  int listen_fd = -1;
  int stop_fd = -1;
  std::thread acceptor;
  std::mutex mu;
  struct App {
    std::thread thread;
    int fd = -1;  // closed once the thread is joined, so that stop() never shuts down a reused number
    uint32_t uid = 0;
    std::atomic<bool> done{false};
  };
  std::list<App> apps;
  std::atomic<size_t> live{0};
  std::unique_ptr<FairShare> share;
  std::atomic<uint32_t> mounts{0};        // served for apps now (AppConn::serve_mount)
  std::map<std::string, Tenant> tenants;  // the config's, and each user's own as its first app comes (under mu)
  bool stopped = false;

  ~Impl() {
    stop();
    if (listen_fd >= 0) {
      close(listen_fd);
      unlink(config.listen.c_str());
    }
    if (stop_fd >= 0) close(stop_fd);
  }

  void stop() {
    {
      std::lock_guard lock(mu);
      if (stopped) return;
      stopped = true;
    }
    uint64_t one = 1;
    (void)!write(stop_fd, &one, sizeof(one));
    if (acceptor.joinable()) acceptor.join();
    std::lock_guard lock(mu);
    // Each app's thread sees its socket end; the app itself hears once that thread drained what it started.
    for (App& a : apps) shutdown(a.fd, SHUT_RD);
    for (App& a : apps) {
      a.thread.join();
      close(a.fd);
    }
    apps.clear();
  }

  // The tenant of an app's user, or an error when none takes it.
  Result<std::string> tenant_of(const Peer& p) const {
    if (config.tenants.empty()) return user_name(p.uid);
    for (const TenantConfig& t : config.tenants) {
      for (const std::string& u : t.users)
        if (uid_of(u) == p.uid) return t.name;
      for (const std::string& g : t.groups) {
        uint32_t gid = gid_of(g);
        if (gid == p.gid || std::find(p.groups.begin(), p.groups.end(), gid) != p.groups.end()) return t.name;
      }
    }
    return error(StatusCode::kPermissionDenied, p.describe() + " is in no tenant of this agent");
  }

  void accept_loop() {
    accept_until_stopped(listen_fd, stop_fd, SOCK_CLOEXEC, [this](int fd) {
      reap_finished();
      admit(fd);
    });
  }

  void admit(int fd) {
    auto refuse = [fd](const Status& s) {
      (void)send_message(fd, error_message(0, s));
      close(fd);
    };
    auto cred = peer_cred(fd);
    if (!cred.is_ok()) return refuse(cred.status());
    Peer peer{*cred};
    auto tenant = tenant_of(peer);
    if (!tenant.is_ok()) return refuse(tenant.status());
    std::lock_guard lock(mu);
    if (live.load() >= config.max_apps) return refuse(error(StatusCode::kBusy, "the agent serves its most apps"));
    // One local user cannot take every connection (each holds a thread) from the others.
    size_t mine = std::count_if(apps.begin(), apps.end(), [&](const App& x) { return !x.done && x.uid == peer.uid; });
    if (mine >= config.max_apps_per_user)
      return refuse(error(StatusCode::kBusy, "this user has " + std::to_string(mine) + " apps on the agent already (" +
                                                 "max_apps_per_user)"));
    ++live;
    Tenant& t = tenants[*tenant];
    if (!t.share) {  // a user's own tenant: weight 1, no limits, not sealed
      t.name = *tenant;
      t.share = share->join(1);
    }
    App& a = apps.emplace_back();
    a.fd = fd;
    a.uid = peer.uid;
    a.thread = std::thread([this, &a, p = peer, &t]() mutable {
      // Named for its tenant, so `top -H` or /proc shows which tenant's apps the agent's CPU goes to.
      pthread_setname_np(pthread_self(), ("app:" + t.name).substr(0, 15).c_str());
      {
        AppConn conn(config, *control, a.fd, std::move(p), t, *share, mounts);
        conn.run();
      }
      --live;
      a.done = true;
    });
  }

  // Joins the threads of apps that have gone, so a long-lived agent keeps no thread it ever started.
  void reap_finished() {
    std::lock_guard lock(mu);
    for (auto it = apps.begin(); it != apps.end();) {
      if (!it->done.load()) {
        ++it;
        continue;
      }
      it->thread.join();
      close(it->fd);
      it = apps.erase(it);
    }
  }
};

Status load_agent_config(const std::string& path, AgentConfig* config) {
  RFOS_ASSIGN_OR_RETURN(
      YAML::Node root,
      load_yaml_mapping(path, {"control_address", "provider", "listen", "cpus", "max_buffer_bytes", "max_apps",
                               "max_apps_per_user", "timeout_ms", "tls_ca", "tls_cert", "tls_key", "tenants",
                               "state_dir", "agent_id", "share_depth", "max_mounts"}));
  if (root.IsNull()) return Status::ok();
  try {
    if (root["control_address"]) config->control_address = root["control_address"].as<std::string>();
    if (root["provider"]) config->provider = root["provider"].as<std::string>();
    if (root["listen"]) config->listen = root["listen"].as<std::string>();
    if (root["cpus"]) config->cpus = root["cpus"].as<std::string>();
    if (root["max_buffer_bytes"]) config->max_buffer_bytes = root["max_buffer_bytes"].as<uint64_t>();
    if (root["max_apps"]) config->max_apps = root["max_apps"].as<uint32_t>();
    if (root["max_apps_per_user"]) config->max_apps_per_user = root["max_apps_per_user"].as<uint32_t>();
    if (root["timeout_ms"]) config->timeout_ms = root["timeout_ms"].as<uint32_t>();
    if (root["tls_ca"]) config->tls.ca = root["tls_ca"].as<std::string>();
    if (root["tls_cert"]) config->tls.cert = root["tls_cert"].as<std::string>();
    if (root["tls_key"]) config->tls.key = root["tls_key"].as<std::string>();
    if (root["state_dir"]) config->state_dir = root["state_dir"].as<std::string>();
    if (root["agent_id"]) config->agent_id = root["agent_id"].as<uint32_t>();
    if (root["share_depth"]) config->share_depth = root["share_depth"].as<double>();
    if (root["max_mounts"]) config->max_mounts = root["max_mounts"].as<uint32_t>();
    if (!(config->share_depth >= 1))
      return error(StatusCode::kInvalidArgument, path + ": share_depth must be at least 1");
    if (root["tenants"]) {
      config->tenants.clear();
      for (const auto& t : root["tenants"]) {
        TenantConfig tc;
        RFOS_RETURN_IF_ERROR(
            check_yaml_keys(t, {"name", "users", "groups", "key_file", "weight", "qos"}, path, "tenant"));
        tc.name = t["name"].as<std::string>();
        if (t["users"]) tc.users = t["users"].as<std::vector<std::string>>();
        if (t["groups"]) tc.groups = t["groups"].as<std::vector<std::string>>();
        if (t["key_file"]) tc.key_file = t["key_file"].as<std::string>();
        if (t["weight"]) tc.weight = t["weight"].as<double>();
        if (!(tc.weight > 0)) return error(StatusCode::kInvalidArgument, path + ": a tenant's weight must be above 0");
        if (const YAML::Node q = t["qos"]) {
          RFOS_RETURN_IF_ERROR(check_yaml_keys(q, {"iops", "bytes_per_s", "burst_ios", "burst_bytes"}, path, "qos"));
          if (q["iops"]) tc.qos.iops = q["iops"].as<double>();
          if (q["bytes_per_s"]) tc.qos.bytes_per_s = q["bytes_per_s"].as<double>();
          if (q["burst_ios"]) tc.qos.burst_ios = q["burst_ios"].as<double>();
          if (q["burst_bytes"]) tc.qos.burst_bytes = q["burst_bytes"].as<double>();
          if (tc.qos.iops < 0 || tc.qos.bytes_per_s < 0 || tc.qos.burst_ios < 0 || tc.qos.burst_bytes < 0)
            return error(StatusCode::kInvalidArgument, path + ": qos values must not be negative");
        }
        if (tc.name.empty()) return error(StatusCode::kInvalidArgument, path + ": a tenant without a name");
        for (const TenantConfig& other : config->tenants)
          if (other.name == tc.name) return error(StatusCode::kInvalidArgument, path + ": two tenants " + tc.name);
        config->tenants.push_back(std::move(tc));
      }
    }
  } catch (const YAML::Exception& e) {
    return error(StatusCode::kInvalidArgument, "config file " + path + ": " + e.what());
  }
  return Status::ok();
}

Status pin_to_cpus(const std::string& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  auto bad = [&] { return error(StatusCode::kInvalidArgument, "'" + cpus + "' is not a CPU list (like 1 or 2-3,6)"); };
  std::string_view rest = cpus;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    size_t dash = part.find('-');
    uint32_t lo, hi;
    if (!parse_u32(part.substr(0, dash), &lo)) return bad();
    hi = lo;
    if (dash != std::string_view::npos && !parse_u32(part.substr(dash + 1), &hi)) return bad();
    if (hi < lo || hi >= CPU_SETSIZE) return bad();
    for (uint32_t c = lo; c <= hi; ++c) CPU_SET(c, &set);
  }
  if (CPU_COUNT(&set) == 0) return bad();
  if (sched_setaffinity(0, sizeof(set), &set) != 0) return sys_error("sched_setaffinity " + cpus);
  return Status::ok();
}

Result<std::unique_ptr<Agent>> Agent::start(const AgentConfig& config) {
  const std::string& path = config.listen;
  if (!config.cpus.empty()) RFOS_RETURN_IF_ERROR(pin_to_cpus(config.cpus));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->share = std::make_unique<FairShare>(config.share_depth);
  for (const TenantConfig& t : config.tenants) {
    Tenant& x = impl->tenants[t.name];
    x.name = t.name;
    x.share = impl->share->join(t.weight);
    if (t.qos.limited()) {
      x.qos = std::make_shared<TenantQos>(t.qos, now_ns());
      // The targets hold the tenant to the same limits across every agent that serves it.
      auto whole = [](double v) { return std::to_string(static_cast<uint64_t>(std::ceil(v))); };
      x.server_limits = whole(t.qos.iops) + ":" + whole(t.qos.burst_ios) + ":" + whole(t.qos.bytes_per_s) + ":" +
                        whole(t.qos.burst_bytes) + ":" + t.name;
    }
    if (t.key_file.empty()) continue;
    RFOS_ASSIGN_OR_RETURN(std::string key, load_key_file(t.key_file));
    if (mkdir(config.state_dir.c_str(), 0700) != 0 && errno != EEXIST) return sys_error("create " + config.state_dir);
    auto sealer = Sealer::open(key, config.state_dir + "/" + t.name + ".nonce", config.agent_id);
    if (!sealer.is_ok()) return sealer.status();
    x.sealer = std::move(sealer).value();
  }
  impl->control = client::ControlClient::create(
      config.control_address.empty() ? client::default_control_address() : config.control_address, 5000, config.tls);
  impl->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) return sys_error("eventfd");
  // Every local user may connect: the tenants and the server's ACLs decide what each may do.
  RFOS_ASSIGN_OR_RETURN(impl->listen_fd, listen_local(path, SOCK_SEQPACKET,
                                                      {"agent socket", "agent",
                                                       " (--listen a socket in a directory this user may create)",
                                                       StatusCode::kAlreadyExists}));
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;
void Agent::stop() { impl_->stop(); }
std::string Agent::socket_path() const { return impl_->config.listen; }
size_t Agent::apps() const { return impl_->live.load(); }

}  // namespace rfos::agent
