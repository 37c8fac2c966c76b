// The shared-memory rings between an application and `rfos agent` (docs/agent.md): a submission queue the app
// fills and the agent drains, and a completion queue the other way round, both single-producer single-consumer
// and lock-free, in one memory region the agent makes (a sealed memfd: the app can neither shrink nor grow it,
// so the agent never faults on it). Each side sleeps on an eventfd only after it said so in the region; the
// other side rings it only then, so a busy pair makes no system call per request.
//
// The region is shared with a process the agent does not trust: every index read from it is checked (a tail
// more than a ring's size ahead of its head is a broken ring), and an entry is copied out once before anything
// in it is looked at, so the app cannot change it between the check and the use.
//
// Thread-safety: one producer and one consumer per queue, in any two processes or threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"

namespace rfos::agent {

inline constexpr uint32_t kRingMagic = 0x52464f52;  // "RFOR"
inline constexpr uint32_t kRingVersion = 1;
inline constexpr uint32_t kMaxRingEntries = 4096;
inline constexpr size_t kSqeKeyBytes = 72;  // dkey and akey together, inline in the entry

enum class RingOp : uint8_t {
  kNop = 0,    // completes at once (a wake-up or latency probe)
  kWrite = 1,  // array write of [offset, offset+length) from the shared buffer at `buf`
  kRead = 2,   // array read into the shared buffer at `buf`
};

// A submission: 128 bytes, two cache lines.
struct Sqe {
  uint64_t user_data = 0;  // handed back in the completion
  uint8_t op = 0;          // RingOp
  uint8_t dkey_len = 0;
  uint8_t akey_len = 0;
  uint8_t flags = 0;  // none defined: must be 0
  uint32_t cont = 0;  // a container handle from the control channel
  uint8_t oid[16] = {};
  uint64_t offset = 0;  // in the array
  uint64_t length = 0;  // bytes
  uint64_t buf = 0;     // offset of the bytes in the shared buffer
  char keys[kSqeKeyBytes] = {};
  std::string_view dkey() const { return {keys, dkey_len}; }
  std::string_view akey() const { return {keys + dkey_len, akey_len}; }
};
static_assert(sizeof(Sqe) == 128);

// A completion: 16 bytes.
struct Cqe {
  uint64_t user_data = 0;
  uint16_t code = 0;  // StatusCode; 0: done
  uint16_t pad = 0;
  uint32_t length = 0;  // bytes moved
};
static_assert(sizeof(Cqe) == 16);

// The region's header; the entries follow it.
struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t sq_entries;
  uint32_t cq_entries;
  alignas(64) std::atomic<uint32_t> sq_head;  // the agent's
  std::atomic<uint32_t> agent_idle;           // the agent sleeps on the submission eventfd
  alignas(64) std::atomic<uint32_t> sq_tail;  // the app's
  alignas(64) std::atomic<uint32_t> cq_head;  // the app's
  std::atomic<uint32_t> app_idle;             // the app sleeps on the completion eventfd
  alignas(64) std::atomic<uint32_t> cq_tail;  // the agent's
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// One queue of a region, as both its ends see it: the indices and sleep flag in the header, the entries, the
// eventfd its consumer sleeps on.
template <typename T>
struct Queue {
  std::atomic<uint32_t>* head;
  std::atomic<uint32_t>* tail;
  std::atomic<uint32_t>* idle;  // the consumer says it sleeps
  T* entries;
  uint32_t n;  // a power of two
  int event;
};

size_t ring_region_bytes(uint32_t sq_entries, uint32_t cq_entries);

// A mapped region and the two eventfds. The agent creates it; the app attaches to the descriptors it was
// passed. Unmaps and closes what it owns when destroyed.
class RingRegion {
 public:
  // Entries: powers of two, 1 .. kMaxRingEntries (kInvalidArgument otherwise).
  static Result<std::unique_ptr<RingRegion>> create(uint32_t sq_entries, uint32_t cq_entries);
  // Takes the descriptors (closed on failure too). Errors: kInvalidArgument for a region that is not a ring of
  // this version, or whose size does not match its header.
  static Result<std::unique_ptr<RingRegion>> attach(int memfd, int sq_event, int cq_event);
  ~RingRegion();
  RingRegion(const RingRegion&) = delete;
  RingRegion& operator=(const RingRegion&) = delete;

