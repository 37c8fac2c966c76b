// rfos mount and rfos fs: a container's POSIX namespace through FUSE, and copying files in and out of it
// without a mount (like `daos fs copy`).
//
//   rfos mount [--pool P] [--cont C] [--foreground] [--direct-io] [--attr-timeout S] [-o OPTS] MOUNTPOINT
//   rfos fs copy SRC DST       paths in the container are written rfos:/path; directories are copied whole
//   rfos fs ls [rfos:/PATH]
//   rfos fs check [--repair]   the namespace's consistency, read-only (--repair: then gives back what nothing
//                              reaches, while no client has the container open)
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <vector>

#include "agent/agent_client.h"
#include "cli/cli.h"
#include "fuse/mount.h"
#include "posix/namespace.h"

namespace rfos::cli {
namespace {

struct FsArgs {
  std::string pool = "default";
  std::string cont = "default";
  std::string provider;
};

constexpr std::string_view kPrefix = "rfos:";
bool in_container(const std::string& p) { return p.rfind(kPrefix, 0) == 0; }
std::string_view inner(const std::string& p) { return std::string_view(p).substr(kPrefix.size()); }

Status errno_error(const std::string& what) { return error(StatusCode::kIoError, what + ": " + std::strerror(errno)); }

// How many small files go to the namespace in one call, and how many of its operations are in flight.
constexpr size_t kBatchFiles = 256;
constexpr size_t kBatchDepth = 32;

// A small local file whole, or nullopt when it is no longer a small regular file (it changed since the listing).
Result<std::optional<std::string>> read_small(const std::filesystem::path& src) {
  int fd = ::open(src.c_str(), O_RDONLY | O_NOFOLLOW);
  if (fd < 0) return errno_error(src.string());
  std::string bytes(posix::kMaxDirData + 1, '\0');
  size_t got = 0;
  ssize_t n = 0;
  while (got < bytes.size() && (n = ::read(fd, bytes.data() + got, bytes.size() - got)) > 0) got += n;
  ::close(fd);
  if (n < 0) return errno_error(src.string());
  if (got > posix::kMaxDirData) return std::optional<std::string>();
  bytes.resize(got);
  return std::optional<std::string>(std::move(bytes));
}

Status copy_in(posix::Namespace& ns, const posix::Cred& cred, const std::filesystem::path& src, const ObjectId& dir,
               const std::string& name, uint64_t* files);

// A local symlink's target.
Result<std::string> read_link(const std::filesystem::path& src) {
  std::string target(4096, '\0');
  ssize_t n = readlink(src.c_str(), target.data(), target.size());
  if (n < 0) return errno_error(src.string());
  target.resize(static_cast<size_t>(n));
  return target;
}

// A local directory's entries for a copy in: each small regular file whole to `small` (name, mode, bytes),
// everything else to `other` (its path and name).
Status walk_local(const std::filesystem::path& src,
                  const std::function<Status(std::string name, uint32_t mode, std::string bytes)>& small,
                  const std::function<Status(const std::filesystem::path& path, const std::string& name)>& other) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(src, ec)) {
    struct stat st {};
    if (lstat(e.path().c_str(), &st) != 0) return errno_error(e.path().string());
    std::string name = e.path().filename().string();
    std::optional<std::string> bytes;
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) <= posix::kMaxDirData) {
      RFOS_ASSIGN_OR_RETURN(bytes, read_small(e.path()));
    }
    RFOS_RETURN_IF_ERROR(bytes ? small(std::move(name), st.st_mode & 07777, std::move(*bytes)) : other(e.path(), name));
  }
  if (ec) return error(StatusCode::kIoError, src.string() + ": " + ec.message());
  return Status::ok();
}

// The small regular files of a local directory go in batches, each file made with its bytes in one round trip
// (Namespace::put_files); names that exist already, and everything else, one at a time.
Status copy_dir_in(posix::Namespace& ns, const posix::Cred& cred, const std::filesystem::path& src, const ObjectId& dir,
                   uint64_t* files) {
  std::vector<posix::Namespace::NewFile> batch;
  std::vector<std::filesystem::path> paths;
  auto flush = [&]() -> Status {
    auto made = ns.put_files(dir, batch, cred, kBatchDepth);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (made[i].is_ok()) {
        ++*files;
      } else if (made[i].status().code() == StatusCode::kAlreadyExists) {
        RFOS_RETURN_IF_ERROR(copy_in(ns, cred, paths[i], dir, batch[i].name, files));
      } else {
        return error(made[i].status().code(), paths[i].string() + ": " + made[i].status().message());
      }
    }
    batch.clear();
    paths.clear();
    return Status::ok();
  };
  RFOS_RETURN_IF_ERROR(walk_local(
      src,
      [&](std::string name, uint32_t mode, std::string bytes) {
        paths.push_back(src / name);
        batch.push_back({std::move(name), mode, std::move(bytes)});
        return batch.size() == kBatchFiles ? flush() : Status::ok();
      },
      [&](const std::filesystem::path& path, const std::string& name) {
        return copy_in(ns, cred, path, dir, name, files);
      }));
  return flush();
}

