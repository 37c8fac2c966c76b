// rfos put / get: a local file (or stdin/stdout) into an object and back.
//
// Layout of such an object (the same striping a file in the POSIX namespace will use): dkey = chunk index
// (decimal), akey "d", array offset = byte offset in the file; dkey "meta" holds single values "size" and
// "name". put writes the data first and the size last, and returns 0 only when every byte is durable.
#include <cstdio>
#include <cstring>
#include <vector>

#include "cli/cli.h"
#include "client/container.h"
#include "placement/placement.h"

namespace rfos::cli {

namespace {

ObjectId object_for(const std::string& key) {
  ObjectId oid{placement::mix(placement::fnv1a(key)), placement::mix(placement::fnv1a(key, 0x84222325cbf29ce4ull))};
  return placement::with_class(oid, placement::ObjectClass::kSX);
}

struct ObjectArgs {
  std::string pool = "default";
  std::string cont = "default";
  std::string provider;
  std::string key;
  std::string path = "-";
  uint64_t snapshot = 0;  // read at this snapshot's epoch (0: latest)
};

void add_target_options(CLI::App* cmd, ObjectArgs& a) {
  cmd->add_option("--pool", a.pool, "pool label or uuid")->capture_default_str();
  cmd->add_option("--cont", a.cont, "container label or uuid")->capture_default_str();
  cmd->add_option("--provider", a.provider, "data-plane provider (default: $RFOS_PROVIDER or the pool's)");
  cmd->add_option("KEY", a.key, "object name")->required();
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

}  // namespace

void add_object_commands(CLI::App& app, Context& ctx) {
  auto ls_args = std::make_shared<ObjectArgs>();
  auto* ls = app.add_subcommand("ls", "list the objects of a container: name and size (objects put by rfos put)");
  ls->add_option("--pool", ls_args->pool, "pool label or uuid")->capture_default_str();
  ls->add_option("--cont", ls_args->cont, "container label or uuid")->capture_default_str();
  ls->add_option("--provider", ls_args->provider, "data-plane provider (default: $RFOS_PROVIDER or the pool's)");
  ls->add_option("--snapshot", ls_args->snapshot, "list the container as of this snapshot (its epoch)");
  ls->callback([&ctx, ls_args] {
    auto cont = open_cont(ctx, *ls_args, false);
    if (!ctx.check(cont.status(), "ls")) return;
    auto oids = (*cont)->list_objects();
    if (!ctx.check(oids.status(), "ls")) return;
    for (const ObjectId& oid : *oids) {
      auto name = (*cont)->get_value(oid, "meta", "name");
      auto size = (*cont)->get_value(oid, "meta", "size");
      // Objects written by other means (the bench, the API) have no name record: show their id.
      std::printf("%12s  %s\n", size.is_ok() ? size->c_str() : "-",
                  name.is_ok() ? name->c_str() : oid.to_string().c_str());
    }
  });

  auto put_args = std::make_shared<ObjectArgs>();
  auto* put = app.add_subcommand("put", "store a file (or stdin) as an object; exit 0 once it is durable");
  add_target_options(put, *put_args);
  put->add_option("FILE", put_args->path, "file to read, - for stdin")->capture_default_str();
  put->callback([&ctx, put_args] {
    const ObjectArgs& a = *put_args;
    FILE* in = a.path == "-" ? stdin : std::fopen(a.path.c_str(), "rb");
    if (!in) {
      std::fprintf(stderr, "rfos put: cannot open %s: %s\n", a.path.c_str(), std::strerror(errno));
      ctx.exit_code = 1;
      return;
    }
    auto cont = open_cont(ctx, a, true);
    if (!ctx.check(cont.status(), "put")) return;
    client::Container& c = **cont;
    ObjectId oid = object_for(a.key);
    Status s = c.punch_object(oid);  // replace, don't merge with an older object of that name
    if (s.code() == StatusCode::kNotFound) s = Status::ok();
    size_t chunk = c.session().cont.props.chunk_bytes ? c.session().cont.props.chunk_bytes : (1u << 20);
    std::vector<uint8_t> buf(chunk);
    uint64_t total = 0;
    for (uint64_t index = 0; s.is_ok(); ++index) {
      size_t n = std::fread(buf.data(), 1, chunk, in);
      if (n == 0) break;
      s = c.write(oid, std::to_string(index), "d", total, {buf.data(), n});
      total += n;
    }
    if (s.is_ok() && std::ferror(in)) s = error(StatusCode::kIoError, "reading " + a.path + " failed");
    if (in != stdin) std::fclose(in);
    if (s.is_ok()) s = c.put_value(oid, "meta", "name", a.key);
    if (s.is_ok()) s = c.put_value(oid, "meta", "size", std::to_string(total));
    if (ctx.check(s, "put"))
      std::fprintf(stderr, "rfos put: %s: %llu bytes stored\n", a.key.c_str(), (unsigned long long)total);
  });

  auto get_args = std::make_shared<ObjectArgs>();
  auto* get = app.add_subcommand("get", "read an object into a file (or stdout); exit 0 once all of it is verified");
  add_target_options(get, *get_args);
  get->add_option("FILE", get_args->path, "file to write, - for stdout")->capture_default_str();
  get->add_option("--snapshot", get_args->snapshot, "read the object as of this snapshot (its epoch)");
  get->callback([&ctx, get_args] {
    const ObjectArgs& a = *get_args;
    auto cont = open_cont(ctx, a, false);
    if (!ctx.check(cont.status(), "get")) return;
    client::Container& c = **cont;
    ObjectId oid = object_for(a.key);
    auto size_text = c.get_value(oid, "meta", "size");
    if (size_text.status().code() == StatusCode::kNotFound) {
      ctx.check(error(StatusCode::kNotFound, "no object named '" + a.key + "'"), "get");
      return;
    }
    if (!ctx.check(size_text.status(), "get")) return;
    uint64_t size = std::strtoull(size_text->c_str(), nullptr, 10);
    FILE* out = a.path == "-" ? stdout : std::fopen(a.path.c_str(), "wb");
    if (!out) {
      std::fprintf(stderr, "rfos get: cannot create %s: %s\n", a.path.c_str(), std::strerror(errno));
      ctx.exit_code = 1;
      return;
    }
    size_t chunk = c.session().cont.props.chunk_bytes ? c.session().cont.props.chunk_bytes : (1u << 20);
    std::vector<uint8_t> buf(chunk);
    Status s;
    for (uint64_t pos = 0, index = 0; pos < size && s.is_ok(); ++index) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, size - pos));
      s = c.read(oid, std::to_string(index), "d", pos, {buf.data(), n});
      if (s.is_ok() && std::fwrite(buf.data(), 1, n, out) != n)
        s = error(StatusCode::kIoError, "writing output failed");
      pos += n;
    }
    if (out != stdout) {
      if (std::fclose(out) != 0 && s.is_ok()) s = error(StatusCode::kIoError, "closing output failed");
    } else {
      std::fflush(stdout);
    }
    ctx.check(s, "get");
  });
}

}  // namespace rfos::cli
