// An in-process fabric for tests: workers in one process reach one another by address, with seeded delivery
// and knobs for what real fabrics do to messages (delay, reordering, loss, duplicates) and for peers that die.
// The client and the target run over it unchanged (provider "sim"), so their tests need no server process and
// no network, and run in milliseconds. Not a provider for users: nothing leaves the process.
//
// Delivery: a message (or a remote read or write) is queued at its destination and handed over by the
// destination's progress(). Each one waits `delay` of its destination's progress calls, drawn from
// [0, max_delay]; messages that become due in the same call are delivered in a seeded random order, so a delay
// above 0 reorders them. Completions (a send's done, a payload's arrival) run from progress() too, never inside
// the call that started them. One-sided get and put check the remote key and range as a NIC would.
//
// Thread-safety: a Fabric and its workers may be used from any number of threads (one per worker, as the
// server's targets do); with one thread driving every worker, a run is a function of the seed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

namespace rfos::transport::sim {

struct Knobs {
  uint64_t seed = 1;
  uint32_t max_delay = 0;  // progress calls of the destination a message may wait (reorders when above 0)
  double drop = 0;         // the share of messages lost on the way (their sender is still told OK, as on RDM)
  double duplicate = 0;    // the share of messages delivered twice
};

class Fabric {
 public:
  explicit Fabric(Knobs knobs = {});
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // The fabric Worker::create("sim") uses: one per process.
  static Fabric& process();

  void set_knobs(const Knobs& knobs);
  Result<std::unique_ptr<Worker>> create_worker(const WorkerOptions& options = {});
  // The worker at `address` dies: what it had queued is lost, its peers' endpoints to it fail (on_peer_failure,
  // from their next progress()), and later sends to it fail with kShutdown.
  void kill(const std::string& address);
  // The addresses of the live workers.
  std::vector<std::string> addresses() const;
  // Messages delivered, dropped and duplicated so far.
  struct Counters {
    uint64_t delivered = 0;
    uint64_t dropped = 0;
    uint64_t duplicated = 0;
  };
  Counters counters() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace rfos::transport::sim
