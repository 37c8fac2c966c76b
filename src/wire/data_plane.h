// The data-plane message format, version 2 (docs/wire-format.md). Every request carries the session's capability.
// A message is a header (encoded here) plus an optional payload moved by the transport: update data on requests,
// fetched data on replies.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace rfos::wire {

inline constexpr uint32_t kRequestMagic = 0x31514652;  // "RFQ1"
inline constexpr uint32_t kReplyMagic = 0x31504652;    // "RFP1"
inline constexpr uint8_t kDataPlaneVersion = 4;        // 3: grants (kGrant, Request::grant); 4: list dkeys' prefix
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;
inline constexpr size_t kMaxRkeyBytes = 1024;
inline constexpr size_t kMaxAnchorBytes = 2 * kMaxKeyBytes + 64;  // an engine anchor holds up to two keys

enum class Op : uint8_t {
  kUpdate = 1,     // payload: the data; epoch 0 = the target stamps one
  kFetch = 2,      // reply payload: the data
  kArraySize = 3,  // reply length: the array's size
  kPunchDkey = 4,  // punches one dkey
  kPunchObject = 5,
  kListObjects = 6,     // anchor: where to resume ("" to start); length: max objects. Reply payload: an ObjectPage
  kListDkeys = 7,       // of oid on this target; length: max keys; dkey: "" or the prefix of the keys to list;
                        // akey: "" or the akey whose single values to return with the keys. Reply payload: a
                        // KeyPage
  kListAkeys = 8,       // of (oid, dkey); length: max keys. Reply payload: a KeyPage
  kPunchAkey = 9,       // punches one (dkey, akey)
  kObjectEnd = 10,      // of oid on this target: the size of the array `akey` under the greatest dkey (byte order)
                        // holding one (reply length), 0 when none: a file's data end, by client/file_layout.h
  kPunchExtent = 11,    // punches [offset, offset+length) of the array (dkey, akey): a hole, not counted in its size
  kListExtents = 12,    // of the array (dkey, akey); length: max extents; anchor: where to resume. Reply payload:
                        // an ExtentPage
  kNamespace = 13,      // a POSIX namespace operation (posix/dir_ops.h) carried out here in one atomic commit;
                        // payload (length bytes, up to kMaxNamespaceBytes): its DirRequest. Reply payload: a DirReply
  kSync = 14,           // makes every write this target acknowledged durable (the lazy ones: kLazy)
  kNamespaceRead = 15,  // a namespace read (posix::is_read: lookup, getattr), as kNamespace but no write; any session
  kWatch = 16,          // this endpoint gets a notice of every namespace change to the container committed here
                        // (a Reply with request_id 0, payload: an encoded posix::Notice) for kWatchLeaseMs; sent
                        // again to renew. offset: the client's tag (0: none); changes whose kNamespace request
                        // carried the same tag in its offset are the client's own and not sent to it
  kGrant = 17,          // the sender's registered memory [remote_addr, +length) (rkey) may be moved by fetches or
                        // updates of any session that name the grant (an S3 RDMA token), over the sender's endpoint
                        // only; grant: id + scope (kGrantBytes); offset: its lifetime in ms (<= kMaxGrantMs); flags:
                        // kGrantFetch (fetches write into it) or kGrantUpdate (updates read from it). length 0, no
                        // rkey, no flags: revokes the grant
};
inline constexpr uint8_t kMaxOp = 17;
inline constexpr uint32_t kWatchLeaseMs = 60000;
inline constexpr size_t kMaxNamespaceBytes = 64 * 1024;

// The operations that change what a container holds: they need a writable session, and the target stamps them.
constexpr bool is_write(Op op) {
  return op == Op::kUpdate || op == Op::kPunchDkey || op == Op::kPunchObject || op == Op::kPunchAkey ||
         op == Op::kPunchExtent || op == Op::kNamespace;
}

// Request flags.
inline constexpr uint32_t kIfAbsent = 1;  // update: only when (dkey, akey) has no visible value (kAlreadyExists)
// update: acknowledged once in the target's log, durable at the next kSync (or durable commit) there; honoured
// for updates small enough to stay in the index (engine::UpdateOp::lazy), durable as usual otherwise
inline constexpr uint32_t kLazy = 2;
inline constexpr uint32_t kGrantFetch = 4;   // kGrant: fetches naming it write into the memory (a GET's)
inline constexpr uint32_t kGrantUpdate = 8;  // kGrant: updates naming it read from the memory (a PUT's)

