#include "client/named_objects.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "client/file_layout.h"
#include "client/file_stream.h"
#include "placement/placement.h"

namespace rfos::client {

namespace {

constexpr std::string_view kMeta = "meta";
constexpr std::string_view kName = "name";
constexpr std::string_view kObject = "object";    // "<id> <size>": the data object and its size
constexpr std::string_view kPending = "pending";  // "<id>": the data object a put is writing
constexpr std::string_view kLegacySize = "size";  // the older layout's size
constexpr std::string_view kIndexAkey = "o";      // an index entry's value: the record's "object" value

std::string encode_id(const ObjectId& oid) {
  char b[40];
  std::snprintf(b, sizeof(b), "%016llx%016llx", static_cast<unsigned long long>(oid.hi),
                static_cast<unsigned long long>(oid.lo));
  return b;
}

Result<ObjectId> decode_id(std::string_view s) {
  if (s.size() != 32 || s.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return error(StatusCode::kCorruption, "a name record holds a malformed object id");
  return ObjectId{std::stoull(std::string(s.substr(0, 16)), nullptr, 16),
                  std::stoull(std::string(s.substr(16)), nullptr, 16)};
}

// "<id> <size>[ <attrs>]": the attrs, any bytes, last.
struct DataRef {
  ObjectId oid;
  uint64_t size = 0;
  std::string attrs;
};

std::string encode_object(const ObjectId& oid, uint64_t size, std::string_view attrs) {
  std::string s = encode_id(oid) + " " + std::to_string(size);
  if (!attrs.empty()) s.append(" ").append(attrs);
  return s;
}

Result<DataRef> decode_object(std::string_view s) {
  size_t space = s.find(' ');
  if (space == std::string_view::npos) return error(StatusCode::kCorruption, "a name record is malformed");
  size_t end = std::min(s.find(' ', space + 1), s.size());
  std::string_view digits = s.substr(space + 1, end - space - 1);
  if (digits.empty() || digits.size() > 19 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return error(StatusCode::kCorruption, "a name record is malformed");
  DataRef r;
  RFOS_ASSIGN_OR_RETURN(r.oid, decode_id(s.substr(0, space)));
  r.size = std::stoull(std::string(digits));
  if (end < s.size()) r.attrs = s.substr(end + 1);
  return r;
}

ObjectId fresh_data_object() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return placement::with_class(ObjectId{rng(), rng()}, placement::ObjectClass::kSX);
}

Status ignore_not_found(Status s) { return s.code() == StatusCode::kNotFound ? Status::ok() : s; }

}  // namespace

ObjectId NamedObjects::index_object() {
  // No name hashes here: record_of mixes its hashes, this id is a constant of its own.
  return placement::with_class(ObjectId{0, 0x72666f73696e6478ull}, placement::ObjectClass::kS1);  // "rfosindx"
}

ObjectId NamedObjects::record_of(std::string_view name) {
  ObjectId oid{placement::mix(placement::fnv1a(name)), placement::mix(placement::fnv1a(name, 0x84222325cbf29ce4ull))};
  return placement::with_class(oid, placement::ObjectClass::kSX);
}

Status NamedObjects::clear_pending(const ObjectId& record) {
  auto pending = c_.get_value(record, kMeta, kPending);
  if (pending.status().code() == StatusCode::kNotFound) return Status::ok();
  RFOS_RETURN_IF_ERROR(pending.status());
  auto oid = decode_id(*pending);
  if (oid.is_ok()) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(*oid)));
  return ignore_not_found(c_.punch_akey(record, kMeta, kPending));
}

Status NamedObjects::put(std::string_view name, const Source& source, const Progress& progress,
                         const PutOptions& options) {
  if (name.empty()) return error(StatusCode::kInvalidArgument, "an object needs a name");
  const ObjectId record = record_of(name);
  RFOS_RETURN_IF_ERROR(clear_pending(record));
  auto old = c_.get_value(record, kMeta, kObject);
  if (!old.is_ok() && old.status().code() != StatusCode::kNotFound) return old.status();
  const bool legacy = c_.get_value(record, kMeta, kLegacySize).is_ok();
  const ObjectId data = fresh_data_object();
  RFOS_RETURN_IF_ERROR(c_.put_value(record, kMeta, kPending, encode_id(data)));
  Status s = c_.put_value(record, kMeta, kName, name);
  uint64_t size = 0;
  if (s.is_ok()) s = write_file_object(c_, data, 0, source, depth_, progress, &size);
  std::string attrs;
  if (s.is_ok() && options.attrs) {
    auto a = options.attrs(size);
    if (a.is_ok()) attrs = std::move(a).value();
    s = a.status();
  }
  // The swap: from here on readers see the new object.
  const std::string object = encode_object(data, size, attrs);
  if (s.is_ok()) s = c_.put_value(record, kMeta, kObject, object);
  if (!s.is_ok()) {
    // What it wrote goes (where even that fails, the next put or remove clears it), and a name that had no
    // object before has none after.
    if (clear_pending(record).is_ok() && !old.is_ok() && !legacy) (void)c_.punch_object(record);
    return s;
  }
  // Listed from here on (a put that dies before leaves it pending, and unlisted or listed as it was).
  Status listed = c_.put_value(index_object(), name, kIndexAkey, object);
  // The old data goes. Where that fails, it is left pending, for the next put or remove of the name to clear.
  if (old.is_ok()) {
    auto prev = decode_object(*old);
    if (prev.is_ok()) {
      RFOS_RETURN_IF_ERROR(c_.put_value(record, kMeta, kPending, encode_id(prev->oid)));
      RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(prev->oid)));
    }
  }
  // An object of the older layout kept its data under the record: every dkey but meta.
  if (legacy) {
    RFOS_ASSIGN_OR_RETURN(std::vector<std::string> dkeys, c_.list_dkeys(record));
    for (const std::string& d : dkeys)
      if (d != kMeta) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_dkey(record, d)));
    RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, kLegacySize)));
  }
  RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, kPending)));
  return listed;
}

