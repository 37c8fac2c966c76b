#include "client/named_objects.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "client/file_layout.h"
#include "client/file_stream.h"
#include "common/coding.h"
#include "common/ids.h"
#include "placement/placement.h"

namespace rfos::client {

namespace {

constexpr std::string_view kMeta = "meta";
constexpr std::string_view kName = "name";
constexpr std::string_view kObject = "object";    // "<id> <size>": the data object and its size
constexpr std::string_view kPending = "pending";  // "<id>": a put's data, as rfos before 0.2 kept it (one at a time)
// "pending.<id>": a put under way writes data object <id> (value: when it started, ms). One akey per put, so that
// puts of one name at once never take each other's data for a dead put's.
constexpr std::string_view kPendingPrefix = "pending.";
// The swap's lock ("<id>" of the put holding it): one put at a time replaces the object and removes the one it
// replaced, so none is left behind by two that swap at once.
constexpr std::string_view kSwapLock = "swap";
// A put pending this long is taken for dead: the next put of the name removes its data (a remove does at once).
constexpr uint64_t kStalePendingMs = 24ull * 3600 * 1000;
// A swap lock held this long (its holder died between taking and leaving it) is taken over.
constexpr auto kSwapLockWait = std::chrono::seconds(10);
constexpr std::string_view kLegacySize = "size";    // the older layout's size
constexpr std::string_view kIndexAkey = "o";        // an index entry's value: the record's "object" value
constexpr std::string_view kManifest = "manifest";  // an object of parts: its manifest object's dkey ...
constexpr std::string_view kParts = "parts";        // ... and akey: per part, its data object's id and size (be64)

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

// "<id> <size>[ m<mtime ms>[ <attrs>]]", or "M<mtime ms>" for an object of parts (its id a manifest's): the
// attrs, any bytes, last. An object kept in its record: "<id> <size> i<mtime ms> <attrs><bytes>", its `size`
// bytes last (after attrs that may be empty).
struct DataRef {
  ObjectId oid;
  uint64_t size = 0;
  uint64_t mtime_ms = 0;
  bool composite = false;
  std::string attrs;
  bool inlined = false;
  std::string bytes;
};

std::string encode_object(const ObjectId& oid, uint64_t size, uint64_t mtime_ms, bool composite,
                          std::string_view attrs) {
  std::string s = encode_id(oid) + " " + std::to_string(size) + (composite ? " M" : " m") + std::to_string(mtime_ms);
  if (!attrs.empty()) s.append(" ").append(attrs);
  return s;
}

std::string encode_inline(const ObjectId& oid, std::string_view bytes, uint64_t mtime_ms, std::string_view attrs) {
  std::string s = encode_id(oid) + " " + std::to_string(bytes.size()) + " i" + std::to_string(mtime_ms) + " ";
  s.append(attrs).append(bytes);
  return s;
}

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
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
  if (end < s.size()) {
    std::string_view rest = s.substr(end + 1);
    size_t next = std::min(rest.find(' '), rest.size());
    std::string_view mtime = rest.substr(0, next);
    if (mtime.size() < 2 || mtime.size() > 20 || (mtime[0] != 'm' && mtime[0] != 'M' && mtime[0] != 'i') ||
        mtime.find_first_not_of("0123456789", 1) != std::string_view::npos)
      return error(StatusCode::kCorruption, "a name record is malformed");
    r.mtime_ms = std::stoull(std::string(mtime.substr(1)));
    r.composite = mtime[0] == 'M';
    r.inlined = mtime[0] == 'i';
    if (next < rest.size()) r.attrs = rest.substr(next + 1);
    if (r.inlined) {
      if (next == rest.size() || r.attrs.size() < r.size)
        return error(StatusCode::kCorruption, "a name record holds fewer bytes than its object's size");
      r.bytes = r.attrs.substr(r.attrs.size() - r.size);
      r.attrs.resize(r.attrs.size() - r.size);
    }
  }
  return r;
}

Status ignore_not_found(Status s) { return s.code() == StatusCode::kNotFound ? Status::ok() : s; }

// A name is a dkey of the index, which keeps them in byte order: 1..4096 bytes, no NUL.
Status check_name(std::string_view name) {
  if (name.empty()) return error(StatusCode::kInvalidArgument, "an object needs a name");
  if (name.size() > NamedObjects::kNameMaxBytes)
    return error(StatusCode::kInvalidArgument,
                 "a name is " + std::to_string(NamedObjects::kNameMaxBytes) + " bytes at most");
  if (name.find('\0') != std::string_view::npos)
    return error(StatusCode::kInvalidArgument, "a name may not hold a NUL byte");
  return Status::ok();
}

// An index entry's value for an object: its record's "object" value, without the bytes of one kept there.
std::string listed_value(const ObjectStat& st) {
  return encode_object(st.data, st.size, st.mtime_ms, st.composite, st.attrs);
}

Status inline_range(const ObjectStat& st, uint64_t offset, uint64_t length) {
  if (st.bytes.size() != st.size) return error(StatusCode::kInvalidArgument, "a stat without its object's bytes");
  if (offset > st.size || length > st.size - offset) return error(StatusCode::kInvalidArgument, "a range past the end");
  return Status::ok();
}

}  // namespace

