// An application's side of `rfos agent` (docs/agent.md): connect to the agent's socket, get the ring and a shared
// buffer from it, open containers by name, and submit array I/O whose bytes lie in the shared buffer; the agent
// does the rest. The app holds no capability, remote key or endpoint: only the descriptors the agent passed.
//
// An agent that goes away gives every call kShutdown at once (the socket hangs up), never a hang.
//
// Thread-safety: one AgentClient per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/protocol.h"
#include "agent/ring.h"
#include "common/ids.h"
#include "common/status.h"

namespace rfos::agent {

struct AgentClientOptions {
  uint64_t buffer_bytes = 64ull << 20;  // the shared buffer asked for
  uint32_t entries = 256;               // submission and completion queue entries
  uint32_t timeout_ms = 30000;          // per control request
  bool ring = true;                     // false: the control channel only (a mount's shim: no ring, no buffer)
};

struct AgentCompletion {
  uint64_t user_data = 0;
  Status status;
  uint64_t length = 0;
};

class AgentClient {
 public:
  // Errors: kNotFound (no agent at `socket`), kPermissionDenied (the agent took the app for no tenant),
  // kNotSupported (another protocol version), kTooLarge (a buffer over the agent's limit).
  static Result<std::unique_ptr<AgentClient>> connect(const std::string& socket,
                                                      const AgentClientOptions& options = {});
  ~AgentClient();

  const std::string& tenant() const { return tenant_; }
  uint32_t agent_pid() const { return agent_pid_; }  // the kernel's word on the agent's process
  // The shared buffer: I/O moves bytes from and into it only.
  std::span<uint8_t> buffer() const { return {buffer_, buffer_bytes_}; }

  Result<uint32_t> open(const std::string& pool, const std::string& cont, bool write);
  Status close(uint32_t handle);  // kBusy while its I/O is in flight (it revokes the handle's grants)
  // Lends `bytes` (inside buffer()) to every target through the handle's session for the one request of `scope`
  // (32 bytes; s3::rdma_scope) for ttl_ms: the targets write into them (`targets_write`) or read from them. The
  // grant's id (16 bytes, made by the agent), for the token that names it (the S3 gateway's RDMA path,
  // docs/s3.md). Errors: kInvalidArgument (bytes outside buffer(), a bad scope or lifetime), kNotSupported (the
  // tenant's data is sealed in the agent), kNoSpace (too many grants held), or the targets'.
  Result<std::string> grant(uint32_t handle, std::span<const uint8_t> bytes, bool targets_write, std::string_view scope,
                            uint32_t ttl_ms);
  Status revoke_grant(uint32_t handle, std::string_view id);  // OK also when it is gone already
  Result<uint64_t> array_size(uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey);
  // An operation on an opened container's object or keys (protocol.h, KeyOp), `arg` its argument: kDone's value.
  // The bytes of values and extents go through the start of the shared buffer.
  Result<uint64_t> keys(KeyOp op, uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                        uint64_t arg);

  // Queues an array write or read of `bytes` (inside buffer(): kInvalidArgument otherwise) at `offset`; the agent
  // sees it at once. kBusy when the submission queue is full (take completions first).
  Status submit(RingOp op, uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                uint64_t offset, std::span<uint8_t> bytes, uint64_t user_data);
  // Up to `max` completions, waiting up to timeout_ms (-1: no limit) for the first. kShutdown when the agent is
  // gone (a poll with timeout 0 looks every 64th time it finds nothing), and to every submit and poll after;
  // kCorruption when it broke the ring.
  Result<std::vector<AgentCompletion>> poll(size_t max, int timeout_ms);
  // Submits and waits for one I/O.
  Status write(uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
               std::span<uint8_t> bytes);
  Status read(uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
              std::span<uint8_t> bytes);
  size_t in_flight() const { return in_flight_; }
  // The control calls' timeout from now on.
  void set_timeout_ms(uint32_t ms) { timeout_ms_ = ms; }