  int memfd() const { return memfd_; }
  int sq_event() const { return sq_event_; }
  int cq_event() const { return cq_event_; }
  RingHeader* header() const { return header_; }
  Sqe* sqes() const;
  Cqe* cqes() const;
  Queue<Sqe> sq() const;  // the submission queue, as both ends use it
  Queue<Cqe> cq() const;
  uint32_t sq_entries() const { return sq_entries_; }  // as made or checked at attach, not as the header says now
  uint32_t cq_entries() const { return cq_entries_; }

 private:
  RingRegion() = default;
  int memfd_ = -1, sq_event_ = -1, cq_event_ = -1;
  RingHeader* header_ = nullptr;
  size_t bytes_ = 0;
  uint32_t sq_entries_ = 0, cq_entries_ = 0;
};

// The producer's end of one queue: push entries, then publish them (one release store for a batch) and ring the
// consumer's eventfd only when it said it sleeps.
template <typename T>
class Producer {
 public:
  explicit Producer(const Queue<T>& q) : q_(q), local_tail_(q.tail->load(std::memory_order_relaxed)) {}
  // Room for one more. kCorruption when the consumer moved its head past what was published (a broken peer).
  Result<bool> has_room();
  // Appends one (has_room() first); unseen by the consumer until publish().
  void push(const T& e) { q_.entries[local_tail_++ & (q_.n - 1)] = e; }
  // Makes what was pushed visible; rings the consumer if it sleeps (unless `ring` is false: then ring() later,
  // or the consumer may sleep with entries waiting). Returns whether it rang.
  bool publish(bool ring = true);
  // Rings the consumer if it sleeps. Returns whether it rang.
  bool ring();

 private:
  Queue<T> q_;
  uint32_t local_tail_;
};

// The consumer's end: take entries as copies, checked against the ring's size.
template <typename T>
class Consumer {
 public:
  explicit Consumer(const Queue<T>& q) : q_(q), local_head_(q.head->load(std::memory_order_relaxed)) {}
  // How many are ready. kCorruption when the producer's tail is more than the ring's size ahead (a broken peer).
  Result<uint32_t> ready();
  // The next one, copied out (ready() first); its slot is given back at release().
  T take() { return q_.entries[local_head_++ & (q_.n - 1)]; }
  // The next one, copied out, left in place; skip() then passes it (use the copy: the slot may change meanwhile).
  T peek() const { return q_.entries[local_head_ & (q_.n - 1)]; }
  void skip() { ++local_head_; }
  void release() {
    q_.head->store(local_head_, std::memory_order_release);
    released_.store(local_head_, std::memory_order_relaxed);
  }
  // From any thread: whether the producer published entries this end has not released, by this end's own count
  // of what it released (the producer may write the shared head too). A hint: the producer writes the tail as it
  // likes, and this end checks what it takes.
  bool waiting() const { return q_.tail->load(std::memory_order_relaxed) != released_.load(std::memory_order_relaxed); }
  // Sleeps on the eventfd until the producer rings it, `ready_too` (another descriptor) is readable, or
  // timeout_ms passes (-1: no limit); says first that it sleeps and returns at once when entries came meanwhile.
  // kCorruption as ready(); kShutdown when `ready_too` hung up.
  Status wait(int timeout_ms, int ready_too = -1);

 private:
  Queue<T> q_;
  uint32_t local_head_;
  std::atomic<uint32_t> released_{local_head_};  // local_head_ as of the last release()
};

// What the agent checks of a submission it copied out before it acts on it: a known op, no unknown flags, keys
// within the entry, and [buf, buf+length) inside a shared buffer of `buffer_bytes`, length at most `max_io`.
Status check_sqe(const Sqe& e, uint64_t buffer_bytes, uint64_t max_io);

// The four ends, as the agent and the app each hold them.
struct AgentEnds {
  explicit AgentEnds(RingRegion& r);
  Consumer<Sqe> sq;
  Producer<Cqe> cq;
};
struct AppEnds {
  explicit AppEnds(RingRegion& r);
  Producer<Sqe> sq;
  Consumer<Cqe> cq;
};

}  // namespace rfos::agent
