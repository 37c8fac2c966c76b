#include "agent/agent_client.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include "common/local_socket.h"

namespace rfos::agent {

namespace {

Status sys_error(const std::string& what) { return error(StatusCode::kIoError, what + ": " + std::strerror(errno)); }

Status gone() { return error(StatusCode::kShutdown, "the agent is gone (its connection hung up)"); }

}  // namespace

Result<std::unique_ptr<AgentClient>> AgentClient::connect(const std::string& socket,
                                                          const AgentClientOptions& options) {
  std::unique_ptr<AgentClient> c(new AgentClient());
  c->timeout_ms_ = options.timeout_ms;
  sockaddr_un a{};
  if (socket.size() >= sizeof(a.sun_path)) return error(StatusCode::kInvalidArgument, "socket path too long");
  c->fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (c->fd_ < 0) return sys_error("socket");
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket.c_str(), sizeof(a.sun_path) - 1);
  if (::connect(c->fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED)
      return error(StatusCode::kNotFound,
                   "no rfos agent at " + socket + " (start one: rfos agent --listen " + socket + ")");
    return sys_error("connect to the agent at " + socket);
  }
  if (auto cred = peer_cred(c->fd_); cred.is_ok()) c->agent_pid_ = cred->pid;
  Message hello;
  hello.type = MsgType::kHello;
  hello.version = kProtocolVersion;
  RFOS_ASSIGN_OR_RETURN(Message welcome, c->call(hello));
  if (welcome.type != MsgType::kWelcome) return error(StatusCode::kInvalidArgument, "the agent did not welcome us");
  c->tenant_ = welcome.text;
  if (!options.ring) return c;
  Message setup;
  setup.type = MsgType::kSetup;
  setup.sq_entries = setup.cq_entries = options.entries;
  setup.buffer_bytes = options.buffer_bytes;
  std::vector<int> fds;
  RFOS_ASSIGN_OR_RETURN(Message ready, c->call(setup, &fds));
  if (ready.type != MsgType::kReady || fds.size() != 4) {
    for (int fd : fds) ::close(fd);
    return error(StatusCode::kInvalidArgument, "the agent's answer to setup is not a ring");
  }
  int buffer_fd = fds[1];
  auto ring = RingRegion::attach(fds[0], fds[2], fds[3]);
  if (!ring.is_ok()) {
    ::close(buffer_fd);
    return ring.status();
  }
  c->ring_ = std::move(ring).value();
  struct stat st {};
  if (fstat(buffer_fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != ready.buffer_bytes) {
    ::close(buffer_fd);
    return error(StatusCode::kInvalidArgument, "the shared buffer's size is not what the agent said");
  }
  void* p = mmap(nullptr, ready.buffer_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, buffer_fd, 0);
  ::close(buffer_fd);
  if (p == MAP_FAILED) return sys_error("map the shared buffer");
  c->buffer_ = static_cast<uint8_t*>(p);
  c->buffer_bytes_ = ready.buffer_bytes;
  c->ends_ = std::make_unique<AppEnds>(*c->ring_);
  return c;
}

AgentClient::~AgentClient() {
  if (buffer_) munmap(buffer_, buffer_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

// The agent may have refused the connection and closed it before it read a request (no tenant, too many apps):
// its reason may still be queued behind the reset the close reported.
Status AgentClient::refusal_or_gone() {
  char buf[kMaxMessageBytes];
  for (int i = 0; i < 2; ++i) {
    ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      auto m = decode_message(std::string_view(buf, static_cast<size_t>(n)));
      if (m.is_ok() && !status_of(*m).is_ok()) return status_of(*m);
      break;
    }
    if (n == 0 || errno != ECONNRESET) break;  // a reset is reported once; what was queued comes after it
  }
  return gone();
}

Status AgentClient::send_request(const Message& m, int send_fd) {
  std::string bytes = encode_message(m);
  iovec out{bytes.data(), bytes.size()};
  msghdr sh{};
  sh.msg_iov = &out;
  sh.msg_iovlen = 1;
  alignas(cmsghdr) char passed[CMSG_SPACE(sizeof(int))];
  if (send_fd >= 0) {
    sh.msg_control = passed;
    sh.msg_controllen = sizeof(passed);
    cmsghdr* c = CMSG_FIRSTHDR(&sh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &send_fd, sizeof(int));
  }
  if (sendmsg(fd_, &sh, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    if (errno != EPIPE && errno != ECONNRESET) return sys_error("send to the agent");
    return refusal_or_gone();
  }
  return Status::ok();
}

Result<Message> AgentClient::receive_answer(uint32_t id, std::vector<int>* fds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pf{fd_, POLLIN, 0};
    int got = ::poll(&pf, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (got == 0)
      return error(StatusCode::kTimeout, "no answer from the agent within " + std::to_string(timeout_ms_) + " ms");
    if (got < 0) return sys_error("poll");
    RFOS_ASSIGN_OR_RETURN(std::optional<Message> r, receive_one(id, fds));
    // nullopt: the late answer to a call that timed out before, dropped (else each later call would read the
    // answer to the one before it).
    if (r) return std::move(*r);
  }
}

// Reads one message of the socket: the answer to call `id`, or nullopt for an answer to an earlier call.
Result<std::optional<Message>> AgentClient::receive_one(uint32_t id, std::vector<int>* fds) {
  std::vector<char> buf(kMaxMessageBytes + 1);
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = control;
  h.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(fd_, &h, MSG_CMSG_CLOEXEC);
  if (n == 0 || (n < 0 && errno == ECONNRESET)) return refusal_or_gone();
  if (n < 0) return sys_error("receive from the agent");
  std::vector<int> got_fds;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm; cm = CMSG_NXTHDR(&h, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      got_fds.push_back(fd);
    }
  }
  auto close_fds = [&] {
    for (int fd : got_fds) ::close(fd);
  };
  if (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    close_fds();
    return error(StatusCode::kInvalidArgument, "the agent sent a message too long");
  }
  auto r = decode_message(std::string_view(buf.data(), static_cast<size_t>(n)));
  if (!r.is_ok() || !status_of(*r).is_ok() || r->id != id || !fds) close_fds();
  if (!r.is_ok()) return r.status();
  // An error with id 0 is the agent refusing the connection before it read a request.
  if (Status s = status_of(*r); !s.is_ok() && (r->id == id || r->id == 0)) return s;
  if (r->id != 0 && r->id < id) {
    drop_late(*r);
    return std::optional<Message>();
  }
  if (r->id != id) return error(StatusCode::kInvalidArgument, "the agent answered another request");
  if (fds) *fds = std::move(got_fds);
  return std::optional<Message>(std::move(*r));
}

Result<Message> AgentClient::call(const Message& m, std::vector<int>* fds, int send_fd) {
  Message q = m;
  q.id = next_id_++;
  RFOS_RETURN_IF_ERROR(send_request(q, send_fd));
  auto r = receive_answer(q.id, fds);
  if (r.status().code() == StatusCode::kTimeout) timed_out_[q.id] = q.type;  // its answer may still come
  return r;
}

// The late answer to a call that timed out: what it made in the agent, which the app can no longer name, goes
// (an opened handle is closed; the close's own answer is dropped the same way).
void AgentClient::drop_late(const Message& r) {
  auto it = timed_out_.find(r.id);
  if (it == timed_out_.end()) return;
  const MsgType asked = it->second;
  timed_out_.erase(it);
  if (asked != MsgType::kOpen || r.type != MsgType::kOpened || !status_of(r).is_ok()) return;
  Message close;
  close.type = MsgType::kClose;
  close.handle = r.handle;
  close.id = next_id_++;
  if (send_request(close).is_ok()) timed_out_[close.id] = MsgType::kClose;
}

// Late answers queued on the socket while no call waits: taken off it, or every wait on the ring would find the
// socket readable and wake at once. kShutdown when the agent hung up.
Status AgentClient::drain_late() {
  for (;;) {
    pollfd pf{fd_, POLLIN, 0};
    if (::poll(&pf, 1, 0) <= 0 || !(pf.revents & POLLIN)) return Status::ok();
    // Any answer now is late: no call is in flight while the ring is polled. Taken and dropped; only a
    // hang-up (or the agent's last word before one) ends the wait.
    auto r = receive_one(next_id_, nullptr);
    if (!r.is_ok() && r.status().code() == StatusCode::kShutdown) return r.status();
  }
}

Result<uint32_t> AgentClient::open(const std::string& pool, const std::string& cont, bool write) {
  Message m;
  m.type = MsgType::kOpen;
  m.pool = pool;
  m.cont = cont;
  m.write = write;
  RFOS_ASSIGN_OR_RETURN(Message r, call(m));
  if (r.type != MsgType::kOpened)
    return error(StatusCode::kInvalidArgument, "the agent's answer to open is not a handle");
  return r.handle;
}

Status AgentClient::close(uint32_t handle) {
  Message m;
  m.type = MsgType::kClose;
  m.handle = handle;
  return call(m).status();
}

Result<std::string> AgentClient::grant(uint32_t handle, std::span<const uint8_t> bytes, bool targets_write,
                                       std::string_view scope, uint32_t ttl_ms) {
  if (bytes.empty() || bytes.data() < buffer_ || bytes.data() + bytes.size() > buffer_ + buffer_bytes_)
    return error(StatusCode::kInvalidArgument, "a grant lends bytes of the shared buffer only (1 or more)");
  Message m;
  m.type = MsgType::kGrant;
  m.handle = handle;
  m.value = static_cast<uint64_t>(bytes.data() - buffer_);
  m.buffer_bytes = bytes.size();
  m.write = targets_write;
  m.akey = scope;
  m.epoch = ttl_ms;
  RFOS_ASSIGN_OR_RETURN(Message r, call(m));
  if (r.type != MsgType::kDone || r.text.size() != 16)
    return error(StatusCode::kInvalidArgument, "the agent's answer to a grant is not a grant's id");
  return r.text;
}

Status AgentClient::revoke_grant(uint32_t handle, std::string_view id) {
  Message m;
  m.type = MsgType::kRevoke;
  m.handle = handle;
  m.dkey = id;
  return call(m).status();
}

Result<uint64_t> AgentClient::array_size(uint32_t handle, const ObjectId& oid, std::string_view dkey,
                                         std::string_view akey) {
  return keys(KeyOp::kArraySize, handle, oid, dkey, akey, 0);
}

Result<uint64_t> AgentClient::keys(KeyOp op, uint32_t handle, const ObjectId& oid, std::string_view dkey,
                                   std::string_view akey, uint64_t arg) {
  Message m;
  m.type = MsgType::kKeys;
  m.handle = handle;
  std::memcpy(m.oid, &oid.hi, 8);
  std::memcpy(m.oid + 8, &oid.lo, 8);
  m.dkey = dkey;
  m.akey = akey;
  m.value = static_cast<uint64_t>(op);
  m.buffer_bytes = arg;
  RFOS_ASSIGN_OR_RETURN(Message r, call(m));
  return r.value;
}

Status AgentClient::went() {
  gone_ = true;
  in_flight_ = 0;
  return gone();
}

Status AgentClient::submit(RingOp op, uint32_t handle, const ObjectId& oid, std::string_view dkey,
                           std::string_view akey, uint64_t offset, std::span<uint8_t> bytes, uint64_t user_data) {
  if (gone_) return gone();
  if (!bytes.empty() && (bytes.data() < buffer_ || bytes.data() + bytes.size() > buffer_ + buffer_bytes_))
    return error(StatusCode::kInvalidArgument, "the bytes must lie in the agent's shared buffer");
  if (dkey.size() + akey.size() > kSqeKeyBytes)
    return error(StatusCode::kInvalidArgument,
                 "dkey and akey longer than " + std::to_string(kSqeKeyBytes) + " bytes together");
  RFOS_ASSIGN_OR_RETURN(bool room, ends_->sq.has_room());
  if (!room) return error(StatusCode::kBusy, "the submission queue is full");
  Sqe e;
  e.user_data = user_data;
  e.op = static_cast<uint8_t>(op);
  e.cont = handle;
  std::memcpy(e.oid, &oid.hi, 8);
  std::memcpy(e.oid + 8, &oid.lo, 8);
  e.offset = offset;
  e.length = bytes.size();
  e.buf = bytes.empty() ? 0 : static_cast<uint64_t>(bytes.data() - buffer_);
  e.dkey_len = static_cast<uint8_t>(dkey.size());
  e.akey_len = static_cast<uint8_t>(akey.size());
  std::memcpy(e.keys, dkey.data(), dkey.size());
  std::memcpy(e.keys + dkey.size(), akey.data(), akey.size());
  ends_->sq.push(e);
  ends_->sq.publish();
  ++in_flight_;
  return Status::ok();
}

Result<std::vector<AgentCompletion>> AgentClient::poll(size_t max, int timeout_ms) {
  std::vector<AgentCompletion> out;
  if (gone_) return gone();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    RFOS_ASSIGN_OR_RETURN(uint32_t n, ends_->cq.ready());
    for (uint32_t i = 0; i < n && out.size() < max; ++i) {
      Cqe c = ends_->cq.take();
      Status s = c.code == 0
                     ? Status::ok()
                     : error(static_cast<StatusCode>(c.code),
                             std::string(status_code_name(static_cast<StatusCode>(c.code))) + " from the agent");
      out.push_back({c.user_data, std::move(s), c.length});
      if (in_flight_ > 0) --in_flight_;
    }
    if (!out.empty()) {
      ends_->cq.release();
      empty_polls_ = 0;
      return out;
    }
    int left = timeout_ms;
    if (timeout_ms >= 0) {
      auto now = std::chrono::steady_clock::now();
      // A caller that spins with no wait must hear of an agent that died too: every 64th empty poll looks at
      // the socket (a system call, which a spinning app should not pay on every turn).
      if (now >= deadline) {
        if ((++empty_polls_ & 63) == 0 || timeout_ms > 0) {
          pollfd p{fd_, POLLIN, 0};
          if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) return went();
        }
        return out;
      }
      left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    }
    // The socket beside the eventfd: an agent that dies ends the wait at once.
    Status w = ends_->cq.wait(left, fd_);
    if (w.code() == StatusCode::kShutdown) return went();
    RFOS_RETURN_IF_ERROR(w);
    Status late = drain_late();
    if (late.code() == StatusCode::kShutdown) return went();
    RFOS_RETURN_IF_ERROR(late);
  }
}

