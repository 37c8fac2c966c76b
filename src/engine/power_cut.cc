#include "engine/power_cut.h"

#include <fcntl.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "engine/blockio/block_device.h"
#include "engine/engine_impl.h"
#include "engine/index/wal_file_system.h"

namespace rfos::engine {

namespace {
std::string parent_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}
std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}
}  // namespace

class PowerCut::Impl : public blockio::WriteLog {
 public:
  explicit Impl(uint64_t seed) : rng(seed) {}

  std::mt19937_64 rng;
  std::atomic<bool> cut{false};
  std::mutex mu;

  // ---- the block file ----
  std::string block_file;
  std::map<std::pair<uint64_t, uint64_t>, int> issued;                       // writes in flight
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, uint64_t>> finished;  // unsynced, with their order
  uint64_t order = 0;

  void write_issued(uint64_t offset, uint64_t len) override {
    std::lock_guard lock(mu);
    ++issued[{offset, len}];
  }
  void write_finished(uint64_t offset, uint64_t len) override {
    std::lock_guard lock(mu);
    auto it = issued.find({offset, len});
    if (it != issued.end() && --it->second == 0) issued.erase(it);
    finished.push_back({{offset, len}, order++});
  }
  uint64_t sync_started() override {
    std::lock_guard lock(mu);
    return order;
  }
  void sync_done(uint64_t token) override {
    std::lock_guard lock(mu);
    if (cut) return;  // the machine is off: nothing becomes durable any more
    std::erase_if(finished, [&](const auto& f) { return f.second < token; });
  }

  // ---- the index's files ----
  struct FileState {
    uint64_t written = 0;       // end of what was written through the file system
    uint64_t synced = 0;        // durable up to here
    bool dir_unsynced = false;  // created since its directory was last synced
  };
  std::map<std::string, FileState> files;

  void created(const std::string& name) {
    std::lock_guard lock(mu);
    files[name] = FileState{0, 0, true};
  }
  void wrote(const std::string& name, uint64_t end) {
    std::lock_guard lock(mu);
    FileState& f = files[name];
    f.written = std::max(f.written, end);
  }
  void synced(const std::string& name) {
    std::lock_guard lock(mu);
    if (cut) return;
    FileState& f = files[name];
    f.synced = f.written;
  }
  void truncated(const std::string& name, uint64_t size) {
    std::lock_guard lock(mu);
    FileState& f = files[name];
    f.written = size;
    f.synced = std::min(f.synced, size);
  }
  void dir_synced(const std::string& dir) {
    std::lock_guard lock(mu);
    if (cut) return;
    for (auto& [name, f] : files)
      if (parent_of(name) == dir) f.dir_unsynced = false;
  }
  void deleted(const std::string& name) {
    std::lock_guard lock(mu);
    files.erase(name);
  }
  void renamed(const std::string& from, const std::string& to) {
    std::lock_guard lock(mu);
    auto it = files.find(from);
    if (it == files.end()) {
      files.erase(to);
      return;
    }
    FileState f = it->second;
    f.dir_unsynced = false;  // renames are taken as durable when made (see power_cut.h)
    files.erase(it);
    files[to] = f;
  }

