#include "engine/index/wal_file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <rocksdb/file_system.h>

namespace rfos::engine::index {
namespace {

rocksdb::IOStatus io_error(const std::string& what, int err) {
  return rocksdb::IOStatus::IOError(what + ": " + std::strerror(err));
}

bool is_wal(const std::string& fname) { return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".log") == 0; }

// RocksDB's file (the target) appends the records; this class owns a second descriptor of the same file,
// through which a thread of its own writes the fill a chunk ahead of them.
class PrewrittenWal : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  PrewrittenWal(std::unique_ptr<rocksdb::FSWritableFile> file, std::string name, int fd)
      : FSWritableFileOwnerWrapper(std::move(file)), name_(std::move(name)), fd_(fd), ahead_([this] { run(); }) {}

  ~PrewrittenWal() override { release(); }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = write_ahead(target()->GetFileSize(options, dbg) + data.size());
    return s.ok() ? target()->Append(data, options, dbg) : s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = write_ahead(target()->GetFileSize(options, dbg) + data.size());
    return s.ok() ? target()->Append(data, options, info, dbg) : s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset, const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = write_ahead(offset + data.size());
    return s.ok() ? target()->PositionedAppend(data, offset, options, dbg) : s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset, const rocksdb::IOOptions& options,
                                     const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = write_ahead(offset + data.size());
    return s.ok() ? target()->PositionedAppend(data, offset, options, info, dbg) : s;
  }

  // The fill allocates the space; RocksDB's fallocate(KEEP_SIZE) would only add unwritten extents past it.
  void PrepareWrite(size_t, size_t, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {}
  rocksdb::IOStatus Allocate(uint64_t, uint64_t, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus Close(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = release();
    rocksdb::IOStatus c = target()->Close(options, dbg);
    return s.ok() ? c : s;
  }

 private:
  // Makes [0, end) allocated, written and of durable size before a record reaches past the written space, and
  // asks for the chunk after it. The fill and its sync are the file's thread's: a writer waits for them only
  // when its records come faster than they do (and for the first chunk), not once a chunk, which on a target
  // thread committing a lazy namespace batch itself held every request on it for the sync (2-3 ms).
  rocksdb::IOStatus write_ahead(uint64_t end) {
    std::unique_lock lock(mu_);
    uint64_t ahead = (end + 2 * kWalPrewriteChunkBytes - 1) / kWalPrewriteChunkBytes * kWalPrewriteChunkBytes;
    if (ahead > want_) {
      want_ = ahead;
      wanted_.notify_one();
    }
    written_cv_.wait(lock, [&] { return end <= written_ || !status_.ok(); });
    return end <= written_ ? rocksdb::IOStatus::OK() : status_;
  }

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      wanted_.wait(lock, [&] { return stopping_ || want_ > written_; });
      if (stopping_) return;
      uint64_t from = written_, to = want_;
      lock.unlock();
      rocksdb::IOStatus s = write_fill(from, to);
      lock.lock();
      if (s.ok()) {
        written_ = to;
      } else {
        status_ = s;
      }
      written_cv_.notify_all();
      if (!s.ok()) return;
    }
  }

  // Last piece first, so the file's size moves once, to a whole number of chunks.
  rocksdb::IOStatus write_fill(uint64_t from, uint64_t to) {
    static const std::vector<char> fill(256u << 10, kWalFillByte);
    for (uint64_t end = to; end > from;) {
      uint64_t at = std::max(from, end > fill.size() ? end - fill.size() : 0);
      for (uint64_t pos = at; pos < end;) {
        ssize_t w = ::pwrite(fd_, fill.data(), static_cast<size_t>(end - pos), static_cast<off_t>(pos));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return io_error("write ahead of " + name_, errno);
        pos += static_cast<uint64_t>(w);
      }
      end = at;
      std::lock_guard lock(mu_);
      if (stopping_) return rocksdb::IOStatus::IOError("write-ahead log " + name_ + " is closed");
    }
    if (::fdatasync(fd_) != 0) return io_error("fdatasync " + name_, errno);
    return rocksdb::IOStatus::OK();
  }

  // Stops the thread, cuts the fill past the records and closes the second descriptor.
  rocksdb::IOStatus release() {
    if (ahead_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stopping_ = true;
        status_ = rocksdb::IOStatus::IOError("write-ahead log " + name_ + " is closed");
        wanted_.notify_one();
        written_cv_.notify_all();
      }
      ahead_.join();
    }
    if (fd_ < 0) return rocksdb::IOStatus::OK();
    rocksdb::IOStatus s;
    uint64_t size = target()->GetFileSize(rocksdb::IOOptions(), nullptr);
    struct stat st {};
    bool longer = ::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) > size;  // fill, maybe half a chunk
    // Through RocksDB's file, not this descriptor: a file system under it (the power-cut seam) sees the cut.
    if (longer) s = target()->Truncate(size, rocksdb::IOOptions(), nullptr);
    ::close(fd_);
    fd_ = -1;
    return s;
  }

  std::string name_;
  int fd_;
  std::mutex mu_;
  std::condition_variable wanted_;      // the thread: want_ moved, or stopping_
  std::condition_variable written_cv_;  // writers: written_ or status_ moved
  uint64_t written_ = 0;                // [0, written_) holds records or fill, allocated and of durable size
  uint64_t want_ = 0;                   // what the thread is asked to have written
  bool stopping_ = false;
  rocksdb::IOStatus status_;  // the thread's failure (or the file's close): no more records
  std::thread ahead_;         // last: started once the rest is set up
};

class PrewrittenWalFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit PrewrittenWalFileSystem(std::shared_ptr<rocksdb::FileSystem> base) : FileSystemWrapper(std::move(base)) {}

  const char* Name() const override { return "RfosPrewrittenWal"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(fname, options, result, dbg);
    if (!s.ok() || !is_wal(fname) || options.use_mmap_writes) return s;
    int fd = ::open(fname.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      result->reset();
      return io_error("open " + fname, err);
    }
    try {
      *result = std::make_unique<PrewrittenWal>(std::move(*result), fname, fd);
    } catch (const std::system_error& e) {  // its thread did not start
      ::close(fd);
      result->reset();
      return rocksdb::IOStatus::IOError("write-ahead log " + fname + ": " + e.what());
    }
    return s;
  }
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> make_prewritten_wal_fs(std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<PrewrittenWalFileSystem>(base ? std::move(base) : rocksdb::FileSystem::Default());
}

}  // namespace rfos::engine::index
