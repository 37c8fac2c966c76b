#include "server/local_listener.h"

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/local_socket.h"

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
    accept_until_stopped(listen_fd, stop_fd, SOCK_CLOEXEC | SOCK_NONBLOCK, [this](int fd) {
      auto cred = peer_cred(fd);
      if (!cred.is_ok()) {
        close(fd);
        return;
      }
      {
        std::lock_guard lock(mu);
        callers[fd] = local_principal(cred->uid, cred->gid, cred->groups);
      }
      grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns fd from here
    });
  }
};

Result<std::unique_ptr<LocalListener>> LocalListener::bind(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) return error(StatusCode::kIoError, "eventfd: " + std::string(std::strerror(errno)));
  // Every local user may connect: the server checks what each caller may do.
  RFOS_ASSIGN_OR_RETURN(impl->listen_fd,
                        listen_local(path, SOCK_STREAM,
                                     {"control socket", "server",
                                      " (set control_socket / --control-socket to a directory this user may create, "
                                      "or create it for the server's user)",
                                      StatusCode::kInvalidArgument}));
  impl->path = path;
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
