#include "client/sealed_io.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "client/scatter_gather.h"
#include "common/clock.h"

namespace rfos::client {

namespace {

constexpr uint64_t kB = kSealBlock;
constexpr uint64_t kR = kSealRecord;
constexpr uint64_t kMaxOffset = kArrayEnd;  // scatter_gather's bound: no sum below wraps
constexpr size_t kSmallBlocks = 16;         // bounces of up to 64 KiB are kept apart from whole pieces'

std::string records_akey(std::string_view akey) { return std::string(akey) + std::string(kRecordsSuffix); }

Status ignore_not_found(Status s) { return s.code() == StatusCode::kNotFound ? Status::ok() : s; }

// One piece, as the container cuts them: its blocks fit a whole piece's bounce buffer.
bool one_piece(uint64_t offset, size_t len) {
  return len > 0 && len <= kMaxIoBytes && offset < kMaxOffset &&
         offset / kMaxIoBytes == (offset + len - 1) / kMaxIoBytes;
}

bool all_zero(std::span<const uint8_t> b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; });
}

}  // namespace

// One piece of the caller's: a read (ciphertext and records, then opened) or a write (sealed, then ciphertext and
// records), one ticket. It holds its blocks until it completes.
struct SealedIo::Op {
  Ticket ticket = 0;
  bool read = false;
  int remaining = 0;  // raw calls in flight
  Status status;
  ObjectId oid;
  std::string dkey, akey;
  uint64_t offset = 0;  // the caller's bytes
  size_t length = 0;
  uint64_t first_block = 0;
  size_t blocks = 0;
  std::span<uint8_t> out;  // a read's destination
  Bounce bounce;           // ciphertext (unless a read's lands in `out`), then the records
  std::span<uint8_t> cipher, records;
  BlockLocks::Hold hold;
  bool cipher_missing = false;  // a read's ciphertext came back kNotFound
  bool records_unsent = false;  // a write's records could not be sent yet
  int attempts = 0;             // a read's reads, a write's sends of a half again
};

SealedIo::SealedIo(std::shared_ptr<BlockSealer> sealer, std::string cont, RawArrays& raw, uint32_t timeout_ms)
    : sealer_(std::move(sealer)), cont_(std::move(cont)), raw_(raw), timeout_ms_(timeout_ms) {}

// Calls still in flight hold their ops (and so the bounce buffers they move, and their blocks) until the raw I/O
// lets them go: the container drains this, and destroys it after its calls.
SealedIo::~SealedIo() = default;

SealedIo::Bounce SealedIo::take_bounce(size_t blocks) {
  auto& pool = blocks <= kSmallBlocks ? small_ : large_;
  if (!pool.empty()) {
    Bounce b = std::move(pool.back());
    pool.pop_back();
    return b;
  }
  // Ciphertext, then records, for the most blocks of its kind: a whole piece, or kSmallBlocks.
  const size_t most = blocks <= kSmallBlocks ? kSmallBlocks : kMaxIoBytes / kB;
  const size_t size = most * (kB + kR);
  return {std::unique_ptr<uint8_t[]>(new uint8_t[size]), size};
}

void SealedIo::give_bounce(Bounce b) {
  if (!b.bytes) return;
  auto& pool = b.size <= kSmallBlocks * (kB + kR) ? small_ : large_;
  if (pool.size() < 8) pool.push_back(std::move(b));  // a synchronous call's window of pieces
}

Result<BlockLocks::Hold> SealedIo::lock(uint64_t array, uint64_t first, uint64_t end, bool shared) {
  const auto deadline = steady_now() + std::chrono::milliseconds(timeout_ms_);
  BlockLocks::Want want;  // a writer kept out: readers coming after it wait behind it
  for (;;) {
    uint64_t seen = 0;
    BlockLocks::Hold h = sealer_->locks().try_lock(array, first, end, shared, &seen);
    if (h) return h;
    if (!shared && !want) want = sealer_->locks().want(array, first, end);
    if (steady_now() >= deadline)
      return error(StatusCode::kBusy, "blocks of a sealed array stayed held by other I/O past the timeout");
    // This handle's own I/O may hold them: it ends only as its completions are taken.
    if (!raw_calls_.empty())
      progress(1);
    else
      sealer_->locks().wait(seen, std::chrono::milliseconds(5));
  }
}