ObjectId NamedObjects::fresh_data_object() {
  static thread_local std::mt19937_64 rng = well_seeded_rng();
  return placement::with_class(ObjectId{rng(), rng()}, placement::ObjectClass::kSX);
}

ObjectId NamedObjects::index_object() {
  // No name hashes here: record_of mixes its hashes, this id is a constant of its own.
  return placement::with_class(ObjectId{0, 0x72666f736e616d65ull}, placement::ObjectClass::kS1, true);  // "rfosname"
}

ObjectId NamedObjects::legacy_index_object() {
  return placement::with_class(ObjectId{0, 0x72666f73696e6478ull}, placement::ObjectClass::kS1);  // "rfosindx"
}

ObjectId NamedObjects::record_of(std::string_view name) {
  ObjectId oid{placement::mix(placement::fnv1a(name)), placement::mix(placement::fnv1a(name, 0x84222325cbf29ce4ull))};
  return placement::with_class(oid, placement::ObjectClass::kSX);
}

Result<std::vector<std::string>> NamedObjects::clear_pending(const ObjectId& record, uint64_t started_before_ms,
                                                             bool spare_live) {
  auto akeys = c_.list_akeys(record, kMeta);
  if (akeys.status().code() == StatusCode::kNotFound) return std::vector<std::string>{};
  RFOS_RETURN_IF_ERROR(akeys.status());
  // What the record names (its data object, and an object of parts' parts), read once an entry is found to be
  // stale. A put that died after its swap but before it dropped its entry left it naming that data, and one that
  // died before it removed the object it replaced left that marked, with parts the new object may have taken over:
  // those stay, and only the entries go.
  struct Live {
    std::set<ObjectId> data;  // the data object (an object of parts' manifest) and its parts
    bool parts_known = true;  // false: an object of parts whose manifest could not be read
  };
  std::optional<Live> live;
  auto live_data = [&]() -> Result<Live> {
    if (live) return *live;
    Live l;
    if (spare_live) {
      auto object = c_.get_value(record, kMeta, kObject);
      if (!object.is_ok() && object.status().code() != StatusCode::kNotFound) return object.status();
      auto ref = object.is_ok() ? decode_object(*object) : Result<DataRef>(error(StatusCode::kNotFound, ""));
      if (ref.is_ok() && !ref->inlined) {
        l.data.insert(ref->oid);
        if (ref->composite) {
          auto parts = parts_of(ref->oid);
          l.parts_known = parts.is_ok();
          if (parts.is_ok())
            for (const Part& p : *parts) l.data.insert(p.data);
        }
      }
    }
    live = l;
    return l;
  };
  for (const std::string& a : *akeys) {
    std::string id;
    if (a == kPending) {
      auto v = c_.get_value(record, kMeta, a);
      if (!v.is_ok()) continue;
      id = *v;
    } else if (a.starts_with(kPendingPrefix)) {
      auto v = c_.get_value(record, kMeta, a);
      if (!v.is_ok()) continue;
      id = a.substr(kPendingPrefix.size());
      if (*v == "r") {  // a replaced object of parts: its parts go too, but those the record's object took over
        if (auto oid = decode_id(id); oid.is_ok()) {
          RFOS_ASSIGN_OR_RETURN(Live l, live_data());
          if (!l.parts_known) continue;  // cannot tell which parts are shared: the mark stays for a later look
          if (!l.data.count(*oid)) RFOS_RETURN_IF_ERROR(remove_data(*oid, true, l.data));
        }
        RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, a)));
        continue;
      }
      // A put under way ("c": of parts, which it does not own yet: only its manifest goes).
      std::string_view t = *v;
      if (t.starts_with("c")) t.remove_prefix(1);
      char* end = nullptr;
      std::string digits(t);
      uint64_t started = std::strtoull(digits.c_str(), &end, 10);
      if (end && *end == '\0' && !digits.empty() && started >= started_before_ms) continue;  // under way
    } else {
      continue;
    }
    if (auto oid = decode_id(id); oid.is_ok()) {
      RFOS_ASSIGN_OR_RETURN(Live l, live_data());
      if (!l.data.count(*oid)) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(*oid)));
    }
    RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, a)));
  }
  return std::move(akeys).value();
}

Status NamedObjects::lock_swap(const ObjectId& record, const ObjectId& data) {
  const auto deadline = std::chrono::steady_clock::now() + kSwapLockWait;
  for (uint32_t attempt = 0;; ++attempt) {
    Status s = c_.insert_value(record, kMeta, kSwapLock, encode_id(data));
    if (s.code() != StatusCode::kAlreadyExists) return s;
    if (std::chrono::steady_clock::now() > deadline) {  // its holder died: take it over
      RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, kSwapLock)));
      continue;
    }
    // Another put is swapping (a few round trips): wait a little longer each time.
    std::this_thread::sleep_for(std::chrono::microseconds(200 << std::min(attempt, 6u)));
  }
}

