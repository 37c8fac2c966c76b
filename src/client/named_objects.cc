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
#include "placement/placement.h"

namespace rfos::client {

namespace {

constexpr std::string_view kMeta = "meta";
constexpr std::string_view kName = "name";
constexpr std::string_view kObject = "object";    // "<id> <size>": the data object and its size
constexpr std::string_view kPending = "pending";  // "<id>": the data object a put is writing
constexpr std::string_view kLegacySize = "size";  // the older layout's size

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

Result<std::pair<ObjectId, uint64_t>> decode_object(std::string_view s) {
  size_t space = s.find(' ');
  if (space == std::string_view::npos || space + 1 >= s.size() ||
      s.find_first_not_of("0123456789", space + 1) != std::string_view::npos)
    return error(StatusCode::kCorruption, "a name record is malformed");
  RFOS_ASSIGN_OR_RETURN(ObjectId oid, decode_id(s.substr(0, space)));
  return std::pair<ObjectId, uint64_t>(oid, std::stoull(std::string(s.substr(space + 1))));
}

ObjectId fresh_data_object() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return placement::with_class(ObjectId{rng(), rng()}, placement::ObjectClass::kSX);
}

// The bytes at `offset` one I/O may move: within its chunk and within one engine piece.
uint64_t piece_at(uint64_t chunk, uint64_t offset, uint64_t left) {
  return layout::piece_length(chunk, offset, layout::piece_length(kMaxIoBytes, offset, left));
}

Status ignore_not_found(Status s) { return s.code() == StatusCode::kNotFound ? Status::ok() : s; }

}  // namespace

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

Status NamedObjects::put(std::string_view name, const Source& source, const Progress& progress) {
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
  if (s.is_ok()) s = write_data(data, source, progress, &size);
  // The swap: from here on readers see the new object.
  if (s.is_ok()) s = c_.put_value(record, kMeta, kObject, encode_id(data) + " " + std::to_string(size));
  if (!s.is_ok()) {
    // What it wrote goes (where even that fails, the next put or remove clears it), and a name that had no
    // object before has none after.
    if (clear_pending(record).is_ok() && !old.is_ok() && !legacy) (void)c_.punch_object(record);
    return s;
  }
  // The old data goes. Where that fails, it is left pending, for the next put or remove of the name to clear.
  if (old.is_ok()) {
    auto prev = decode_object(*old);
    if (prev.is_ok()) {
      RFOS_RETURN_IF_ERROR(c_.put_value(record, kMeta, kPending, encode_id(prev->first)));
      RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(prev->first)));
    }
  }
  // An object of the older layout kept its data under the record: every dkey but meta.
  if (legacy) {
    RFOS_ASSIGN_OR_RETURN(std::vector<std::string> dkeys, c_.list_dkeys(record));
    for (const std::string& d : dkeys)
      if (d != kMeta) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_dkey(record, d)));
    RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_akey(record, kMeta, kLegacySize)));
  }
  return ignore_not_found(c_.punch_akey(record, kMeta, kPending));
}

// The source is read on a thread of its own into `depth_` buffers, while this thread keeps the filled ones
// moving: the next input is read while earlier pieces are on their way.
Status NamedObjects::write_data(const ObjectId& data, const Source& source, const Progress& progress, uint64_t* size) {
  const uint64_t chunk = layout::chunk_bytes(c_.session().cont.props.chunk_bytes);
  struct Filled {
    size_t buf = 0;
    size_t len = 0;
  };
  std::vector<std::vector<uint8_t>> bufs(depth_, std::vector<uint8_t>(kMaxIoBytes));
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> empty;
  std::deque<Filled> filled;
  bool ended = false, stop = false;
  Status read_status;
  for (size_t i = 0; i < bufs.size(); ++i) empty.push_back(i);
  // Each buffer is filled to the next piece boundary (or the end), so that every one is one I/O.
  std::thread reader([&] {
    uint64_t at = 0;
    for (;;) {
      size_t b;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !empty.empty(); });
        if (stop) return;
        b = empty.front();
        empty.pop_front();
      }
      size_t want = static_cast<size_t>(piece_at(chunk, at, kMaxIoBytes)), got = 0;
      Status st;
      while (got < want) {
        auto n = source({bufs[b].data() + got, want - got});
        if (!n.is_ok()) {
          st = n.status();
          break;
        }
        if (*n == 0) break;
        got += *n;
      }
      at += got;
      std::lock_guard lock(mu);
      if (got) filled.push_back({b, got});
      if (!st.is_ok() || got < want) {
        read_status = st;
        ended = true;
        cv.notify_all();
        return;
      }
      cv.notify_all();
    }
  });
  std::map<Ticket, Filled> in_flight;
  uint64_t offset = 0, done = 0;
  Status s;
  for (;;) {
    std::vector<Filled> ready;
    bool finished = false;
    {
      std::unique_lock lock(mu);
      if (in_flight.empty()) cv.wait(lock, [&] { return ended || !filled.empty(); });
      ready.assign(filled.begin(), filled.end());
      filled.clear();
      finished = ended && ready.empty();
    }
    for (const Filled& f : ready) {
      if (!s.is_ok()) break;
      auto t = c_.submit_write(data, layout::chunk_key(offset / chunk), layout::kDataAkey, offset,
                               {bufs[f.buf].data(), f.len});
      if (!t.is_ok()) {
        s = t.status();
        break;
      }
      in_flight[*t] = f;
      offset += f.len;
    }
    if (!s.is_ok() || (finished && in_flight.empty())) break;
    for (const Completion& comp : c_.poll(depth_, in_flight.empty() ? 0 : 1)) {
      auto it = in_flight.find(comp.ticket);
      if (it == in_flight.end()) continue;
      if (!comp.status.is_ok() && s.is_ok()) s = comp.status;
      done += it->second.len;
      std::lock_guard lock(mu);
      empty.push_back(it->second.buf);
      in_flight.erase(it);
      cv.notify_all();
    }
    if (!s.is_ok()) break;
    if (progress) progress(done);
  }
  {
    std::lock_guard lock(mu);
    stop = true;
    cv.notify_all();
  }
  reader.join();
  while (!in_flight.empty()) {  // the buffers must outlive what is still moving them
    for (const Completion& comp : c_.poll(depth_, 100)) in_flight.erase(comp.ticket);
  }
  if (s.is_ok()) s = read_status;
  if (s.is_ok() && progress) progress(done);
  *size = offset;
  return s;
}

