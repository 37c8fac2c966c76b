// `rfos mount`: a container's POSIX namespace through FUSE (libfuse3's low-level API, multi-threaded).
//
// Every local user works on the mount: it is mounted with allow_other and default_permissions, so the kernel
// checks owner, group, supplementary groups and mode bits for whoever calls, and the namespace library checks
// again with the caller's credentials (sticky and setgid directories included). Large requests (1 MiB),
// attribute and entry caching with timeouts, dropped early when the targets send notices of other clients'
// changes (Namespace::watch); optional direct I/O, kernel readahead; page-cache contents are kept across opens
// only while a file is unchanged.
//
// Thread-safety: run_mount owns its threads; nothing here is shared with callers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "posix/namespace.h"

namespace rfos::fuse {

struct MountOptions {
  std::string mountpoint;
  std::string fsname = "rfos";  // shown in /proc/mounts
  double attr_timeout_s = 1.0;
  double entry_timeout_s = 1.0;
  double negative_timeout_s = 1.0;  // how long the kernel keeps a name's absence (0: it asks every time)
  // No notices of other clients' changes (Namespace::watch): they show within the timeouts, and the targets
  // keep no watcher for this mount (thousands of mounts, or a mount that wants to cost the servers nothing).
  bool no_notices = false;
  bool direct_io = false;        // bypass the page cache on every open file
  bool writeback_cache = false;  // let the kernel gather buffered writes (visible to others after fsync/close)
  bool sync_writes = false;      // store every write before write() returns (no write-behind, see write_behind.h)
  // Every operation and write durable when it returns (--sync, or -o sync): otherwise they are visible at once
  // and durable at fsync (docs/posix.md, "Durability and coherence").
  bool durable = false;
  unsigned writer_threads = 4;  // write-behind: writes of the mount stored at once
  bool allow_other = true;      // every local user, not just the one who mounted
  std::string extra_options;    // more -o options passed to FUSE (see check_mount_options)
  // Honour suid and dev in extra_options; otherwise the mount is always nosuid,nodev.
  bool allow_suid_and_devices = false;
  unsigned request_threads = 16;        // FUSE requests handled at once
  unsigned readahead_bytes = 4u << 20;  // sequential reads: the kernel reads ahead this much
  // Called once the file system is mounted (for daemonizing parents and tests).
  std::function<void(const Status&)> on_mounted;

  // Serving a mount another process made (`rfos mount --agent`, the namespace in `rfos agent`): the FUSE device
  // it opened and mounted, which run_mount then owns and closes; no mount point, signals or unmount here. The
  // loop ends when the mount goes away or `stop` is set.
  int fuse_fd = -1;
  std::shared_ptr<std::atomic<bool>> stop;
};

// The settings that travel from `rfos mount --agent` to the agent that serves its mount (timeouts, notices,
// caching, durability, threads, fsname): "key=value" lines. decode: kInvalidArgument for an unknown key or a
// bad value.
std::string encode_served_settings(const MountOptions& o);
Status decode_served_settings(std::string_view text, MountOptions* o);

// `rfos mount --agent`'s side: mounts (nosuid, nodev), sets the readahead, hands the FUSE device to `serve`
// (which passes it to the agent and returns when the agent ends or `ended()` says a signal came), then
// unmounts. Errors: check_mountpoint's, kIoError (FUSE refused), or serve's.
Status mount_for_agent(const MountOptions& options,
                       const std::function<Status(int fuse_fd, const std::function<bool()>& ended)>& serve);

// Mounts, serves until unmounted (fusermount3 -u, umount) or SIGINT/SIGTERM/SIGHUP, unmounts. Errors:
// kInvalidArgument (bad mount point), kIoError (FUSE refused: no /dev/fuse, not permitted).
Status run_mount(posix::Namespace& ns, const MountOptions& options);

// Whether extra -o options may have setuid files and device nodes take effect: `suid` and `dev` (and `exec` is
// fine) only when the mounting user is root and the container's owner is root; anyone else able to write into a
// container could otherwise plant a setuid-root binary or a device node and become root through the mount.
// Returns true when suid or dev were asked for and are allowed, false when neither was asked for;
// kPermissionDenied otherwise.
Result<bool> check_mount_options(const std::string& extra_options, uint32_t mounting_uid,
                                 const std::string& container_owner);

// OK when `mountpoint` is a directory; kInvalidArgument otherwise. run_mount checks it too; callers check it
// first so that a typo costs no session with the servers.
Status check_mountpoint(const std::string& mountpoint);

}  // namespace rfos::fuse