Status NamedObjects::put(std::string_view name, const Source& source, const Progress& progress,
                         const PutOptions& options) {
  // The first kInlineBytes + 1 bytes tell whether the object fits its record. A sealing handle keeps bytes out of
  // records, which travel unsealed: every object of its has a data object.
  std::string head(c_.sealed() ? 0 : kInlineBytes + 1, '\0');
  size_t got = 0;
  while (got < head.size()) {
    RFOS_ASSIGN_OR_RETURN(size_t n, source({reinterpret_cast<uint8_t*>(head.data()) + got, head.size() - got}));
    if (n == 0) {
      head.resize(got);
      RFOS_RETURN_IF_ERROR(store_inline(name, head, options));
      if (progress) progress(got);
      return Status::ok();
    }
    got += n;
  }
  // Larger: a data object, its first bytes those already read.
  size_t replayed = 0;
  auto rest = [&](std::span<uint8_t> buf) -> Result<size_t> {
    if (replayed == head.size()) return source(buf);
    const size_t n = std::min(buf.size(), head.size() - replayed);
    std::memcpy(buf.data(), head.data() + replayed, n);
    replayed += n;
    return n;
  };
  const ObjectId data = fresh_data_object();
  return store(name, data, false, options,
               [&](uint64_t* size) { return write_file_object(c_, data, 0, rest, depth_, progress, size); });
}

Status NamedObjects::put_parts(std::string_view name, std::span<const Part> parts, const PutOptions& options) {
  if (parts.empty()) return error(StatusCode::kInvalidArgument, "an object of parts needs one part at least");
  const ObjectId manifest = fresh_data_object();
  return store(name, manifest, true, options, [&](uint64_t* size) {
    std::string list;
    *size = 0;
    for (const Part& p : parts) {
      put_be64(&list, p.data.hi);
      put_be64(&list, p.data.lo);
      put_be64(&list, p.size);
      *size += p.size;
    }
    return c_.put_value(manifest, kManifest, kParts, list);
  });
}

Result<std::vector<NamedObjects::Part>> NamedObjects::parts_of(const ObjectId& manifest) {
  RFOS_ASSIGN_OR_RETURN(std::string list, c_.get_value(manifest, kManifest, kParts));
  if (list.size() % 24) return error(StatusCode::kCorruption, "a manifest of parts is malformed");
  std::vector<Part> out;
  for (size_t at = 0; at < list.size(); at += 24)
    out.push_back(
        Part{ObjectId{get_be64(list.data() + at), get_be64(list.data() + at + 8)}, get_be64(list.data() + at + 16)});
  return out;
}

Status NamedObjects::remove_data(const ObjectId& data, bool composite, const std::set<ObjectId>& keep) {
  if (composite) {
    auto parts = parts_of(data);
    if (!parts.is_ok() && parts.status().code() != StatusCode::kNotFound) return parts.status();
    if (parts.is_ok())
      for (const Part& p : *parts)
        if (!keep.count(p.data)) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(p.data)));
  }
  return ignore_not_found(c_.punch_object(data));
}

Status NamedObjects::store(std::string_view name, const ObjectId& data, bool composite, const PutOptions& options,
                           const std::function<Status(uint64_t*)>& write) {
  RFOS_RETURN_IF_ERROR(check_name(name));
  const ObjectId record = record_of(name);
  const uint64_t started = now_ms();
  // What the record holds tells, with no request of its own, whether it is of the older layout and whether it
  // has its name already (a replacement: the name is not written again).
  RFOS_ASSIGN_OR_RETURN(std::vector<std::string> akeys,
                        clear_pending(record, started - std::min(started, kStalePendingMs), true));
  const bool legacy = std::find(akeys.begin(), akeys.end(), kLegacySize) != akeys.end();
  const bool named = std::find(akeys.begin(), akeys.end(), kName) != akeys.end();
  const std::string pending = std::string(kPendingPrefix) + encode_id(data);
  // A composite put owns only its manifest until the swap: its parts are still the upload's.
  RFOS_RETURN_IF_ERROR(c_.put_value(record, kMeta, pending, (composite ? "c" : "") + std::to_string(started)));
  Status s = named ? Status::ok() : c_.put_value(record, kMeta, kName, name);
  uint64_t size = 0;
  if (s.is_ok()) s = write(&size);
  std::string attrs;
  if (s.is_ok() && options.attrs) {
    auto a = options.attrs(size);
    if (a.is_ok()) attrs = std::move(a).value();
    s = a.status();
  }
  if (!s.is_ok()) {
    // What it wrote goes (where even that fails, the next remove of the name clears it), and a name that has
    // no object and no other put under way is gone.
    if (ignore_not_found(c_.punch_object(data)).is_ok() &&
        ignore_not_found(c_.punch_akey(record, kMeta, pending)).is_ok()) {
      auto akeys = c_.list_akeys(record, kMeta);
      if (akeys.is_ok() && std::all_of(akeys->begin(), akeys->end(), [](const std::string& a) { return a == kName; }))
        (void)c_.punch_object(record);
    }
    return s;
  }
  // The swap, one put of the name at a time: from here on readers see the new object, and the one it replaced
  // (read under the lock, so no other swap slips in between) goes.
  RFOS_RETURN_IF_ERROR(lock_swap(record, data));
  auto old = c_.get_value(record, kMeta, kObject);
  const std::string object = encode_object(data, size, now_ms(), composite, attrs);
  if (old.is_ok() || old.status().code() == StatusCode::kNotFound)
    s = c_.put_value(record, kMeta, kObject, object);
  else
    s = old.status();
  if (!s.is_ok()) {
    (void)c_.punch_akey(record, kMeta, kSwapLock);
    (void)ignore_not_found(c_.punch_object(data));
    (void)c_.punch_akey(record, kMeta, pending);
    return s;
  }
  return after_swap(record, name, data, composite, old, object, legacy, pending);
}

