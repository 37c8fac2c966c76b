// The S3 operations of `rfos s3` (docs/s3.md), apart from HTTP: a Request as the event loop parsed it, the
// Response it writes back, and the channels bodies stream through between the loop and a worker thread.
// gateway.cc owns the sockets; everything here runs on worker threads.
//
// Thread-safety: a Channel is shared by its two sides; the rest is one request's.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "client/container.h"
#include "client/control_client.h"
#include "client/file_stream.h"
#include "s3/gateway.h"
#include "s3/sigv4.h"

namespace rfos::s3 {

// A chunk of a body between the loop and a worker: bytes read from a socket (a PUT's), or a stream's piece read
// from the targets (a GET's), which goes to the socket from the buffer it was read into.
class Chunk {
 public:
  Chunk() = default;
  explicit Chunk(std::string bytes) : bytes_(std::move(bytes)) {}
  explicit Chunk(client::StreamPiece piece) : piece_(std::move(piece)) {}
  std::string_view view() const {
    if (piece_.size() == 0) return bytes_;
    return {reinterpret_cast<const char*>(piece_.bytes().data()), piece_.size()};
  }
  size_t size() const { return view().size(); }
  // The bytes as a string (a PUT's chunk: moved, not copied).
  std::string take() && { return piece_.size() == 0 ? std::move(bytes_) : std::string(view()); }

 private:
  std::string bytes_;
  client::StreamPiece piece_;
};

// A body's bytes between a thread that may wait (a worker) and one that must not (the event loop), at most
// about `limit` bytes queued. The waiting side calls wake() (set by the loop) when the loop may go on.
class Channel {
 public:
  explicit Channel(size_t limit) : limit_(limit) {}
  void set_wake(std::function<void()> wake);

  // The waiting side. push_wait: kAborted-like kShutdown once the other side gave up; pop_wait: "" at the end
  // (the producer finished OK), the producer's error if it failed.
  Status push_wait(Chunk chunk);
  Result<Chunk> pop_wait();
  // The loop's side: never waits.
  void push(Chunk chunk);
  std::optional<Chunk> pop();
  bool full() const;
  // The producer is done (OK) or failed; the consumer gives up (abandon).
  void finish(Status s);
  void abandon();
  // Nothing left to pop and the producer finished: its status.
  std::optional<Status> ended() const;

 private:
  void wake_locked(std::unique_lock<std::mutex>& lock);

  const size_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> chunks_;
  size_t bytes_ = 0;
  std::optional<Status> finished_;
  bool abandoned_ = false;
  std::function<void()> wake_;
};

struct Request {
  std::string method;
  std::string path;  // decoded
  Params query;
  Headers headers;  // lowercase names
  std::string bucket;
  std::string key;
  std::string body;                 // a small body (XML), read whole
  std::shared_ptr<Channel> upload;  // a PutObject's body, streamed
  std::string payload_hash;         // x-amz-content-sha256 (UNSIGNED-PAYLOAD for presigned URLs)
  Auth auth;                        // the verified signature
  std::string signing_key;          // for an aws-chunked body's chunk signatures

  const std::string* header(std::string_view name) const;
  const std::string* param(std::string_view name) const;
};

struct Response {
  unsigned status = 200;
  Headers headers;
  std::string body;
  std::shared_ptr<Channel> download;  // the body streamed: `length` bytes
  uint64_t length = 0;
};

// The S3 error `code` (with its HTTP status) as XML.
Response error_response(unsigned status, std::string_view code, std::string_view message, std::string_view resource);
// An rfos status as the S3 error a client expects.
Response error_response(const Status& s, std::string_view resource, bool bucket_level = false);

// One local user a key acts as, and its control client.
struct User {
  AccessKey key;
  std::string name;           // the user's name, as ACLs and owners know it
  uint32_t uid = UINT32_MAX;  // a named local user's (key.user); none for the gateway's own
  std::unique_ptr<client::ControlClient> control;
};

// A worker thread's container handles (a Container is one thread's), by user and bucket.
class Handles {
 public:
  Result<client::Container*> get(const User& user, const std::string& pool, const std::string& bucket,
                                 const client::ContainerOptions& options);
  void drop(const User& user, const std::string& bucket);

 private:
  std::map<std::string, std::unique_ptr<client::Container>> conts_;
};

struct ServiceConfig {
  std::string pool;
  std::string provider;
  std::string region;
  uint32_t timeout_ms = 30000;
};

// Serves `req` for `user` on a worker thread: calls reply exactly once (for a GET, before the body streams
// through the response's channel, which this fills and finishes).
void serve(const ServiceConfig& config, const User& user, Handles& handles, Request& req,
           const std::function<void(Response)>& reply);

}  // namespace rfos::s3