Result<ObjectStat> NamedObjects::stat(std::string_view name) { return stat_of(record_of(name), name); }

Result<ObjectStat> NamedObjects::stat_of(const ObjectId& record, std::string_view name) {
  ObjectStat st;
  st.name = name;
  auto object = c_.get_value(record, kMeta, kObject);
  if (object.is_ok()) {
    RFOS_ASSIGN_OR_RETURN(auto o, decode_object(*object));
    st.data = o.first;
    st.size = o.second;
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
  std::vector<std::vector<uint8_t>> bufs(depth_, std::vector<uint8_t>(kMaxIoBytes));
  std::vector<size_t> free_bufs;
  for (size_t i = 0; i < bufs.size(); ++i) free_bufs.push_back(i);
  struct Piece {
    size_t buf = 0;
    size_t len = 0;
    bool arrived = false;
  };
  std::map<uint64_t, Piece> pieces;  // by offset: in flight or arrived, not yet handed out
  std::map<Ticket, uint64_t> tickets;
  uint64_t next = 0, handed = 0;
  Status s;
  while (s.is_ok() && handed < st.size) {
    while (!free_bufs.empty() && next < st.size) {
      size_t len = static_cast<size_t>(piece_at(chunk, next, st.size - next));
      size_t b = free_bufs.back();
      auto t = c_.submit_read(st.data, layout::chunk_key(next / chunk), layout::kDataAkey, next, {bufs[b].data(), len});
      if (!t.is_ok()) {
        s = t.status();
        break;
      }
      free_bufs.pop_back();
      tickets[*t] = next;
      pieces[next] = {b, len, false};
      next += len;
    }
    if (!s.is_ok()) break;
    for (const Completion& comp : c_.poll(depth_, 100)) {
      auto it = tickets.find(comp.ticket);
      if (it == tickets.end()) continue;
      if (!comp.status.is_ok() && s.is_ok()) s = comp.status;
      pieces[it->second].arrived = true;
      tickets.erase(it);
    }
    while (s.is_ok() && !pieces.empty() && pieces.begin()->first == handed && pieces.begin()->second.arrived) {
      Piece p = pieces.begin()->second;
      pieces.erase(pieces.begin());
      s = sink({bufs[p.buf].data(), p.len});
      handed += p.len;
      free_bufs.push_back(p.buf);
    }
    if (progress) progress(handed);
  }
  while (!tickets.empty()) {  // the buffers must outlive what is still moving into them
    for (const Completion& comp : c_.poll(depth_, 100)) tickets.erase(comp.ticket);
  }
  return s;
}

Status NamedObjects::remove(std::string_view name) {
  const ObjectId record = record_of(name);
  auto st = stat(name);
  auto pending = c_.get_value(record, kMeta, kPending);
  if (!st.is_ok() && st.status().code() != StatusCode::kNotFound) return st.status();
  if (!st.is_ok() && !pending.is_ok()) return st.status();
  RFOS_RETURN_IF_ERROR(clear_pending(record));
  if (st.is_ok() && !st->legacy) RFOS_RETURN_IF_ERROR(ignore_not_found(c_.punch_object(st->data)));
  return ignore_not_found(c_.punch_object(record));
}

Result<NamedObjects::Listing> NamedObjects::list() {
  RFOS_ASSIGN_OR_RETURN(std::vector<ObjectId> oids, c_.list_objects());
  Listing out;
  std::set<ObjectId> referenced, unnamed;
  for (const ObjectId& oid : oids) {
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
