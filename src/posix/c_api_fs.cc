// The C API of the POSIX namespace (include/rfos/rfos_fs.h) over posix::Namespace.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "agent/agent_client.h"
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
  // Agent mode: the namespace runs in the agent, opened there for this process's user; batches of files go
  // through the buffer this connection shares with it.
  std::unique_ptr<rfos::agent::AgentClient> agent;
  std::string pool, cont;
};

namespace {

// The directory at `path`, for the batch calls.
Result<Attr> directory(rfos_fs_t* fs, const char* path, const Cred& cred) {
  RFOS_ASSIGN_OR_RETURN(Attr d, fs->ns->resolve(path, cred));
  if (!S_ISDIR(d.mode)) return rfos::error(StatusCode::kNotDirectory, std::string(path) + " is not a directory");
  return d;
}

int status_of(const Status& s) { return s.is_ok() ? 0 : -s.to_errno(); }
int status_of(uint16_t code) {
  return code == 0 ? 0 : status_of(rfos::error(static_cast<StatusCode>(code), "through the agent"));
}

using rfos::agent::kMaxBatchFiles;
using rfos::agent::ObjectOp;

// A batch of the files from `*next` that fit the shared buffer, laid out as docs/agent.md says: `put` writes a
// file's entry at `at` (or only sizes it when `out` is null) and `room` is what its answer needs besides (a
// get's capacity), which counts against the buffer too. `taken` gets their indices; a file that alone does not
// fit is left to `alone`. Returns the request's bytes.
template <typename File, typename Put, typename Room>
uint64_t lay_out(std::span<uint8_t> buf, File* files, size_t n, size_t* next, std::vector<size_t>* taken, Put put,
                 Room room, const std::function<void(size_t)>& alone) {
  uint64_t at = 4, answers = 0;
  taken->clear();
  for (; *next < n && taken->size() < kMaxBatchFiles; ++*next) {
    size_t i = *next;
    uint64_t need = put(files[i], nullptr, 0), extra = room(files[i]);
    if (std::string_view(files[i].name).size() > 65535 || at + need + answers + extra > buf.size()) {
      if (!taken->empty()) break;  // the next batch
      alone(i);
      continue;
    }
    put(files[i], buf.data(), at);
    at += need;
    answers += extra;
    taken->push_back(i);
  }
  uint32_t count = static_cast<uint32_t>(taken->size());
  std::memcpy(buf.data(), &count, 4);
  return at;
}

void put_name(uint8_t* out, uint64_t* at, std::string_view name) {
  uint16_t len = static_cast<uint16_t>(name.size());
  std::memcpy(out + *at, &len, 2);
  std::memcpy(out + *at + 2, name.data(), name.size());
  *at += 2 + name.size();
}

int agent_put_files(rfos_fs_t* fs, const char* dir, rfos_fs_put_t* files, size_t n) {
  auto buf = fs->agent->buffer();
  // A file's entry: name, mode u32, length u64, bytes (returns its size; writes it when `out` is set).
  auto entry = [](const rfos_fs_put_t& f, uint8_t* out, uint64_t at) -> uint64_t {
    std::string_view name = f.name;
    uint64_t need = 2 + name.size() + 4 + 8 + f.len;
    if (!out) return need;
    put_name(out, &at, name);
    uint32_t mode = f.mode;
    uint64_t len = f.len;
    std::memcpy(out + at, &mode, 4);
    std::memcpy(out + at + 4, &len, 8);
    if (f.len) std::memcpy(out + at + 12, f.data, f.len);
    return need;
  };
  int count = 0;
  std::vector<size_t> taken;
  for (size_t next = 0; next < n;) {
    uint64_t bytes = lay_out(
        buf, files, n, &next, &taken, entry, [](const rfos_fs_put_t&) { return uint64_t{0}; },
        [&](size_t i) {
          files[i].status =
              status_of(rfos::error(StatusCode::kTooLarge, "a file larger than the agent's shared buffer"));
        });
    if (taken.empty()) continue;
    auto r = fs->agent->object_call(ObjectOp::kPutFiles, fs->pool, fs->cont, dir, 0, bytes);
    if (!r.is_ok()) {
      if (count == 0 && taken.front() == 0) return fail(r.status());  // the directory: none was tried
      for (size_t i : taken) files[i].status = status_of(r.status());
      continue;
    }
    for (size_t k = 0; k < taken.size(); ++k) {
      uint16_t code = 0;
      if (r->blob.size() >= 2 * (k + 1)) std::memcpy(&code, r->blob.data() + 2 * k, 2);
      files[taken[k]].status = status_of(code);
      count += code == 0;
    }
  }
  return count;
}

int agent_get_files(rfos_fs_t* fs, const char* dir, rfos_fs_get_t* files, size_t n) {
  auto buf = fs->agent->buffer();
  // A file's entry: name, capacity u64; its bytes come back at the sum of the capacities before it, so the
  // capacities count against the buffer too (a capacity past the buffer is clamped: a file it does not hold is
  // read alone).
  auto cap_of = [&](const rfos_fs_get_t& f) { return std::min<uint64_t>(f.cap, buf.size() / 2); };
  auto entry = [&](const rfos_fs_get_t& f, uint8_t* out, uint64_t at) -> uint64_t {
    std::string_view name = f.name;
    uint64_t need = 2 + name.size() + 8;
    if (!out) return need;
    put_name(out, &at, name);
    uint64_t cap = cap_of(f);
    std::memcpy(out + at, &cap, 8);
    return need;
  };
  int count = 0;
  std::vector<size_t> taken;
  auto read_alone = [&](size_t i) {
    std::string path = std::string(dir);
    if (path.empty() || path.back() != '/') path += '/';
    path += files[i].name;
    uint64_t at = 0;
    auto got = fs->agent->get_object(fs->pool, fs->cont, path, [&](std::span<const uint8_t> b) {
      if (at + b.size() > files[i].cap) return rfos::error(StatusCode::kTooLarge, "larger than its buffer");
      std::memcpy(static_cast<uint8_t*>(files[i].buf) + at, b.data(), b.size());
      at += b.size();
      return Status::ok();
    });
    files[i].len = got.is_ok() ? *got : 0;
    files[i].status = got.is_ok()                                    ? 0
                      : got.status().code() == StatusCode::kTooLarge ? -ENOBUFS
                                                                     : status_of(got.status());
    count += got.is_ok();
  };
  // Files read alone go through the same buffer: each after the batch whose bytes it would overwrite.
  std::vector<size_t> alone;
  auto later = [&](size_t i) { alone.push_back(i); };
  for (size_t next = 0; next < n;) {
    for (size_t i : alone) read_alone(i);
    alone.clear();
    uint64_t bytes = lay_out(buf, files, n, &next, &taken, entry, cap_of, later);
    if (taken.empty()) continue;
    auto r = fs->agent->object_call(ObjectOp::kGetFiles, fs->pool, fs->cont, dir, 0, bytes);
    if (!r.is_ok()) {
      if (count == 0 && taken.front() == 0) return fail(r.status());
      for (size_t i : taken) files[i].status = status_of(r.status());
      continue;
    }
    uint64_t at = 0;
    for (size_t k = 0; k < taken.size(); ++k) {
      rfos_fs_get_t& f = files[taken[k]];
      uint16_t code = 0;
      uint64_t size = 0;
      if (r->blob.size() >= 10 * (k + 1)) {
        std::memcpy(&code, r->blob.data() + 10 * k, 2);
        std::memcpy(&size, r->blob.data() + 10 * k + 2, 8);
      }
      uint64_t cap = cap_of(f);
      f.len = size;
      if (code == static_cast<uint16_t>(StatusCode::kTooLarge) && size <= f.cap) {
        later(taken[k]);  // its capacity was clamped to the shared buffer's
      } else if (code == static_cast<uint16_t>(StatusCode::kTooLarge)) {
        f.status = -ENOBUFS;
      } else {
        f.status = status_of(code);
        if (code == 0) {
          if (size) std::memcpy(f.buf, buf.data() + at, size);
          ++count;
        }
      }
      at += cap;
    }
  }
  for (size_t i : alone) read_alone(i);
  return count;
}

}  // namespace

