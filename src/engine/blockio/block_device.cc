#include "engine/blockio/block_device.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

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
  return std::unique_ptr<BlockDevice>(new BlockDevice(fd, bytes, direct, !exists, arena,
                                                      options.queue_depth < 8 ? 8 : options.queue_depth,
                                                      options.read_window_bytes, options.write_log));
}

BlockDevice::BlockDevice(int fd, uint64_t bytes, bool direct, bool created, BufferArena* arena, uint32_t depth,
                         uint32_t read_window, WriteLog* write_log)
    : fd_(fd),
      bytes_(bytes),
      direct_(direct),
      created_(created),
      arena_(arena),
      queue_depth_(depth),
      read_window_(read_window),
      write_log_(write_log) {}

BlockDevice::~BlockDevice() {
  idle_rings_.clear();
  ::close(fd_);
}

Result<std::unique_ptr<Ring>> BlockDevice::make_ring() {
  auto ring = std::make_unique<Ring>();
  // Completions without an interrupt: by default the kernel kicks a thread running in user space (an IPI to
  // its CPU) to post each completion. The threads that use these rings either wait in the ring or spin
  // through system calls, which post them anyway, and a sleeping one is still woken. Kernels before 5.19 lack
  // the flags and get the default.
  int rc = io_uring_queue_init(queue_depth_, &ring->ring_, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
  if (rc == -EINVAL) rc = io_uring_queue_init(queue_depth_, &ring->ring_, 0);
  if (rc < 0) return errno_status("io_uring_queue_init", -rc);
  rc = io_uring_register_files(&ring->ring_, &fd_, 1);
  if (rc < 0) return errno_status("io_uring_register_files", -rc);
  if (!fixed_buffers()) return ring;
  const auto& slots = arena_->slots();
  rc = io_uring_register_buffers(&ring->ring_, slots.data(), static_cast<unsigned>(slots.size()));
  if (rc == -ENOMEM) {
    // Registered buffers are pinned and counted against RLIMIT_MEMLOCK (Debian's default for a user: 8 MiB;
    // root's CAP_IPC_LOCK ignores it). Rather than refuse to run, the rings do without: said once per target.
    if (fixed_buffers_.exchange(false, std::memory_order_acq_rel)) {
      rlimit lim{};
      getrlimit(RLIMIT_MEMLOCK, &lim);
      std::string have = lim.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(lim.rlim_cur >> 10) + " KiB";
      spdlog::warn(
          "engine: the {} MiB buffer arena does not fit the locked-memory limit (RLIMIT_MEMLOCK {}), so its I/O "
          "uses unregistered buffers (slower: pages pinned per I/O). For registered buffers raise the limit for "
          "the server's user: LimitMEMLOCK=infinity in its systemd unit (packaging/rfos-server.service), "
          "`ulimit -l unlimited` where it starts, or '<user> - memlock unlimited' in /etc/security/limits.conf",
          arena_->bytes() >> 20, have);
    }
    return ring;
  }
  if (rc < 0) return errno_status("io_uring_register_buffers", -rc);
  return ring;
}

void BlockDevice::prep(io_uring_sqe* sqe, const IoRequest& r, uint32_t done, uint64_t user_data) const {
  uint8_t* buf = r.buf + done;
  uint64_t off = r.offset + done;
  unsigned len = r.len - done;
  if (write_log_ && r.write && done == 0) write_log_->write_issued(r.offset, r.len);
  if (!fixed_buffers()) {
    if (r.write)
      io_uring_prep_write(sqe, 0, buf, len, off);
    else
      io_uring_prep_read(sqe, 0, buf, len, off);
  } else {
    int index = arena_->slot_index(r.buf);
    if (r.write)
      io_uring_prep_write_fixed(sqe, 0, buf, len, off, index);
    else
      io_uring_prep_read_fixed(sqe, 0, buf, len, off, index);
  }
  sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, user_data);
}

bool BlockDevice::account(const IoRequest& r, int res, uint32_t* done, Status* status) {
  if (RFOS_FAULT(r.write ? "blockio.write" : "blockio.read")) res = -EIO;
  if (res == -EAGAIN || res == -EINTR) return true;
  if (res < 0) {
    if (status->is_ok())
      *status = errno_status(std::string(r.write ? "write" : "read") + " at offset " + std::to_string(r.offset), -res);
  } else if (res == 0) {
    if (status->is_ok()) *status = error(StatusCode::kIoError, "unexpected end of block file");
  } else {
    *done += static_cast<uint32_t>(res);
    return *done < r.len;
  }
  return false;
}