Status SealedIo::read_edges(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                            std::span<const Edge> edges) {
  const std::string rec_akey = records_akey(akey);
  const SealPlace place = SealPlace::of(cont_, oid, dkey, akey);
  Status s;
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    std::vector<std::pair<uint64_t, std::span<uint8_t>>> calls;  // each raw read and where it lands
    s = Status::ok();
    for (const Edge& e : edges) {
      for (bool records : {false, true}) {
        std::span<uint8_t> into = records ? e.record : e.plain;
        auto id = records ? raw_.raw_read(oid, dkey, rec_akey, e.block * kR, into)
                          : raw_.raw_read(oid, dkey, akey, e.block * kB, into);
        if (!id.is_ok()) {
          s = id.status();
          break;
        }
        calls.emplace_back(*id, into);
      }
      if (!s.is_ok()) break;
    }
    for (auto [id, into] : calls) {  // every one, so none is left in flight
      Status d = raw_.raw_wait(id).status;
      if (d.code() == StatusCode::kNotFound)
        std::memset(into.data(), 0, into.size());  // no such dkey or array: holes (bytes and a record: an error)
      else if (s.is_ok())
        s = d;
    }
    RFOS_RETURN_IF_ERROR(s);
    for (const Edge& e : edges) {
      s = sealer_->open(e.plain, e.record, place, e.block, e.plain);
      if (!s.is_ok()) break;
    }
    if (s.code() != StatusCode::kChecksumMismatch) return s;  // else another process's writer may be between halves
  }
  return s;
}

Result<std::shared_ptr<SealedIo::Op>> SealedIo::new_op(bool read, const ObjectId& oid, std::string_view dkey,
                                                       std::string_view akey, uint64_t offset, size_t length) {
  if (!one_piece(offset, length))
    return error(StatusCode::kInvalidArgument, "a sealed I/O is 1 B .. 1 MiB within one 1 MiB-aligned range");
  auto op = std::make_shared<Op>();
  op->read = read;
  op->oid = oid;
  op->dkey = dkey;
  op->akey = akey;
  op->offset = offset;
  op->length = length;
  op->first_block = offset / kB;
  op->blocks = (offset + length + kB - 1) / kB - op->first_block;
  return op;
}

