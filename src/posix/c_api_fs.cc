// The C API of the POSIX namespace (include/rfos/rfos_fs.h) over posix::Namespace.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "client/c_api_internal.h"
#include "client/container.h"
#include "posix/namespace.h"
#include "rfos/rfos_fs.h"

using rfos::Result;
using rfos::Status;
using rfos::StatusCode;
using rfos::client::c_api::bad;
using rfos::client::c_api::fail;
using rfos::posix::Attr;
using rfos::posix::Cred;

struct rfos_fs {
  std::unique_ptr<rfos::posix::Namespace> ns;
};

namespace {

// The directory at `path`, for the batch calls.
Result<Attr> directory(rfos_fs_t* fs, const char* path, const Cred& cred) {
  RFOS_ASSIGN_OR_RETURN(Attr d, fs->ns->resolve(path, cred));
  if (!S_ISDIR(d.mode)) return rfos::error(StatusCode::kNotDirectory, std::string(path) + " is not a directory");
  return d;
}

int status_of(const Status& s) { return s.is_ok() ? 0 : -s.to_errno(); }

}  // namespace

extern "C" {

int rfos_fs_open(rfos_client_t* client, const char* pool, const char* cont, const char* provider, rfos_fs_t** out) {
  if (bad(client, "client") || bad(pool, "pool") || bad(cont, "cont") || bad(out, "out")) return -EINVAL;
  if (!client->control)
    return fail(rfos::error(rfos::StatusCode::kNotSupported,
                            "the namespace is not available through the agent yet (docs/agent.md)"));
  rfos::client::ContainerOptions o;
  if (provider) o.provider = provider;
  auto ns = rfos::posix::Namespace::open(*client->control, pool, cont, o);
  if (!ns.is_ok()) return fail(ns.status());
  *out = new rfos_fs{std::move(ns).value()};
  return 0;
}

void rfos_fs_close(rfos_fs_t* fs) { delete fs; }

int rfos_fs_mkdir(rfos_fs_t* fs, const char* path, uint32_t mode) {
  if (bad(fs, "fs") || bad(path, "path")) return -EINVAL;
  std::string_view p(path);
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  size_t slash = p.rfind('/');
  if (slash == std::string_view::npos || p.size() <= 1)
    return fail(rfos::error(StatusCode::kInvalidArgument, "an absolute path below the root"));
  Cred cred = Cred::of_process();
  auto parent = fs->ns->resolve(std::string(p.substr(0, slash)), cred);
  if (!parent.is_ok()) return fail(parent.status());
  auto made = fs->ns->mkdir(parent->oid, p.substr(slash + 1), mode, cred);
  return made.is_ok() ? 0 : fail(made.status());
}

int rfos_fs_put_files(rfos_fs_t* fs, const char* dir, rfos_fs_put_t* files, size_t n, uint32_t depth) {
  if (bad(fs, "fs") || bad(dir, "dir") || (n > 0 && bad(files, "files"))) return -EINVAL;
  Cred cred = Cred::of_process();
  auto d = directory(fs, dir, cred);
  if (!d.is_ok()) return fail(d.status());
  std::vector<rfos::posix::Namespace::NewFile> batch(n);
  for (size_t i = 0; i < n; ++i) {
    if (bad(files[i].name, "a file's name") || (files[i].len > 0 && bad(files[i].data, "a file's data")))
      return -EINVAL;
    batch[i].name = files[i].name;
    batch[i].mode = files[i].mode & 07777;
    batch[i].data.assign(static_cast<const char*>(files[i].data), files[i].len);
  }
  auto made = fs->ns->put_files(d->oid, batch, cred, depth ? depth : 32);
  int count = 0;
  for (size_t i = 0; i < n; ++i) {
    files[i].status = status_of(made[i].status());
    if (made[i].is_ok()) ++count;
  }
  return count;
}

int rfos_fs_get_files(rfos_fs_t* fs, const char* dir, rfos_fs_get_t* files, size_t n, uint32_t depth) {
  if (bad(fs, "fs") || bad(dir, "dir") || (n > 0 && bad(files, "files"))) return -EINVAL;
  Cred cred = Cred::of_process();
  auto d = directory(fs, dir, cred);
  if (!d.is_ok()) return fail(d.status());
  std::vector<std::string> names(n);
  for (size_t i = 0; i < n; ++i) {
    if (bad(files[i].name, "a file's name") || (files[i].cap > 0 && bad(files[i].buf, "a file's buffer")))
      return -EINVAL;
    names[i] = files[i].name;
  }
  auto got = fs->ns->get_files(d->oid, names, cred, depth ? depth : 32);
  int count = 0;
  for (size_t i = 0; i < n; ++i) {
    files[i].len = 0;
    if (!got[i].is_ok()) {
      files[i].status = status_of(got[i].status());
      continue;
    }
    files[i].len = got[i]->size();
    if (got[i]->size() > files[i].cap) {
      files[i].status = -ENOBUFS;
      continue;
    }
    if (!got[i]->empty()) std::memcpy(files[i].buf, got[i]->data(), got[i]->size());
    files[i].status = 0;
    ++count;
  }
  return count;
}

int rfos_fs_sync(rfos_fs_t* fs) {
  if (bad(fs, "fs")) return -EINVAL;
  Status s = fs->ns->sync();
  return s.is_ok() ? 0 : fail(s);
}

}  // extern "C"
