// The data-plane transport: one interface, providers behind it (UCX today; libfabric next). Layers above name a
// provider string ("ucx+tcp", "ucx+shm", "ucx+rc", ...) and never see UCX or libfabric types.
//
// Model: a Worker is one progress context (one per server target thread, one per client thread). Peers connect
// by the opaque address another worker published (through the control plane's pool map). A message is a small
// header plus an optional payload given as an iovec. Small payloads ride eagerly with the header; large ones
// use the fabric's rendezvous: the receiver sees the header first and pulls the payload straight into memory
// it chooses (the engine's registered buffers), zero-copy where the fabric can (RDMA), pipelined otherwise.
//
// Besides messages, a worker moves bytes one-sidedly (the explicit path): a peer registers memory
// (register_memory), sends its address and packed remote key inside a message, and the worker that got it reads
// from (get) or writes into (put) that memory. RDMA does it with no CPU on the peer; UCX emulates it on tcp and
// shm. GPU memory and S3 RDMA tokens ride this path.
//
// Completion callbacks run inside progress() on the worker's thread. Results of operations tell apart done,
// in progress (callback later) and failed (UCX ucs_status_t style).
//
// Thread-safety: a Worker and everything it hands out belong to one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rfos::transport {

struct Iov {
  void* data = nullptr;
  size_t len = 0;
};

using EpHandle = uint64_t;  // 0: none
using Done = std::function<void(Status)>;

// A message as it arrives. Valid only inside the message handler, which must either take the payload
// (fetch_payload) or ignore it.
struct Incoming {
  EpHandle reply_to = 0;
  // libfabric, on a worker with introduced_peers_only: reply_to is 0 for a sender not known yet, whose message
  // names this address (proved the sender's own: see ofi_worker.cc). Worker::adopt makes it a peer.
  std::string_view claimed_address;
  std::string_view header;
  size_t payload_bytes = 0;
  const void* eager_payload = nullptr;  // set when the payload is already here
  void* rndv = nullptr;                 // provider handle of a payload still at the sender
  bool rndv_taken = false;              // set by fetch_payload; an untaken payload is dropped
};

// Memory a peer may read and write: its address as peers name it, and the packed remote key they need.
struct Registration {
  void* handle = nullptr;    // the provider's registration
  uint64_t remote_base = 0;  // what a peer passes as remote_addr for the first byte
  std::string rkey;          // opaque; peers hand it to get()/put()
};

// Another event source the thread sleeping in Worker::wait() serves (a target's media ring): wait() returns
// when it is ready as well.
struct WakeSource {
  int fd = -1;                  // readable when ready (poll(2)), once armed
  std::function<bool()> ready;  // the same, checked without a system call
  std::function<bool()> arm;    // called before sleeping on fd; true: ready already, do not sleep
};

struct WorkerOptions {
  // A payload receive (fetch_payload) whose sender has not completed it this long is cancelled, and its done
  // gets an error: how a target gives back the engine buffers of a client that died mid-transfer where the
  // fabric does not report the dead peer (libfabric's RDM endpoints). UCX reports a dead peer on tcp and the
  // RDMA transports, and cannot cancel an active-message receive, so it ignores this; on ucx+shm, where UCX
  // 1.13 reports no dead peer, a worker watches the process each peer's hello names and gives the operations
  // of a peer whose process is gone up itself (docs/wire-format.md). On libfabric it also
  // bounds how long messages wait for a peer that takes none (a send refused for now waits in a queue, and the
  // worker serves its other peers meanwhile).
  uint32_t payload_timeout_ms = 30000;
  // A UCX worker spins for a while after each event before it sleeps on its event fd, since the next event is
  // usually close (small requests at depth). With this set, it spins only while its recent waits have been
  // short, and sleeps at once when they have been long, leaving the cores to threads with work: for the
  // server's targets, whose waits for large device reads are long. A client leaves it unset: its waits are
  // for replies, and how soon it wakes is on the latency of every request (docs/BENCHMARKS.md has both).
  bool sleep_when_waits_long = false;
  // Messages count only from peers that introduced themselves (every connect() does): a server's targets set
  // it. On libfabric, where the only introduction is the address a message claims, a message from a sender not
  // known yet comes with reply_to 0 and its claimed_address, and becomes a peer only when the layer above
  // adopts it (a target: once the request's capability verified), so garbage costs no address-vector entry. UCX keeps
  // an endpoint it made for a peer's messages only once adopted on the hello, and a target that answers late must not
  // answer through one UCX may have freed. Where endpoints cannot detect a dead peer (UCX 1.13 shm) nothing is freed
  // under the target, and every message counts.
  bool introduced_peers_only = false;
  // UCX: whether a peer's hello may introduce it, given the token the peer set (set_introduction): a server's
  // targets check the capability in it before they make or adopt an endpoint for the peer. Unset: every hello
  // does. (libfabric has no hellos; its targets adopt a sender on a request whose capability verifies.)
  std::function<bool(std::string_view token)> admit_hello;
};