Status NamedObjects::store_inline(std::string_view name, std::string_view bytes, const PutOptions& options) {
  RFOS_RETURN_IF_ERROR(check_name(name));
  const ObjectId record = record_of(name);
  const ObjectId data = fresh_data_object();  // the object's identity only: no object of this id is written
  std::string attrs;
  if (options.attrs) {
    RFOS_ASSIGN_OR_RETURN(attrs, options.attrs(bytes.size()));
  }
  RFOS_RETURN_IF_ERROR(lock_swap(record, data));
  auto old = c_.get_value(record, kMeta, kObject);
  Status s = old.is_ok() || old.status().code() == StatusCode::kNotFound ? Status::ok() : old.status();
  bool legacy = false;
  if (s.is_ok() && !old.is_ok()) {  // a new name (listings map records to names by "name"), or the older layout
    auto size = c_.get_value(record, kMeta, kLegacySize);
    legacy = size.is_ok();
    if (!legacy && size.status().code() != StatusCode::kNotFound) s = size.status();
    if (s.is_ok()) s = c_.put_value(record, kMeta, kName, name);
  }
  const uint64_t mtime = now_ms();
  if (s.is_ok()) s = c_.put_value(record, kMeta, kObject, encode_inline(data, bytes, mtime, attrs));
  if (!s.is_ok()) {
    (void)c_.punch_akey(record, kMeta, kSwapLock);
    return s;
  }
  return after_swap(record, name, data, false, old, encode_object(data, bytes.size(), mtime, false, attrs), legacy, {});
}

Status NamedObjects::after_swap(const ObjectId& record, std::string_view name, const ObjectId& data, bool composite,
                                const Result<std::string>& old, std::string_view listed_value, bool legacy,
                                std::string_view pending) {
  using Update = Container::KeyUpdate;
  // The data the swap replaced (an object kept in its record has none), with the mark that it is to go.
  std::optional<DataRef> prev;
  if (old.is_ok())
    if (auto p = decode_object(*old); p.is_ok() && p->oid != data && !p->inlined) prev = *p;
  const std::string was = prev ? std::string(kPendingPrefix) + encode_id(prev->oid) : std::string();
  // Two batches, each one round trip, what is in one landing in any order: first the listing (listed from here on;
  // a put that dies before leaves it unlisted or listed as it was), the mark on the replaced data ("0", or "r"
  // for an object of parts: where its removal fails or dies, the next put or remove of the name clears it) and
  // the end of this put's own pending entry (the record names its data now; it goes before the lock, since the
  // next put to take the lock marks this data under the same key); then, once the replaced data is gone, the
  // lock and the mark.
  std::vector<Update> first = {{Update::Kind::kPut, index_object(), name, kIndexAkey, listed_value}};
  if (prev) first.push_back({Update::Kind::kPut, record, kMeta, was, prev->composite ? "r" : "0"});
  if (!pending.empty()) first.push_back({Update::Kind::kPunchAkey, record, kMeta, pending, {}});
  const std::vector<Status> firsts = c_.update_keys(first);
  const Status listed = firsts[0];
  Status gone = prev ? firsts[1] : Status::ok();
  Status ended = pending.empty() ? Status::ok() : ignore_not_found(firsts.back());
  bool left_marked = false;  // the replaced data stays, marked, for the next put or remove of the name
  if (prev && gone.is_ok()) {
    std::set<ObjectId> keep;  // parts the new object took over from the old stay
    bool shared_known = true;
    if (composite && prev->composite) {
      auto now = parts_of(data);
      shared_known = now.is_ok();  // where it cannot tell which parts are shared, the old ones stay
      if (now.is_ok())
        for (const Part& p : *now) keep.insert(p.data);
    }
    if (shared_known)
      gone = remove_data(prev->oid, prev->composite, keep);
    else
      left_marked = true;
  }
  std::vector<Update> last = {{Update::Kind::kPunchAkey, record, kMeta, kSwapLock, {}}};
  if (prev && gone.is_ok() && !left_marked) last.push_back({Update::Kind::kPunchAkey, record, kMeta, was, {}});
  for (const Status& s : c_.update_keys(last))
    if (ended.is_ok()) ended = ignore_not_found(s);
  RFOS_RETURN_IF_ERROR(gone);
  RFOS_RETURN_IF_ERROR(ended);
  // An object of the older layout kept its data under the record: every dkey but meta.
  if (legacy) {
    RFOS_ASSIGN_OR_RETURN(std::vector<std::string> dkeys, c_.list_dkeys(record));
    for (const std::string& d : dkeys)
      if (d != kMeta) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_dkey(record, d)));
    RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, kLegacySize)));
  }
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
    st.mtime_ms = o.mtime_ms;
    st.composite = o.composite;
    st.attrs = std::move(o.attrs);
    st.inlined = o.inlined;
    st.bytes = std::move(o.bytes);
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
  if (st.composite || st.inlined) return read_range(st, 0, st.size, sink, progress);
  return read_file_object(c_, st.data, 0, st.size, sink, depth_, progress, false);
}