Status AgentClient::io(RingOp op, uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                       uint64_t offset, std::span<uint8_t> bytes) {
  if (in_flight_ > 0) return error(StatusCode::kBusy, "synchronous I/O with submissions in flight");
  uint64_t tag = (uint64_t{1} << 63) | next_sync_++;
  RFOS_RETURN_IF_ERROR(submit(op, handle, oid, dkey, akey, offset, bytes, tag));
  for (;;) {
    RFOS_ASSIGN_OR_RETURN(auto done, poll(1, -1));
    for (auto& c : done)
      if (c.user_data == tag) return c.status;
  }
}

Status AgentClient::write(uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                          uint64_t offset, std::span<uint8_t> bytes) {
  return io(RingOp::kWrite, handle, oid, dkey, akey, offset, bytes);
}

Status AgentClient::read(uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                         uint64_t offset, std::span<uint8_t> bytes) {
  return io(RingOp::kRead, handle, oid, dkey, akey, offset, bytes);
}

AgentClient::ControlRelay AgentClient::control_relay(const std::string& socket, uint32_t timeout_ms) {
  AgentClientOptions o;
  o.ring = false;
  o.timeout_ms = timeout_ms;
  auto app = connect(socket, o);
  if (!app.is_ok())
    return [failed = app.status()](const std::string&, const std::string&) -> Result<std::string> { return failed; };
  auto shared = std::shared_ptr<AgentClient>(std::move(app).value());
  auto mu = std::make_shared<std::mutex>();
  return [shared, mu](const std::string& type, const std::string& request) {
    std::lock_guard lock(*mu);
    return shared->relay_control(type, request);
  };
}