// Local file or directory tree -> container path (created; an existing directory receives it by name).
Status copy_in(posix::Namespace& ns, const posix::Cred& cred, const std::filesystem::path& src, const ObjectId& dir,
               const std::string& name, uint64_t* files) {
  struct stat st {};
  if (lstat(src.c_str(), &st) != 0) return errno_error(src.string());
  if (S_ISDIR(st.st_mode)) {
    auto d = ns.mkdir(dir, name, st.st_mode & 07777, cred);
    if (!d.is_ok() && d.status().code() == StatusCode::kAlreadyExists) d = ns.lookup(dir, name, cred);
    RFOS_RETURN_IF_ERROR(d.status());
    return copy_dir_in(ns, cred, src, d->oid, files);
  }
  if (S_ISLNK(st.st_mode)) {
    RFOS_ASSIGN_OR_RETURN(std::string target, read_link(src));
    ++*files;
    return ns.symlink(dir, name, target, cred).status();
  }
  if (!S_ISREG(st.st_mode)) return Status::ok();  // devices, fifos and sockets are not copied
  int fd = ::open(src.c_str(), O_RDONLY);
  if (fd < 0) return errno_error(src.string());
  client::StreamSource source = [&](std::span<uint8_t> buf) -> Result<size_t> {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) return errno_error(src.string());
    return static_cast<size_t>(n);
  };
  // A new file is written whole, then named (Namespace::put_file); an existing one is rewritten in place, as cp
  // does, keeping its inode, owner, links and xattrs. Many pieces in flight either way.
  Status s;
  auto existing = ns.lookup(dir, name, cred);
  if (existing.is_ok() && S_ISREG(existing->mode)) {
    posix::SetAttr t;
    t.set_size = true;
    auto f = ns.setattr(existing->oid, t, cred);
    s = f.is_ok() ? ns.write_file(*f, source).status() : f.status();
  } else {
    s = existing.is_ok() || existing.status().code() == StatusCode::kNotFound
            ? ns.put_file(dir, name, st.st_mode & 07777, source, cred).status()
            : existing.status();
  }
  ::close(fd);
  ++*files;
  return s;
}

// All of `bytes` to `fd` (the local file `dst`).
Status write_all(int fd, std::string_view bytes, const std::filesystem::path& dst) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) return errno_error(dst.string());
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status write_local(const std::filesystem::path& dst, uint32_t mode, std::string_view bytes) {
  int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode & 07777);
  if (fd < 0) return errno_error(dst.string());
  Status s = write_all(fd, bytes, dst);
  ::close(fd);
  return s;
}

Status copy_out(posix::Namespace& ns, const posix::Cred& cred, const posix::Attr& a, const std::filesystem::path& dst,
                uint64_t* files);

// A page of a directory comes with its entries' attributes (readdir_plus), and its small files' bytes in one
// batch (Namespace::get_files); the rest one at a time.
Status copy_dir_out(posix::Namespace& ns, const posix::Cred& cred, const posix::Attr& a,
                    const std::filesystem::path& dst, uint64_t* files) {
  if (::mkdir(dst.c_str(), a.mode & 07777) != 0 && errno != EEXIST) return errno_error(dst.string());
  std::string anchor;
  for (bool done = false; !done;) {
    RFOS_ASSIGN_OR_RETURN(auto page, ns.readdir_plus(a.oid, anchor, posix::kMaxPageEntries));
    std::vector<std::string> small;
    std::vector<uint32_t> modes;
    for (const auto& e : page.entries) {
      if (e.has_attr && e.size_final && S_ISREG(e.attr.mode) && e.attr.size <= posix::kMaxDirData) {
        small.push_back(e.entry.name);
        modes.push_back(e.attr.mode);
        continue;
      }
      RFOS_ASSIGN_OR_RETURN(auto child,
                            e.has_attr&& e.size_final ? Result<posix::Attr>(e.attr) : ns.getattr(e.entry.oid));
      RFOS_RETURN_IF_ERROR(copy_out(ns, cred, child, dst / e.entry.name, files));
    }
    auto got = ns.get_files(a.oid, small, cred, kBatchDepth);
    for (size_t i = 0; i < small.size(); ++i) {
      if (!got[i].is_ok()) return error(got[i].status().code(), small[i] + ": " + got[i].status().message());
      RFOS_RETURN_IF_ERROR(write_local(dst / small[i], modes[i], *got[i]));
      ++*files;
    }
    anchor = page.anchor;
    done = page.done;
  }
  return Status::ok();
}

