#include "client/file_stream.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client/file_layout.h"

namespace rfos::client {

namespace {
// The bytes at `offset` one I/O may move: within its chunk and within one engine piece.
uint64_t piece_at(uint64_t chunk, uint64_t offset, uint64_t left) {
  return layout::piece_length(chunk, offset, layout::piece_length(kMaxIoBytes, offset, left));
}

// Piece buffers kept between streams. A stream takes its buffers from here and gives them back when it ends:
// a stream of one small object (an S3 GET) then writes into pages already mapped, where a fresh buffer had every
// page faulted in and zeroed by the kernel, and the fabric's registration cache finds the buffer again. Up to
// kKept buffers are kept (a gateway's workers streaming at once), the rest freed.
class BufferPool {
 public:
  static BufferPool& process() {
    static BufferPool* pool = new BufferPool;  // never destroyed: streams may end on threads that outlive main
    return *pool;
  }
  std::unique_ptr<uint8_t[]> take() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        auto b = std::move(free_.back());
        free_.pop_back();
        return b;
      }
    }
    return std::unique_ptr<uint8_t[]>(new uint8_t[kMaxIoBytes]);  // never zeroed: every use writes what it reads
  }
  void give(std::unique_ptr<uint8_t[]> b) {
    std::lock_guard lock(mu_);
    if (free_.size() < kKept) free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kKept = 32;
  std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> free_;
};

// `depth` piece buffers of kMaxIoBytes, each taken from the pool when first used: a small object costs one
// buffer, not depth MiB of memory (zeroed, it was most of a 4 KiB S3 GET's time). Each buffer is one thread's
// at a time; the vector never moves.
class PieceBuffers {
 public:
  explicit PieceBuffers(size_t depth) : bufs_(depth) {}
  ~PieceBuffers() {
    for (auto& b : bufs_)
      if (b) BufferPool::process().give(std::move(b));
  }
  PieceBuffers(const PieceBuffers&) = delete;
  PieceBuffers& operator=(const PieceBuffers&) = delete;
  uint8_t* operator[](size_t i) {
    if (!bufs_[i]) bufs_[i] = BufferPool::process().take();
    return bufs_[i].get();
  }
  // Buffer i, handed to a sink; its slot takes another when next used.
  std::unique_ptr<uint8_t[]> release(size_t i) { return std::move(bufs_[i]); }
  size_t size() const { return bufs_.size(); }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> bufs_;
};
}  // namespace

StreamPiece::~StreamPiece() {
  if (buf_) BufferPool::process().give(std::move(buf_));
}

StreamPiece StreamPiece::copy_of(std::string_view bytes) {
  auto buf = BufferPool::process().take();
  const size_t n = std::min(bytes.size(), kMaxIoBytes);
  std::memcpy(buf.get(), bytes.data(), n);
  return StreamPiece(std::move(buf), n);
}

StreamPiece& StreamPiece::operator=(StreamPiece&& o) noexcept {
  if (this != &o) {
    if (buf_) BufferPool::process().give(std::move(buf_));
    buf_ = std::move(o.buf_);
    len_ = std::exchange(o.len_, 0);
  }
  return *this;
}

// The source is read on a thread of its own into `depth` buffers, while this thread keeps the filled ones
// moving: the next input is read while earlier pieces are on their way.
Status write_file_object(Container& c, const ObjectId& data, uint64_t chunk, const StreamSource& source, uint32_t depth,
                         const StreamProgress& progress, uint64_t* size) {
  depth = std::max(depth, 1u);
  if (chunk == 0) chunk = layout::chunk_bytes(c.session().cont.props.chunk_bytes);
  struct Filled {
    size_t buf = 0;
    size_t len = 0;
  };
  PieceBuffers bufs(depth);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> empty;
  std::deque<Filled> filled;
  bool ended = false, stop = false;
  Status read_status;
  for (size_t i = 0; i < bufs.size(); ++i) empty.push_back(i);
  // Each buffer is filled to the next piece boundary (or the end), so that every one is one I/O.
  std::thread reader([&] {
    uint64_t at = 0;
    for (;;) {
      size_t b;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !empty.empty(); });
        if (stop) return;
        b = empty.front();
        empty.pop_front();
      }
      size_t want = static_cast<size_t>(piece_at(chunk, at, kMaxIoBytes)), got = 0;
      Status st;
      while (got < want) {
        auto n = source({bufs[b] + got, want - got});
        if (!n.is_ok()) {
          st = n.status();
          break;
        }
        if (*n == 0) break;
        got += *n;
      }
      at += got;
      std::lock_guard lock(mu);
      if (got) filled.push_back({b, got});
      if (!st.is_ok() || got < want) {
        read_status = st;
        ended = true;
        cv.notify_all();
        return;
      }
      cv.notify_all();
    }
  });
  std::map<Ticket, Filled> in_flight;
  uint64_t offset = 0, done = 0;
  Status s;
  for (;;) {
    std::vector<Filled> ready;
    bool finished = false;
    {
      std::unique_lock lock(mu);
      if (in_flight.empty()) cv.wait(lock, [&] { return ended || !filled.empty(); });
      ready.assign(filled.begin(), filled.end());
      filled.clear();
      finished = ended && ready.empty();
    }
    for (const Filled& f : ready) {
      if (!s.is_ok()) break;
      auto t = c.submit_write(data, layout::chunk_key(offset / chunk), layout::kDataAkey, offset, {bufs[f.buf], f.len});
      if (!t.is_ok()) {
        s = t.status();
        break;
      }
      in_flight[*t] = f;
      offset += f.len;
    }
    if (!s.is_ok() || (finished && in_flight.empty())) break;
    for (const Completion& comp : c.poll(depth, in_flight.empty() ? 0 : 1)) {
      auto it = in_flight.find(comp.ticket);
      if (it == in_flight.end()) continue;
      if (!comp.status.is_ok() && s.is_ok()) s = comp.status;
      done += it->second.len;
      std::lock_guard lock(mu);
      empty.push_back(it->second.buf);
      in_flight.erase(it);
      cv.notify_all();
    }
    if (!s.is_ok()) break;
    if (progress) progress(done);
  }
  {
    std::lock_guard lock(mu);
    stop = true;
    cv.notify_all();
  }
  reader.join();
  while (!in_flight.empty()) {  // the buffers must outlive what is still moving them
    for (const Completion& comp : c.poll(depth, 100)) in_flight.erase(comp.ticket);
  }
  if (s.is_ok()) s = read_status;
  if (s.is_ok() && progress) progress(done);
  *size = offset;
  return s;
}