Result<ObjectStat> NamedObjects::stat(std::string_view name) { return stat_of(record_of(name), name); }

Result<ObjectStat> NamedObjects::stat_of(const ObjectId& record, std::string_view name) {
  ObjectStat st;
  st.name = name;
  auto object = c_.get_value(record, kMeta, kObject);
  if (object.is_ok()) {
    RFOS_ASSIGN_OR_RETURN(DataRef o, decode_object(*object));
    st.data = o.oid;
    st.size = o.size;
    st.attrs = std::move(o.attrs);
    return st;
  }
  if (object.status().code() != StatusCode::kNotFound) return object.status();
  auto legacy = c_.get_value(record, kMeta, kLegacySize);
  if (legacy.status().code() == StatusCode::kNotFound)
    return error(StatusCode::kNotFound, "no object named '" + std::string(name) + "'");
  RFOS_RETURN_IF_ERROR(legacy.status());
  st.data = record;
  st.size = std::strtoull(legacy->c_str(), nullptr, 10);
  st.legacy = true;
  return st;
}

Status NamedObjects::get(std::string_view name, const Sink& sink, const Progress& progress) {
  RFOS_ASSIGN_OR_RETURN(ObjectStat st, stat(name));
  return read(st, sink, progress);
}

// Reads ahead up to depth_ pieces, and hands them to the sink in order as they arrive.
Status NamedObjects::read(const ObjectStat& st, const Sink& sink, const Progress& progress) {
  const uint64_t chunk = layout::chunk_bytes(c_.session().cont.props.chunk_bytes);
  if (st.legacy) {  // one chunk at a time, as the older layout was written
    std::vector<uint8_t> buf(chunk);
    for (uint64_t pos = 0, index = 0; pos < st.size; ++index) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, st.size - pos));
      RFOS_RETURN_IF_ERROR(c_.read(st.data, std::to_string(index), layout::kDataAkey, pos, {buf.data(), n}));
      RFOS_RETURN_IF_ERROR(sink({buf.data(), n}));
      pos += n;
      if (progress) progress(pos);
    }
    return Status::ok();
  }
  return read_file_object(c_, st.data, 0, st.size, sink, depth_, progress, false);
}

Status NamedObjects::remove(std::string_view name) {
  const ObjectId record = record_of(name);
  auto st = stat(name);
  auto pending = c_.get_value(record, kMeta, kPending);
  if (!st.is_ok() && st.status().code() != StatusCode::kNotFound) return st.status();
  if (!st.is_ok() && !pending.is_ok()) return st.status();
  // Unlisted first: a remove that dies half-way leaves an object that is not listed, never a listed one that
  // is gone.
  RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_dkey(index_object(), name)));
  RFOS_RETURN_IF_ERROR(clear_pending(record));
  if (st.is_ok() && !st->legacy) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(st->data)));
  return ignore_not_found(c_.punch_object(record));
}

Result<NamedObjects::Listing> NamedObjects::list() {
  RFOS_ASSIGN_OR_RETURN(std::vector<ObjectId> oids, c_.list_objects());
  Listing out;
  std::set<ObjectId> referenced, unnamed;
  for (const ObjectId& oid : oids) {
    if (oid == index_object()) continue;
    auto name = c_.get_value(oid, kMeta, kName);
    if (!name.is_ok()) {
      if (name.status().code() != StatusCode::kNotFound) return name.status();
      unnamed.insert(oid);
      continue;
    }
    referenced.insert(oid);
    if (auto pending = c_.get_value(oid, kMeta, kPending); pending.is_ok())
      if (auto p = decode_id(*pending); p.is_ok()) referenced.insert(*p);
    auto st = stat_of(oid, *name);
    if (st.status().code() == StatusCode::kNotFound) continue;  // a name whose first put is still under way
    RFOS_RETURN_IF_ERROR(st.status());
    referenced.insert(st->data);
    out.named.push_back(std::move(st).value());
  }
  for (const ObjectId& oid : unnamed)
    if (!referenced.count(oid)) out.other.push_back(oid);
  std::sort(out.named.begin(), out.named.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace rfos::client

namespace rfos::client {

Result<std::vector<ObjectStat>> NamedObjects::list_index(std::string_view prefix) {
  const ObjectId index = index_object();
  const uint32_t target = c_.target_of(index, {});
  std::vector<ObjectStat> out;
  std::string anchor;
  for (bool done = false; !done;) {
    RFOS_ASSIGN_OR_RETURN(KeyPage page, c_.list_dkeys(index, target, anchor, 1024, kIndexAkey));
    if (!page.done && page.anchor == anchor) return error(StatusCode::kInternal, "index listing made no progress");
    for (size_t i = 0; i < page.keys.size(); ++i) {
      if (!page.keys[i].starts_with(prefix) || page.values[i].empty()) continue;
      RFOS_ASSIGN_OR_RETURN(DataRef o, decode_object(page.values[i]));
      out.push_back(ObjectStat{page.keys[i], o.size, o.oid, false, std::move(o.attrs)});
    }
    anchor = std::move(page.anchor);
    done = page.done;
  }
  // The engine orders keys by length first; listings are in byte order.
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace rfos::client