class Worker {
 public:
  virtual ~Worker() = default;

  // provider: "ucx+tcp", "ucx+shm", "ucx+rc", "ucx+dc_x", "ucx+ud", "ofi+tcp", "ofi+shm", "ofi+verbs"; "sim": the
  // process's simulated fabric, for tests (sim/sim.h). Errors: kNotSupported (unknown or unavailable provider),
  // kIoError.
  static Result<std::unique_ptr<Worker>> create(const std::string& provider, const WorkerOptions& options = {});

  // The address peers pass to connect() (binary).
  virtual std::string address() const = 0;
  // What this worker's hellos carry from now on (a client: its capability), for the peer's admit_hello.
  virtual void set_introduction(std::string token) { (void)token; }
  virtual Result<EpHandle> connect(std::string_view peer_address) = 0;
  virtual void disconnect(EpHandle ep) = 0;
  // Drops an endpoint whose peer is gone (a server that restarted), without the flush a disconnect waits for:
  // over shared memory nothing tells a dead peer apart from a slow one, and the flush would never end.
  virtual void abandon(EpHandle ep) { disconnect(ep); }

  virtual void on_message(std::function<void(Incoming&)> handler) = 0;
  // Inside the message handler: makes the sender of `in` (reply_to 0, see WorkerOptions::introduced_peers_only)
  // a peer and returns its handle. kNotSupported where senders are known otherwise (UCX's hellos).
  virtual Result<EpHandle> adopt(const Incoming& in) {
    (void)in;
    return error(StatusCode::kNotSupported, "this provider knows its peers by their hellos");
  }
  // Messages dropped because they did not prove who sent them (libfabric: an envelope without the token the
  // address it names was given; garbage; proof answers nobody asked for). UCX: 0 (UCX knows its senders).
  virtual uint64_t unproved_dropped() const { return 0; }
  // Called when a peer fails (dies, disconnects); its in-flight operations complete with errors.
  virtual void on_peer_failure(std::function<void(EpHandle, const Status&)> handler) = 0;

  // Lands the payload of `in` into dst (total length == payload_bytes). Must be called inside the handler.
  // done(OK) once the bytes are there; done(error) if the sender failed mid-transfer.
  virtual Status fetch_payload(Incoming& in, std::span<const Iov> dst, Done done) = 0;
  // Sends header + payload; the payload must stay valid until done. `reply` marks a request whose receiver
  // will answer on the same endpoint.
  virtual Status send(EpHandle ep, std::string_view header, std::span<const Iov> payload, Done done) = 0;