  Result<bool> lose_pages(const std::string& name, const FileState& f) {
    constexpr uint64_t kPage = 4096;
    int fd = ::open(name.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return error(StatusCode::kIoError, "open " + name + ": " + std::strerror(errno));
    bool lost = false;
    for (uint64_t page = f.synced / kPage * kPage; page < f.written; page += kPage) {
      if (rng() % 2 == 0) continue;
      uint64_t from = std::max(page, f.synced), to = std::min(page + kPage, f.written);
      std::string fill(to - from, index::kWalFillByte);
      if (::pwrite(fd, fill.data(), fill.size(), static_cast<off_t>(from)) != static_cast<ssize_t>(fill.size())) {
        ::close(fd);
        return error(StatusCode::kIoError, "lose pages of " + name + ": " + std::strerror(errno));
      }
      lost = true;
    }
    ::fsync(fd);
    ::close(fd);
    return lost;
  }

  Result<std::string> apply() {
    std::lock_guard lock(mu);
    uint64_t torn_ranges = 0, torn_bytes = 0, cut_files = 0, removed = 0, paged_logs = 0;
    if (!block_file.empty()) {
      int fd = ::open(block_file.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) return error(StatusCode::kIoError, "open " + block_file + ": " + std::strerror(errno));
      std::vector<std::pair<uint64_t, uint64_t>> torn;
      for (const auto& [range, count] : issued) torn.push_back(range);
      for (const auto& f : finished) torn.push_back(f.first);
      for (const auto& [offset, len] : torn) {
        std::string junk(len, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        if (::pwrite(fd, junk.data(), len, static_cast<off_t>(offset)) != static_cast<ssize_t>(len)) {
          ::close(fd);
          return error(StatusCode::kIoError, "tear " + block_file + ": " + std::strerror(errno));
        }
        ++torn_ranges;
        torn_bytes += len;
      }
      ::fsync(fd);
      ::close(fd);
    }
    for (const auto& [name, f] : files) {
      if (f.dir_unsynced) {
        if (::unlink(name.c_str()) == 0) ++removed;
        continue;
      }
      if (f.written <= f.synced) continue;
      struct stat st {};
      if (::stat(name.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > f.written) {
        // A log written ahead (index/wal_file_system.h): its size and the fill past its records were durable,
        // and the device writes its unsynced pages in any order. Each page of them is kept or lost, a lost one
        // reading as the fill again.
        RFOS_ASSIGN_OR_RETURN(bool lost, lose_pages(name, f));
        paged_logs += lost ? 1 : 0;
        continue;
      }
      // A random part of what was not synced survives, cut anywhere.
      uint64_t keep = f.synced + rng() % (f.written - f.synced + 1);
      if (::truncate(name.c_str(), static_cast<off_t>(keep)) == 0) ++cut_files;
    }
    issued.clear();
    finished.clear();
    files.clear();
    return "tore " + std::to_string(torn_ranges) + " block ranges (" + std::to_string(torn_bytes) + " bytes), cut " +
           std::to_string(cut_files) + " index files, lost pages of " + std::to_string(paged_logs) +
           " written-ahead logs, removed " + std::to_string(removed);
  }
};

namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

class CutFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  CutFile(std::unique_ptr<rocksdb::FSWritableFile> target, std::string name, PowerCut::Impl* cut)
      : FSWritableFileOwnerWrapper(std::move(target)), name_(std::move(name)), cut_(cut) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    uint64_t at = target()->GetFileSize(o, dbg);
    IOStatus s = target()->Append(data, o, dbg);
    if (s.ok()) cut_->wrote(name_, at + data.size());
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    uint64_t at = target()->GetFileSize(o, dbg);
    IOStatus s = target()->Append(data, o, info, dbg);
    if (s.ok()) cut_->wrote(name_, at + data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    IOStatus s = target()->PositionedAppend(data, offset, o, dbg);
    if (s.ok()) cut_->wrote(name_, offset + data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            const rocksdb::DataVerificationInfo& info, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    IOStatus s = target()->PositionedAppend(data, offset, o, info, dbg);
    if (s.ok()) cut_->wrote(name_, offset + data.size());
    return s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    IOStatus s = target()->Truncate(size, o, dbg);
    if (s.ok()) cut_->truncated(name_, size);
    return s;
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override { return sync(target()->Sync(o, dbg)); }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override { return sync(target()->Fsync(o, dbg)); }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    return target()->RangeSync(offset, nbytes, o, dbg);  // a hint: durable only at Sync
  }

 private:
  IOStatus sync(IOStatus s) {
    if (s.ok()) cut_->synced(name_);
    return s;
  }
  std::string name_;
  PowerCut::Impl* cut_;
};

class CutDirectory : public rocksdb::FSDirectoryWrapper {
 public:
  CutDirectory(std::unique_ptr<rocksdb::FSDirectory> target, std::string name, PowerCut::Impl* cut)
      : FSDirectoryWrapper(std::move(target)), name_(std::move(name)), cut_(cut) {}
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = FSDirectoryWrapper::Fsync(o, dbg);
    if (s.ok()) cut_->dir_synced(name_);
    return s;
  }
  IOStatus FsyncWithDirOptions(const IOOptions& o, IODebugContext* dbg, const rocksdb::DirFsyncOptions& d) override {
    IOStatus s = FSDirectoryWrapper::FsyncWithDirOptions(o, dbg, d);
    if (s.ok()) cut_->dir_synced(name_);
    return s;
  }

 private:
  std::string name_;
  PowerCut::Impl* cut_;
};

class CutFileSystem : public rocksdb::FileSystemWrapper {
 public:
  CutFileSystem(std::shared_ptr<rocksdb::FileSystem> base, PowerCut::Impl* cut)
      : FileSystemWrapper(std::move(base)), cut_(cut) {}
  const char* Name() const override { return "RfosPowerCut"; }

  IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                           std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) override {
    IOStatus s = target()->NewWritableFile(name, o, result, dbg);
    if (!s.ok()) return s;
    cut_->created(name);
    *result = std::make_unique<CutFile>(std::move(*result), name, cut_);
    return s;
  }
  IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                              std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) override {
    IOStatus s = target()->ReopenWritableFile(name, o, result, dbg);
    if (!s.ok()) return s;
    *result = std::make_unique<CutFile>(std::move(*result), name, cut_);
    return s;
  }
  IOStatus NewDirectory(const std::string& name, const IOOptions& o, std::unique_ptr<rocksdb::FSDirectory>* result,
                        IODebugContext* dbg) override {
    IOStatus s = target()->NewDirectory(name, o, result, dbg);
    if (s.ok()) *result = std::make_unique<CutDirectory>(std::move(*result), without_trailing_slash(name), cut_);
    return s;
  }
  IOStatus DeleteFile(const std::string& name, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    IOStatus s = target()->DeleteFile(name, o, dbg);
    if (s.ok()) cut_->deleted(name);
    return s;
  }
  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions& o,
                      IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    IOStatus s = target()->RenameFile(from, to, o, dbg);
    if (s.ok()) cut_->renamed(from, to);
    return s;
  }
  IOStatus Truncate(const std::string& name, size_t size, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    IOStatus s = target()->Truncate(name, size, o, dbg);
    if (s.ok()) cut_->truncated(name, size);
    return s;
  }
  IOStatus DeleteDir(const std::string& name, const IOOptions& o, IODebugContext* dbg) override {
    if (cut_->cut) return IOStatus::OK();
    return target()->DeleteDir(name, o, dbg);
  }

 private:
  PowerCut::Impl* cut_;
};

}  // namespace

PowerCut::PowerCut(uint64_t seed) : impl_(std::make_unique<Impl>(seed)) {}
PowerCut::~PowerCut() = default;
void PowerCut::cut() { impl_->cut = true; }
bool PowerCut::is_cut() const { return impl_->cut; }
Result<std::string> PowerCut::apply() { return impl_->apply(); }

blockio::WriteLog* power_cut_block_log(PowerCut* cut, const std::string& block_file) {
  std::lock_guard lock(cut->impl()->mu);
  cut->impl()->block_file = block_file;
  return cut->impl();
}

std::shared_ptr<rocksdb::FileSystem> power_cut_fs(PowerCut* cut, std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<CutFileSystem>(std::move(base), cut->impl());
}

}  // namespace rfos::engine
