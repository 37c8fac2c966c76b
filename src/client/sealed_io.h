// Array I/O of a container whose data is sealed in this process (ContainerOptions::sealer; the agent's sealing
// tenants): every byte is sealed before it leaves and opened when it comes back, in the layout of
// client/sealing.h, at any offset and length. A block a write or punch changes only in part is read, opened,
// changed and sealed again whole; the last block of an array keeps its length in its record, so sealed data ends
// where the plaintext does. The container sends its array calls here; the ciphertext and the records move by
// the container's unsealed I/O (RawArrays).
//
// A write's ciphertext and records are two requests to one target; a half that fails is sent again while the
// write still holds its blocks (kWriteAttempts in all). The I/O of this process holds the blocks it moves
// (BlockLocks, shared by the containers of one sealer: a writer alone, readers together), so no reader here meets
// a block between its two halves, and no write here loses another's bytes. A reader that meets such a block of
// another process's writer reads it again (kReadAttempts in all). A block whose halves a crash, a write that
// failed for good, or writers in two processes at once left apart is an error (kChecksumMismatch) until written
// again whole: never wrong bytes. Two processes writing bytes of one block at once may lose one's bytes (each
// seals the block again whole): the tenant's writers must share one agent.
//
// Thread-safety: as the container's, one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/container.h"
#include "client/sealing.h"

namespace rfos::client {

// The container's unsealed array I/O, as SealedIo uses it.
class RawArrays {
 public:
  virtual ~RawArrays() = default;
  virtual Result<uint64_t> raw_write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                                     std::span<const uint8_t> data) = 0;
  virtual Result<uint64_t> raw_read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                                    std::span<uint8_t> out) = 0;
  // Waits for one call (a read's checksums verified); the others' completions stay for raw_take.
  virtual Completion raw_wait(uint64_t id) = 0;
  // Up to `max` finished calls, waiting up to timeout_ms for the first.
  virtual std::vector<Completion> raw_take(size_t max, int timeout_ms) = 0;
  virtual Status raw_punch(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                           uint64_t length) = 0;
};

class SealedIo {
 public:
  // `cont`: the container's uuid, in every block's place. `timeout_ms`: how long a writer waits for blocks another
  // holds.
  SealedIo(std::shared_ptr<BlockSealer> sealer, std::string cont, RawArrays& raw, uint32_t timeout_ms);
  ~SealedIo();
  SealedIo(const SealedIo&) = delete;
  SealedIo& operator=(const SealedIo&) = delete;

  static constexpr int kReadAttempts = 3;
  static constexpr int kWriteAttempts = 3;

  // One piece: 1 B .. 1 MiB inside one 1 MiB-aligned range. A write is sealed before this returns (`data` may go);
  // `out` must stay valid until the read's completion.
  Result<Ticket> submit_write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                              std::span<const uint8_t> data);
  Result<Ticket> submit_read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                             std::span<uint8_t> out);
  // Waits for a ticket of submit_*: its outcome.
  Status finish(Ticket ticket);
  // Up to `max` completions, waiting up to timeout_ms for the first (and any the raw I/O gave that are not ours).
  std::vector<Completion> poll(size_t max, int timeout_ms);
  // Drops [offset, offset + length) (holes read as zeros); an array cut at a block's middle ends there.
  Status punch_extent(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                      uint64_t length);
  // Tickets submitted whose completions poll() has not given yet.
  size_t pending() const { return ops_ + done_.size(); }
  // Finishes what is in flight, for up to timeout_ms (a handle that closes: its writes land before their blocks
  // are let go).
  void drain(int timeout_ms);

 private:
  struct Op;
  struct Raw {
    std::shared_ptr<Op> op;
    bool records = false;
  };
  // A buffer for an op's ciphertext and records: small ones and whole pieces' kept apart.
  struct Bounce {
    std::unique_ptr<uint8_t[]> bytes;
    size_t size = 0;
    uint8_t* get() const { return bytes.get(); }
  };

  // An op for one piece of the caller's, its blocks counted (kInvalidArgument for one that is not a piece).
  Result<std::shared_ptr<Op>> new_op(bool read, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                     uint64_t offset, size_t length);
  Bounce take_bounce(size_t blocks);
  void give_bounce(Bounce b);
  // Holds blocks [first, end) of the array, finishing this handle's own calls while another holds some of them.
  Result<BlockLocks::Hold> lock(uint64_t array, uint64_t first, uint64_t end, bool shared);
  // Blocks of an array read (ciphertext and record) and opened, all at once, waited for: what a write or punch
  // changes only in part.
  struct Edge {
    uint64_t block;
    std::span<uint8_t> plain;   // kSealBlock
    std::span<uint8_t> record;  // kSealRecord
  };
  Status read_edges(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::span<const Edge> edges);
  Status write_now(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                   std::span<const uint8_t> data);
  // Sends a write's ciphertext or its records (op->remaining counts it).
  Status send_half(const std::shared_ptr<Op>& op, bool records);
  // Sends a half again, up to kWriteAttempts sends of the op in all: OK once sent, else the last failure (`why`
  // when no attempt is left).
  Status resend(const std::shared_ptr<Op>& op, bool records, Status why);
  Status start_read(const std::shared_ptr<Op>& op);
  void progress(int timeout_ms);
  void route(const Completion& c);
  void complete(const std::shared_ptr<Op>& op);

  std::shared_ptr<BlockSealer> sealer_;
  std::string cont_;
  RawArrays& raw_;
  uint32_t timeout_ms_;
  uint64_t next_ticket_ = 1;
  size_t ops_ = 0;                     // submitted, not completed
  std::map<uint64_t, Raw> raw_calls_;  // raw call id -> its op
  std::deque<Completion> done_;        // completed, not yet handed out
  std::vector<Bounce> small_, large_;  // kept for the next ops
};

}  // namespace rfos::client