// Container path -> local path.
Status copy_out(posix::Namespace& ns, const posix::Cred& cred, const posix::Attr& a, const std::filesystem::path& dst,
                uint64_t* files) {
  if (S_ISDIR(a.mode)) return copy_dir_out(ns, cred, a, dst, files);
  if (S_ISLNK(a.mode)) {
    RFOS_ASSIGN_OR_RETURN(std::string target, ns.readlink(a.oid));
    ++*files;
    if (::symlink(target.c_str(), dst.c_str()) != 0) return errno_error(dst.string());
    return Status::ok();
  }
  if (!S_ISREG(a.mode)) return Status::ok();
  int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC, a.mode & 07777);
  if (fd < 0) return errno_error(dst.string());
  Status s = ns.get_file(a, [&](std::span<const uint8_t> bytes) {
    return write_all(fd, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, dst);
  });
  ::close(fd);
  ++*files;
  return s;
}

// rfos fs copy through the agent: the same walk as copy_in and copy_out, each step a request the agent makes on
// the namespace it opens for this user (by path), small files in batches through the shared buffer. A file that
// exists is replaced (put under a hidden name, then renamed over it), not rewritten in place.
class AgentCopy {
 public:
  AgentCopy(agent::AgentClient& app, const FsArgs& a) : app_(app), a_(a) {}

  // The file's mode (its kind), or kNotFound.
  Result<uint32_t> mode_of(const std::string& path) {
    RFOS_ASSIGN_OR_RETURN(agent::Message st, call(agent::ObjectOp::kStat, path));
    std::istringstream fields(st.text);
    std::string oid, mode;
    fields >> oid >> mode;
    return static_cast<uint32_t>(std::strtoul(mode.c_str(), nullptr, 8));
  }

  Status in(const std::filesystem::path& src, const std::string& dst, uint64_t* files) {
    struct stat st {};
    if (lstat(src.c_str(), &st) != 0) return errno_error(src.string());
    if (S_ISDIR(st.st_mode)) {
      auto made = call(agent::ObjectOp::kMkdir, dst, st.st_mode & 07777);
      if (!made.is_ok() && made.status().code() != StatusCode::kAlreadyExists) return made.status();
      return in_dir(src, dst, files);
    }
    if (S_ISLNK(st.st_mode)) {
      RFOS_ASSIGN_OR_RETURN(std::string target, read_link(src));
      ++*files;
      return call(agent::ObjectOp::kSymlink, dst, 0, target).status();
    }
    if (!S_ISREG(st.st_mode)) return Status::ok();  // devices, fifos and sockets are not copied
    int fd = ::open(src.c_str(), O_RDONLY);
    if (fd < 0) return errno_error(src.string());
    auto put =
        app_.put_object(a_.pool, a_.cont, dst, st.st_mode & 07777, [&](std::span<uint8_t> buf) -> Result<size_t> {
          ssize_t n = ::read(fd, buf.data(), buf.size());
          if (n < 0) return errno_error(src.string());
          return static_cast<size_t>(n);
        });
    ::close(fd);
    ++*files;
    return put.status();
  }