Status BlockDevice::check_range(const IoRequest& r) const {
  if (r.offset + r.len > bytes_ || r.len == 0)
    return error(StatusCode::kInternal, "block I/O out of range at offset " + std::to_string(r.offset));
  return Status::ok();
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
    RFOS_RETURN_IF_ERROR(check_range(requests[i]));
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
      prep(io_uring_get_sqe(uring), r, done[i], i);
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
      if (account(requests[i], res, &done[i], &status))
        pending.push_back(i);
      else
        finished(requests[i]);
    }
    if (!status.is_ok()) break;
  }
  std::lock_guard lock(mu_);
  idle_rings_.push_back(std::move(ring));
  return status;
}

// ---- AsyncRing ----

struct AsyncRing::Batch {
  std::vector<IoRequest> requests;
  std::vector<uint32_t> done;  // bytes transferred so far, per request
  size_t open = 0;             // requests not finished
  Status status;
  std::function<void(Status)> callback;
};

Result<std::unique_ptr<AsyncRing>> BlockDevice::make_async_ring() {
  RFOS_ASSIGN_OR_RETURN(std::unique_ptr<Ring> ring, make_ring());
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) return errno_status("eventfd", errno);
  int rc = io_uring_register_eventfd(&ring->ring_, efd);
  if (rc < 0) {
    ::close(efd);
    return errno_status("io_uring_register_eventfd", -rc);
  }
  return std::unique_ptr<AsyncRing>(new AsyncRing(std::move(ring), efd, this));
}

AsyncRing::AsyncRing(std::unique_ptr<Ring> ring, int event_fd, const BlockDevice* dev)
    : ring_(std::move(ring)), event_fd_(event_fd), dev_(dev) {}

AsyncRing::~AsyncRing() {
  // The kernel may still be writing into arena buffers: wait for it, but run nobody's callback.
  std::set<Batch*> orphans;
  io_uring_submit(&ring_->ring_);
  while (sq_inflight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_->ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    auto* slot = reinterpret_cast<Slot*>(io_uring_cqe_get_data64(cqe));
    orphans.insert(slot->batch);
    delete slot;
    io_uring_cqe_seen(&ring_->ring_, cqe);
    --sq_inflight_;
  }
  for (const Slot& s : backlog_) orphans.insert(s.batch);
  for (const Slot& s : windowed_) orphans.insert(s.batch);
  for (Batch* b : orphans) delete b;
  ::close(event_fd_);
}

void AsyncRing::submit(std::vector<IoRequest> requests, std::function<void(Status)> done) {
  auto* b = new Batch{std::move(requests), {}, 0, Status::ok(), std::move(done)};
  for (const IoRequest& r : b->requests) {
    Status s = dev_->check_range(r);
    if (!s.is_ok()) {
      b->callback(s);
      delete b;
      return;
    }
  }
  b->done.assign(b->requests.size(), 0);
  b->open = b->requests.size();
  ++batches_;
  if (b->open == 0) {  // nothing to read or write: finished at the next poll
    backlog_.push_back({b, SIZE_MAX});
    return;
  }
  for (size_t i = 0; i < b->requests.size(); ++i) push(b, i);
}

void AsyncRing::push(Batch* b, size_t i) {
  const IoRequest& r = b->requests[i];
  uint32_t read_bytes = r.write ? 0 : r.len - b->done[i];
  // A read behind a waiting one waits too, though it might fit: smaller reads passing a large one could keep
  // the window from ever emptying for it.
  bool over_window = read_bytes_ > 0 && dev_->read_window_ > 0 && read_bytes_ + read_bytes > dev_->read_window_;
  if (read_bytes > 0 && (!windowed_.empty() || over_window)) {
    windowed_.push_back({b, i});
    return;
  }
  io_uring_sqe* sqe = sq_inflight_ < dev_->queue_depth_ ? io_uring_get_sqe(&ring_->ring_) : nullptr;
  if (sqe == nullptr) {
    backlog_.push_back({b, i});
    return;
  }
  // The completion finds its batch and request through the slot in the ring's user data.
  auto* slot = new Slot{b, i, read_bytes};
  dev_->prep(sqe, r, b->done[i], reinterpret_cast<uint64_t>(slot));
  ++sq_inflight_;
  read_bytes_ += read_bytes;
}

void AsyncRing::flush() {
  // A refused submission (the kernel short of memory, or its completion queue overflowing) stays queued and
  // goes again at the next poll: ready() keeps the loop coming back.
  if (io_uring_sq_ready(&ring_->ring_) > 0) io_uring_submit(&ring_->ring_);
}

bool AsyncRing::ready() const {
  return io_uring_cq_ready(&ring_->ring_) > 0 || io_uring_sq_ready(&ring_->ring_) > 0 || !backlog_.empty() ||
         completions_posting();
}