Result<Ticket> SealedIo::submit_write(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                      uint64_t offset, std::span<const uint8_t> data) {
  RFOS_ASSIGN_OR_RETURN(std::shared_ptr<Op> op, new_op(false, oid, dkey, akey, offset, data.size()));
  const uint64_t end = offset + data.size();
  RFOS_ASSIGN_OR_RETURN(
      op->hold, lock(sealed_array(cont_, oid, dkey, akey), op->first_block, op->first_block + op->blocks, false));
  op->bounce = take_bounce(op->blocks);
  uint8_t* b = op->bounce.get();
  op->records = {b + op->blocks * kB, op->blocks * kR};
  const SealPlace place = SealPlace::of(cont_, oid, dkey, akey);
  const uint64_t head = offset % kB, tail = end % kB;  // tail: the bytes of the last block written (0: all)
  const uint64_t last = op->first_block + op->blocks - 1;
  size_t total = op->blocks * kB;
  Status s;
  if (head == 0 && tail == 0) {
    op->cipher = {b, total};
    s = sealer_->seal(data, place, op->first_block, op->cipher, op->records);
  } else {
    // The blocks written only in part, as they are: the bytes around the new ones, and the last one's length.
    std::span<uint8_t> plain(b, total);
    std::vector<Edge> edges;
    if (head != 0) edges.push_back({op->first_block, plain.subspan(0, kB), op->records.subspan(0, kR)});
    if (tail != 0 && (last != op->first_block || head == 0))
      edges.push_back({last, plain.subspan((op->blocks - 1) * kB, kB), op->records.subspan((op->blocks - 1) * kR, kR)});
    s = read_edges(oid, dkey, akey, edges);
    if (s.is_ok()) {
      uint64_t last_length = kB;
      if (tail != 0)
        last_length = std::max<uint64_t>(tail, sealed_length(op->records.subspan((op->blocks - 1) * kR, kR)));
      std::memcpy(plain.data() + head, data.data(), data.size());
      total = (op->blocks - 1) * kB + last_length;
      op->cipher = {b, total};
      s = sealer_->seal(op->cipher, place, op->first_block, op->cipher, op->records);
    }
  }
  if (!s.is_ok()) {
    give_bounce(std::move(op->bounce));
    return s;
  }
  // Both halves go out now. Records whose send fails once the ciphertext went are sent again when its call ends
  // (route), while the op holds its blocks: the block would not open without them.
  if (Status sent = send_half(op, false); !sent.is_ok()) {  // nothing went out
    give_bounce(std::move(op->bounce));
    return sent;
  }
  op->records_unsent = !send_half(op, true).is_ok();
  op->ticket = next_ticket_++;
  ++ops_;
  return op->ticket;
}

Status SealedIo::start_read(const std::shared_ptr<Op>& op) {
  op->cipher_missing = false;
  auto c = raw_.raw_read(op->oid, op->dkey, op->akey, op->first_block * kB, op->cipher);
  if (!c.is_ok()) return c.status();
  raw_calls_[*c] = {op, false};
  op->remaining = 1;
  auto r = raw_.raw_read(op->oid, op->dkey, records_akey(op->akey), op->first_block * kR, op->records);
  if (!r.is_ok()) {
    op->status = r.status();
    return Status::ok();
  }
  raw_calls_[*r] = {op, true};
  op->remaining = 2;
  return Status::ok();
}

Result<Ticket> SealedIo::submit_read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                                     std::span<uint8_t> out) {
  RFOS_ASSIGN_OR_RETURN(std::shared_ptr<Op> op, new_op(true, oid, dkey, akey, offset, out.size()));
  op->out = out;
  RFOS_ASSIGN_OR_RETURN(
      op->hold, lock(sealed_array(cont_, oid, dkey, akey), op->first_block, op->first_block + op->blocks, true));
  op->bounce = take_bounce(op->blocks);
  // Whole blocks land in the caller's buffer and open there; others through the bounce buffer.
  const bool whole = offset % kB == 0 && out.size() % kB == 0;
  op->cipher = whole ? out : std::span<uint8_t>(op->bounce.get(), op->blocks * kB);
  op->records = {op->bounce.get() + op->blocks * kB, op->blocks * kR};
  if (Status s = start_read(op); !s.is_ok()) {
    give_bounce(std::move(op->bounce));
    return s;
  }
  op->ticket = next_ticket_++;
  ++ops_;
  return op->ticket;
}

void SealedIo::progress(int timeout_ms) {
  for (const Completion& c : raw_.raw_take(64, timeout_ms)) route(c);
}