Status NamedObjects::read_range(const ObjectStat& st, uint64_t offset, uint64_t length, const Sink& sink,
                                const Progress& progress) {
  return read_range_pieces(
      st, offset, length, [&](StreamPiece piece) { return sink(piece.bytes()); }, progress);
}

Status NamedObjects::read_range_pieces(const ObjectStat& st, uint64_t offset, uint64_t length, const PieceSink& sink,
                                       const Progress& progress) {
  if (st.inlined) {
    // A sealing handle keeps no bytes in records, so bytes there are not its own: anyone who may write the
    // container could have put them, and they are not authenticated.
    if (c_.sealed())
      return error(StatusCode::kChecksumMismatch,
                   "the object's bytes are in its record, which a sealing handle never writes: not its own");
    RFOS_RETURN_IF_ERROR(inline_range(st, offset, length));
    if (length > 0) RFOS_RETURN_IF_ERROR(sink(StreamPiece::copy_of(std::string_view(st.bytes).substr(offset, length))));
    if (progress) progress(length);
    return Status::ok();
  }
  return each_piece(st, offset, length, [&](const ObjectId& data, uint64_t from, uint64_t len, uint64_t done) {
    return read_file_range(
        c_, data, 0, from, len, sink, depth_,
        [&](uint64_t b) {
          if (progress) progress(done + b);
        },
        false);
  });
}

Status NamedObjects::each_piece(const ObjectStat& st, uint64_t offset, uint64_t length,
                                const std::function<Status(const ObjectId&, uint64_t, uint64_t, uint64_t)>& piece) {
  if (st.legacy) return error(StatusCode::kNotSupported, "a range of an object of the older layout");
  if (offset > st.size || length > st.size - offset) return error(StatusCode::kInvalidArgument, "a range past the end");
  if (!st.composite) return piece(st.data, offset, length, 0);
  RFOS_ASSIGN_OR_RETURN(std::vector<Part> parts, parts_of(st.data));
  uint64_t part_start = 0, done = 0;
  for (const Part& p : parts) {
    const uint64_t end = offset + length, part_end = part_start + p.size;
    if (part_end > offset && part_start < end) {
      const uint64_t from = std::max(offset, part_start), to = std::min(end, part_end);
      RFOS_RETURN_IF_ERROR(piece(p.data, from - part_start, to - from, done));
      done += to - from;
    }
    part_start = part_end;
  }
  if (done != length) return error(StatusCode::kCorruption, "an object's parts do not add up to its size");
  return Status::ok();
}

Result<ObjectId> NamedObjects::put_granted(std::string_view name, uint64_t size, const GrantRef& grant,
                                           const PutOptions& options) {
  const ObjectId data = fresh_data_object();
  RFOS_RETURN_IF_ERROR(store(name, data, false, options, [&](uint64_t* stored) {
    *stored = size;
    return write_granted(data, size, grant);
  }));
  return data;
}

Status NamedObjects::write_granted(const ObjectId& data, uint64_t size, const GrantRef& grant) {
  return transfer_file_range(c_, data, 0, 0, size, true, grant, 0, depth_);
}

Status NamedObjects::read_granted(const ObjectStat& st, uint64_t offset, uint64_t length, const GrantRef& grant,
                                  uint64_t at) {
  if (st.inlined)
    return error(StatusCode::kNotSupported, "an object of " + std::to_string(kInlineBytes) +
                                                " bytes or less is kept in its record, not in an object the targets "
                                                "move by RDMA");
  return each_piece(st, offset, length, [&](const ObjectId& data, uint64_t from, uint64_t len, uint64_t done) {
    return transfer_file_range(c_, data, 0, from, len, false, grant, at + done, depth_);
  });
}

Status NamedObjects::remove(std::string_view name) {
  const ObjectId record = record_of(name);
  auto st = stat(name);
  if (!st.is_ok() && st.status().code() != StatusCode::kNotFound) return st.status();
  if (!st.is_ok()) {  // no object: a dead put's leftovers are still cleared
    auto akeys = c_.list_akeys(record, kMeta);
    if (!akeys.is_ok() || akeys->empty()) return st.status();
  }
  // Unlisted first: a remove that dies half-way leaves an object that is not listed, never a listed one that
  // is gone. (A name with a NUL byte, put before names were checked, is in no index this version reads.)
  if (name.find('\0') == std::string_view::npos)
    RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_dkey(index_object(), name)));
  RFOS_RETURN_IF_ERROR(clear_pending(record, UINT64_MAX, false).status());
  if (st.is_ok() && !st->legacy && !st->inlined) RFOS_RETURN_IF_ERROR(remove_data(st->data, st->composite, {}));
  return ignore_not_found(c_.punch_object(record));
}

