// Scatter-gather array I/O, apart from how a piece moves: the extents are cut at kMaxIoBytes-aligned
// boundaries (one engine piece each), up to `window` pieces in flight. The extents' bytes, in order, are the
// concatenation of the buffers of `sgl`; a piece inside one buffer moves straight from or into it, a piece
// that straddles buffers goes through a bounce buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "client/container.h"

namespace rfos::client {

// How one piece moves: submit starts it (write: from mem; read: into mem) and gives a ticket, finish waits for
// that ticket and gives the piece's outcome. Tickets finish in the order they were submitted.
struct PieceIo {
  std::function<Result<uint64_t>(uint64_t offset, std::span<uint8_t> mem)> submit;
  std::function<Status(uint64_t ticket)> finish;
};

// Where array offsets end (the engine's kArrayOffsetMax), and the most bytes one call's extents or buffers hold
// together: sums of values below it never wrap around.
inline constexpr uint64_t kArrayEnd = uint64_t{1} << 62;

// Adds one buffer's `len` to `*total`, the bytes of a call's buffers so far: kInvalidArgument once they hold more
// than kArrayEnd together (lengths that wrap around 2^64 together must not pass for a small total).
Status add_buffer_bytes(uint64_t* total, uint64_t len);

// kInvalidArgument when an extent is empty or reaches past 2^62, or the extents' total is not `have` bytes (the
// buffers'): what scatter_gather checks first, for a caller that moves the pieces another way (the C API
// through the agent).
Status check_extents(std::span<const Extent> extents, uint64_t have);

// kInvalidArgument when an extent is empty or reaches past 2^62, or the totals differ. Otherwise the first
// piece's failure, returned once nothing is in flight; pieces after it are not started.
Status scatter_gather(bool write, std::span<const Extent> extents, std::span<const std::span<uint8_t>> sgl,
                      size_t window, const PieceIo& io);

}  // namespace rfos::client
