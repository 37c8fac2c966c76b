#include "engine/index/wal_file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <rocksdb/file_system.h>

namespace rfos::engine::index {
namespace {

rocksdb::IOStatus io_error(const std::string& what, int err) {
  return rocksdb::IOStatus::IOError(what + ": " + std::strerror(err));
}

bool is_wal(const std::string& fname) { return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".log") == 0; }

// RocksDB's file (the target) appends the records; this class owns a second descriptor of the same file,
// through which it writes the zeros ahead of them.
class PrewrittenWal : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  PrewrittenWal(std::unique_ptr<rocksdb::FSWritableFile> file, std::string name, int fd)
      : FSWritableFileOwnerWrapper(std::move(file)), name_(std::move(name)), fd_(fd) {}

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

  // The zeros allocate the space; RocksDB's fallocate(KEEP_SIZE) would only add unwritten extents past them.
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
  // Makes [0, end) allocated, written and of durable size before a record reaches past the written space.
  rocksdb::IOStatus write_ahead(uint64_t end) {
    if (end <= written_) return rocksdb::IOStatus::OK();
    if (fd_ < 0) return rocksdb::IOStatus::IOError("write-ahead log " + name_ + " is closed");
    static const std::vector<char> zeros(256u << 10, 0);
    uint64_t to = (end + kWalPrewriteChunkBytes - 1) / kWalPrewriteChunkBytes * kWalPrewriteChunkBytes;
    for (uint64_t at = written_; at < to;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), to - at));
      ssize_t w = ::pwrite(fd_, zeros.data(), n, static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return io_error("write ahead of " + name_, errno);
      at += static_cast<uint64_t>(w);
    }
    if (::fdatasync(fd_) != 0) return io_error("fdatasync " + name_, errno);
    written_ = to;
    return rocksdb::IOStatus::OK();
  }

  // Cuts the zeros past the records and closes the second descriptor.
  rocksdb::IOStatus release() {
    if (fd_ < 0) return rocksdb::IOStatus::OK();
    rocksdb::IOStatus s;
    uint64_t size = target()->GetFileSize(rocksdb::IOOptions(), nullptr);
    if (written_ > size && ::ftruncate(fd_, static_cast<off_t>(size)) != 0) s = io_error("truncate " + name_, errno);
    ::close(fd_);
    fd_ = -1;
    return s;
  }

  std::string name_;
  int fd_;
  uint64_t written_ = 0;  // [0, written_) holds records or zeros, allocated and of durable size
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
    *result = std::make_unique<PrewrittenWal>(std::move(*result), fname, fd);
    return s;
  }
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> make_prewritten_wal_fs(std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<PrewrittenWalFileSystem>(base ? std::move(base) : rocksdb::FileSystem::Default());
}

}  // namespace rfos::engine::index