Result<NamedObjects::Listing> NamedObjects::list() {
  RFOS_ASSIGN_OR_RETURN(std::vector<ObjectId> oids, c_.list_objects());
  Listing out;
  std::set<ObjectId>& referenced = out.owned;
  std::set<ObjectId> unnamed;
  referenced.insert(index_object());
  referenced.insert(legacy_index_object());
  referenced.insert(uploads_index());
  RFOS_ASSIGN_OR_RETURN(out.uploads, uploads(""));
  for (const Upload& u : out.uploads) {
    referenced.insert(upload_object(u.id));
    RFOS_ASSIGN_OR_RETURN(auto staged, parts(u.id));
    for (const auto& [n, p] : staged) referenced.insert(p.part.data);
    RFOS_ASSIGN_OR_RETURN(std::vector<ObjectId> writing, parts_in_writing(u.id));
    referenced.insert(writing.begin(), writing.end());
  }
  for (const ObjectId& oid : oids) {
    if (oid == index_object() || oid == legacy_index_object() || oid == uploads_index()) continue;
    auto name = c_.get_value(oid, kMeta, kName);
    if (!name.is_ok()) {
      if (name.status().code() != StatusCode::kNotFound) return name.status();
      unnamed.insert(oid);
      continue;
    }
    referenced.insert(oid);
    // What a name references is what `owned` protects (fs check --repair punches unowned file data), so a
    // listing that could not read a reference fails rather than leave it out.
    auto akeys = c_.list_akeys(oid, kMeta);
    if (!akeys.is_ok() && akeys.status().code() != StatusCode::kNotFound) return akeys.status();
    if (akeys.is_ok())
      for (const std::string& a : *akeys) {
        std::string id = a.starts_with(kPendingPrefix) ? a.substr(kPendingPrefix.size()) : std::string();
        if (a == kPending) {
          auto v = c_.get_value(oid, kMeta, a);
          if (!v.is_ok() && v.status().code() != StatusCode::kNotFound) return v.status();
          if (v.is_ok()) id = *v;
        }
        if (auto p = decode_id(id); p.is_ok()) referenced.insert(*p);
      }
    auto st = stat_of(oid, *name);
    if (st.status().code() == StatusCode::kNotFound) continue;  // a name whose first put is still under way
    RFOS_RETURN_IF_ERROR(st.status());
    referenced.insert(st->data);
    if (st->composite) {
      auto parts = parts_of(st->data);
      if (!parts.is_ok() && parts.status().code() != StatusCode::kNotFound) return parts.status();
      if (parts.is_ok())
        for (const Part& p : *parts) referenced.insert(p.data);
    }
    out.named.push_back(std::move(st).value());
  }
  for (const ObjectId& oid : unnamed)
    if (!referenced.count(oid)) out.other.push_back(oid);
  std::sort(out.named.begin(), out.named.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace rfos::client

namespace rfos::client {

Result<NamedObjects::IndexPage> NamedObjects::list_index(std::string_view prefix, std::string_view from, size_t max) {
  if (!index_settled_) {
    Status settled = settle_index();
    // A read-only (or snapshot) handle may not move an earlier index.
    if (settled.code() == StatusCode::kPermissionDenied || settled.code() == StatusCode::kInvalidArgument)
      return merged_index_page(prefix, from, max);
    RFOS_RETURN_IF_ERROR(settled);
    index_settled_ = true;
  }
  return index_page(prefix, from, max);
}

Status NamedObjects::settle_index() {
  RFOS_ASSIGN_OR_RETURN(bool left, legacy_index_left());
  return left ? move_legacy_index() : Status::ok();
}

Result<NamedObjects::IndexPage> NamedObjects::index_page(std::string_view prefix, std::string_view from, size_t max) {
  const ObjectId index = index_object();
  const uint32_t target = c_.target_of(index, {});
  IndexPage out;
  std::string anchor(from);
  while (out.names.size() < max) {
    const size_t want = std::min<size_t>(max - out.names.size(), 1024);
    RFOS_ASSIGN_OR_RETURN(KeyPage page, c_.list_dkeys(index, target, anchor, want, kIndexAkey, prefix));
    for (size_t i = 0; i < page.keys.size(); ++i) {
      if (page.values[i].empty()) continue;
      RFOS_ASSIGN_OR_RETURN(DataRef o, decode_object(page.values[i]));
      out.names.push_back(
          ObjectStat{page.keys[i], o.size, o.oid, false, o.mtime_ms, std::move(o.attrs), o.composite, false, {}});
    }
    if (page.done) {
      out.done = true;
      return out;
    }
    if (page.anchor == anchor) return error(StatusCode::kInternal, "index listing made no progress");
    anchor = std::move(page.anchor);
  }
  out.next = std::move(anchor);
  return out;
}

Result<bool> NamedObjects::legacy_index_left() {
  const ObjectId old = legacy_index_object();
  RFOS_ASSIGN_OR_RETURN(KeyPage page, c_.list_dkeys(old, c_.target_of(old, {}), {}, 1));
  return !page.keys.empty();
}

Status NamedObjects::each_legacy_entry(std::string_view prefix, const std::function<Status(const ObjectStat&)>& f) {
  const ObjectId old = legacy_index_object();
  const uint32_t target = c_.target_of(old, {});
  std::string anchor;
  for (bool done = false; !done;) {
    RFOS_ASSIGN_OR_RETURN(KeyPage page, c_.list_dkeys(old, target, anchor, 1024, {}, prefix));
    if (!page.done && page.anchor == anchor) return error(StatusCode::kInternal, "index listing made no progress");
    for (const std::string& name : page.keys) {
      // The record decides: a name removed since (a remove no longer looks at this index) is left out, as is
      // one whose record is unreadable (rfos fs check reports it) and one with a NUL byte, which the index cannot
      // hold (such names are no longer taken).
      if (name.find('\0') != std::string::npos) continue;
      auto st = stat(name);
      const StatusCode code = st.status().code();
      if (code == StatusCode::kNotFound || code == StatusCode::kCorruption || (st.is_ok() && st->legacy)) continue;
      RFOS_RETURN_IF_ERROR(st.status());
      RFOS_RETURN_IF_ERROR(f(*st));
    }
    anchor = std::move(page.anchor);
    done = page.done;
  }
  return Status::ok();
}

Status NamedObjects::move_legacy_index() {
  RFOS_RETURN_IF_ERROR(each_legacy_entry({}, [&](const ObjectStat& st) {
    // Where a put listed the name in the new index already, its entry stays.
    Status s = c_.insert_value(index_object(), st.name, kIndexAkey, listed_value(st));
    if (s.code() == StatusCode::kAlreadyExists) return Status::ok();
    RFOS_RETURN_IF_ERROR(s);
    // A remove between the stat and the insert found no entry to drop: the entry goes again.
    auto again = stat(st.name);
    if (again.status().code() != StatusCode::kNotFound) return again.status();
    return ignore_not_found(c_.punch_dkey(index_object(), st.name));
  }));
  return ignore_not_found(c_.punch_object(legacy_index_object()));
}

Result<NamedObjects::IndexPage> NamedObjects::merged_index_page(std::string_view prefix, std::string_view from,
                                                                size_t max) {
  // Every name with the prefix in both indexes (the newer one's entry where both have one), in byte order.
  std::map<std::string, ObjectStat> all;
  RFOS_RETURN_IF_ERROR(each_legacy_entry(prefix, [&](const ObjectStat& st) {
    all.emplace(st.name, st);
    return Status::ok();
  }));
  for (std::string at(from);;) {
    RFOS_ASSIGN_OR_RETURN(IndexPage page, index_page(prefix, at, 1024));
    for (ObjectStat& st : page.names) all.insert_or_assign(st.name, std::move(st));
    if (page.done) break;
    at = std::move(page.next);
  }
  IndexPage out;
  for (auto it = all.lower_bound(std::string(from)); it != all.end(); ++it) {
    if (out.names.size() == max) {
      out.next = it->first;
      return out;
    }
    out.names.push_back(std::move(it->second));
  }
  out.done = true;
  return out;
}

}  // namespace rfos::client

namespace rfos::client {

namespace {

constexpr std::string_view kUpload = "u";         // an upload's dkey: its name, attributes and start
constexpr std::string_view kUploadParts = "p";    // ... and its parts: "%05u" of the number -> "<id> <size> <etag>"
constexpr std::string_view kUploadWriting = "w";  // ... and parts being written: the data object's id -> ""

std::string part_key(uint32_t n) {
  char b[16];
  std::snprintf(b, sizeof(b), "%05u", n);
  return b;
}

// A part's record, "<id> <size> <etag>": its data object, size and etag.
Result<std::pair<NamedObjects::Part, std::string>> decode_part(std::string_view v) {
  size_t sp = v.size() > 33 ? v.find(' ', 33) : std::string_view::npos;
  if (sp == std::string_view::npos) return error(StatusCode::kCorruption, "an upload's part record is malformed");
  RFOS_ASSIGN_OR_RETURN(DataRef r, decode_object(v.substr(0, sp)));
  return std::pair<NamedObjects::Part, std::string>(NamedObjects::Part{r.oid, r.size}, std::string(v.substr(sp + 1)));
}

}  // namespace

ObjectId NamedObjects::upload_object(std::string_view id) {
  std::string s = "rfos-upload:" + std::string(id);
  return placement::with_class(
      ObjectId{placement::mix(placement::fnv1a(s)), placement::mix(placement::fnv1a(s, 0x5bd1e9955bd1e995ull))},
      placement::ObjectClass::kS1);
}

ObjectId NamedObjects::uploads_index() {
  return placement::with_class(ObjectId{0, 0x72667375706c6473ull}, placement::ObjectClass::kS1);  // "rfsuplds"
}

Status NamedObjects::begin_upload(const Upload& u) {
  if (u.id.empty()) return error(StatusCode::kInvalidArgument, "an upload needs an id");
  RFOS_RETURN_IF_ERROR(check_name(u.name));
  const ObjectId o = upload_object(u.id);
  if (!u.attrs.empty()) RFOS_RETURN_IF_ERROR(c_.put_value(o, kUpload, "attrs", u.attrs));
  RFOS_RETURN_IF_ERROR(c_.put_value(o, kUpload, "started", std::to_string(u.started_ms)));
  RFOS_RETURN_IF_ERROR(c_.put_value(uploads_index(), u.id, "k", u.name));
  // The name last: an upload is there once it has one.
  return c_.put_value(o, kUpload, kName, u.name);
}

Result<NamedObjects::Upload> NamedObjects::upload(std::string_view id) {
  const ObjectId o = upload_object(id);
  Upload u;
  u.id = id;
  RFOS_ASSIGN_OR_RETURN(u.name, c_.get_value(o, kUpload, kName));
  auto attrs = c_.get_value(o, kUpload, "attrs");
  if (attrs.is_ok()) u.attrs = std::move(attrs).value();
  auto started = c_.get_value(o, kUpload, "started");
  if (started.is_ok()) u.started_ms = std::strtoull(started->c_str(), nullptr, 10);
  return u;
}

Status NamedObjects::begin_part(std::string_view id, const ObjectId& data) {
  return c_.put_value(upload_object(id), kUploadWriting, encode_id(data), "1");
}

Status NamedObjects::abandon_part(std::string_view id, const ObjectId& data) {
  RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(data)));
  return ignore_not_found(c_.punch_akey(upload_object(id), kUploadWriting, encode_id(data)));
}

Status NamedObjects::add_part(std::string_view id, uint32_t number, const Part& p, std::string_view etag) {
  const ObjectId o = upload_object(id);
  auto old = c_.get_value(o, kUploadParts, part_key(number));
  RFOS_RETURN_IF_ERROR(c_.put_value(o, kUploadParts, part_key(number),
                                    encode_id(p.data) + " " + std::to_string(p.size) + " " + std::string(etag)));
  RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(o, kUploadWriting, encode_id(p.data))));
  if (old.is_ok())
    if (auto prev = decode_part(*old); prev.is_ok() && prev->first.data != p.data)
      RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(prev->first.data)));
  return Status::ok();
}

