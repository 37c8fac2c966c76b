#include "engine/blockio/block_device.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fault.h"

namespace rfos::engine::blockio {

class Ring {
 public:
  ~Ring() { io_uring_queue_exit(&ring_); }
  io_uring ring_{};
};

namespace {

Status errno_status(const std::string& what, int err) {
  StatusCode code = err == ENOSPC ? StatusCode::kNoSpace : StatusCode::kIoError;
  return error(code, what + ": " + strerror(err));
}

Status write_zeros(int fd, uint64_t bytes) {
  constexpr size_t kChunk = 1u << 20;
  void* zeros = nullptr;
  if (posix_memalign(&zeros, 4096, kChunk) != 0) return error(StatusCode::kIoError, "out of memory");
  std::memset(zeros, 0, kChunk);
  Status st;
  for (uint64_t off = 0; off < bytes && st.is_ok(); off += kChunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - off));
    if (pwrite(fd, zeros, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
      st = errno_status("zeroing block file", errno);
  }
  free(zeros);
  return st;
}

}  // namespace

Result<std::unique_ptr<BlockDevice>> BlockDevice::open(const BlockDeviceOptions& options, BufferArena* arena) {
  if (options.path.empty()) return error(StatusCode::kInvalidArgument, "block file path is empty");
  struct stat st {};
  bool exists = ::stat(options.path.c_str(), &st) == 0;
  if (!exists && !options.create) return error(StatusCode::kNotFound, "block file " + options.path + " does not exist");
  if (!exists && (options.bytes < 2 * kBlockBytes || options.bytes % kBlockBytes != 0))
    return error(StatusCode::kInvalidArgument, "block file size must be a multiple of 4096 and at least 8192");

  int flags = O_RDWR | O_CLOEXEC | (exists ? 0 : O_CREAT);
  int fd = -1;
  bool direct = false;
  if (options.direct_io) {
    fd = ::open(options.path.c_str(), flags | O_DIRECT, 0644);
    direct = fd >= 0;
  }
  if (fd < 0) fd = ::open(options.path.c_str(), flags, 0644);
  if (fd < 0) return errno_status("open " + options.path, errno);

  uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (!exists) {
    bytes = options.bytes;
    Status s;
    if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) s = errno_status("fallocate " + options.path, errno);
    // Zeroing through the page cache is simplest; O_DIRECT handles are fine with it after the fsync below.
    if (s.is_ok() && options.prezero) {
      int bfd = ::open(options.path.c_str(), O_WRONLY | O_CLOEXEC);
      s = bfd < 0 ? errno_status("open for zeroing", errno) : write_zeros(bfd, bytes);
      if (bfd >= 0) {
        if (s.is_ok() && fsync(bfd) != 0) s = errno_status("fsync " + options.path, errno);
        ::close(bfd);
      }
    }
    if (s.is_ok() && fsync(fd) != 0) s = errno_status("fsync " + options.path, errno);
    if (!s.is_ok()) {
      ::close(fd);
      ::unlink(options.path.c_str());
      return s;
    }
  }
  if (bytes < 2 * kBlockBytes || bytes % kBlockBytes != 0) {
    ::close(fd);
    return error(StatusCode::kCorruption, "block file " + options.path + " has an invalid size");
  }
  return std::unique_ptr<BlockDevice>(
      new BlockDevice(fd, bytes, direct, !exists, arena, options.queue_depth < 8 ? 8 : options.queue_depth));
}

BlockDevice::BlockDevice(int fd, uint64_t bytes, bool direct, bool created, BufferArena* arena, uint32_t depth)
    : fd_(fd), bytes_(bytes), direct_(direct), created_(created), arena_(arena), queue_depth_(depth) {}

BlockDevice::~BlockDevice() {
  idle_rings_.clear();
  ::close(fd_);
}