  Status out(const std::string& src, uint32_t mode, const std::filesystem::path& dst, uint64_t* files) {
    if (S_ISDIR(mode)) return out_dir(src, mode, dst, files);
    if (S_ISLNK(mode)) {
      RFOS_ASSIGN_OR_RETURN(agent::Message link, call(agent::ObjectOp::kReadlink, src));
      ++*files;
      if (::symlink(link.text.c_str(), dst.c_str()) != 0) return errno_error(dst.string());
      return Status::ok();
    }
    if (!S_ISREG(mode)) return Status::ok();
    int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode & 07777);
    if (fd < 0) return errno_error(dst.string());
    auto got = app_.get_object(a_.pool, a_.cont, src, [&](std::span<const uint8_t> bytes) {
      return write_all(fd, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, dst);
    });
    ::close(fd);
    ++*files;
    return got.status();
  }

  Status sync() { return call(agent::ObjectOp::kSync, "/").status(); }

 private:
  static std::string child(const std::string& dir, const std::string& name) {
    return dir == "/" ? "/" + name : dir + "/" + name;
  }

  Result<agent::Message> call(agent::ObjectOp op, const std::string& path, uint32_t mode = 0,
                              const std::string& extra = "", uint64_t batch = 0) {
    return app_.object_call(op, a_.pool, a_.cont, path, mode, batch, extra);
  }

  // A local directory's small regular files in batches (what fits half the shared buffer, kBatchFiles at
  // most); a name that exists already, and everything else, one at a time.
  Status in_dir(const std::filesystem::path& src, const std::string& dst, uint64_t* files) {
    std::vector<agent::BatchFile> batch;
    uint64_t bytes = 0;
    auto flush = [&]() -> Status {
      if (batch.empty()) return Status::ok();
      std::string request = agent::encode_file_batch(batch, true);
      std::memcpy(app_.buffer().data(), request.data(), request.size());
      RFOS_ASSIGN_OR_RETURN(agent::Message r, call(agent::ObjectOp::kPutFiles, dst, 0, "", request.size()));
      for (size_t i = 0; i < batch.size(); ++i) {
        uint16_t code = 0;
        if (r.blob.size() >= 2 * (i + 1)) std::memcpy(&code, r.blob.data() + 2 * i, 2);
        if (code == static_cast<uint16_t>(StatusCode::kAlreadyExists)) {
          RFOS_RETURN_IF_ERROR(in(src / batch[i].name, child(dst, batch[i].name), files));
        } else if (code != 0) {
          return error(static_cast<StatusCode>(code), (src / batch[i].name).string());
        } else {
          ++*files;
        }
      }
      batch.clear();
      bytes = 0;
      return Status::ok();
    };
    RFOS_RETURN_IF_ERROR(walk_local(
        src,
        [&](std::string name, uint32_t mode, std::string data) -> Status {
          uint64_t need = 2 + name.size() + 12 + data.size();
          if (batch.size() == kBatchFiles || bytes + need > app_.buffer().size() / 2) RFOS_RETURN_IF_ERROR(flush());
          bytes += need;
          batch.push_back({std::move(name), mode, std::move(data), 0});
          return Status::ok();
        },
        [&](const std::filesystem::path& path, const std::string& name) { return in(path, child(dst, name), files); }));
    return flush();
  }

  // A page of entries with their attributes at a time; its small files in one batch, their bytes back in the
  // shared buffer; the rest one at a time.
  Status out_dir(const std::string& src, uint32_t mode, const std::filesystem::path& dst, uint64_t* files) {
    if (::mkdir(dst.c_str(), mode & 07777) != 0 && errno != EEXIST) return errno_error(dst.string());
    std::string anchor;
    for (bool done = false; !done;) {
      RFOS_ASSIGN_OR_RETURN(agent::Message r, call(agent::ObjectOp::kListDir, src, 0, anchor));
      RFOS_ASSIGN_OR_RETURN(posix::DirPlusPage page, posix::decode_dir_page(r.blob));
      std::vector<agent::BatchFile> small;
      std::vector<uint32_t> modes;
      uint64_t room = 0;
      for (const auto& e : page.entries) {
        std::string from = child(src, e.entry.name);
        bool fits = e.has_attr && e.size_final && S_ISREG(e.attr.mode) && e.attr.size <= posix::kMaxDirData &&
                    room + e.attr.size <= app_.buffer().size() / 2;
        if (fits) {
          small.push_back({e.entry.name, 0, "", e.attr.size});
          modes.push_back(e.attr.mode);
          room += e.attr.size;
          continue;
        }
        uint32_t m = e.attr.mode;
        if (!e.has_attr) {
          RFOS_ASSIGN_OR_RETURN(m, mode_of(from));
        }
        RFOS_RETURN_IF_ERROR(out(from, m, dst / e.entry.name, files));
      }
      if (!small.empty()) {
        std::string request = agent::encode_file_batch(small, false);
        std::memcpy(app_.buffer().data(), request.data(), request.size());
        RFOS_ASSIGN_OR_RETURN(agent::Message got, call(agent::ObjectOp::kGetFiles, src, 0, "", request.size()));
        uint64_t at = 0;
        for (size_t i = 0; i < small.size(); ++i) {
          uint16_t code = 0;
          uint64_t size = 0;
          if (got.blob.size() >= 10 * (i + 1)) {
            std::memcpy(&code, got.blob.data() + 10 * i, 2);
            std::memcpy(&size, got.blob.data() + 10 * i + 2, 8);
          }
          std::string from = child(src, small[i].name);
          if (code == static_cast<uint16_t>(StatusCode::kTooLarge)) {  // it grew since the listing
            RFOS_RETURN_IF_ERROR(out(from, modes[i], dst / small[i].name, files));
          } else if (code != 0) {
            return error(static_cast<StatusCode>(code), from);
          } else {
            std::string_view bytes(reinterpret_cast<const char*>(app_.buffer().data()) + at, size);
            RFOS_RETURN_IF_ERROR(write_local(dst / small[i].name, modes[i], bytes));
            ++*files;
          }
          at += small[i].capacity;
        }
      }
      anchor = page.anchor;
      done = page.done;
    }
    return Status::ok();
  }

  agent::AgentClient& app_;
  const FsArgs& a_;
};