Result<std::vector<ObjectId>> NamedObjects::parts_in_writing(std::string_view id) {
  std::vector<ObjectId> out;
  auto keys = c_.list_akeys(upload_object(id), kUploadWriting);
  if (keys.status().code() == StatusCode::kNotFound) return out;
  RFOS_RETURN_IF_ERROR(keys.status());
  for (const std::string& k : *keys)
    if (auto oid = decode_id(k); oid.is_ok()) out.push_back(*oid);
  return out;
}

Result<std::map<uint32_t, NamedObjects::StagedPart>> NamedObjects::parts(std::string_view id) {
  std::map<uint32_t, StagedPart> out;
  const ObjectId o = upload_object(id);
  auto keys = c_.list_akeys(o, kUploadParts);
  if (keys.status().code() == StatusCode::kNotFound) return out;
  RFOS_RETURN_IF_ERROR(keys.status());
  for (const std::string& k : *keys) {
    auto v = c_.get_value(o, kUploadParts, k);
    if (v.status().code() == StatusCode::kNotFound) continue;
    RFOS_RETURN_IF_ERROR(v.status());
    if (k.empty() || k.size() > 5 || k.find_first_not_of("0123456789") != std::string::npos)
      return error(StatusCode::kCorruption, "an upload's part record is malformed");
    RFOS_ASSIGN_OR_RETURN(auto part, decode_part(*v));
    out[static_cast<uint32_t>(std::stoul(k))] = StagedPart{part.first, std::move(part.second)};
  }
  return out;
}

