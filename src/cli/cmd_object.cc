// rfos put / get / rm / stat / ls: local files (or stdin/stdout) as named objects (client/named_objects.h), laid out
// as every file-like object is (client/file_layout.h). put returns 0 only when every byte is durable and the
// name points at the new object; until then the old object of that name, if any, is what readers see.
//
// A KEY that starts with '/' is a path in the container's POSIX namespace instead (posix/namespace.h): the file
// is what `rfos mount` and `rfos fs` show, written all or nothing the same way (Namespace::put_file).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "agent/agent_client.h"
#include "cli/cli.h"
#include "client/container.h"
#include "client/named_objects.h"
#include "posix/namespace.h"

namespace rfos::cli {

namespace {

struct ObjectArgs {
  std::string pool = "default";
  std::string cont = "default";
  std::string provider;
  std::string key;
  std::string path = "-";
  uint64_t snapshot = 0;  // read at this snapshot's epoch (0: latest)
  bool quiet = false;
};

// After a named object's id in `rfos stat`: how it is stored, where that is not a data object of that id.
const char* object_note(bool legacy, bool inlined) {
  if (legacy) return " (older layout)";
  return inlined ? " (no object of this id: the bytes are kept in the name's record)" : "";
}

void add_target_options(CLI::App* cmd, ObjectArgs& a, bool key = true) {
  cmd->add_option("--pool", a.pool, "pool label or uuid")->capture_default_str();
  cmd->add_option("--cont", a.cont, "container label or uuid")->capture_default_str();
  cmd->add_option("--provider", a.provider, "data-plane provider (default: $RFOS_PROVIDER or the pool's)");
  if (key)
    cmd->add_option("KEY", a.key, "object name, or /PATH: a file of the container's POSIX namespace")->required();
}

Result<std::unique_ptr<client::Container>> open_cont(Context& ctx, const ObjectArgs& a, bool write) {
  client::ContainerOptions o;
  o.write = write;
  o.provider = a.provider;
  if (o.provider.empty() && std::getenv("RFOS_PROVIDER")) o.provider = std::getenv("RFOS_PROVIDER");
  auto control = ctx.control();
  auto c = client::Container::open(*control, a.pool, a.cont, o);
  if (c.is_ok() && a.snapshot) (*c)->set_read_epoch(a.snapshot);
  return c;
}

// Bytes moved, the rate and the time left, redrawn in place on a terminal (stderr) four times a second, as
// rclone and awscli do; nothing when stderr is not a terminal or --quiet.
class ProgressLine {
 public:
  ProgressLine(std::string what, uint64_t total, bool quiet)
      : what_(std::move(what)), total_(total), on_(!quiet && isatty(STDERR_FILENO)) {}
  ~ProgressLine() {
    if (drawn_) std::fputc('\n', stderr);
  }
  void operator()(uint64_t bytes) {
    if (!on_) return;
    auto now = Clock::now();
    if (now < next_ && bytes != total_) return;
    next_ = now + std::chrono::milliseconds(250);
    double s = std::chrono::duration<double>(now - start_).count();
    double rate = s > 0 ? bytes / s : 0;
    std::string left = "-";
    if (total_ && rate > 0 && bytes <= total_)
      left = std::to_string(static_cast<uint64_t>((total_ - bytes) / rate)) + " s";
    std::fprintf(stderr, "\r%s: %s%s%s  %s/s  %s left   ", what_.c_str(), human_bytes(bytes).c_str(),
                 total_ ? " of " : "", total_ ? human_bytes(total_).c_str() : "",
                 human_bytes(static_cast<uint64_t>(rate)).c_str(), left.c_str());
    drawn_ = true;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  uint64_t total_;
  bool on_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now(), next_{};
};

bool is_path(const std::string& key) { return !key.empty() && key[0] == '/'; }

Result<Mounted> open_ns(Context& ctx, const ObjectArgs& a) { return open_namespace(ctx, a.pool, a.cont, a.provider); }

// Reads a put's input.
client::StreamSource reader_of(FILE* in, const std::string& path) {
  return [in, path](std::span<uint8_t> buf) -> Result<size_t> {
    size_t n = std::fread(buf.data(), 1, buf.size(), in);
    if (n == 0 && std::ferror(in)) return error(StatusCode::kIoError, "reading " + path + " failed");
    return n;
  };
}

// Writes a get's output.
client::StreamSink writer_to(FILE* out) {
  return [out](std::span<const uint8_t> bytes) {
    return std::fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size()
               ? Status::ok()
               : error(StatusCode::kIoError, "writing output failed");
  };
}

// put of a /PATH: a file in the namespace, created with the mode a new file gets here (0666 less the umask).
Result<uint64_t> put_path(Context& ctx, const ObjectArgs& a, FILE* in, ProgressLine& line) {
  RFOS_ASSIGN_OR_RETURN(Mounted m, open_ns(ctx, a));
  posix::Cred cred = posix::Cred::of_process();
  RFOS_ASSIGN_OR_RETURN(auto parent, parent_of(*m.ns, cred, a.key));
  mode_t mask = umask(0);
  umask(mask);
  uint64_t stored = 0;
  RFOS_ASSIGN_OR_RETURN(posix::Attr f, m.ns->put_file(parent.first.oid, parent.second, 0666 & ~mask,
                                                      reader_of(in, a.path), cred, 16, [&](uint64_t bytes) {
                                                        stored = bytes;
                                                        line(bytes);
                                                      }));
  RFOS_RETURN_IF_ERROR(m.ns->sync());  // durable when the command says it is done
  return f.size;
}

// The commands through the agent (rfos --agent SOCK, or $RFOS_AGENT): the agent opens the container for this
// user and moves the bytes through the buffer it shares with this process; this process holds no session.
Result<std::unique_ptr<agent::AgentClient>> agent_app(const Context& ctx) {
  agent::AgentClientOptions o;
  o.buffer_bytes = 4 << 20;  // a put's or get's chunk
  o.entries = 8;
  o.timeout_ms = std::max<uint32_t>(ctx.timeout_ms, 300000);  // a chunk may wait on the media
  return agent::AgentClient::connect(ctx.agent, o);
}

uint32_t new_file_mode() {
  mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

}  // namespace

void add_object_commands(CLI::App& app, Context& ctx) {
  auto ls_args = std::make_shared<ObjectArgs>();
  auto* ls = app.add_subcommand("ls", "list the named objects of a container (size, name), then other objects by id");
  add_target_options(ls, *ls_args, false);
  ls->add_option("--snapshot", ls_args->snapshot, "list the container as of this snapshot (its epoch)");
  ls->callback([&ctx, ls_args] {
    if (!ctx.agent.empty()) {
      auto app = agent_app(ctx);
      if (app.is_ok()) (*app)->read_snapshot(ls_args->snapshot);
      auto r = app.is_ok() ? (*app)->object_call(agent::ObjectOp::kList, ls_args->pool, ls_args->cont, "")
                           : Result<agent::Message>(app.status());
      if (!ctx.check(r.status(), "ls")) return;
      std::istringstream lines(r->blob);
      for (std::string kind, first; lines >> kind >> first;) {
        std::string rest;
        std::getline(lines, rest);
        if (kind == "N")
          std::printf("%12s  %s\n", first.c_str(), rest.empty() ? "" : rest.c_str() + 1);
        else if (kind == "O")
          std::printf("%12s  %s\n", "-", first.c_str());
        else if (kind == "I")
          std::printf("%12s  (%s files and directories of the POSIX namespace: rfos fs ls rfos:/)\n", "-",
                      first.c_str());
      }
      return;
    }
    auto cont = open_cont(ctx, *ls_args, false);
    if (!ctx.check(cont.status(), "ls")) return;
    auto listing = client::NamedObjects(**cont).list();
    if (!ctx.check(listing.status(), "ls")) return;
    for (const auto& o : listing->named) std::printf("%12llu  %s\n", (unsigned long long)o.size, o.name.c_str());
    // The POSIX namespace's inodes are counted, not listed (rfos fs ls rfos:/ lists its tree); objects written
    // by other means (the bench, the API) have no name: shown by their id.
    size_t inodes = 0;
    for (const ObjectId& oid : listing->other) {
      auto inode = posix::Namespace::holds_inode(**cont, oid);
      if (!ctx.check(inode.status(), "ls")) return;
      if (*inode) {
        ++inodes;
        continue;
      }
      std::printf("%12s  %s\n", "-", oid.to_string().c_str());
    }
    if (inodes)
      std::printf("%12s  (%zu files and directories of the POSIX namespace: rfos fs ls rfos:/)\n", "-", inodes);
  });

  auto put_args = std::make_shared<ObjectArgs>();
  auto* put = app.add_subcommand("put", "store a file (or stdin) as an object; exit 0 once it is durable");
  add_target_options(put, *put_args);
  put->add_option("FILE", put_args->path, "file to read, - for stdin")->capture_default_str();
  put->add_flag("-q,--quiet", put_args->quiet, "no progress line");
  put->callback([&ctx, put_args] {
    const ObjectArgs& a = *put_args;
    FILE* in = a.path == "-" ? stdin : std::fopen(a.path.c_str(), "rb");
    if (!in) {
      std::fprintf(stderr, "rfos put: cannot open %s: %s\n", a.path.c_str(), std::strerror(errno));
      ctx.exit_code = 1;
      return;
    }
    struct stat sb {};
    uint64_t total = fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode) ? static_cast<uint64_t>(sb.st_size) : 0;
    if (!ctx.agent.empty()) {
      Result<uint64_t> stored = error(StatusCode::kNotFound, "not stored");
      {
        ProgressLine line("put " + a.key, total, a.quiet);
        auto app = agent_app(ctx);
        stored = app.is_ok() ? (*app)->put_object(a.pool, a.cont, a.key, new_file_mode(), reader_of(in, a.path),
                                                  [&](uint64_t b) { line(b); })
                             : Result<uint64_t>(app.status());
      }
      if (in != stdin) std::fclose(in);
      if (ctx.check(stored.status(), "put"))
        std::fprintf(stderr, "rfos put: %s: %llu bytes stored\n", a.key.c_str(), (unsigned long long)*stored);
      return;
    }
    Result<std::unique_ptr<client::Container>> cont = error(StatusCode::kNotFound, "not opened");
    if (!is_path(a.key)) {
      cont = open_cont(ctx, a, true);
      if (!ctx.check(cont.status(), "put")) {
        if (in != stdin) std::fclose(in);
        return;
      }
    }
    uint64_t stored = 0;
    Status s;
    {
      ProgressLine line("put " + a.key, total, a.quiet);
      if (is_path(a.key)) {
        auto size = put_path(ctx, a, in, line);
        s = size.status();
        if (size.is_ok()) stored = *size;
      } else {
        s = client::NamedObjects(**cont).put(a.key, reader_of(in, a.path), [&](uint64_t bytes) {
          stored = bytes;
          line(bytes);
        });
      }
    }
    if (in != stdin) std::fclose(in);
    if (ctx.check(s, "put"))
      std::fprintf(stderr, "rfos put: %s: %llu bytes stored\n", a.key.c_str(), (unsigned long long)stored);
  });

