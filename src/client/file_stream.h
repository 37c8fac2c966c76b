// A whole file-like object (client/file_layout.h) streamed in or out with many pieces in flight over the
// targets: on the way in, the next input is read (on a thread of its own) while earlier pieces move; on the way
// out, pieces are read ahead and handed over in order as they arrive, each verified. rfos put/get (named
// objects and namespace paths) and rfos fs copy move their bytes through here.
//
// Thread-safety: as the Container: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "client/container.h"

namespace rfos::client {

// Reads up to buf.size() bytes of the input into buf: how many (0 at its end), or an error.
using StreamSource = std::function<Result<size_t>(std::span<uint8_t> buf)>;
// Takes the next bytes of the output, in order.
using StreamSink = std::function<Status(std::span<const uint8_t> bytes)>;
// Told the bytes moved so far (from the calling thread).
using StreamProgress = std::function<void(uint64_t bytes)>;
class StreamPiece;
// Takes the next piece of the output, in order.
using PieceSink = std::function<Status(StreamPiece piece)>;

// A piece of a stream's output, owned by whoever holds it: its buffer goes back to the streams' pool when the
// piece is destroyed. A sink that keeps a piece (to hand it to another thread) lets the stream go on with
// another buffer, and the bytes are never copied.
class StreamPiece {
 public:
  StreamPiece() = default;
  ~StreamPiece();
  StreamPiece(StreamPiece&& o) noexcept : buf_(std::move(o.buf_)), len_(std::exchange(o.len_, 0)) {}
  StreamPiece& operator=(StreamPiece&& o) noexcept;
  // A piece holding a copy of `bytes` (kMaxIoBytes at most), in a buffer of the pool.
  static StreamPiece copy_of(std::string_view bytes);
  std::span<const uint8_t> bytes() const { return {buf_.get(), len_}; }
  size_t size() const { return len_; }

 private:
  // Only the pool's buffers (kMaxIoBytes each), which the destructor gives back to it.
  StreamPiece(std::unique_ptr<uint8_t[]> buf, size_t len) : buf_(std::move(buf)), len_(len) {}
  friend Status read_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                                const PieceSink& sink, uint32_t depth, const StreamProgress& progress, bool sparse);
  std::unique_ptr<uint8_t[]> buf_;
  size_t len_ = 0;
};

// Writes all of `source` into `oid` from offset 0, laid out in `chunk`-byte chunks (0: the container's chunk
// size), `depth` pieces (1 MiB each at most) in flight; *size gets the bytes written. On an error some pieces
// may be stored: the caller owns the cleanup (a fresh object).
Status write_file_object(Container& c, const ObjectId& oid, uint64_t chunk, const StreamSource& source, uint32_t depth,
                         const StreamProgress& progress, uint64_t* size);
// Gives the first `size` bytes of `oid` to `sink`; holes read as zeros. A chunk that is not there is a hole with
// `sparse` (a file of the namespace), and kNotFound without it (a named object's data, written whole: a chunk
// missing means the object was removed or replaced under the reader).
Status read_file_object(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t size, const StreamSink& sink,
                        uint32_t depth, const StreamProgress& progress, bool sparse);
// The same for the bytes [offset, offset + length) (an S3 Range).
Status read_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                       const StreamSink& sink, uint32_t depth, const StreamProgress& progress, bool sparse);
// ... each piece handed over with its buffer.
Status read_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                       const PieceSink& sink, uint32_t depth, const StreamProgress& progress, bool sparse);
// Moves the bytes [offset, offset + length) of `oid` between its targets and memory another session granted
// (Container::grant_memory), starting at offset `at` in it, `depth` pieces in flight: the targets write them
// there (a read, whose chunks must all be there), or read them from there into `oid` (`write`). The bytes never
// pass through this process: an S3 request on the RDMA path.
Status transfer_file_range(Container& c, const ObjectId& oid, uint64_t chunk, uint64_t offset, uint64_t length,
                           bool write, const GrantRef& grant, uint64_t at, uint32_t depth);

}  // namespace rfos::client
