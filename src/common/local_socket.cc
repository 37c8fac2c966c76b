#include "common/local_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace rfos {

namespace {

Status sys_error(const std::string& what) { return error(StatusCode::kIoError, what + ": " + std::strerror(errno)); }

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  return a;
}

// Whether something accepts connections of `type` at `path`.
bool live_socket(const std::string& path, int type) {
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a = address_of(path);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return live;
}

}  // namespace

Result<PeerCred> peer_cred(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return sys_error("SO_PEERCRED");
  PeerCred p{static_cast<uint32_t>(cred.pid), cred.uid, cred.gid, {}};
  std::vector<gid_t> groups(64);
  len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int r = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  if (r != 0 && errno == ERANGE) {  // more than 64: len says how many
    groups.resize(len / sizeof(gid_t));
    r = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  }
  if (r != 0) len = 0;  // the primary group only
  groups.resize(len / sizeof(gid_t));
  p.groups.assign(groups.begin(), groups.end());
  return p;
}

Result<int> listen_local(const std::string& path, int type, const LocalSocketNames& names) {
  sockaddr_un a{};
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(a.sun_path))
    return error(StatusCode::kInvalidArgument, names.what + " '" + path + "' must be an absolute path of at most " +
                                                   std::to_string(sizeof(a.sun_path) - 1) + " characters");
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (mkdir(dir.c_str(), 0755) == 0) {
    chmod(dir.c_str(), 0755);  // the process's umask (077) must not keep other users from the socket
  } else if (errno != EEXIST) {
    return error(StatusCode::kIoError, "create " + dir + ": " + std::strerror(errno) + names.create_hint);
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return error(StatusCode::kIoError, dir + " is not a directory");
  if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return error(StatusCode::kPermissionDenied, "the " + names.what + "'s directory " + dir +
                                                    " is writable by users other than the " + names.owner +
                                                    "'s and root: anyone could replace the socket");
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return error(StatusCode::kInvalidArgument, path + " exists and is not a socket");
    if (live_socket(path, type)) return error(names.live_code, "another " + names.owner + " listens on " + path);
    unlink(path.c_str());  // left by one that died
  }
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error("socket");
  a = address_of(path);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    Status s = sys_error("bind " + path);
    close(fd);
    return s;
  }
  if (chmod(path.c_str(), 0666) != 0 || listen(fd, 128) != 0) {
    Status s = sys_error("listen on " + path);
    close(fd);
    unlink(path.c_str());
    return s;
  }
  return fd;
}

void accept_until_stopped(int listen_fd, int stop_fd, int flags, const std::function<void(int)>& take) {
  for (;;) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    int fd = accept4(listen_fd, nullptr, nullptr, flags);
    if (fd < 0) {
      // Out of descriptors: the connection stays queued; look again in a while rather than spin on it.
      if (errno == EMFILE || errno == ENFILE) {
        pollfd stop{stop_fd, POLLIN, 0};
        if (poll(&stop, 1, 100) > 0) return;
      }
      continue;  // or the peer went away: next connection
    }
    take(fd);
  }
}

}  // namespace rfos
