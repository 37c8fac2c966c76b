#include "agent/ring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace rfos::agent {

namespace {

bool power_of_two(uint32_t n) { return n >= 1 && n <= kMaxRingEntries && (n & (n - 1)) == 0; }

Status sys_error(const char* what) { return error(StatusCode::kIoError, std::string(what) + ": " + strerror(errno)); }

size_t sq_offset() { return (sizeof(RingHeader) + 127) & ~size_t{127}; }

}  // namespace

size_t ring_region_bytes(uint32_t sq_entries, uint32_t cq_entries) {
  size_t bytes = sq_offset() + size_t{sq_entries} * sizeof(Sqe) + size_t{cq_entries} * sizeof(Cqe);
  return (bytes + 4095) & ~size_t{4095};
}

Result<std::unique_ptr<RingRegion>> RingRegion::create(uint32_t sq_entries, uint32_t cq_entries) {
  if (!power_of_two(sq_entries) || !power_of_two(cq_entries))
    return error(StatusCode::kInvalidArgument,
                 "ring entries must be powers of two up to " + std::to_string(kMaxRingEntries));
  std::unique_ptr<RingRegion> r(new RingRegion());
  r->bytes_ = ring_region_bytes(sq_entries, cq_entries);
  r->memfd_ = memfd_create("rfos-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r->memfd_ < 0) return sys_error("memfd_create");
  if (ftruncate(r->memfd_, static_cast<off_t>(r->bytes_)) != 0) return sys_error("ftruncate");
  // The app gets this descriptor: it must not be able to shrink the region under the agent (a fault there) or
  // seal it otherwise.
  if (fcntl(r->memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return sys_error("F_ADD_SEALS");
  void* p = mmap(nullptr, r->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd_, 0);
  if (p == MAP_FAILED) return sys_error("mmap");
  r->header_ = new (p) RingHeader{};
  r->header_->magic = kRingMagic;
  r->header_->version = kRingVersion;
  r->header_->sq_entries = r->sq_entries_ = sq_entries;
  r->header_->cq_entries = r->cq_entries_ = cq_entries;
  r->sq_event_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  r->cq_event_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (r->sq_event_ < 0 || r->cq_event_ < 0) return sys_error("eventfd");
  return r;
}

Result<std::unique_ptr<RingRegion>> RingRegion::attach(int memfd, int sq_event, int cq_event) {
  std::unique_ptr<RingRegion> r(new RingRegion());
  r->memfd_ = memfd;
  r->sq_event_ = sq_event;
  r->cq_event_ = cq_event;
  struct stat st {};
  if (fstat(memfd, &st) != 0) return sys_error("fstat of the ring");
  if (st.st_size < static_cast<off_t>(sizeof(RingHeader)) || st.st_size > (64 << 20))
    return error(StatusCode::kInvalidArgument, "the ring region has a size no ring has");
  r->bytes_ = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, r->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) return sys_error("mmap of the ring");
  r->header_ = static_cast<RingHeader*>(p);
  const RingHeader& h = *r->header_;
  if (h.magic != kRingMagic || h.version != kRingVersion)
    return error(StatusCode::kInvalidArgument, "not an rfos ring of version " + std::to_string(kRingVersion));
  r->sq_entries_ = h.sq_entries;
  r->cq_entries_ = h.cq_entries;
  if (!power_of_two(r->sq_entries_) || !power_of_two(r->cq_entries_) ||
      ring_region_bytes(r->sq_entries_, r->cq_entries_) != r->bytes_)
    return error(StatusCode::kInvalidArgument, "the ring's header does not match its region");
  return r;
}

RingRegion::~RingRegion() {
  if (header_) munmap(header_, bytes_);
  for (int fd : {memfd_, sq_event_, cq_event_})
    if (fd >= 0) close(fd);
}

Sqe* RingRegion::sqes() const { return reinterpret_cast<Sqe*>(reinterpret_cast<char*>(header_) + sq_offset()); }

Cqe* RingRegion::cqes() const { return reinterpret_cast<Cqe*>(sqes() + sq_entries_); }

Queue<Sqe> RingRegion::sq() const {
  return {&header_->sq_head, &header_->sq_tail, &header_->agent_idle, sqes(), sq_entries_, sq_event_};
}

Queue<Cqe> RingRegion::cq() const {
  return {&header_->cq_head, &header_->cq_tail, &header_->app_idle, cqes(), cq_entries_, cq_event_};
}

template <typename T>
Result<bool> Producer<T>::has_room() {
  uint32_t head = q_.head->load(std::memory_order_acquire);
  uint32_t used = local_tail_ - head;
  if (used > q_.n) return error(StatusCode::kCorruption, "the ring's consumer moved past its producer");
  return used < q_.n;
}

template <typename T>
bool Producer<T>::publish(bool ring_now) {
  q_.tail->store(local_tail_, std::memory_order_release);
  return ring_now && ring();
}

template <typename T>
bool Producer<T>::ring() {
  // Pairs with the consumer's fence between saying it sleeps and looking once more: one of the two sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (q_.idle->load(std::memory_order_relaxed) == 0) return false;
  // One ring per sleep: the producer that clears the flag rings, and a batch pushed one entry at a time before
  // the woken consumer runs again costs one system call, not one each.
  if (q_.idle->exchange(0, std::memory_order_relaxed) == 0) return false;
  uint64_t one = 1;
  return write(q_.event, &one, sizeof(one)) == sizeof(one);
}

template <typename T>
Result<uint32_t> Consumer<T>::ready() {
  uint32_t tail = q_.tail->load(std::memory_order_acquire);
  uint32_t n = tail - local_head_;
  if (n > q_.n) return error(StatusCode::kCorruption, "the ring's producer is more than the ring ahead");
  return n;
}

template <typename T>
Status Consumer<T>::wait(int timeout_ms, int ready_too) {
  q_.idle->store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  Result<uint32_t> n = ready();
  if (!n.is_ok() || *n > 0) {
    q_.idle->store(0, std::memory_order_relaxed);
    return n.status();
  }
  pollfd fds[2] = {{q_.event, POLLIN, 0}, {ready_too, POLLIN, 0}};
  int got = poll(fds, ready_too >= 0 ? 2 : 1, timeout_ms);
  q_.idle->store(0, std::memory_order_relaxed);
  if (got < 0 && errno != EINTR) return sys_error("poll");
  if (fds[0].revents & POLLIN) {
    uint64_t v;
    (void)!read(q_.event, &v, sizeof(v));  // nonblocking: a count a racing ring already took is fine
  }
  if (ready_too >= 0 && (fds[1].revents & (POLLHUP | POLLERR)))
    return error(StatusCode::kShutdown, "the other end hung up");
  return Status::ok();
}

Status check_sqe(const Sqe& e, uint64_t buffer_bytes, uint64_t max_io) {
  auto bad = [](const std::string& why) { return error(StatusCode::kInvalidArgument, "submission refused: " + why); };
  if (e.op > static_cast<uint8_t>(RingOp::kRead)) return bad("unknown op " + std::to_string(e.op));
  if (e.flags != 0) return bad("unknown flags");
  if (e.op == static_cast<uint8_t>(RingOp::kNop)) return Status::ok();
  if (size_t{e.dkey_len} + e.akey_len > kSqeKeyBytes) return bad("keys longer than the entry holds");
  if (e.dkey_len == 0 || e.akey_len == 0) return bad("an empty dkey or akey");
  if (e.length == 0 || e.length > max_io) return bad("length " + std::to_string(e.length) + " out of range");
  if (e.buf > buffer_bytes || e.length > buffer_bytes - e.buf) return bad("bytes outside the shared buffer");
  return Status::ok();
}

template class Producer<Sqe>;
template class Producer<Cqe>;
template class Consumer<Sqe>;
template class Consumer<Cqe>;

AgentEnds::AgentEnds(RingRegion& r) : sq(r.sq()), cq(r.cq()) {}

AppEnds::AppEnds(RingRegion& r) : sq(r.sq()), cq(r.cq()) {}

}  // namespace rfos::agent
