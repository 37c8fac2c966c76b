// Unix-socket listeners any local user may reach, whose callers the kernel names: the server's control socket
// (server/local_listener.h) and the agent's (agent/agent.h).
//
// Thread-safety: functions; accept_until_stopped runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace rfos {

// The kernel's word on a connected peer: SO_PEERCRED, and SO_PEERGROUPS (none where the kernel gives none).
struct PeerCred {
  uint32_t pid = 0, uid = UINT32_MAX, gid = UINT32_MAX;
  std::vector<uint32_t> groups;
};
Result<PeerCred> peer_cred(int fd);

// How a listener names itself in its errors.
struct LocalSocketNames {
  std::string what;         // "control socket"
  std::string owner;        // "server": whose directory it is, and who listens on a live socket
  std::string create_hint;  // after a failed mkdir of the directory
  StatusCode live_code = StatusCode::kAlreadyExists;  // a socket something still accepts on
};

// Binds and listens on `path` (`type`: SOCK_STREAM or SOCK_SEQPACKET), mode 0666: any local user may connect and
// the owner decides what each may do. The directory is made 0755 when missing, and refused (kPermissionDenied)
// when someone other than this user or root may write it: nobody else can put a socket of their own in its place.
// A socket nobody accepts on (left by a process that died) is replaced. Returns the listening descriptor.
Result<int> listen_local(const std::string& path, int type, const LocalSocketNames& names);

// Accepts connections on `listen_fd` (with accept4's `flags`) and hands each to `take` until `stop_fd` is
// readable. Out of descriptors, the connection stays queued and is looked at again in 100 ms.
void accept_until_stopped(int listen_fd, int stop_fd, int flags, const std::function<void(int)>& take);

}  // namespace rfos