Result<std::string> AgentClient::relay_control(const std::string& type, const std::string& request) {
  if (request.size() > kMaxMessageBytes - 256)
    return error(StatusCode::kTooLarge, "a control request too long to relay");
  Message m;
  m.type = MsgType::kControl;
  m.text = type;
  m.blob = request;
  RFOS_ASSIGN_OR_RETURN(Message answer, call(m));
  if (answer.type != MsgType::kControlled)
    return error(StatusCode::kInvalidArgument, "the agent's answer to a control call");
  return std::move(answer.blob);
}

Message AgentClient::object_request(ObjectOp op, const std::string& pool, const std::string& cont,
                                    const std::string& key, uint32_t mode, uint64_t batch, const std::string& anchor) {
  Message m;
  m.type = MsgType::kObject;
  m.id = next_id_++;
  m.pool = pool;
  m.cont = cont;
  m.text = key;
  m.value = static_cast<uint64_t>(op);
  m.handle = mode;
  m.buffer_bytes = batch;
  m.dkey = anchor;
  m.epoch = snapshot_;
  return m;
}

Result<Message> AgentClient::object_call(ObjectOp op, const std::string& pool, const std::string& cont,
                                         const std::string& key, uint32_t mode, uint64_t batch,
                                         const std::string& anchor) {
  Message m = object_request(op, pool, cont, key, mode, batch, anchor);
  RFOS_RETURN_IF_ERROR(send_request(m));
  return receive_answer(m.id);
}