extern "C" {

int rfos_fs_open(rfos_client_t* client, const char* pool, const char* cont, const char* provider, rfos_fs_t** out) {
  if (bad(client, "client") || bad(pool, "pool") || bad(cont, "cont") || bad(out, "out")) return -EINVAL;
  if (!client->agent_socket.empty()) {
    rfos::agent::AgentClientOptions ao;
    const char* mib = std::getenv("RFOS_AGENT_BUFFER_MIB");
    ao.buffer_bytes = (mib ? std::max<uint64_t>(std::strtoull(mib, nullptr, 10), 1) : 64) << 20;
    ao.entries = 8;
    ao.timeout_ms = std::max<uint32_t>(client->timeout_ms, 30000);
    auto a = rfos::agent::AgentClient::connect(client->agent_socket, ao);
    if (!a.is_ok()) return fail(a.status());
    // The agent opens the namespace for this user now: an unknown container or missing rights fail here.
    auto opened = (*a)->object_call(ObjectOp::kSync, pool, cont, "");
    if (!opened.is_ok()) return fail(opened.status());
    *out = new rfos_fs{nullptr, std::move(a).value(), pool, cont};
    return 0;
  }
  rfos::client::ContainerOptions o;
  if (provider) o.provider = provider;
  auto ns = rfos::posix::Namespace::open(*client->control, pool, cont, o);
  if (!ns.is_ok()) return fail(ns.status());
  *out = new rfos_fs{std::move(ns).value(), nullptr, pool, cont};
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
  if (fs->agent) {
    auto made = fs->agent->object_call(ObjectOp::kMkdir, fs->pool, fs->cont, path, mode);
    return made.is_ok() ? 0 : fail(made.status());
  }
  Cred cred = Cred::of_process();
  auto parent = fs->ns->resolve(std::string(p.substr(0, slash)), cred);
  if (!parent.is_ok()) return fail(parent.status());
  auto made = fs->ns->mkdir(parent->oid, p.substr(slash + 1), mode, cred);
  return made.is_ok() ? 0 : fail(made.status());
}

int rfos_fs_put_files(rfos_fs_t* fs, const char* dir, rfos_fs_put_t* files, size_t n, uint32_t depth) {
  if (bad(fs, "fs") || bad(dir, "dir") || (n > 0 && bad(files, "files"))) return -EINVAL;
  for (size_t i = 0; i < n; ++i)
    if (bad(files[i].name, "a file's name") || (files[i].len > 0 && bad(files[i].data, "a file's data")))
      return -EINVAL;
  if (fs->agent) return agent_put_files(fs, dir, files, n);
  Cred cred = Cred::of_process();
  auto d = directory(fs, dir, cred);
  if (!d.is_ok()) return fail(d.status());
  std::vector<rfos::posix::Namespace::NewFile> batch(n);
  for (size_t i = 0; i < n; ++i) {
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
  for (size_t i = 0; i < n; ++i)
    if (bad(files[i].name, "a file's name") || (files[i].cap > 0 && bad(files[i].buf, "a file's buffer")))
      return -EINVAL;
  if (fs->agent) return agent_get_files(fs, dir, files, n);
  Cred cred = Cred::of_process();
  auto d = directory(fs, dir, cred);
  if (!d.is_ok()) return fail(d.status());
  std::vector<std::string> names(n);
  for (size_t i = 0; i < n; ++i) names[i] = files[i].name;
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
  Status s = fs->agent ? fs->agent->object_call(ObjectOp::kSync, fs->pool, fs->cont, "").status() : fs->ns->sync();
  return s.is_ok() ? 0 : fail(s);
}

}  // extern "C"