Result<std::unique_ptr<Ring>> BlockDevice::make_ring() {
  auto ring = std::make_unique<Ring>();
  int rc = io_uring_queue_init(queue_depth_, &ring->ring_, 0);
  if (rc < 0) return errno_status("io_uring_queue_init", -rc);
  rc = io_uring_register_files(&ring->ring_, &fd_, 1);
  if (rc < 0) return errno_status("io_uring_register_files", -rc);
  const auto& slots = arena_->slots();
  rc = io_uring_register_buffers(&ring->ring_, slots.data(), static_cast<unsigned>(slots.size()));
  if (rc < 0) return errno_status("io_uring_register_buffers", -rc);
  return ring;
}

Status BlockDevice::submit_and_wait(std::span<const IoRequest> requests) {
  std::unique_ptr<Ring> ring;
  {
    std::lock_guard lock(mu_);
    if (!idle_rings_.empty()) {
      ring = std::move(idle_rings_.back());
      idle_rings_.pop_back();
    }
  }
  if (!ring) {
    RFOS_ASSIGN_OR_RETURN(ring, make_ring());
  }

  // Progress of each request: bytes done so far. Short transfers are resubmitted for the remainder.
  std::vector<uint32_t> done(requests.size(), 0);
  std::vector<size_t> pending;
  for (size_t i = 0; i < requests.size(); ++i) {
    const IoRequest& r = requests[i];
    if (r.offset + r.len > bytes_ || r.len == 0)
      return error(StatusCode::kInternal, "block I/O out of range at offset " + std::to_string(r.offset));
    pending.push_back(i);
  }
  Status status;
  io_uring* uring = &ring->ring_;
  while (!pending.empty()) {
    size_t inflight = 0;
    while (!pending.empty() && inflight < queue_depth_) {
      size_t i = pending.back();
      pending.pop_back();
      const IoRequest& r = requests[i];
      io_uring_sqe* sqe = io_uring_get_sqe(uring);
      uint8_t* buf = r.buf + done[i];
      uint64_t off = r.offset + done[i];
      unsigned len = r.len - done[i];
      int index = arena_->slot_index(r.buf);
      if (r.write)
        io_uring_prep_write_fixed(sqe, 0, buf, len, off, index);
      else
        io_uring_prep_read_fixed(sqe, 0, buf, len, off, index);
      sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, i);
      ++inflight;
    }
    int rc = io_uring_submit_and_wait(uring, 1);  // one syscall submits and waits for the first completion
    // A ring that failed to submit or wait is dropped (not returned to the pool): its queues are unknown.
    if (rc < 0) return errno_status("io_uring_submit", -rc);
    while (inflight > 0) {
      io_uring_cqe* cqe = nullptr;
      rc = io_uring_wait_cqe(uring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) return errno_status("io_uring_wait_cqe", -rc);
      size_t i = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(uring, cqe);
      --inflight;
      const IoRequest& r = requests[i];
      bool injected = RFOS_FAULT(r.write ? "blockio.write" : "blockio.read");
      if (injected) res = -EIO;
      if (res < 0) {
        if (res == -EAGAIN || res == -EINTR) {
          pending.push_back(i);
        } else if (status.is_ok()) {
          status =
              errno_status(std::string(r.write ? "write" : "read") + " at offset " + std::to_string(r.offset), -res);
        }
      } else if (res == 0) {
        if (status.is_ok()) status = error(StatusCode::kIoError, "unexpected end of block file");
      } else {
        done[i] += static_cast<uint32_t>(res);
        if (done[i] < r.len) pending.push_back(i);
      }
    }
    if (!status.is_ok()) break;
  }
  std::lock_guard lock(mu_);
  idle_rings_.push_back(std::move(ring));
  return status;
}

Status BlockDevice::sync() {
  if (RFOS_FAULT("blockio.sync")) return error(StatusCode::kIoError, "fdatasync: injected fault");
  if (fdatasync(fd_) != 0) return errno_status("fdatasync", errno);
  return Status::ok();
}

}  // namespace rfos::engine::blockio