Result<uint64_t> AgentClient::put_object(const std::string& pool, const std::string& cont, const std::string& key,
                                         uint32_t mode, const std::function<Result<size_t>(std::span<uint8_t>)>& source,
                                         const std::function<void(uint64_t)>& progress) {
  if (!buffer_) return error(StatusCode::kInvalidArgument, "no shared buffer (connect with a ring)");
  Message m = object_request(ObjectOp::kPut, pool, cont, key, mode);
  RFOS_RETURN_IF_ERROR(send_request(m));
  uint64_t sent = 0;
  for (;;) {
    RFOS_ASSIGN_OR_RETURN(Message r, receive_answer(m.id));
    if (r.type == MsgType::kDone) return r.value;
    if (r.type != MsgType::kNext) return error(StatusCode::kInvalidArgument, "the agent's answer to a put");
    // The agent took the last chunk: the next one, as much as the buffer holds.
    size_t n = 0;
    while (n < buffer_bytes_) {
      Result<size_t> got = source(std::span<uint8_t>(buffer_ + n, buffer_bytes_ - n));
      if (!got.is_ok()) {  // the put is given up: the agent stores nothing under the name, and answers
        RFOS_RETURN_IF_ERROR(send_request(error_message(m.id, got.status())));
        (void)receive_answer(m.id);
        return got.status();
      }
      if (*got == 0) break;
      n += *got;
    }
    sent += n;
    if (progress && n > 0) progress(sent);
    Message c;
    c.type = MsgType::kChunk;
    c.id = m.id;
    c.value = n;
    RFOS_RETURN_IF_ERROR(send_request(c));
  }
}

