// A connected container: the data-plane client. Connects through the control plane (session, capability,
// pool map), opens one endpoint per target, places every (oid, dkey) with the pool map, computes checksums on
// update and verifies them on fetch (end to end), and answers with a clear error, never a hang, when a server
// is gone (every call has a deadline). A target out of engine buffers answers Busy; the request is sent again
// after a growing backoff, within the same deadline.
//
// Two forms: synchronous calls (write, read, ...), and an event queue: submit_write / submit_read return a
// ticket at once, many may be in flight at a time, and poll() hands out their completions. Synchronous array
// I/O keeps several requests in flight itself (one per 1 MiB piece, a window of them).
//
// Snapshots: set_read_epoch(epoch of a snapshot) turns the handle into a read-only view of the container as it
// was when the snapshot was taken (ControlClient::snapshot_create); 0 goes back to the latest state.
//
// Thread-safety: one Container per thread (it owns a transport worker).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/control_client.h"
#include "common/ids.h"
#include "common/status.h"

namespace rfos::client {

using Ticket = uint64_t;
class BlockSealer;  // client/sealing.h

// The most one submitted I/O moves: one engine piece. It stays inside one kMaxIoBytes-aligned range.
inline constexpr size_t kMaxIoBytes = 1u << 20;
// Whether [offset, offset + len) is one piece: 1 B .. kMaxIoBytes inside one kMaxIoBytes-aligned range.
inline bool within_one_piece(uint64_t offset, size_t len) {
  return len > 0 && len <= kMaxIoBytes && offset / kMaxIoBytes == (offset + len - 1) / kMaxIoBytes;
}

struct Completion {
  Ticket ticket = 0;
  Status status;
  uint64_t length = 0;
};

// One page of keys (Container::list_dkeys): pass `anchor` back for the next page until `done`.
struct KeyPage {
  std::string anchor;
  bool done = false;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // with value_akey: each key's single value under it ("" where none), one per key
};

// How array data moves between the client's buffer and the target's engine buffer.
enum class DataPath {
  kAuto,      // the explicit path for registered buffers where the provider gains from it (RDMA), else messages
  kMessage,   // data rides the request or reply message: inline when small, the fabric's rendezvous when large
  kExplicit,  // the request carries a descriptor of the client's registered buffer; the target reads it on
              // update and writes into it on fetch (unregistered buffers are registered on first use and cached)
};

// A byte range of an array.
struct Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const Extent&) const = default;
};

// A grant (Container::grant_memory) as a request that uses it names it: the grant's id, the use (the request of
// another session that claims it; one per S3 request), and the scope it was made for.
struct GrantRef {
  std::string id;     // wire::kGrantIdBytes
  std::string use;    // wire::kGrantUseBytes
  std::string scope;  // wire::kGrantScopeBytes
};

struct ContainerOptions {
  bool write = true;
  DataPath data_path = DataPath::kAuto;
  std::string provider;         // "" = the pool's provider
  uint32_t timeout_ms = 30000;  // per request
  uint32_t ttl_s = 0;           // capability lifetime asked for; 0: the server's default
  // Payloads over 64 KiB (rendezvous) moving at once from this handle; later ones wait their turn. -1: the
  // provider's measured default (transport::payload_sends_at_once: 1 on ucx+tcp, no limit elsewhere); 0: no limit.
  int payload_sends_at_once = -1;
  // Set: array data is sealed in this process before it leaves and opened when it comes back, at any offset and
  // length (client/sealed_io.h; the agent's sealing tenants). Single values, keys and namespace operations are
  // not: their callers keep bytes out of them (sealed()). Grants are refused (kNotSupported): the targets would
  // move the bytes unsealed.
  std::shared_ptr<BlockSealer> sealer;
};

class Container {
 public:
  // Errors: whatever connect() gives (kUnknownPool, kUnknownContainer, kShutdown, kTimeout), kNotSupported
  // (provider), kIoError.
  static Result<std::unique_ptr<Container>> open(ControlClient& control, const std::string& pool,
                                                 const std::string& cont, const ContainerOptions& options = {});
  // Over a session granted elsewhere (tests over the simulated fabric; a process handed its session): with no
  // control plane to ask, the capability is not renewed. Errors: as open's, less the control plane's.
  static Result<std::unique_ptr<Container>> open(Session session, const ContainerOptions& options = {});
  ~Container();