  auto get_args = std::make_shared<ObjectArgs>();
  auto* get = app.add_subcommand("get", "read an object into a file (or stdout); exit 0 once all of it is verified");
  add_target_options(get, *get_args);
  get->add_option("FILE", get_args->path, "file to write, - for stdout")->capture_default_str();
  get->add_option("--snapshot", get_args->snapshot, "read the object as of this snapshot (its epoch)");
  get->add_flag("-q,--quiet", get_args->quiet, "no progress line");
  get->callback([&ctx, get_args] {
    const ObjectArgs& a = *get_args;
    if (is_path(a.key) && a.snapshot)
      return (void)ctx.check(error(StatusCode::kNotSupported, "--snapshot reads named objects, not paths yet"), "get");
    Result<Mounted> m = error(StatusCode::kNotFound, "not opened");
    Result<posix::Attr> file = error(StatusCode::kNotFound, "not found");
    Result<std::unique_ptr<client::Container>> cont = error(StatusCode::kNotFound, "not opened");
    Result<client::ObjectStat> st = error(StatusCode::kNotFound, "not found");
    Result<std::unique_ptr<agent::AgentClient>> app = error(StatusCode::kNotFound, "not connected");
    if (!ctx.agent.empty()) {
      app = agent_app(ctx);
      if (app.is_ok()) (*app)->read_snapshot(a.snapshot);
      auto found = app.is_ok() ? (*app)->object_call(agent::ObjectOp::kStat, a.pool, a.cont, a.key)
                               : Result<agent::Message>(app.status());
      if (!ctx.check(found.status(), "get")) return;
      st = client::ObjectStat{a.key, found->value, {}, false, 0, {}, false, false, {}};
    } else if (is_path(a.key)) {
      m = open_ns(ctx, a);
      if (!ctx.check(m.status(), "get")) return;
      file = m->ns->resolve(a.key, posix::Cred::of_process());
      if (file.is_ok() && !posix::Namespace::permits(*file, posix::Cred::of_process(), R_OK))
        file = error(StatusCode::kPermissionDenied, a.key + ": no read permission");
      if (!ctx.check(file.status(), "get")) return;
      st = client::ObjectStat{a.key, file->size, file->oid, false, 0, {}, false, false, {}};
    } else {
      cont = open_cont(ctx, a, false);
      if (!ctx.check(cont.status(), "get")) return;
      st = client::NamedObjects(**cont).stat(a.key);
      if (!ctx.check(st.status(), "get")) return;
    }
    FILE* out = a.path == "-" ? stdout : std::fopen(a.path.c_str(), "wb");
    if (!out) {
      std::fprintf(stderr, "rfos get: cannot create %s: %s\n", a.path.c_str(), std::strerror(errno));
      ctx.exit_code = 1;
      return;
    }
    Status s;
    {
      ProgressLine line("get " + a.key, st->size, a.quiet || out == stdout);
      auto progress = [&](uint64_t bytes) { line(bytes); };
      if (app.is_ok())  // through the agent, which opens the container for this user
        s = (*app)->get_object(a.pool, a.cont, a.key, writer_to(out), progress).status();
      else
        s = is_path(a.key) ? m->ns->get_file(*file, writer_to(out), 16, progress)
                           : client::NamedObjects(**cont).read(*st, writer_to(out), progress);
    }
    if (out != stdout) {
      if (std::fclose(out) != 0 && s.is_ok()) s = error(StatusCode::kIoError, "closing output failed");
    } else {
      std::fflush(stdout);
    }
    ctx.check(s, "get");
  });