void SealedIo::route(const Completion& c) {
  auto it = raw_calls_.find(c.ticket);
  if (it == raw_calls_.end()) {
    done_.push_back(c);  // not one of ours: handed out as it came
    return;
  }
  Raw r = std::move(it->second);
  raw_calls_.erase(it);
  Op& op = *r.op;
  --op.remaining;
  if (op.read) {
    if (!c.status.is_ok() && op.status.is_ok()) {
      if (c.status.code() != StatusCode::kNotFound)
        op.status = c.status;
      else if (r.records)
        std::memset(op.records.data(), 0, op.records.size());  // no records: holes (or bytes without any: an error)
      else
        op.cipher_missing = true;
    }
  } else {
    // A half that failed while the other may have landed is sent again while the op holds its blocks, so that the
    // block is whole again (and the bytes around the new ones, which it carries too, are not lost); records that
    // could not be sent at first go once the ciphertext's call has ended.
    Status s = c.status.is_ok() ? Status::ok() : resend(r.op, r.records, c.status);
    if (s.is_ok() && op.records_unsent && !r.records) {
      s = resend(r.op, true, error(StatusCode::kIoError, "a sealed write's records could not be sent"));
      if (s.is_ok()) op.records_unsent = false;
    }
    if (!s.is_ok() && op.status.is_ok()) op.status = s;
  }
  if (op.remaining == 0) complete(r.op);
}

Status SealedIo::resend(const std::shared_ptr<Op>& op, bool records, Status why) {
  while (op->attempts + 1 < kWriteAttempts) {
    ++op->attempts;
    Status sent = send_half(op, records);
    if (sent.is_ok()) return sent;
    why = sent;
  }
  return why;
}

Status SealedIo::send_half(const std::shared_ptr<Op>& op, bool records) {
  auto id = records ? raw_.raw_write(op->oid, op->dkey, records_akey(op->akey), op->first_block * kR, op->records)
                    : raw_.raw_write(op->oid, op->dkey, op->akey, op->first_block * kB, op->cipher);
  if (!id.is_ok()) return id.status();
  raw_calls_[*id] = {op, records};
  ++op->remaining;
  return Status::ok();
}

void SealedIo::complete(const std::shared_ptr<Op>& op) {
  if (op->read && op->status.is_ok()) {
    Status s;
    if (op->cipher_missing && all_zero(op->records)) {
      s = error(StatusCode::kNotFound, "no such dkey");  // the caller's to read as a hole, or as gone
    } else {
      if (op->cipher_missing) std::memset(op->cipher.data(), 0, op->cipher.size());  // records without bytes
      const SealPlace place = SealPlace::of(cont_, op->oid, op->dkey, op->akey);
      s = sealer_->open(op->cipher, op->records, place, op->first_block, op->cipher);
      if (s.code() == StatusCode::kChecksumMismatch && ++op->attempts < kReadAttempts) {
        // Another process's writer may have been between its two halves: read again.
        s = start_read(op);
        if (s.is_ok()) return;
      }
    }
    op->status = s;
    if (s.is_ok() && op->cipher.data() != op->out.data())
      std::memcpy(op->out.data(), op->cipher.data() + op->offset % kB, op->length);
  }
  op->hold.release();
  give_bounce(std::move(op->bounce));
  --ops_;
  done_.push_back({op->ticket, op->status, op->status.is_ok() ? op->length : 0});
}

Status SealedIo::finish(Ticket ticket) {
  for (;;) {
    auto it = std::find_if(done_.begin(), done_.end(), [&](const Completion& c) { return c.ticket == ticket; });
    if (it != done_.end()) {
      Status s = it->status;
      done_.erase(it);
      return s;
    }
    if (raw_calls_.empty()) return error(StatusCode::kInvalidArgument, "no such ticket in flight");
    progress(100);
  }
}

std::vector<Completion> SealedIo::poll(size_t max, int timeout_ms) {
  // An op ends with its last raw call: what one wait took may end none.
  const auto deadline = steady_now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  while (done_.empty() && !raw_calls_.empty()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - steady_now()).count();
    if (left <= 0) break;
    progress(static_cast<int>(left));
  }
  if (done_.empty() && !raw_calls_.empty()) progress(0);
  std::vector<Completion> out;
  while (!done_.empty() && out.size() < max) {
    out.push_back(std::move(done_.front()));
    done_.pop_front();
  }
  return out;
}

