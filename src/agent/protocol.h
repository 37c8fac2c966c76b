// The control channel between an application and `rfos agent` (docs/agent.md): one message per datagram of a
// Unix SOCK_SEQPACKET socket, each a request the app sends and the agent answers in order. Descriptors (the
// ring region, the shared buffer, the two eventfds) travel beside the answer to kSetup as SCM_RIGHTS, and a
// FUSE device beside kMount; no other message may carry one.
//
//   message := type(1) id(4 LE) body
//   string  := len(2 LE) bytes
//   blob    := len(4 LE) bytes
//
// Bytes from the other side are untrusted: decode_message checks every length and refuses what is malformed
// or has bytes left over (fuzzed in protocol_fuzz).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rfos::agent {

inline constexpr uint32_t kProtocolVersion = 3;
inline constexpr size_t kMaxMessageBytes = 65536;  // a relayed control answer (a list of pools) may be long

enum class MsgType : uint8_t {
  // app -> agent
  kHello = 1,  // version; answered by kWelcome
  kSetup = 2,  // sq_entries, cq_entries, buffer_bytes; answered by kReady with 4 descriptors
  kOpen = 3,   // pool, cont, write; answered by kOpened
  kClose = 4,  // handle; answered by kDone
  // handle, oid, dkey, akey, value: a KeyOp, buffer_bytes: its argument; answered by kDone with its value.
  kKeys = 5,
  // pool, cont, text (fuse::encode_served_settings), one descriptor: a FUSE device the app mounted, which the
  // agent serves (the namespace runs in the agent); answered by kDone once it does. The agent closes the
  // connection when the mount ends.
  kMount = 6,
  // text: a control call's request type (client::ControlClient::forward), blob: its bytes; answered by
  // kControlled with the response's bytes in blob. Made for the app's user; never the session calls.
  kControl = 7,
  // pool, cont, text: a name (or /PATH: a file of the namespace), value: ObjectOp, handle: a new file's mode,
  // epoch: a snapshot a get, stat or list of named objects reads (0: the latest).
  // put: the agent asks for the bytes with kNext, the app answers each with kChunk (value bytes at the start
  // of the shared buffer; 0: the end); get: the agent sends kChunk, the app answers kNext once it took them.
  // Answered by kDone (value: the bytes; stat: the size, text: what else) or kControlled (list: blob).
  kObject = 8,
  kChunk = 9,  // value: bytes at the start of the shared buffer
  kNext = 10,  // the last chunk is taken: the next
  // handle, value: an offset in the shared buffer, buffer_bytes: a length, write: the targets write into it (a
  // GET) rather than read from it, akey: the scope (32 bytes), epoch: the lifetime in ms. Lends those bytes to
  // every target through the handle's session for one request of that scope (client::Container::grant_memory:
  // the S3 gateway's RDMA path, docs/s3.md); answered by kDone, text: the grant's id (16 bytes, the agent's).
  kGrant = 11,
  kRevoke = 12,  // handle, dkey: a grant's id; answered by kDone (also when it is gone already)
  // agent -> app
  kWelcome = 64,     // version, tenant
  kReady = 65,       // sq_entries, cq_entries, buffer_bytes (the region sizes as made)
  kOpened = 66,      // handle
  kDone = 67,        // value
  kError = 68,       // code, text
  kControlled = 69,  // blob
};

// kObject's operations. The namespace's (the C API's rfos_fs_*): kMkdir (text: the path, handle: the mode);
// kPutFiles and kGetFiles, a batch in the shared buffer's first buffer_bytes (docs/agent.md, "The control
// channel"), answered by kControlled with one result per file; kSync.
enum class ObjectOp : uint8_t {
  kPut = 1,
  kGet = 2,
  kStat = 3,
  kRemove = 4,
  kList = 5,
  kMkdir = 6,
  kPutFiles = 7,
  kGetFiles = 8,
  kSync = 9,
  kListDir = 10,   // key: the directory; dkey: where to go on from; answer: kControlled, a page (docs/agent.md)
  kCheck = 11,     // the namespace's check (rfos fs check); answer: kControlled, its report as text
  kSymlink = 12,   // key: the link's path; dkey: its target
  kReadlink = 13,  // key: a symlink's path; answer: kDone, text = its target
};

// kKeys' operations on an opened container's object, dkey or akey (the C API's), each with its argument and
// what kDone's value answers:
enum class KeyOp : uint8_t {
  kArraySize = 1,    // -; the array's size
  kPutValue = 2,     // the value's bytes at the start of the shared buffer (at most 1 MiB); -
  kGetValue = 3,     // the room at the start of the shared buffer; the value's size (its bytes there if it fits)
  kPunchDkey = 4,    // -; -
  kPunchObject = 5,  // -; -
  kListExtents = 6,  // the room at the start of the shared buffer; how many extents (16 bytes each: offset,
                     // length, u64 LE), those that fit there
  kReadEpoch = 7,    // the snapshot epoch the handle reads from now on (0: the latest); -
};

// Files in one kPutFiles or kGetFiles batch, at most (their results fit one message).
inline constexpr uint32_t kMaxBatchFiles = 4096;

// One file of a kPutFiles or kGetFiles batch, as the agent reads it from the shared buffer.
struct BatchFile {
  std::string name;
  uint32_t mode = 0;      // put: the new file's
  std::string data;       // put: its bytes
  uint64_t capacity = 0;  // get: the room for its bytes in the answer
};
// A batch (docs/agent.md): count u32 (at most kMaxBatchFiles), then per file its name (string) and, for a put,
// mode u32, length u64 and the bytes, or for a get its capacity u64; a get's capacities add up to at most
// `room`. kInvalidArgument for anything else (fuzzed in agent_fuzz).
Result<std::vector<BatchFile>> decode_file_batch(std::string_view bytes, bool put, uint64_t room);
// The app's side: a put's files with their names, modes and bytes, or a get's with their names and capacities.
std::string encode_file_batch(const std::vector<BatchFile>& files, bool put);

// One message; which fields mean something depends on its type (above).
struct Message {
  MsgType type = MsgType::kHello;
  uint32_t id = 0;  // the app's; the answer carries it back
  uint32_t version = 0;
  uint32_t sq_entries = 0, cq_entries = 0;
  uint64_t buffer_bytes = 0;
  std::string pool, cont;
  bool write = false;
  uint32_t handle = 0;
  uint8_t oid[16] = {};
  std::string dkey, akey;
  uint64_t value = 0;
  uint16_t code = 0;   // StatusCode
  std::string text;    // an error's message, or the tenant's name
  std::string blob;    // a relayed control call's bytes (u32 length)
  uint64_t epoch = 0;  // kObject: read a named object at this snapshot's epoch (0: the latest)
};

std::string encode_message(const Message& m);
// kInvalidArgument for an unknown type, a short or long body, or a string past the end.
Result<Message> decode_message(std::string_view bytes);

// The error a kError message carries, as a Status.
Status status_of(const Message& m);
Message error_message(uint32_t id, const Status& s);

}  // namespace rfos::agent
