// CRC-32C (Castagnoli) through ISA-L, and the chunked checksum layout shared by every layer.
//
// A byte array's checksums are computed per "checksum chunk": chunk i covers logical offsets
// [i*chunk, (i+1)*chunk). For an extent [offset, offset+len) there is one crc per chunk the extent touches,
// each over the extent's bytes inside that chunk. Writers compute them, the engine verifies and stores them,
// readers get them back with fetched data: end to end.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rfos {

// Standard CRC-32C of data (crc32c("123456789") == 0xE3069283).
uint32_t crc32c(const void* data, size_t len);
// Continue a CRC-32C: crc32c_extend(crc32c(a), b) == crc32c(a || b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len);

// crc32c(data, len), asking the CPU beforehand for the bytes after it, up to `limit` (at most 4 KiB of them):
// for loops over consecutive chunks of memory that may not be in cache (see chunk_crcs).
uint32_t crc32c_ahead(const void* data, size_t len, const void* limit);

// Number of checksum chunks that [offset, offset+len) touches.
size_t chunk_count(uint64_t offset, uint64_t len, uint32_t chunk_bytes);

// Appends one crc per chunk of the extent that starts at logical `offset` and holds `data`.
void chunk_crcs(uint64_t offset, std::span<const uint8_t> data, uint32_t chunk_bytes, std::vector<uint32_t>* out);

}  // namespace rfos