void SealedIo::drain(int timeout_ms) {
  const auto deadline = steady_now() + std::chrono::milliseconds(timeout_ms);
  while (!raw_calls_.empty() && steady_now() < deadline) progress(10);
}

Status SealedIo::write_now(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                           std::span<const uint8_t> data) {
  Status s;
  for (int attempt = 0; attempt < kWriteAttempts; ++attempt) {
    auto id = raw_.raw_write(oid, dkey, akey, offset, data);
    s = id.is_ok() ? raw_.raw_wait(*id).status : id.status();
    if (s.is_ok()) break;
  }
  return s;
}

Status SealedIo::punch_extent(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                              uint64_t length) {
  if (length == 0) return Status::ok();
  if (offset >= kMaxOffset || length >= kMaxOffset)
    return error(StatusCode::kInvalidArgument, "a sealed punch lies below 2^62");
  const uint64_t end = offset + length;
  const uint64_t first = offset / kB, past = (end + kB - 1) / kB;
  RFOS_ASSIGN_OR_RETURN(BlockLocks::Hold hold, lock(sealed_array(cont_, oid, dkey, akey), first, past, false));
  const SealPlace place = SealPlace::of(cont_, oid, dkey, akey);
  const std::string rec_akey = records_akey(akey);
  // The blocks punched only in part: each opened, its bytes in the range made zeros (or, where the range reaches
  // past its data, its data cut short), and sealed again; one left with nothing is punched whole. Whatever lies
  // past a block's data goes too (a write that failed half-way may have left bytes there).
  std::vector<uint64_t> partial;
  if (offset % kB != 0) partial.push_back(first);
  if (end % kB != 0 && (partial.empty() || past - 1 != first)) partial.push_back(past - 1);
  std::vector<uint8_t> plain(kB), record(kR);
  for (uint64_t p : partial) {
    Edge e{p, plain, record};
    RFOS_RETURN_IF_ERROR(read_edges(oid, dkey, akey, {&e, 1}));
    const uint64_t have = sealed_length(record);
    const uint64_t from = std::max(offset, p * kB) - p * kB, to = std::min(end, (p + 1) * kB) - p * kB;
    if (from >= have) continue;  // nothing of its data in the range
    uint64_t keep = have;
    if (to >= have) {
      keep = from;  // its data ends where the range starts
    } else {
      std::memset(plain.data() + from, 0, to - from);
    }
    if (keep == 0) {
      RFOS_RETURN_IF_ERROR(ignore_not_found(raw_.raw_punch(oid, dkey, akey, p * kB, kB)));
      RFOS_RETURN_IF_ERROR(ignore_not_found(raw_.raw_punch(oid, dkey, rec_akey, p * kR, kR)));
      continue;
    }
    std::span<uint8_t> kept(plain.data(), keep);
    RFOS_RETURN_IF_ERROR(sealer_->seal(kept, place, p, kept, record));
    RFOS_RETURN_IF_ERROR(write_now(oid, dkey, akey, p * kB, kept));
    RFOS_RETURN_IF_ERROR(write_now(oid, dkey, rec_akey, p * kR, record));
    if (keep < kB) RFOS_RETURN_IF_ERROR(ignore_not_found(raw_.raw_punch(oid, dkey, akey, p * kB + keep, kB - keep)));
  }
  // The blocks punched whole, with their records.
  const uint64_t whole_first = (offset + kB - 1) / kB, whole_past = end / kB;
  if (whole_first < whole_past) {
    RFOS_RETURN_IF_ERROR(
        ignore_not_found(raw_.raw_punch(oid, dkey, akey, whole_first * kB, (whole_past - whole_first) * kB)));
    RFOS_RETURN_IF_ERROR(
        ignore_not_found(raw_.raw_punch(oid, dkey, rec_akey, whole_first * kR, (whole_past - whole_first) * kR)));
  }
  return Status::ok();
}

}  // namespace rfos::client