  auto rm_args = std::make_shared<ObjectArgs>();
  auto* rm = app.add_subcommand("rm", "remove an object and its name (also what a put that died left behind)");
  add_target_options(rm, *rm_args);
  rm->callback([&ctx, rm_args] {
    if (!ctx.agent.empty()) {
      auto app = agent_app(ctx);
      ctx.check(app.is_ok()
                    ? (*app)->object_call(agent::ObjectOp::kRemove, rm_args->pool, rm_args->cont, rm_args->key).status()
                    : app.status(),
                "rm");
      return;
    }
    if (is_path(rm_args->key)) {
      auto m = open_ns(ctx, *rm_args);
      if (!ctx.check(m.status(), "rm")) return;
      posix::Cred cred = posix::Cred::of_process();
      auto parent = parent_of(*m->ns, cred, rm_args->key);
      if (!ctx.check(parent.status(), "rm")) return;
      auto gone = m->ns->unlink(parent->first.oid, parent->second, cred);
      if (gone.is_ok() && gone->nlink == 0) (void)m->ns->forget(gone->oid);
      if (ctx.check(gone.status(), "rm")) ctx.check(m->ns->sync(), "rm");
      return;
    }
    auto cont = open_cont(ctx, *rm_args, true);
    if (!ctx.check(cont.status(), "rm")) return;
    ctx.check(client::NamedObjects(**cont).remove(rm_args->key), "rm");
  });