Result<uint64_t> AgentClient::get_object(const std::string& pool, const std::string& cont, const std::string& key,
                                         const std::function<Status(std::span<const uint8_t>)>& sink,
                                         const std::function<void(uint64_t)>& progress) {
  if (!buffer_) return error(StatusCode::kInvalidArgument, "no shared buffer (connect with a ring)");
  Message m = object_request(ObjectOp::kGet, pool, cont, key, 0);
  RFOS_RETURN_IF_ERROR(send_request(m));
  uint64_t got = 0;
  for (;;) {
    RFOS_ASSIGN_OR_RETURN(Message r, receive_answer(m.id));
    if (r.type == MsgType::kDone) return r.value;
    if (r.type != MsgType::kChunk || r.value > buffer_bytes_)
      return error(StatusCode::kInvalidArgument, "the agent's answer to a get");
    if (Status s = sink(std::span<const uint8_t>(buffer_, r.value)); !s.is_ok()) {  // given up: the agent stops
      RFOS_RETURN_IF_ERROR(send_request(error_message(m.id, s)));
      (void)receive_answer(m.id);
      return s;
    }
    got += r.value;
    if (progress) progress(got);
    Message next;
    next.type = MsgType::kNext;
    next.id = m.id;
    RFOS_RETURN_IF_ERROR(send_request(next));
  }
}

Status AgentClient::serve_mount(const std::string& pool, const std::string& cont, const std::string& settings,
                                int fuse_fd) {
  Message m;
  m.type = MsgType::kMount;
  m.pool = pool;
  m.cont = cont;
  m.text = settings;
  RFOS_ASSIGN_OR_RETURN(Message done, call(m, nullptr, fuse_fd));
  if (done.type != MsgType::kDone) return error(StatusCode::kInvalidArgument, "the agent's answer to mount");
  return Status::ok();
}

Status AgentClient::wait_until_closed(const std::function<bool()>& stop) {
  while (!stop()) {
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, 200);
    if (n < 0 && errno != EINTR) return sys_error("poll");
    if (n > 0) {
      char buf[kMaxMessageBytes];
      ssize_t got = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return gone();
      // Nothing is asked now: a message is the agent's last word on the mount before it hangs up.
      auto m = got > 0 ? decode_message(std::string_view(buf, static_cast<size_t>(got))) : Result<Message>(gone());
      if (m.is_ok() && m->id == 0) return status_of(*m);
    }
  }
  return Status::ok();
}

}  // namespace rfos::agent