  // A relay for client::ControlClient::relayed over a connection of its own to the agent at `socket` (control
  // calls only, one at a time); when the agent cannot be reached, every call fails with why.
  using ControlRelay = std::function<Result<std::string>(const std::string& type, const std::string& request)>;
  static ControlRelay control_relay(const std::string& socket, uint32_t timeout_ms);
  // A control call relayed by the agent, made for this app's user: client::ControlClient::relayed's relay.
  Result<std::string> relay_control(const std::string& type, const std::string& request);

  // Named objects and files of a container through the agent (what `rfos put/get/stat/rm/ls --agent` do), for
  // this app's user, the bytes through the shared buffer a chunk at a time. `key`: a name, or /PATH for a file
  // of the container's namespace (`mode`: a new file's). put_object returns the bytes stored (durable), and
  // get_object the bytes the sink took; object_call runs kStat, kRemove and kList (its answer: kDone, value and
  // text, or kControlled, blob). Errors: the agent's and the server's, as the native calls give them.
  Result<uint64_t> put_object(const std::string& pool, const std::string& cont, const std::string& key, uint32_t mode,
                              const std::function<Result<size_t>(std::span<uint8_t>)>& source,
                              const std::function<void(uint64_t)>& progress = {});
  Result<uint64_t> get_object(const std::string& pool, const std::string& cont, const std::string& key,
                              const std::function<Status(std::span<const uint8_t>)>& sink,
                              const std::function<void(uint64_t)>& progress = {});
  // Later gets, stats and lists of named objects read at this snapshot's epoch (0: the latest).
  void read_snapshot(uint64_t epoch) { snapshot_ = epoch; }
  // `batch`: bytes at the start of the shared buffer that the request carries (kPutFiles, kGetFiles).
  Result<Message> object_call(ObjectOp op, const std::string& pool, const std::string& cont, const std::string& key,
                              uint32_t mode = 0, uint64_t batch = 0, const std::string& anchor = "");

  // Hands a FUSE device this process mounted to the agent, which serves it with the namespace of `cont` for
  // this app's user (`rfos mount --agent`); `settings` from fuse::encode_served_settings. The agent closes the
  // connection when the mount ends.
  Status serve_mount(const std::string& pool, const std::string& cont, const std::string& settings, int fuse_fd);
  // Waits until the agent says the mount ended (OK, or how it failed), the agent goes away (kShutdown), or
  // `stop()` holds (OK; looked at every 200 ms and after a signal).
  Status wait_until_closed(const std::function<bool()>& stop);

 private:
  AgentClient() = default;
  Result<Message> call(const Message& m, std::vector<int>* fds = nullptr, int send_fd = -1);
  Status send_request(const Message& m, int send_fd = -1);
  Message object_request(ObjectOp op, const std::string& pool, const std::string& cont, const std::string& key,
                         uint32_t mode, uint64_t batch = 0, const std::string& anchor = "");
  Result<Message> receive_answer(uint32_t id, std::vector<int>* fds = nullptr);
  Result<std::optional<Message>> receive_one(uint32_t id, std::vector<int>* fds);
  void drop_late(const Message& r);
  Status drain_late();
  Status refusal_or_gone();
  Status went();  // the agent is gone (found by poll): says so, and from now on to every submit and poll
  Status io(RingOp op, uint32_t handle, const ObjectId& oid, std::string_view dkey, std::string_view akey,
            uint64_t offset, std::span<uint8_t> bytes);

  int fd_ = -1;
  uint32_t timeout_ms_ = 30000;
  uint32_t next_id_ = 1;
  std::map<uint32_t, MsgType> timed_out_;  // calls that timed out (by id): what they asked, for their late answer
  uint64_t snapshot_ = 0;                  // read_snapshot's
  std::string tenant_;
  std::unique_ptr<RingRegion> ring_;
  std::unique_ptr<AppEnds> ends_;
  uint8_t* buffer_ = nullptr;
  size_t buffer_bytes_ = 0;
  size_t in_flight_ = 0;
  bool gone_ = false;         // poll found the agent gone: nothing is in flight, and nothing more goes
  uint32_t empty_polls_ = 0;  // polls in a row that waited for nothing and found nothing
  uint32_t agent_pid_ = 0;
  uint64_t next_sync_ = 0;  // user_data of synchronous I/O: the top bit set
};

}  // namespace rfos::agent