  // Array I/O at [offset, offset+data.size()). Durable when it returns OK. Updates above 1 MiB are split
  // at 1 MiB-aligned boundaries, each piece its own update; when one fails the others may have been stored.
  Status write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
               std::span<const uint8_t> data);
  // Reads into `out` (its size is the length); holes read as zeros. Checksums verified on arrival.
  Status read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
              std::span<uint8_t> out);
  // Scatter-gather: the extents' bytes, in the order given, are the concatenation of the buffers of `sgl`
  // (the totals must match: kInvalidArgument otherwise). Pieces that fall inside one buffer move straight
  // from or into it; a piece that straddles buffers goes through a bounce buffer.
  Status write(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::span<const Extent> extents,
               std::span<const std::span<const uint8_t>> sgl);
  Status read(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::span<const Extent> extents,
              std::span<const std::span<uint8_t>> sgl);
  // The array's extents that hold data (holes and punched ranges left out), in offset order, coalesced.
  Result<std::vector<Extent>> list_extents(const ObjectId& oid, std::string_view dkey, std::string_view akey);
  Result<uint64_t> array_size(const ObjectId& oid, std::string_view dkey, std::string_view akey);
  Status put_value(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::string_view value);
  Result<std::string> get_value(const ObjectId& oid, std::string_view dkey, std::string_view akey);
  // Event queue. An async I/O is 1 B .. 1 MiB and stays inside one 1 MiB-aligned range (one engine piece);
  // `data` / `out` must stay valid until its completion. A read counts as done once its checksums verified.
  Result<Ticket> submit_write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                              std::span<const uint8_t> data);
  Result<Ticket> submit_read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                             std::span<uint8_t> out);
  // Makes progress; returns up to `max` completions, waiting up to timeout_ms for the first one.
  std::vector<Completion> poll(size_t max, int timeout_ms);
  size_t in_flight() const;

  // Registers a buffer with the fabric once, for the explicit path (RDMA reads and writes by the targets);
  // I/O whose bytes lie inside a registered buffer reuses the registration. Stays until unregister_memory.
  Status register_memory(std::span<const uint8_t> buffer);
  Status unregister_memory(const void* addr);
  // A buffer of len bytes (page-aligned, on huge pages where the kernel gives them), registered as
  // register_memory does, until free_memory. The container frees what is left when it closes.
  Result<std::span<uint8_t>> alloc_memory(size_t len);
  Status free_memory(const void* addr);
  size_t registered_regions() const;
  void set_data_path(DataPath path);  // for I/O submitted from now on

  // Grants: this session lends registered memory (register_memory, alloc_memory) to another session's fetches or
  // updates that name the grant: the targets move their bytes into it (`targets_write`: a GET's) or out of it (a
  // PUT's) over this session's endpoints only (an S3 RDMA token, docs/s3.md "RDMA"). Made on every target at once;
  // `id` is 16 random bytes, `scope` the 32-byte digest of the request it is for; it lasts ttl_ms (at most
  // wire::kMaxGrantMs), until revoke_grant, this handle closes, or its session ends. The first request that uses it
  // claims it for its use (GrantRef::use); no other use moves bytes with it. Keep the memory registered and this handle
  // progressing (wait()) while the other session uses it: over tcp and shm this side serves the transfers.
  // Errors: kInvalidArgument (memory not registered), kNoSpace (too many grants held), a request's.
  Status grant_memory(std::span<const uint8_t> buffer, bool targets_write, std::string_view id, std::string_view scope,
                      uint32_t ttl_ms);
  Status revoke_grant(std::string_view id);
  // An async I/O as submit_read / submit_write (1 B .. 1 MiB within one 1 MiB-aligned range), whose bytes go into
  // or come from the granted memory at offset `at`; nothing is verified here (the target checks what it reads
  // against its stored checksums, and checksums what it writes).
  Result<Ticket> submit_read_to(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                                uint64_t length, const GrantRef& grant, uint64_t at);
  Result<Ticket> submit_write_from(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                                   uint64_t length, const GrantRef& grant, uint64_t at);

  // Reads from now on see the container at `epoch` (a snapshot's; 0: the latest state). While it is set,
  // updates and punches are refused (kInvalidArgument): a snapshot is read-only. A read at an epoch that is
  // not a snapshot and below the aggregation boundary gets kEpochTooOld.
  void set_read_epoch(uint64_t epoch);
  uint64_t read_epoch() const;

  // Every object with something visible, over all targets (an object striped over several appears once).
  Result<std::vector<ObjectId>> list_objects();
  Status punch_dkey(const ObjectId& oid, std::string_view dkey);
  Status punch_akey(const ObjectId& oid, std::string_view dkey, std::string_view akey);
  Status punch_extent(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                      uint64_t length);
  // Single-value puts and akey punches sent all at once, each then waited for: one round trip where as many in a
  // row would be several. They land in no order among themselves (each on its key's target, on its own), so a
  // caller puts in one batch only what may land in any order, or fail alone. Each one's status, in order.
  struct KeyUpdate {
    enum class Kind { kPut, kPunchAkey } kind = Kind::kPut;
    ObjectId oid;
    std::string_view dkey, akey, value;  // value: kPut's
  };
  std::vector<Status> update_keys(std::span<const KeyUpdate> updates);
  // Stores a single value only when (dkey, akey) has none: kAlreadyExists otherwise. Of racing inserts from
  // any number of clients exactly one succeeds (the key's target serializes them).
  Status insert_value(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::string_view value);
  // dkeys of an object on one target, a page at a time: pass the returned anchor back until `done`.
  // With value_akey set, each dkey comes with its single value under that akey ("" where none); with `prefix`,
  // only the dkeys that start with it. An object of ordered dkeys (ObjectId::kOrderedDkeys) lists them in byte
  // order, and its anchor is where a page starts, inclusive: any key may start one.
  Result<KeyPage> list_dkeys(const ObjectId& oid, uint32_t target, const std::string& anchor, size_t max,
                             std::string_view value_akey = {}, std::string_view prefix = {});
  // Every dkey of an object over all targets, in key order.
  Result<std::vector<std::string>> list_dkeys(const ObjectId& oid);
  Result<std::vector<std::string>> list_akeys(const ObjectId& oid, std::string_view dkey);
  // The size of the array `akey` under the greatest dkey (byte order) holding one, over all targets (asked at
  // once) but `skip`: the data end of a file-like object (client/file_layout.h).
  Result<uint64_t> object_end(const ObjectId& oid, std::string_view akey, uint32_t skip = ~0u);
  // A namespace operation carried out by `target` (wire kNamespace, or kNamespaceRead for a `read`): `request` is
  // an encoded posix::DirRequest; returns the encoded DirReply. The POSIX namespace's (posix/namespace.h); the
  // container knows no layout.
  Result<std::string> namespace_op(uint32_t target, const ObjectId& oid, std::string_view request, bool read = false);
  // Many at once, up to `depth` in flight on this session: each one's reply or error, in order.
  struct NamespaceCall {
    uint32_t target = 0;
    ObjectId oid;
    std::string request;
    bool read = false;
  };
  std::vector<Result<std::string>> namespace_ops(std::span<const NamespaceCall> calls, size_t depth);
  // Namespace requests from this handle carry `tag` (0: none): a client's tag, shared by its handles, so that
  // watch() brings it notices of the others' changes only.
  void set_client_tag(uint64_t tag);
  // Asks every target for notices of the namespace changes committed there to this container (wire kWatch) but
  // those whose requests carried `tag`, for wire::kWatchLeaseMs; call again within it to keep them coming.
  // `on_notice` gets each notice's bytes (posix::decode_notice) on the thread using this handle, inside its calls
  // and wait(). Errors: as any request's (kNotSupported from a server that sends none).
  Status watch(uint64_t tag, std::function<void(std::string_view)> on_notice);
  // Progresses this handle for up to timeout_ms (0: takes what is there): what a handle that only watches runs.
  void wait(int timeout_ms);
  // Makes every write any target acknowledged so far durable (lazy writes and namespace operations): kSync to
  // every target at once.
  Status sync();
  // Array writes from now on are lazy (wire kLazy): acknowledged once in the target's log (and their block data
  // written, not flushed), durable at the next sync() or the target's own about a second later.
  void set_lazy_writes(bool lazy);
  uint32_t target_count() const;
  uint32_t target_of(const ObjectId& oid, std::string_view dkey) const;
  Status punch_object(const ObjectId& oid);

  const Session& session() const;
  // Whether this handle seals array data (ContainerOptions::sealer): a caller then keeps file and object bytes out
  // of single values and namespace operations, which travel as they are.
  bool sealed() const;

  class Impl;

 private:
  explicit Container(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<Container>> open(std::unique_ptr<Impl> impl, Session session,
                                                 const ContainerOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rfos::client