  // Registers [addr, addr+len) for remote get/put by peers. Errors: kNotSupported, kIoError.
  virtual Result<Registration> register_memory(void* addr, size_t len) = 0;
  virtual void deregister_memory(const Registration& r) = 0;
  // Allocates len bytes of their own pages (page-aligned, on huge pages where the kernel gives them) and
  // registers them: *addr gets the bytes; free_memory deregisters and frees them. Errors: kNoSpace and
  // register_memory's. Not memory peers map: a worker refuses keys it would serve through a mapping (UCX's
  // shared-memory segments; docs/wire-format.md).
  Result<Registration> alloc_memory(size_t len, void** addr);
  void free_memory(const Registration& r, void* addr, size_t len);
  // Reads the peer's registered memory at remote_addr into dst (one contiguous remote range).
  virtual Status get(EpHandle ep, uint64_t remote_addr, std::string_view rkey, std::span<const Iov> dst, Done done) = 0;
  // Writes src into the peer's registered memory at remote_addr. done(OK) once the bytes are visible there: a
  // message sent after it arrives after the data.
  virtual Status put(EpHandle ep, std::span<const Iov> src, uint64_t remote_addr, std::string_view rkey, Done done) = 0;

  // Makes progress; returns how many events it handled.
  virtual int progress() = 0;
  // Sleeps until there may be something to progress, or `also` is ready, or timeout_ms passes.
  virtual void wait(int timeout_ms, const WakeSource* also = nullptr) = 0;
  // Wakes a thread blocked in wait() (safe from any thread).
  virtual void signal() = 0;
};

// Whether `provider`'s one-sided gets and puts are done by the NIC (the verbs providers: ucx+rc, ucx+dc_x,
// ucx+ud, ofi+verbs). Over tcp and shm the peer serves each one with messages of its own, so a client's default
// data path keeps to messages there (measured faster, docs/BENCHMARKS.md).
bool one_sided_in_hardware(std::string_view provider);

// A payload above this size goes by the fabric's rendezvous on every provider (far above their eager limits).
inline constexpr size_t kLargePayloadBytes = 64 * 1024;

// How many large payloads a client should have moving at once over `provider`; 0: no limit. 1 on ucx+tcp:
// there the CPUs move the bytes, and two 1 MiB rendezvous to two targets share the connection bandwidth,
// both landing late, while the device waits for either; one at a time, each lands in half the time and its
// device write and commit overlap the next one's transfer (1 MiB writes at depth 4: a landing of 0.44-0.54 ms
// instead of 1.2-1.6 ms; ahead in 9 of 13 alternating runs, by 16 % at the median, docs/BENCHMARKS.md). No
// limit elsewhere: on ucx+shm and ofi+tcp the same limit measured lower (medians 2023 against 2365 and 1636
// against 1919 writes/s), and the RDMA providers are not measured yet.
uint32_t payload_sends_at_once(std::string_view provider);

// Calls `progress` until it reports an event, `also` is ready or `signaled` is set (true), or until `until`
// (false), yielding the core between tries to any other runnable thread: on a small machine that is often the
// peer that will answer.
bool spin_until(const std::function<int()>& progress, std::atomic<bool>& signaled,
                std::chrono::steady_clock::time_point until, const WakeSource* also);

// What poll_then_nap keeps of a worker between its calls. `last_event`: when the worker last found an event,
// which its own progress() moves (so events its thread found outside poll_then_nap count too).
struct Naps {
  std::chrono::steady_clock::time_point last_event;
  std::chrono::steady_clock::time_point seen;  // last_event as of the last nap
  int in_a_row = 0;                            // naps with no event between them
};

// wait() for workers with no event to sleep on (UCX 1.13 shm, libfabric with FI_WAIT_NONE): spin for up to
// 1 ms (a reply is usually microseconds away), then nap up to 50 us, or less when `also` becomes ready;
// `signaled` ends it early. After about 100 naps in a row with no event (100 ms) the worker spins 20 us and
// naps 1 ms instead, until its next event.
void poll_then_nap(const std::function<int()>& progress, std::atomic<bool>& signaled, int timeout_ms,
                   const WakeSource* also, Naps* naps);

}  // namespace rfos::transport
