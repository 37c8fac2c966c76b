// CRC-64/NVME (poly 0xAD93D23594C93659, reflected, init and xorout all ones; check "123456789" ->
// 0xAE8B14860A799888): the x-amz-checksum-crc64nvme of S3's newer clients. Debian 12's ISA-L (2.30) predates its
// crc64_rocksoft, so this is a table-driven one (slicing by 8, about 1-2 GB/s a core).
//
// Thread-safety: pure (the tables are built once, at first use).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rfos::s3 {

// The CRC of `n` more bytes after `crc` (0 to start); crc64nvme(0, "123456789", 9) == 0xAE8B14860A799888.
uint64_t crc64nvme(uint64_t crc, const void* data, size_t n);

// The reflected polynomials of the CRCs S3 names, all with init and xorout all ones.
inline constexpr uint64_t kCrc32Poly = 0xEDB88320u;   // CRC-32 (gzip's, zlib's)
inline constexpr uint64_t kCrc32cPoly = 0x82F63B78u;  // CRC-32C (Castagnoli)
inline constexpr uint64_t kCrc64NvmePoly = 0x9A6C9329AC4BC9B5ull;

// The CRC of bytes A followed by bytes B from crc(A), crc(B) and B's length alone, for a reflected CRC of `width`
// bits (32 or 64) whose init and xorout are all ones: a multipart object's whole-object (FULL_OBJECT) checksum
// from its parts'. zlib's method: the CRC of A followed by n zero bytes is a linear map of crc(A), the map for n
// built by squaring the one for a zero bit; log2(n) steps of `width` x `width` bits.
uint64_t crc_combine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b, uint64_t poly, int width);

}  // namespace rfos::s3