  auto stat_args = std::make_shared<ObjectArgs>();
  auto* stat_cmd = app.add_subcommand("stat", "an object's size and data object");
  add_target_options(stat_cmd, *stat_args);
  stat_cmd->add_option("--snapshot", stat_args->snapshot, "as of this snapshot (its epoch)");
  stat_cmd->callback([&ctx, stat_args] {
    if (!ctx.agent.empty()) {
      auto app = agent_app(ctx);
      if (app.is_ok()) (*app)->read_snapshot(stat_args->snapshot);
      auto r = app.is_ok()
                   ? (*app)->object_call(agent::ObjectOp::kStat, stat_args->pool, stat_args->cont, stat_args->key)
                   : Result<agent::Message>(app.status());
      if (!ctx.check(r.status(), "stat")) return;
      std::istringstream fields(r->text);
      std::string object, mode_or_legacy, uid, gid;
      fields >> object >> mode_or_legacy >> uid >> gid;
      if (is_path(stat_args->key))
        std::printf("name: %s\nsize: %llu\nobject: %s\nmode: %s\nuid: %s\ngid: %s\n", stat_args->key.c_str(),
                    (unsigned long long)r->value, object.c_str(), mode_or_legacy.c_str(), uid.c_str(), gid.c_str());
      else
        std::printf("name: %s\nsize: %llu\nobject: %s%s\n", stat_args->key.c_str(), (unsigned long long)r->value,
                    object.c_str(), object_note(mode_or_legacy == "legacy", mode_or_legacy == "inline"));
      return;
    }
    if (is_path(stat_args->key)) {
      if (stat_args->snapshot)
        return (void)ctx.check(error(StatusCode::kNotSupported, "--snapshot reads named objects, not paths yet"),
                               "stat");
      auto m = open_ns(ctx, *stat_args);
      if (!ctx.check(m.status(), "stat")) return;
      auto a = m->ns->resolve(stat_args->key, posix::Cred::of_process());
      if (!ctx.check(a.status(), "stat")) return;
      std::printf("name: %s\nsize: %llu\nobject: %s\nmode: %06o\nuid: %u\ngid: %u\n", stat_args->key.c_str(),
                  (unsigned long long)a->size, a->oid.to_string().c_str(), a->mode, a->uid, a->gid);
      return;
    }
    auto cont = open_cont(ctx, *stat_args, false);
    if (!ctx.check(cont.status(), "stat")) return;
    auto st = client::NamedObjects(**cont).stat(stat_args->key);
    if (!ctx.check(st.status(), "stat")) return;
    std::printf("name: %s\nsize: %llu\nobject: %s%s\n", st->name.c_str(), (unsigned long long)st->size,
                st->data.to_string().c_str(), object_note(st->legacy, st->inlined));
  });
}

}  // namespace rfos::cli