// Reads ahead up to `depth` pieces, and hands them to the sink in order as they arrive.
Status read_file_object(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t size, const StreamSink& sink,
                        uint32_t depth, const StreamProgress& progress, bool sparse) {
  return read_file_range(c, oid, chunk, 0, size, sink, depth, progress, sparse);
}

Status read_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                       const StreamSink& sink, uint32_t depth, const StreamProgress& progress, bool sparse) {
  return read_file_range(c, oid, chunk, offset, length,
                         PieceSink([&](StreamPiece piece) { return sink(piece.bytes()); }), depth, progress, sparse);
}

Status read_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                       const PieceSink& sink, uint32_t depth, const StreamProgress& progress, bool sparse) {
  depth = std::max(depth, 1u);
  const uint64_t size = offset + length;
  if (chunk == 0) chunk = layout::chunk_bytes(c.session().cont.props.chunk_bytes);
  PieceBuffers bufs(depth);
  std::vector<size_t> free_bufs;
  for (size_t i = 0; i < bufs.size(); ++i) free_bufs.push_back(i);
  struct Piece {
    size_t buf = 0;
    size_t len = 0;
    bool arrived = false;
  };
  std::map<uint64_t, Piece> pieces;  // by offset: in flight or arrived, not yet handed out
  std::map<Ticket, uint64_t> tickets;
  uint64_t next = offset, handed = offset;
  Status s;
  while (s.is_ok() && handed < size) {
    while (!free_bufs.empty() && next < size) {
      size_t len = static_cast<size_t>(piece_at(chunk, next, size - next));
      size_t b = free_bufs.back();
      auto t = c.submit_read(oid, layout::chunk_key(next / chunk), layout::kDataAkey, next, {bufs[b], len});
      if (!t.is_ok()) {
        s = t.status();
        break;
      }
      free_bufs.pop_back();
      tickets[*t] = next;
      pieces[next] = {b, len, false};
      next += len;
    }
    if (!s.is_ok()) break;
    for (const Completion& comp : c.poll(depth, 100)) {
      auto it = tickets.find(comp.ticket);
      if (it == tickets.end()) continue;
      Piece& p = pieces[it->second];
      if (sparse && comp.status.code() == StatusCode::kNotFound)
        std::memset(bufs[p.buf], 0, p.len);  // a chunk never written: a hole
      else if (!comp.status.is_ok() && s.is_ok())
        s = comp.status;
      p.arrived = true;
      tickets.erase(it);
    }
    while (s.is_ok() && !pieces.empty() && pieces.begin()->first == handed && pieces.begin()->second.arrived) {
      Piece p = pieces.begin()->second;
      pieces.erase(pieces.begin());
      s = sink(StreamPiece(bufs.release(p.buf), p.len));
      handed += p.len;
      free_bufs.push_back(p.buf);
    }
    if (progress) progress(handed - offset);
  }
  while (!tickets.empty()) {  // the buffers must outlive what is still moving into them
    for (const Completion& comp : c.poll(depth, 100)) tickets.erase(comp.ticket);
  }
  return s;
}

Status transfer_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                           bool write, const GrantRef& grant, uint64_t at, uint32_t depth) {
  depth = std::max(depth, 1u);
  if (chunk == 0) chunk = layout::chunk_bytes(c.session().cont.props.chunk_bytes);
  const uint64_t end = offset + length;
  std::set<Ticket> tickets;
  uint64_t next = offset;
  Status s;
  while (s.is_ok() && (next < end || !tickets.empty())) {
    while (tickets.size() < depth && next < end) {
      const uint64_t len = piece_at(chunk, next, end - next);
      const std::string dkey = layout::chunk_key(next / chunk);
      auto t = write ? c.submit_write_from(oid, dkey, layout::kDataAkey, next, len, grant, at + (next - offset))
                     : c.submit_read_to(oid, dkey, layout::kDataAkey, next, len, grant, at + (next - offset));
      if (!t.is_ok()) {
        s = t.status();
        break;
      }
      tickets.insert(*t);
      next += len;
    }
    if (!s.is_ok()) break;
    for (const Completion& comp : c.poll(depth, 100)) {
      if (!tickets.erase(comp.ticket)) continue;
      if (!comp.status.is_ok() && s.is_ok()) s = comp.status;
    }
  }
  while (!tickets.empty()) {  // none is left in flight to complete into a later call's poll
    for (const Completion& comp : c.poll(depth, 100)) tickets.erase(comp.ticket);
  }
  return s;
}

}  // namespace rfos::client