// Durable when the command says it is done: one syncfs of the destination's file system, as `cp -r` and `sync`
// would make it, rather than an fsync per file.
Status sync_local(const std::filesystem::path& to) {
  std::filesystem::path where = std::filesystem::is_directory(to) ? to : to.parent_path();
  if (where.empty()) where = ".";
  int fd = ::open(where.c_str(), O_RDONLY | O_DIRECTORY);
  Status s = fd < 0 || ::syncfs(fd) != 0 ? errno_error(where.string()) : Status::ok();
  if (fd >= 0) ::close(fd);
  return s;
}

// The name a copy takes in an existing directory: the source's last component.
std::string name_in_dir(const std::filesystem::path& from) {
  return from.filename().empty() ? from.parent_path().filename().string() : from.filename().string();
}

}  // namespace

void add_fs_commands(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<FsArgs>();
  auto common = [a](CLI::App* cmd) {
    cmd->add_option("--pool", a->pool, "pool label or uuid")->capture_default_str();
    cmd->add_option("--cont", a->cont, "container label or uuid")->capture_default_str();
    cmd->add_option("--provider", a->provider, "data-plane provider (default: $RFOS_PROVIDER or the pool's)");
  };

  auto m = std::make_shared<fuse::MountOptions>();
  auto foreground = std::make_shared<bool>(false);
  auto* mount = app.add_subcommand("mount", "mount a container as a POSIX file system (FUSE)");
  common(mount);
  mount->add_option("mountpoint", m->mountpoint, "an empty directory")->required();
  mount->add_flag("--foreground,-f", *foreground, "stay in the foreground (default: return once mounted)");
  mount->add_flag("--direct-io", m->direct_io, "bypass the page cache for file data");
  mount->add_flag("--writeback-cache", m->writeback_cache,
                  "let the kernel gather buffered writes (others see them after fsync or close)");
  mount->add_option("--attr-timeout", m->attr_timeout_s, "seconds the kernel caches attributes")->capture_default_str();
  mount->add_option("--entry-timeout", m->entry_timeout_s, "seconds the kernel caches names")->capture_default_str();
  mount->add_option("--negative-timeout", m->negative_timeout_s, "seconds the kernel caches that a name is absent")
      ->capture_default_str();
  mount->add_flag("--no-notices", m->no_notices,
                  "ask the servers for no notices of other clients' changes: they show within the timeouts");
  mount->add_option("-o", m->extra_options,
                    "more FUSE mount options; suid and dev only as root on a container root owns (docs/posix.md)");
  mount->add_flag("--sync-writes", m->sync_writes,
                  "store each write before write() returns (default: write-behind; fsync and close wait)");
  mount->add_flag("--sync", m->durable,
                  "every operation and write durable when it returns, as -o sync (default: durable at fsync)");
  add_size_option(mount, "--readahead", m->readahead_bytes, "bytes the kernel reads ahead on sequential reads")
      ->capture_default_str();
  auto agent_socket = std::make_shared<std::string>();
  mount->add_option("--agent", *agent_socket,
                    "the namespace runs in the rfos agent on this socket; this process only mounts (docs/agent.md)");
  mount->callback([&ctx, a, m, foreground, agent_socket] {
    // Daemonize before any client thread exists: the parent waits for the child's word that it mounted.
    int pipefd[2] = {-1, -1};
    if (!*foreground) {
      if (pipe(pipefd) != 0) return (void)ctx.check(errno_error("pipe"), "mount");
      pid_t pid = fork();
      if (pid < 0) return (void)ctx.check(errno_error("fork"), "mount");
      if (pid > 0) {
        ::close(pipefd[1]);
        char msg[1024] = {};
        ssize_t n = ::read(pipefd[0], msg, sizeof(msg) - 1);
        if (n > 0 && std::strncmp(msg, "ok", 2) == 0) return;
        std::fprintf(stderr, "%s", n > 0 ? msg : "rfos mount: the mount process died\n");
        ctx.exit_code = 1;
        return;
      }
      ::close(pipefd[0]);
      setsid();
    }
    auto tell = [fd = pipefd[1]](const std::string& what) {
      if (fd < 0) return;
      (void)!::write(fd, what.data(), what.size());
      ::close(fd);
    };
    m->fsname = "rfos:" + a->pool + "/" + a->cont;
    bool told = false;
    m->on_mounted = [&](const Status& s) {
      if (told) return;
      told = true;
      if (s.is_ok() && *foreground)
        std::printf("rfos mount: %s mounted on %s\n", m->fsname.c_str(), m->mountpoint.c_str());
      std::fflush(stdout);
      tell(s.is_ok() ? std::string("ok") : "rfos mount: " + s.to_string() + "\n");
      if (s.is_ok() && !*foreground) {  // detach from the terminal
        int null = ::open("/dev/null", O_RDWR);
        if (null >= 0) {
          dup2(null, STDIN_FILENO);
          dup2(null, STDOUT_FILENO);
          dup2(null, STDERR_FILENO);
          if (null > 2) ::close(null);
        }
      }
    };
    if (agent_socket->empty()) *agent_socket = ctx.agent;  // rfos --agent SOCK mount, or $RFOS_AGENT
    if (!agent_socket->empty()) {
      // A thin shim: it mounts and hands the FUSE device to the agent, which serves it for this user.
      Status s = Status::ok();
      if (auto asked = fuse::check_mount_options(m->extra_options, 0, "root"); asked.is_ok() && *asked)
        s = error(StatusCode::kPermissionDenied, "-o suid and -o dev are not available through the agent");
      if (s.is_ok())
        s = fuse::mount_for_agent(*m, [&](int fuse_fd, const std::function<bool()>& ended) -> Status {
          agent::AgentClientOptions ao;
          ao.ring = false;
          RFOS_ASSIGN_OR_RETURN(auto app, agent::AgentClient::connect(*agent_socket, ao));
          RFOS_RETURN_IF_ERROR(app->serve_mount(a->pool, a->cont, fuse::encode_served_settings(*m), fuse_fd));
          m->on_mounted(Status::ok());
          return app->wait_until_closed(ended);
        });
      if (!told) tell("rfos mount: " + s.to_string() + "\n");
      ctx.check(s, "mount");
      return;
    }
    Status where = fuse::check_mountpoint(m->mountpoint);
    auto opened = where.is_ok() ? open_namespace(ctx, a->pool, a->cont, a->provider) : Result<Mounted>(where);
    if (opened.is_ok()) {
      auto allowed = fuse::check_mount_options(m->extra_options, geteuid(), opened->owner);
      if (allowed.is_ok())
        m->allow_suid_and_devices = *allowed;
      else
        opened = allowed.status();
    }
    if (!opened.is_ok()) {
      tell("rfos mount: " + opened.status().to_string() + "\n");
      ctx.check(opened.status(), "mount");
      return;
    }
    Status s = fuse::run_mount(*opened->ns, *m);
    if (!told) tell("rfos mount: " + s.to_string() + "\n");
    ctx.check(s, "mount");
  });

  auto* fs = app.add_subcommand("fs", "files in a container without a mount");
  fs->require_subcommand(1);
  auto src = std::make_shared<std::string>(), dst = std::make_shared<std::string>();
  auto* copy = fs->add_subcommand("copy", "copy a file or directory tree in or out (container paths: rfos:/PATH)");
  common(copy);
  copy->add_option("src", *src, "source")->required();
  copy->add_option("dst", *dst, "destination")->required();
  copy->callback([&ctx, a, src, dst] {
    if (in_container(*src) == in_container(*dst))
      return (void)ctx.check(error(StatusCode::kInvalidArgument, "exactly one of SRC and DST is an rfos:/ path"),
                             "fs copy");
    uint64_t files = 0;
    Status s;
    if (!ctx.agent.empty()) {  // through the agent: the namespace runs there, for this user
      agent::AgentClientOptions o;
      o.buffer_bytes = 4 << 20;
      o.entries = 8;
      o.timeout_ms = std::max<uint32_t>(ctx.timeout_ms, 300000);  // a chunk may wait on the media
      auto app = agent::AgentClient::connect(ctx.agent, o);
      if (!ctx.check(app.status(), "fs copy")) return;
      AgentCopy copy(**app, *a);
      if (in_container(*dst)) {
        std::filesystem::path from(*src);
        std::string to(inner(*dst));
        auto target = copy.mode_of(to);
        if (target.is_ok() && S_ISDIR(*target)) to = (to.ends_with("/") ? to : to + "/") + name_in_dir(from);
        s = copy.in(from, to, &files);
        if (s.is_ok()) s = copy.sync();
      } else {
        std::string from(inner(*src));
        std::filesystem::path to(*dst);
        auto mode = copy.mode_of(from);
        if (mode.is_ok() && std::filesystem::is_directory(to) && !S_ISDIR(*mode))
          to /= std::filesystem::path(from).filename();
        s = mode.is_ok() ? copy.out(from, *mode, to, &files) : mode.status();
        if (s.is_ok()) s = sync_local(to);
      }
      if (!ctx.check(s, "fs copy")) return;
      std::printf("copied %llu files\n", static_cast<unsigned long long>(files));
      return;
    }
    auto opened = open_namespace(ctx, a->pool, a->cont, a->provider);
    if (!ctx.check(opened.status(), "fs copy")) return;
    posix::Namespace& ns = *opened->ns;
    posix::Cred cred = posix::Cred::of_process();
    if (in_container(*dst)) {
      std::filesystem::path from(*src);
      auto target = ns.resolve(inner(*dst), cred);
      if (target.is_ok() && S_ISDIR(target->mode)) {  // into an existing directory, by the source's name
        s = copy_in(ns, cred, from, target->oid, name_in_dir(from), &files);
      } else {
        auto parent = parent_of(ns, cred, inner(*dst));
        s = parent.is_ok() ? copy_in(ns, cred, from, parent->first.oid, parent->second, &files) : parent.status();
      }
    } else {
      auto from = ns.resolve(inner(*src), cred);
      std::filesystem::path to(*dst);
      if (from.is_ok() && std::filesystem::is_directory(to) && !S_ISDIR(from->mode))
        to /= std::filesystem::path(std::string(inner(*src))).filename();
      s = from.is_ok() ? copy_out(ns, cred, *from, to, &files) : from.status();
      if (s.is_ok()) s = sync_local(to);
    }
    if (s.is_ok() && in_container(*dst)) s = ns.sync();  // durable when the command says it is done
    if (!ctx.check(s, "fs copy")) return;
    std::printf("copied %llu files\n", static_cast<unsigned long long>(files));
  });

  auto* check = fs->add_subcommand(
      "check",
      "check the namespace: entries without inodes, inodes without entries, link counts (read-only unless "
      "--repair)");
  common(check);
  auto repair = std::make_shared<bool>(false);
  auto punch_leaked = std::make_shared<bool>(false);
  auto force = std::make_shared<bool>(false);
  check->add_flag("--repair", *repair,
                  "then give back what nothing reaches (dangling entries, unfinished puts, unlinked inodes) and "
                  "check again; refused while a session is open on the container");
  check->add_flag("--punch-leaked", *punch_leaked,
                  "with --repair: also punch leaked file data that looks like an unfinished purge's remains (only "
                  "for a container that holds nothing but the namespace: rfos bench's objects look the same)");
  check->add_flag("--force", *force,
                  "with --repair: even while sessions are open (those of clients that died stay open until their "
                  "capability expires, an hour by default)");
  check->callback([&ctx, a, repair, punch_leaked, force] {
    std::string report;
    if (*repair && !ctx.agent.empty())
      return (void)ctx.check(error(StatusCode::kNotSupported, "--repair does not run through the agent yet"),
                             "fs check");
    if (!ctx.agent.empty()) {  // run in the agent, on the namespace it opens for this user
      agent::AgentClientOptions o;
      o.ring = false;
      o.timeout_ms = std::max<uint32_t>(ctx.timeout_ms, 300000);  // a walk of the whole container
      auto app = agent::AgentClient::connect(ctx.agent, o);
      auto r = app.is_ok() ? (*app)->object_call(agent::ObjectOp::kCheck, a->pool, a->cont, "")
                           : Result<agent::Message>(app.status());
      if (!ctx.check(r.status(), "fs check")) return;
      report = r->blob;
    } else {
      if ((*punch_leaked || *force) && !*repair)
        return (void)ctx.check(error(StatusCode::kInvalidArgument, "--punch-leaked and --force go with --repair"),
                               "fs check");
      auto opened = open_namespace(ctx, a->pool, a->cont, a->provider);
      if (!ctx.check(opened.status(), "fs check")) return;
      // As a file system is repaired unmounted: an unlinked file is one a live mount may still read, an unfinished
      // put one a live put is still writing.
      if (*repair && !*force && opened->open_sessions > 0)
        return (void)ctx.check(
            error(StatusCode::kBusy, std::to_string(opened->open_sessions) +
                                         " session(s) open on the container (a mount, a copy, an agent's app, or a "
                                         "client that died, until its capability expires): repair once none is, "
                                         "or pass --force"),
            "fs check --repair");
      auto r = opened->ns->check();
      if (!ctx.check(r.status(), "fs check")) return;
      report = r->describe();
      if (*repair) {
        std::fputs(report.c_str(), stdout);  // what was found, before anything changes
        std::fflush(stdout);
        posix::Namespace::RepairReport fixed;
        Status done = opened->ns->repair(*r, *punch_leaked, &fixed);
        if (done.is_ok()) done = opened->ns->sync();  // durable when it says so
        report = "repaired " + std::to_string(fixed.repaired) + "\n";
        for (const auto& l : fixed.left) report += "left: " + l + "\n";
        for (const auto& f : fixed.failed) report += "failed: " + f + "\n";
        if (!done.is_ok()) {  // what it changed before it stopped, then why it stopped
          std::fputs(report.c_str(), stdout);
          return (void)ctx.check(done, "fs check --repair");
        }
        if (!fixed.failed.empty()) ctx.exit_code = 1;
        r = opened->ns->check();
        if (!ctx.check(r.status(), "fs check")) return;
        report += "checked again:\n" + r->describe();
      }
    }
    std::fputs(report.c_str(), stdout);
    if (!report.ends_with("\nconsistent\n")) ctx.exit_code = 1;
  });

  auto path = std::make_shared<std::string>("rfos:/");
  auto* ls = fs->add_subcommand("ls", "list a directory of the container");
  common(ls);
  ls->add_option("path", *path, "rfos:/PATH")->capture_default_str();
  ls->callback([&ctx, a, path] {
    if (!in_container(*path))
      return (void)ctx.check(error(StatusCode::kInvalidArgument, "paths are written rfos:/PATH"), "fs ls");
    auto print = [](const posix::DirPlusPage& page) {
      for (const auto& e : page.entries)
        std::printf("%06o %6u %6u %12llu  %s%s\n", e.attr.mode, e.attr.uid, e.attr.gid,
                    static_cast<unsigned long long>(e.attr.size), e.entry.name.c_str(),
                    S_ISDIR(e.attr.mode) ? "/" : "");
    };
    if (!ctx.agent.empty()) {  // the namespace in the agent, a page of 128 entries at a time
      agent::AgentClientOptions o;
      o.ring = false;
      auto app = agent::AgentClient::connect(ctx.agent, o);
      if (!ctx.check(app.status(), "fs ls")) return;
      std::string anchor;
      for (bool done = false; !done;) {
        auto answer =
            (*app)->object_call(agent::ObjectOp::kListDir, a->pool, a->cont, std::string(inner(*path)), 0, 0, anchor);
        auto page = answer.is_ok() ? posix::decode_dir_page(answer->blob) : Result<posix::DirPlusPage>(answer.status());
        if (!ctx.check(page.status(), "fs ls")) return;
        print(*page);
        anchor = page->anchor;
        done = page->done;
      }
      return;
    }
    auto opened = open_namespace(ctx, a->pool, a->cont, a->provider);
    if (!ctx.check(opened.status(), "fs ls")) return;
    posix::Namespace& ns = *opened->ns;
    auto dir = ns.resolve(inner(*path), posix::Cred::of_process());
    if (!ctx.check(dir.status(), "fs ls")) return;
    std::string anchor;
    for (bool done = !S_ISDIR(dir->mode); !done;) {
      auto page = ns.list(dir->oid, anchor, 1024);
      if (!ctx.check(page.status(), "fs ls")) return;
      print(*page);
      anchor = page->anchor;
      done = page->done;
    }
  });
}

}  // namespace rfos::cli
