#include "server/local_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace rfos::server {

class LocalListener::Impl {
 public:
  std::string path;
  int listen_fd = -1;
  int stop_fd = -1;
  std::thread thread;
  grpc::Server* server = nullptr;
  mutable std::mutex mu;
  std::unordered_map<int, Principal> callers;  // by the fd gRPC serves the connection on

  void stop() {
    if (!thread.joinable()) return;
    uint64_t one = 1;
    (void)!write(stop_fd, &one, sizeof(one));
    thread.join();
  }
  ~Impl() {
    stop();
    if (listen_fd >= 0) {
      close(listen_fd);
      unlink(path.c_str());
    }
    if (stop_fd >= 0) close(stop_fd);
  }

  void loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // Out of descriptors: the connection stays queued; look again in a while rather than spin on it.
        if (errno == EMFILE || errno == ENFILE) {
          pollfd stop{stop_fd, POLLIN, 0};
          if (poll(&stop, 1, 100) > 0) return;
        }
        continue;  // or the peer went away: next connection
      }
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        close(fd);
        continue;
      }
      std::vector<uint32_t> groups(256);
      socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(uint32_t));
      if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0) glen = 0;  // primary group only
      groups.resize(glen / sizeof(uint32_t));
      {
        std::lock_guard lock(mu);
        callers[fd] = local_principal(cred.uid, cred.gid, groups);
      }
      grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns fd from here
    }
  }
};

namespace {
// Whether something accepts connections at `path`.
bool live_socket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return live;
}
}  // namespace

Result<std::unique_ptr<LocalListener>> LocalListener::bind(const std::string& path) {
  sockaddr_un a{};
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(a.sun_path))
    return error(StatusCode::kInvalidArgument, "control socket '" + path + "' must be an absolute path of at most " +
                                                   std::to_string(sizeof(a.sun_path) - 1) + " characters");
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (mkdir(dir.c_str(), 0755) == 0) {
    chmod(dir.c_str(), 0755);  // the server's umask (077) must not keep other users from the socket
  } else if (errno != EEXIST) {
    return error(StatusCode::kIoError, "create " + dir + ": " + std::strerror(errno) +
                                           " (set control_socket / --control-socket to a directory this user may "
                                           "create, or create it for the server's user)");
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return error(StatusCode::kIoError, dir + " is not a directory");
  if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return error(StatusCode::kPermissionDenied,
                 "the control socket's directory " + dir +
                     " is writable by users other than the server's and root: anyone could replace the socket");
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return error(StatusCode::kInvalidArgument, path + " exists and is not a socket");
    if (live_socket(path)) return error(StatusCode::kInvalidArgument, "another server listens on " + path);
    unlink(path.c_str());  // left by a server that died
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  impl->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->listen_fd < 0 || impl->stop_fd < 0)
    return error(StatusCode::kIoError, "socket: " + std::string(std::strerror(errno)));
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (::bind(impl->listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    int e = errno;
    close(impl->listen_fd);
    impl->listen_fd = -1;  // nothing of ours to unlink
    return error(StatusCode::kIoError, "bind " + path + ": " + std::strerror(e));
  }
  // Every local user may connect: the server checks what each caller may do.
  if (chmod(path.c_str(), 0666) != 0 || listen(impl->listen_fd, 128) != 0)
    return error(StatusCode::kIoError, "listen on " + path + ": " + std::strerror(errno));
  return std::unique_ptr<LocalListener>(new LocalListener(std::move(impl)));
}

LocalListener::LocalListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalListener::~LocalListener() = default;

void LocalListener::start(grpc::Server* server) {
  impl_->server = server;
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void LocalListener::stop_accepting() { impl_->stop(); }

std::optional<Principal> LocalListener::who(std::string_view peer) const {
  if (!peer.starts_with("fd:")) return std::nullopt;
  int fd = 0;
  for (char c : peer.substr(3)) {
    if (c < '0' || c > '9') return std::nullopt;
    fd = fd * 10 + (c - '0');
    if (fd > (1 << 24)) return std::nullopt;
  }
  std::lock_guard lock(impl_->mu);
  auto it = impl_->callers.find(fd);
  if (it == impl_->callers.end()) return std::nullopt;
  return it->second;
}

const std::string& LocalListener::path() const { return impl_->path; }

}  // namespace rfos::server