Status NamedObjects::drop_upload(std::string_view id, const std::set<ObjectId>& keep) {
  RFOS_ASSIGN_OR_RETURN(auto staged, parts(id));
  for (const auto& [n, p] : staged)
    if (!keep.count(p.part.data)) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(p.part.data)));
  RFOS_ASSIGN_OR_RETURN(std::vector<ObjectId> writing, parts_in_writing(id));
  for (const ObjectId& w : writing) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(w)));
  RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(upload_object(id))));
  return ignore_not_found(c_.punch_dkey(uploads_index(), id));
}

Result<std::vector<NamedObjects::Upload>> NamedObjects::uploads(std::string_view prefix) {
  std::vector<Upload> out;
  const ObjectId idx = uploads_index();
  std::string anchor;
  for (bool done = false; !done;) {
    RFOS_ASSIGN_OR_RETURN(KeyPage page, c_.list_dkeys(idx, c_.target_of(idx, {}), anchor, 1024, "k"));
    if (!page.done && page.anchor == anchor) return error(StatusCode::kInternal, "upload listing made no progress");
    for (size_t i = 0; i < page.keys.size(); ++i)
      if (!page.values[i].empty() && page.values[i].starts_with(prefix)) {
        Upload u;
        u.id = page.keys[i];
        u.name = page.values[i];
        out.push_back(std::move(u));
      }
    anchor = std::move(page.anchor);
    done = page.done;
  }
  std::sort(out.begin(), out.end(),
            [](const Upload& a, const Upload& b) { return std::tie(a.name, a.id) < std::tie(b.name, b.id); });
  return out;
}

}  // namespace rfos::client
