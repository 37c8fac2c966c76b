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

}  // namespace rfos::s3