// Grants (kGrant): a random id, the digest of the request it is for (its scope), and, in a fetch or update that
// uses one, the use's id: the first use claims the grant, and no other use may move bytes with it.
inline constexpr size_t kGrantIdBytes = 16;
inline constexpr size_t kGrantScopeBytes = 32;
inline constexpr size_t kGrantUseBytes = 16;
inline constexpr size_t kGrantBytes = kGrantIdBytes + kGrantScopeBytes;                      // in a kGrant
inline constexpr size_t kGrantRefBytes = kGrantIdBytes + kGrantUseBytes + kGrantScopeBytes;  // in a fetch/update
inline constexpr uint64_t kMaxGrantMs = 300000;

enum class Kind : uint8_t { kSingle = 1, kArray = 2 };

struct Request {
  Op op = Op::kFetch;
  Kind kind = Kind::kArray;
  uint64_t request_id = 0;
  std::string capability;
  ObjectId oid;
  uint64_t epoch = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string dkey;
  std::string akey;
  std::vector<uint32_t> csums;  // update: one per checksum chunk (see common/crc32c.h)
  uint32_t flags = 0;           // kIfAbsent, kLazy
  std::string anchor;           // list dkeys / akeys: where to resume ("" to start)
  // The explicit path: the client's registered buffer (transport::Registration), which the target reads on an
  // update or writes on a fetch instead of moving a payload with the message. rkey "" = no descriptor.
  uint64_t remote_addr = 0;
  std::string rkey;
  // A fetch or update through a grant (kGrantRefBytes: id, use, scope): the bytes move between the target and the
  // memory another session granted (kGrant), remote_addr being the offset in it. In a kGrant: id and scope.
  std::string grant;
};

struct Reply {
  uint64_t request_id = 0;
  StatusCode status = StatusCode::kOk;
  std::string message;          // error text
  uint64_t epoch = 0;           // update: the epoch it was stamped with
  uint64_t length = 0;          // fetch: payload bytes; size: the array size; Busy: microseconds to wait
  std::vector<uint32_t> csums;  // fetch: checksums of the payload
};

std::string encode_request(const Request& r);
// kInvalidArgument for what decode_request would refuse as too long (keys, anchor, remote key): a caller learns
// it before sending, since the answer to a request that does not decode cannot always name it.
Status check_lengths(const Request& r);
// kInvalidArgument for anything malformed: wrong magic or version, truncated, lengths out of range.
Result<Request> decode_request(std::string_view in);
// The request id of a header decode_request refused, where the fixed part that holds it is whole (0 if not), so
// that the refusal reaches the call that made it rather than leave it to time out.
uint64_t request_id_of(std::string_view in);
std::string encode_reply(const Reply& r);

// A page of keys (list dkeys / akeys reply payload): the next anchor, whether the enumeration is done, the keys.
struct KeyPage {
  std::string anchor;
  bool done = false;
  std::vector<std::string> keys;
  // List dkeys with an akey named: each dkey's single value under that akey ("" where it has none), so a
  // directory listing gets its entries in one round trip.
  bool with_values = false;
  std::vector<std::string> values;
};
// A page of an array's visible extents (list extents reply payload): offset order, coalesced, no holes.
struct ExtentPage {
  std::string anchor;
  bool done = false;
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // (offset, length)
};
inline constexpr size_t kMaxExtentsPerPage = 4096;
// A page of a container's objects on one target (list objects reply payload), in id order.
struct ObjectPage {
  std::string anchor;
  bool done = false;
  std::vector<ObjectId> oids;
};
inline constexpr size_t kMaxObjectsPerPage = 4096;

std::string encode_extent_page(const ExtentPage& p);
Result<ExtentPage> decode_extent_page(std::string_view in);
std::string encode_object_page(const ObjectPage& p);
Result<ObjectPage> decode_object_page(std::string_view in);
std::string encode_key_page(const KeyPage& p);
Result<KeyPage> decode_key_page(std::string_view in);
Result<Reply> decode_reply(std::string_view in);

}  // namespace rfos::wire
