// The one layout of a file-like object, shared by every front end: a file of the POSIX namespace (and so the
// mount), an object `rfos put` stores, the objects `rfos bench` writes, and later an S3 object.
//
// The byte at offset o of the file lies in the array under dkey chunk_key(o / chunk), akey kDataAkey, at array
// offset o (the offset in the file, not in the chunk). `chunk` is the container's chunk_bytes property (1 MiB by
// default), so a file's chunks spread over the targets by placement (object class SX) and each chunk is one
// engine piece at most. Chunk keys are the chunk index as 8 bytes big-endian, so they sort in file order. The
// server knows none of this: the end of a file is the end of kDataAkey under the greatest dkey that holds it
// (Container::object_end), which this layout makes the last chunk. docs/object-layout.md has the whole picture.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/coding.h"

namespace rfos::client::layout {

inline constexpr std::string_view kDataAkey = "d";
inline constexpr uint32_t kDefaultChunkBytes = 1u << 20;

// The chunk size of a container whose chunk_bytes property is `prop` (0: the default).
inline uint32_t chunk_bytes(uint32_t prop) { return prop ? prop : kDefaultChunkBytes; }

// The dkey of chunk `index`: 8 bytes, big-endian.
inline std::string chunk_key(uint64_t index) {
  std::string k;
  put_be64(&k, index);
  return k;
}

// The index a chunk key names; nullopt for any other dkey.
inline std::optional<uint64_t> chunk_index(std::string_view dkey) {
  if (dkey.size() != 8) return std::nullopt;
  return get_be64(dkey.data());
}

// The piece of [offset, offset + len) that lies in offset's chunk: its length.
inline uint64_t piece_length(uint64_t chunk, uint64_t offset, uint64_t len) {
  uint64_t room = chunk - offset % chunk;
  return len < room ? len : room;
}

}  // namespace rfos::client::layout