bool AsyncRing::completions_posting() const {
  return (IO_URING_READ_ONCE(*ring_->ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0;
}

bool AsyncRing::arm() {
  uint64_t ignored;
  ssize_t n = ::read(event_fd_, &ignored, sizeof ignored);  // an eventfd without EFD_SEMAPHORE: one read clears it
  (void)n;                                                  // nothing to clear (EAGAIN) is fine
  return ready();
}

int AsyncRing::poll() {
  std::vector<Batch*> finished;
  if (completions_posting()) io_uring_get_events(&ring_->ring_);  // held completions: have the kernel post them
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_->ring_, &cqe) == 0) {
    auto* slot = reinterpret_cast<Slot*>(io_uring_cqe_get_data64(cqe));
    int res = cqe->res;
    io_uring_cqe_seen(&ring_->ring_, cqe);
    --sq_inflight_;
    read_bytes_ -= slot->read_bytes;
    Batch* b = slot->batch;
    size_t i = slot->index;
    delete slot;
    if (BlockDevice::account(b->requests[i], res, &b->done[i], &b->status)) {
      backlog_.push_back({b, i});  // short or interrupted: the rest goes again
      continue;
    }
    dev_->finished(b->requests[i]);
    if (--b->open == 0) finished.push_back(b);
  }
  // Requests that waited for room (or a resubmission) go in now, then the reads the window lets in.
  std::vector<Slot> waiting;
  waiting.swap(backlog_);
  for (const Slot& s : waiting) {
    if (s.index == SIZE_MAX)
      finished.push_back(s.batch);
    else
      push(s.batch, s.index);
  }
  waiting.clear();
  waiting.swap(windowed_);
  for (const Slot& s : waiting) push(s.batch, s.index);
  flush();
  for (Batch* b : finished) {
    --batches_;
    auto callback = std::move(b->callback);
    Status st = b->status;
    delete b;
    callback(st);
  }
  return static_cast<int>(finished.size());
}

void AsyncRing::drain() {
  while (batches_ > 0) {
    if (poll() > 0 || sq_inflight_ == 0) continue;
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_->ring_, &cqe);  // leaves it for poll() to reap
    if (rc < 0 && rc != -EINTR) break;
  }
}

Status BlockDevice::check_in_place_writes() const {
  struct statfs sf {};
  if (fstatfs(fd_, &sf) != 0) return errno_status("fstatfs", errno);
  constexpr long kExt4 = 0xEF53, kXfs = 0x58465342;
  if (sf.f_type != kExt4 && sf.f_type != kXfs) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%lx", static_cast<unsigned long>(sf.f_type));
    return error(StatusCode::kNotSupported, std::string("the block file's file system (magic ") + hex +
                                                ") is not ext4 or XFS, where in-place O_DIRECT writes are known to "
                                                "need only a device flush");
  }
  if (!direct_) return error(StatusCode::kNotSupported, "the block file is not open with O_DIRECT");
  constexpr uint32_t kBatch = 256;
  std::vector<char> buf(sizeof(fiemap) + kBatch * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  uint64_t covered = 0;
  constexpr uint32_t kRefused = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED |
                                FIEMAP_EXTENT_DATA_ENCRYPTED | FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE |
                                FIEMAP_EXTENT_DATA_TAIL | FIEMAP_EXTENT_UNWRITTEN | FIEMAP_EXTENT_SHARED;
  for (;;) {
    std::memset(buf.data(), 0, buf.size());
    fm->fm_start = covered;
    fm->fm_length = bytes_ - covered;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = kBatch;
    if (ioctl(fd_, FS_IOC_FIEMAP, fm) != 0) return errno_status("FIEMAP on the block file", errno);
    if (fm->fm_mapped_extents == 0) break;
    bool last = false;
    for (uint32_t i = 0; i < fm->fm_mapped_extents; ++i) {
      const fiemap_extent& e = fm->fm_extents[i];
      if (e.fe_logical > covered)
        return error(StatusCode::kNotSupported, "the block file has a hole at byte " + std::to_string(covered));
      if (e.fe_flags & kRefused) {
        char flags[32];
        std::snprintf(flags, sizeof(flags), "0x%x", e.fe_flags & kRefused);
        return error(StatusCode::kNotSupported, "the block file's extent at byte " + std::to_string(e.fe_logical) +
                                                    " is not plainly written (FIEMAP flags " + flags + ")");
      }
      covered = std::max<uint64_t>(covered, e.fe_logical + e.fe_length);
      last |= (e.fe_flags & FIEMAP_EXTENT_LAST) != 0;
    }
    if (last || covered >= bytes_) break;
  }
  if (covered < bytes_)
    return error(StatusCode::kNotSupported, "the block file has a hole at byte " + std::to_string(covered));
  return Status::ok();
}

Status BlockDevice::sync() {
  if (RFOS_FAULT("blockio.sync")) return error(StatusCode::kIoError, "fdatasync: injected fault");
  uint64_t token = write_log_ ? write_log_->sync_started() : 0;
  if (fdatasync(fd_) != 0) return errno_status("fdatasync", errno);
  if (write_log_) write_log_->sync_done(token);
  return Status::ok();
}

}  // namespace rfos::engine::blockio
