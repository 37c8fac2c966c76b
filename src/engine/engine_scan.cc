// Engine: index scans -- visibility, enumeration, array size, aggregation and the consistency check.
#include <algorithm>
#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"
#include "engine/engine_impl.h"
#include "engine/extent_map.h"

namespace rfos::engine {

using namespace index;

Version Engine::Impl::punch_floor(rocksdb::Iterator* it, const std::string& level_prefix, Epoch epoch) {
  std::string seek = level_prefix;
  seek.push_back(kPunchTag);
  size_t want = seek.size() + kVersionBytes;
  append_version(&seek, epoch, UINT64_MAX);
  it->Seek(seek);
  if (!it->Valid() || it->key().size() != want || !starts_with(it->key(), level_prefix) ||
      it->key()[level_prefix.size()] != kPunchTag)
    return {};
  const char* v = it->key().data() + level_prefix.size() + 1;
  return {~get_be64(v), ~get_be64(v + 8)};
}

namespace {
// akey_floor, given the object's own floor.
Version below_object_floor(rocksdb::Iterator* it, const KeyRef& key, Epoch epoch, std::string p, Version f) {
  append_dkey(&p, key.dkey);
  f = std::max(f, Engine::Impl::punch_floor(it, p, epoch));
  append_akey(&p, key.akey);
  return std::max(f, Engine::Impl::punch_floor(it, p, epoch));
}
}  // namespace

Version Engine::Impl::read_floor(const index::ContRecord& rec, rocksdb::Iterator* it, const KeyRef& key, Epoch epoch,
                                 ReadView::State* view) const {
  if (!may_have_punches(rec, key.cont, key.oid, view)) return {};
  if (view == nullptr) return akey_floor(it, key, epoch);
  std::string p = object_prefix(key.cont, key.oid);
  auto [o, fresh] = view->object_floors.try_emplace({key.cont, key.oid, epoch}, Version{});
  if (fresh) o->second = punch_floor(it, p, epoch);
  return below_object_floor(it, key, epoch, std::move(p), o->second);
}

Version Engine::Impl::akey_floor(rocksdb::Iterator* it, const KeyRef& key, Epoch epoch) {
  std::string p = object_prefix(key.cont, key.oid);
  Version f = punch_floor(it, p, epoch);
  return below_object_floor(it, key, epoch, std::move(p), f);
}

bool Engine::Impl::any_visible(rocksdb::Iterator* it, const std::string& prefix, Epoch epoch, Version floor) {
  it->Seek(prefix);
  return any_visible_here(it, prefix, epoch, floor);
}

namespace {
// Moves `it` (standing at or before `target`) forward to the first key at or past `target` with at most `steps`
// Next()s: every key stepped over is below the target, so that is where a seek lands. False when the steps did
// not get there (the caller seeks). A seek costs as much as dozens of steps: it searches the memtable and every
// table's index from the top.
bool step_to(rocksdb::Iterator* it, const rocksdb::Slice& target, int steps) {
  for (int i = 0;; ++i) {
    if (!it->Valid() || it->key().compare(target) >= 0) return true;
    if (i == steps) return false;
    it->Next();
  }
}
}  // namespace

void Engine::Impl::skip_past(rocksdb::Iterator* it, const std::string& prefix) {
  if (!it->Valid() || !starts_with(it->key(), prefix)) return;
  std::string next = prefix_successor(prefix);
  if (!step_to(it, next, 16)) it->Seek(next);
}

rocksdb::Iterator* Engine::Impl::read_iterator(ReadView::State* view, std::unique_ptr<rocksdb::Iterator>* own) const {
  if (view) return view->it.get();
  own->reset(db->NewIterator(rocksdb::ReadOptions()));
  return own->get();
}

bool Engine::Impl::any_visible_here(rocksdb::Iterator* it, const std::string& prefix, Epoch epoch, Version floor) {
  // Records come in key order: within each level its punches first (newest first), then what is below it.
  // Floors are tracked per level and reset when the scan enters a new dkey or akey.
  Version floors[3] = {floor, floor, floor};
  std::string cur_dkey, cur_akey;
  for (; it->Valid() && starts_with(it->key(), prefix); it->Next()) {
    ObjectKey k;
    if (!parse_object_key(it->key().ToStringView(), &k)) continue;
    if (k.level >= 1 && k.dkey != cur_dkey) {
      cur_dkey.assign(k.dkey);
      cur_akey.clear();
      floors[1] = floors[0];
      floors[2] = floors[0];
    }
    if (k.level == 2 && k.akey != cur_akey) {
      cur_akey.assign(k.akey);
      floors[2] = floors[1];
    }
    Version v{k.epoch, k.seq};
    if (k.epoch > epoch) continue;
    if (k.kind == kPunchTag) {
      for (int l = k.level; l < 3; ++l) floors[l] = std::max(floors[l], v);
      continue;
    }
    if (v > floors[2]) return true;
  }
  return false;
}

Status Engine::Impl::visible_extents(rocksdb::Iterator* it, const std::string& akey_prefix, Version floor, Epoch epoch,
                                     uint64_t begin, uint64_t end, std::vector<ExtentRef>* out) {
  // Records never cross a grain, so none that overlaps [begin, end) starts before begin's grain.
  std::string seek = akey_prefix;
  append_extent_start(&seek, align_down(begin, kGrainBytes));
  std::string tag_prefix = akey_prefix + kExtentTag;
  out->clear();
  // What the walk stepped over: records that overlap an earlier one, and holes, are what aggregation can take
  // away (records side by side, as small writes over a large file leave, it cannot).
  size_t stepped = 0, removable = 0;
  uint64_t reach = 0;  // the furthest end of the records stepped over so far (they come by start)
  for (it->Seek(seek); it->Valid() && starts_with(it->key(), tag_prefix); it->Next()) {
    ObjectKey k;
    if (!parse_object_key(it->key().ToStringView(), &k)) return error(StatusCode::kCorruption, "malformed extent key");
    if (k.start >= end) break;
    Version v{k.epoch, k.seq};
    if (k.epoch > epoch || v <= floor) continue;
    // Most records before `begin` end before it (small overwrites in a chunk): skip them undecoded.
    uint32_t length = 0;
    uint8_t flags = 0;
    if (!peek_extent_length(it->value().ToStringView(), &length, &flags))
      return error(StatusCode::kCorruption, "malformed extent record at offset " + std::to_string(k.start));
    ++stepped;
    if (k.start < reach || (flags & ExtentRecord::kHole)) ++removable;
    reach = std::max(reach, k.start + length);
    if (k.start + length <= begin) continue;
    ExtentRef ref;
    ref.start = k.start;
    ref.version = v;
    ref.value = it->value().ToString();
    out->push_back(std::move(ref));
  }
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "index read"));
  if (stepped > kPiledUpRecords && removable * 4 > stepped && !piled_up.load(std::memory_order_relaxed))
    piled_up.store(true, std::memory_order_relaxed);
  // Decode only now: rec.inline_data points into value, which must not move any more.
  for (ExtentRef& ref : *out) {
    if (!decode_extent(ref.value, &ref.rec) ||
        ref.start + ref.rec.length > align_down(ref.start, kGrainBytes) + kGrainBytes)
      return error(StatusCode::kCorruption, "malformed extent record at offset " + std::to_string(ref.start));
  }
  std::erase_if(*out, [&](const ExtentRef& r) { return r.start + r.rec.length <= begin; });
  std::sort(out->begin(), out->end(), [](const ExtentRef& x, const ExtentRef& y) { return x.version < y.version; });
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------
// Read views

namespace {

class SteppingIterator final : public rocksdb::Iterator {
 public:
  explicit SteppingIterator(std::unique_ptr<rocksdb::Iterator> base) : base_(std::move(base)) {}
  bool Valid() const override { return base_->Valid(); }
  void SeekToFirst() override { base_->SeekToFirst(); }
  void SeekToLast() override { base_->SeekToLast(); }
  // Where Seek(target) lands, reached by steps when the target lies a few keys ahead in the same object.
  void Seek(const rocksdb::Slice& target) override {
    if (base_->Valid() && same_object(base_->key(), target) && base_->key().compare(target) <= 0 &&
        step_to(base_.get(), target, 8))
      return;
    base_->Seek(target);
  }
  void SeekForPrev(const rocksdb::Slice& target) override { base_->SeekForPrev(target); }
  void Next() override { base_->Next(); }
  void Prev() override { base_->Prev(); }
  rocksdb::Slice key() const override { return base_->key(); }
  rocksdb::Slice value() const override { return base_->value(); }
  rocksdb::Status status() const override { return base_->status(); }

 private:
  static bool same_object(const rocksdb::Slice& a, const rocksdb::Slice& b) {
    return a.size() >= kObjectPrefixBytes && b.size() >= kObjectPrefixBytes && a[0] == kObjTag &&
           std::memcmp(a.data(), b.data(), kObjectPrefixBytes) == 0;
  }
  std::unique_ptr<rocksdb::Iterator> base_;
};

}  // namespace

std::unique_ptr<rocksdb::Iterator> stepping_iterator(std::unique_ptr<rocksdb::Iterator> base) {
  return std::make_unique<SteppingIterator>(std::move(base));
}

ReadView::ReadView() = default;
ReadView::ReadView(ReadView&&) noexcept = default;
ReadView& ReadView::operator=(ReadView&&) noexcept = default;
ReadView::~ReadView() = default;

ReadView Engine::read_view() {
  ReadView v;
  v.state_ = std::make_unique<ReadView::State>();
  v.state_->reclaim = std::shared_lock(impl_->reclaim_mu);
  v.state_->moment = impl_->values.moment();
  v.state_->it = stepping_iterator(std::unique_ptr<rocksdb::Iterator>(impl_->db->NewIterator(rocksdb::ReadOptions())));
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// Enumeration

namespace {

// The single value the iterator stands on, when it is one of akey `akey` (any_visible stopped on it, so it is the
// newest at the epoch above the floors) and passes its checksum.
std::optional<std::string> visible_single(rocksdb::Iterator* it, std::string_view akey) {
  ObjectKey k;
  SingleRecord r;
  if (!parse_object_key(it->key().ToStringView(), &k) || k.level != 2 || k.kind != kSingleTag || k.akey != akey ||
      !decode_single(it->value().ToStringView(), &r) || crc32c(r.data.data(), r.data.size()) != r.csum)
    return std::nullopt;
  return std::string(r.data);
}

// Generic resumable key enumeration below `parent`: keys are the names after `tag`, u16-length-prefixed, or
// NUL-terminated for the dkeys of an object of ordered dkeys. Only names that start with `prefix`. With `values`,
// each name's value of akey `value_akey` where the scan met it first (visible_single).
//
// The anchor's position is the last name given, for names in length order; for ordered dkeys it is where the
// next page starts, inclusive: the last name and a 0x01 byte (the least name after it, as names hold no NUL), or
// any name the caller chooses to start from (past a whole prefix, for a listing that skips one).
Result<std::vector<std::string>> list_names(Engine::Impl* im, const std::string& parent, char tag, Epoch epoch,
                                            Version floor, Anchor* anchor, size_t max, std::string_view prefix = {},
                                            std::string_view value_akey = {},
                                            std::vector<std::optional<std::string>>* values = nullptr) {
  std::vector<std::string> out;
  if (anchor->done || max == 0) return out;
  const bool ordered = tag == kDkeyTag && parent.size() == kObjectPrefixBytes && ordered_object(parent);
  std::unique_ptr<rocksdb::Iterator> it(im->db->NewIterator(rocksdb::ReadOptions()));
  const std::string tag_prefix = parent + tag;
  std::string pos = tag_prefix;
  if (ordered) {
    pos += std::max<std::string_view>(anchor->position, prefix);
  } else if (!anchor->position.empty()) {
    put_be16(&pos, static_cast<uint16_t>(anchor->position.size()));
    pos += anchor->position;
    pos = prefix_successor(pos);
  }
  // One seek for the page: from each name the scan steps on to the next (skip_past), since names lie side by
  // side and a name usually has a few records. A page steps over at most kStepsPerName * max names it does not
  // give (punched, or without the prefix), then ends short of `max` but not done, so no request holds the
  // target's thread for long however many such names lie in the way.
  constexpr size_t kStepsPerName = 64;
  size_t stepped = 0;
  bool short_page = false;
  it->Seek(pos);
  while (out.size() < max) {
    if (!it->Valid() || !starts_with(it->key(), tag_prefix)) break;
    std::string_view k = it->key().ToStringView().substr(tag_prefix.size());
    size_t name_at = 2, len = 0;
    if (ordered) {
      name_at = 0;
      len = k.find('\0');
      if (len == std::string_view::npos) return error(StatusCode::kCorruption, "malformed key");
    } else {
      if (k.size() < 2) return error(StatusCode::kCorruption, "malformed key");
      len = get_be16(k.data());
      if (k.size() < 2 + len) return error(StatusCode::kCorruption, "malformed key");
    }
    std::string name(k.substr(name_at, len));
    std::string child = tag_prefix + std::string(k.substr(0, name_at + len + (ordered ? 1 : 0)));
    // Where the next page starts: after this name.
    const auto resume = [&] { anchor->position = ordered ? name + '\x01' : name; };
    bool given = false;
    if (!name.starts_with(prefix)) {
      if (ordered) {  // past the prefix: nothing after it has it
        anchor->done = true;
        break;
      }
    } else if (Engine::Impl::any_visible_here(it.get(), child, epoch, floor)) {
      // The child's own punch floor is found by any_visible's scan (its punches lead its records).
      resume();
      if (values) values->push_back(visible_single(it.get(), value_akey));
      out.push_back(std::move(name));
      given = true;
    }
    if (!given && ++stepped > kStepsPerName * max) {
      resume();
      short_page = true;
      break;
    }
    Engine::Impl::skip_past(it.get(), child);
  }
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "index scan"));
  if (out.size() < max && !short_page) anchor->done = true;
  return out;
}

}  // namespace

Result<std::vector<ObjectId>> Engine::list_objects(uint32_t cont, Epoch epoch, Anchor* anchor, size_t max) {
  RFOS_RETURN_IF_ERROR(impl_->open_for_read(cont, epoch).status());
  std::vector<ObjectId> out;
  if (anchor->done || max == 0) return out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  std::string prefix = cont_objects_prefix(cont);
  std::string pos = anchor->position.empty() ? prefix : prefix_successor(prefix + anchor->position);
  it->Seek(pos);
  while (out.size() < max) {
    if (!it->Valid() || !starts_with(it->key(), prefix)) break;
    if (it->key().size() < prefix.size() + 16) return error(StatusCode::kCorruption, "malformed object key");
    std::string obj(it->key().data(), prefix.size() + 16);
    if (Impl::any_visible_here(it.get(), obj, epoch, {})) {
      ObjectId oid{get_be64(obj.data() + prefix.size()), get_be64(obj.data() + prefix.size() + 8)};
      out.push_back(oid);
      anchor->position = obj.substr(prefix.size());
    }
    Impl::skip_past(it.get(), obj);
  }
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "index scan"));
  if (out.size() < max) anchor->done = true;
  return out;
}

Result<std::vector<std::string>> Engine::list_dkeys(uint32_t cont, const ObjectId& oid, Epoch epoch, Anchor* anchor,
                                                    size_t max) {
  return list_dkeys(cont, oid, epoch, anchor, max, {}, {}, nullptr);
}

Result<std::vector<std::string>> Engine::list_dkeys(uint32_t cont, const ObjectId& oid, Epoch epoch, Anchor* anchor,
                                                    size_t max, std::string_view prefix, std::string_view value_akey,
                                                    std::vector<std::optional<std::string>>* values) {
  RFOS_RETURN_IF_ERROR(impl_->open_for_read(cont, epoch).status());
  std::string obj = object_prefix(cont, oid);
  Version floor;
  {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
    floor = Impl::punch_floor(it.get(), obj, epoch);
  }
  if (values) values->clear();
  return list_names(impl_.get(), obj, kDkeyTag, epoch, floor, anchor, max, prefix, value_akey, values);
}

Result<std::vector<std::string>> Engine::list_akeys(uint32_t cont, const ObjectId& oid, std::string_view dkey,
                                                    Epoch epoch, Anchor* anchor, size_t max) {
  RFOS_RETURN_IF_ERROR(validate_key({cont, oid, dkey, {}}, false));
  RFOS_RETURN_IF_ERROR(impl_->open_for_read(cont, epoch).status());
  std::string p = object_prefix(cont, oid);
  Version floor;
  {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
    floor = Impl::punch_floor(it.get(), p, epoch);
    append_dkey(&p, dkey);
    floor = std::max(floor, Impl::punch_floor(it.get(), p, epoch));
  }
  return list_names(impl_.get(), p, kAkeyTag, epoch, floor, anchor, max);
}

namespace {

// Visible data segments (holes dropped) of a whole array, coalesced.
Result<std::vector<Extent>> visible_data(Engine::Impl* im, const KeyRef& key, Epoch epoch,
                                         ReadView::State* view = nullptr) {
  RFOS_RETURN_IF_ERROR(validate_key(key, true));
  // The view first, then the container's record (as plan_fetch does).
  std::unique_ptr<rocksdb::Iterator> own;
  rocksdb::Iterator* it = im->read_iterator(view, &own);
  RFOS_ASSIGN_OR_RETURN(index::ContRecord rec, im->open_for_read(key.cont, epoch));
  Version floor = im->read_floor(rec, it, key, epoch, view);
  std::string prefix = akey_prefix(key);
  std::vector<Engine::Impl::ExtentRef> recs;
  RFOS_RETURN_IF_ERROR(im->visible_extents(it, prefix, floor, epoch, 0, kArrayOffsetMax, &recs));
  if (recs.empty()) return error(StatusCode::kNotFound, "no array at this key and epoch");
  uint64_t hi = 0;
  for (const auto& r : recs) hi = std::max(hi, r.start + r.rec.length);
  ExtentMap map(0, hi);
  for (size_t i = 0; i < recs.size(); ++i) {
    bool hole = recs[i].rec.flags & ExtentRecord::kHole;
    map.assign(recs[i].start, recs[i].start + recs[i].rec.length, hole ? -1 : 0);
  }
  std::vector<Extent> out;
  for (const auto& s : map.segments())
    if (s.owner == 0) out.push_back({s.start, s.end - s.start});
  return out;
}

}  // namespace

Result<std::vector<Extent>> Engine::list_extents(const KeyRef& key, Epoch epoch, Anchor* anchor, size_t max) {
  std::vector<Extent> out;
  if (anchor->done || max == 0) return out;
  RFOS_ASSIGN_OR_RETURN(std::vector<Extent> all, visible_data(impl_.get(), key, epoch));
  uint64_t from = 0;
  if (!anchor->position.empty()) {
    if (anchor->position.size() != 8) return error(StatusCode::kInvalidArgument, "malformed extent anchor");
    from = get_be64(anchor->position.data());
  }
  for (const Extent& e : all) {
    if (e.offset + e.length <= from) continue;
    Extent piece = e;
    if (piece.offset < from) {
      piece.length -= from - piece.offset;
      piece.offset = from;
    }
    if (out.size() == max) return out;
    out.push_back(piece);
    anchor->position.clear();
    put_be64(&anchor->position, piece.offset + piece.length);
  }
  anchor->done = true;
  return out;
}

Result<uint64_t> Engine::array_size(const KeyRef& key, Epoch epoch, ReadView* view) {
  Impl& im = *impl_;
  ReadView::State* state = view ? view->state_.get() : nullptr;
  auto size_of = [&]() -> Result<uint64_t> {
    auto data = visible_data(&im, key, epoch, state);
    if (!data.is_ok()) return data.status();
    return data->empty() ? 0 : data->back().offset + data->back().length;
  };
  if (epoch != kEpochLatest) return size_of();
  // At the latest epoch the size may be cached (value_cache.h), as its 8 bytes; visible_data checks the key.
  RFOS_ASSIGN_OR_RETURN(std::string cached,
                        im.read_through({key.cont, key.oid, key.dkey, key.akey, true}, state,
                                        "no array at this key and epoch", [&]() -> Result<std::string> {
                                          RFOS_ASSIGN_OR_RETURN(uint64_t size, size_of());
                                          std::string v;
                                          put_be64(&v, size);
                                          return v;
                                        }));
  return get_be64(cached.data());
}

// ---------------------------------------------------------------------------------------------------------
// Aggregation

// One record of an akey, as aggregation judges it.
struct AggRecord {
  std::string key;
  ObjectKey k;       // views into key
  ExtentRecord ext;  // extents only
  bool keep = false;
};

namespace {

// A hole reads as no record does (zeros, and no part of the array's size): one stays only while some data record
// kept is older than it and overlaps it. Truncates that extend a file, and holes whose data under them went,
// would otherwise stay as long as they are the newest over some byte. Only where the akey keeps some data at
// `upto` (it exists at every epoch readable afterwards, whatever holes go), and only without snapshots to serve
// (the caller's part: each would need a record of its own to show the akey exists there).
void drop_holes_hiding_nothing(std::vector<AggRecord>& recs, Epoch upto) {
  std::vector<const AggRecord*> data;
  for (const AggRecord& r : recs)
    if (r.k.kind == kExtentTag && r.keep && r.k.epoch <= upto && !(r.ext.flags & ExtentRecord::kHole))
      data.push_back(&r);
  if (data.empty()) return;
  for (AggRecord& h : recs) {
    if (h.k.kind != kExtentTag || !h.keep || !(h.ext.flags & ExtentRecord::kHole) || h.k.epoch > upto) continue;
    Version hv{h.k.epoch, h.k.seq};
    uint64_t hs = h.k.start, he = h.k.start + h.ext.length;
    h.keep = std::any_of(data.begin(), data.end(), [&](const AggRecord* d) {
      return Version{d->k.epoch, d->k.seq} < hv && d->k.start < he && hs < d->k.start + d->ext.length;
    });
  }
}

// Decides which versions of one akey (at or below `upto`) any view can see. Views are the snapshots below
// `upto` and `upto` itself; a view sees a version at or below its epoch and above the punch floor at its epoch.
void mark_akey(std::vector<AggRecord>& recs, const std::vector<Epoch>& views, Epoch upto,
               const std::vector<Version>& obj_punches, const std::vector<Version>& dkey_punches) {
  auto floor_at = [](const std::vector<Version>& punches, Epoch view) {
    Version f;
    for (const Version& p : punches)
      if (p.epoch <= view) f = std::max(f, p);
    return f;
  };
  std::vector<Version> akey_punches;
  for (const AggRecord& r : recs)
    if (r.k.kind == kPunchTag) akey_punches.push_back({r.k.epoch, r.k.seq});
  for (AggRecord& r : recs)
    if (r.k.epoch > upto) r.keep = true;

  for (Epoch view : views) {
    Version floor = std::max({floor_at(obj_punches, view), floor_at(dkey_punches, view), floor_at(akey_punches, view)});
    // Single value: the newest visible version (records are newest first).
    for (AggRecord& r : recs) {
      if (r.k.kind != kSingleTag || r.k.epoch > view) continue;
      if (Version{r.k.epoch, r.k.seq} > floor) r.keep = true;
      break;
    }
    // Extents: every record that owns a byte after newest-wins painting.
    std::vector<AggRecord*> ext;
    uint64_t hi = 0;
    for (AggRecord& r : recs)
      if (r.k.kind == kExtentTag && r.k.epoch <= view && Version{r.k.epoch, r.k.seq} > floor) {
        ext.push_back(&r);
        hi = std::max(hi, r.k.start + r.ext.length);
      }
    if (ext.empty()) continue;
    std::sort(ext.begin(), ext.end(), [](AggRecord* x, AggRecord* y) {
      return Version{x->k.epoch, x->k.seq} < Version{y->k.epoch, y->k.seq};
    });
    ExtentMap map(0, hi);
    for (size_t i = 0; i < ext.size(); ++i)
      map.assign(ext[i]->k.start, ext[i]->k.start + ext[i]->ext.length, static_cast<int>(i));
    for (const auto& s : map.segments())
      if (s.owner >= 0) ext[s.owner]->keep = true;
  }
  if (views.size() == 1) drop_holes_hiding_nothing(recs, upto);
  // An akey punch stays while some kept version is older than it (it still hides that version).
  for (AggRecord& r : recs) {
    if (r.k.kind != kPunchTag || r.keep) continue;
    Version p{r.k.epoch, r.k.seq};
    for (const AggRecord& o : recs)
      if (o.k.kind != kPunchTag && o.keep && Version{o.k.epoch, o.k.seq} < p) r.keep = true;
  }
}

}  // namespace

// A grain whose visible bytes at `upto` are spread over many records is rewritten as one: every read of it walks
// its records, and so does its array's size. Rewriting costs the grain's span in writes, so it waits until the
// records hold a quarter more bytes than they span (overwrites piled up: at most 4x the bytes overwritten);
// small writes side by side, which overlap nothing, are left alone (merging them rewrote whole grains for a few
// KiB each: 4 KiB random writes of rfos bench fell by a fifth).
constexpr size_t kMergeRecords = 8;

void Engine::merge_grains(std::vector<AggRecord>& group, Epoch upto, uint32_t csum_chunk_bytes, Writer* w,
                          AggregateStats* stats, size_t* records_left) {
  Impl& im = *impl_;
  std::map<uint64_t, std::vector<AggRecord*>> grains;
  for (AggRecord& r : group)
    if (r.k.kind == kExtentTag && r.keep && r.k.epoch <= upto) grains[r.k.start / kGrainBytes].push_back(&r);
  for (auto& [grain, recs] : grains) {
    if (recs.size() < kMergeRecords) continue;
    // What a read at `upto` sees, newest-wins: the merged record covers the first to the last visible data byte
    // (a hole between them reads as zeros either way, and a hole at either end is not part of the size).
    std::sort(recs.begin(), recs.end(), [](AggRecord* x, AggRecord* y) {
      return Version{x->k.epoch, x->k.seq} < Version{y->k.epoch, y->k.seq};
    });
    ExtentMap map(grain * kGrainBytes, (grain + 1) * kGrainBytes);
    for (size_t i = 0; i < recs.size(); ++i)
      map.assign(recs[i]->k.start, recs[i]->k.start + recs[i]->ext.length, static_cast<int>(i));
    uint64_t from = UINT64_MAX, to = 0;
    Epoch newest = 0;
    for (const auto& seg : map.segments()) {
      if (seg.owner < 0 || (recs[seg.owner]->ext.flags & ExtentRecord::kHole)) continue;
      from = std::min(from, seg.start);
      to = std::max(to, seg.end);
    }
    uint64_t stored = 0;
    for (AggRecord* r : recs) {
      if (!(r->ext.flags & ExtentRecord::kHole)) stored += r->ext.length;
      newest = std::max(newest, r->k.epoch);
    }
    if (from < to && stored < (to - from) + (to - from) / 4) continue;
    const ObjectKey& k = recs[0]->k;
    KeyRef key{k.cid, k.oid, k.dkey, k.akey};
    ExtentRecord merged;
    merged.csum_chunk_bytes = csum_chunk_bytes;
    std::string data;
    std::vector<Run> runs;
    if (from < to) {
      // Read through the fetch path, which checks the stored checksums: damage is not copied under new ones.
      auto got = fetch({key, upto, ValueKind::kArray, from, to - from});
      if (!got.is_ok()) continue;  // left as it is; a read will report the damage
      data = std::move(got).value();
      merged.length = static_cast<uint32_t>(data.size());
      chunk_crcs(from, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}, csum_chunk_bytes, &merged.csums);
      if (data.size() <= im.opts.inline_max_bytes) {
        merged.flags = ExtentRecord::kInline;
        merged.inline_data = data;
      } else {
        uint64_t head = from % kBlockBytes, nblocks = align_up(head + data.size(), kBlockBytes) / kBlockBytes;
        auto reserved = im.alloc.reserve(nblocks);
        if (!reserved.is_ok()) continue;  // no room to rewrite: the records stay
        runs = std::move(reserved).value();
        uint8_t* buf = im.arena->alloc(nblocks * kBlockBytes);
        if (buf == nullptr) {
          im.alloc.unreserve(runs);
          continue;
        }
        std::memset(buf, 0, nblocks * kBlockBytes);
        std::memcpy(buf + head, data.data(), data.size());
        std::vector<blockio::IoRequest> writes;
        run_ios(true, buf, runs, &writes);
        Status ws = im.dev->submit_and_wait(writes);
        im.arena->free(buf, nblocks * kBlockBytes);
        if (!ws.is_ok()) {
          im.alloc.unreserve(runs);
          continue;
        }
        merged.runs = runs;
        w->commit_runs.insert(w->commit_runs.end(), runs.begin(), runs.end());
        w->wrote_data = true;
      }
      // At the newest merged epoch, with this commit's sequence number: above every record it replaces, below
      // every version after `upto`, and above every punch at or below `upto` (those that hid a merged byte
      // hid all of it: mark_akey kept only records above the punch floor).
      std::string rk = akey_prefix(key);
      append_extent_start(&rk, from);
      append_version(&rk, newest, 0);
      w->puts.push_back({std::move(rk), encode_extent(merged), true});
      ++*records_left;
    }
    for (AggRecord* r : recs) r->keep = false;  // deleted, their runs freed, with the merged record's commit
    ++stats->grains_merged;
  }
}

bool Engine::records_piled_up() const { return impl_->piled_up.load(std::memory_order_relaxed); }

Result<AggregateStats> Engine::aggregate(uint32_t cont, Epoch upto) {
  Impl& im = *impl_;
  std::lock_guard admin(im.admin_mu);
  if (upto == 0 || upto == kEpochLatest) return error(StatusCode::kInvalidArgument, "aggregation epoch out of range");
  RFOS_ASSIGN_OR_RETURN(ContState c, im.container(cont));
  if (upto < c.rec.agg_epoch) return AggregateStats{};
  im.piled_up.store(false, std::memory_order_relaxed);  // a read after this pass's scan tells again
  // Nothing written since the last pass looked: no durable commit (an idle target syncs nothing). The boundary
  // still goes up, in memory: nothing at or below it was reclaimed by this pass, so a restart that finds the
  // stored one lower loses nothing, and the next pass that commits stores it. An update that commits meanwhile
  // is among the objects that pass scans.
  if (!c.aggregate_all && c.changed.empty()) {
    std::lock_guard meta(im.meta_mu);
    if (auto it = im.conts.find(cont); it != im.conts.end())
      it->second.rec.agg_epoch = std::max(it->second.rec.agg_epoch, upto);
    return AggregateStats{};
  }

  // First raise the boundary durably: from here on no update at or below `upto` can commit, so the scan
  // below sees every version it has to judge. What it scans is taken in the same step: the objects written since
  // the last pass (every one that can have a version at or below `upto` to reclaim), or all of them.
  bool all = false;
  std::set<std::string> changed;
  {
    Writer w;
    w.puts.push_back({cont_key(c.pool, c.uuid), "", false});
    w.prepare = [&] {
      auto it = im.conts.find(cont);
      if (it == im.conts.end())
        return error(StatusCode::kUnknownContainer, "container handle " + std::to_string(cont) + " was destroyed");
      it->second.rec.agg_epoch = std::max(it->second.rec.agg_epoch, upto);
      w.puts[0].value = encode_cont(it->second.rec);
      all = it->second.aggregate_all;
      it->second.aggregate_all = false;
      changed.swap(it->second.changed);
      c = it->second;
      return Status::ok();
    };
    RFOS_RETURN_IF_ERROR(im.commit(&w));
  }
  // Objects to look at again next time: those with versions above `upto` (not judged yet), or, when this pass
  // fails, everything it took.
  std::set<std::string> again;
  bool failed = true;
  auto give_back = [&] {
    std::lock_guard meta(im.meta_mu);
    auto it = im.conts.find(cont);
    if (it == im.conts.end()) return;
    if (failed) {
      it->second.aggregate_all |= all;
      it->second.changed.merge(changed);
    }
    if (!it->second.aggregate_all) it->second.changed.merge(again);
  };
  struct Finally {
    std::function<void()> f;
    ~Finally() { f(); }
  } finally{give_back};

  std::vector<Epoch> views;
  for (Epoch s : c.snapshots)
    if (s < upto) views.push_back(s);
  views.push_back(upto);

  AggregateStats stats;
  Writer w;
  std::unique_ptr<rocksdb::Iterator> it(im.db->NewIterator(rocksdb::ReadOptions()));
  std::string prefix = cont_objects_prefix(cont);
  std::vector<AggRecord> group;  // the records of one akey
  std::vector<Version> obj_punches, dkey_punches;
  std::string cur_obj, cur_dkey;
  // Object and dkey punch records go once they hide nothing: no record kept below them in their object or dkey
  // (a removed name's punch, a purged file's). Otherwise every name a directory ever had, and every file a
  // namespace ever removed, would stay in the index, and listings would step over them.
  constexpr Version kNoneKept{UINT64_MAX, UINT64_MAX};
  std::vector<std::pair<std::string, Version>> obj_punch_keys, dkey_punch_keys;
  Version oldest_kept_obj = kNoneKept, oldest_kept_dkey = kNoneKept;
  size_t obj_left = 0;                                             // records the object keeps
  std::vector<std::pair<std::string, std::string>> empty_objects;  // (object prefix, its punch mark)
  auto flush = [&] {
    if (group.empty()) return;
    mark_akey(group, views, upto, obj_punches, dkey_punches);
    if (views.size() == 1) merge_grains(group, upto, c.rec.csum_chunk_bytes, &w, &stats, &obj_left);
    for (AggRecord& r : group) {
      if (r.keep) {
        ++obj_left;
        oldest_kept_dkey = std::min(oldest_kept_dkey, Version{r.k.epoch, r.k.seq});
        continue;
      }
      w.deletes.push_back(r.key);
      ++stats.records_removed;
      for (const Run& run : r.ext.runs) {
        w.free_runs.push_back(run);
        stats.bytes_reclaimed += uint64_t{run.nblocks} * kBlockBytes;
      }
    }
    group.clear();
  };
  auto drop_unneeded = [&](std::vector<std::pair<std::string, Version>>& punches, Version oldest_kept) {
    for (auto& [key, v] : punches) {
      if (v.epoch <= upto && !(oldest_kept < v)) {
        w.deletes.push_back(std::move(key));
        ++stats.records_removed;
      } else {
        ++obj_left;
      }
    }
    punches.clear();
  };
  auto end_dkey = [&] {
    flush();
    drop_unneeded(dkey_punch_keys, oldest_kept_dkey);
    oldest_kept_obj = std::min(oldest_kept_obj, oldest_kept_dkey);
    oldest_kept_dkey = kNoneKept;
  };
  auto end_object = [&] {
    end_dkey();
    drop_unneeded(obj_punch_keys, oldest_kept_obj);
    if (!cur_obj.empty() && obj_left == 0)  // 'O' cid oid -> 'Q' cid oid
      empty_objects.emplace_back(cur_obj, std::string(1, kMarkTag) + cur_obj.substr(1));
    oldest_kept_obj = kNoneKept;
    obj_left = 0;
  };
  // The records under `range` (the container's, or one object's), in key order.
  auto scan = [&](const std::string& range) -> Status {
    for (it->Seek(range); it->Valid() && starts_with(it->key(), range); it->Next()) {
      AggRecord r;
      r.key = it->key().ToString();
      if (!parse_object_key(r.key, &r.k)) return error(StatusCode::kCorruption, "malformed object key");
      std::string obj = r.key.substr(0, kObjectPrefixBytes);
      if (obj != cur_obj) {
        end_object();
        cur_obj = obj;
        obj_punches.clear();
        cur_dkey.clear();
        dkey_punches.clear();
      }
      if (r.k.epoch > upto) again.insert(obj);
      if (r.k.level >= 1 && r.k.dkey != cur_dkey) {
        end_dkey();
        cur_dkey.assign(r.k.dkey);
        dkey_punches.clear();
      }
      if (r.k.level == 0) {
        obj_punches.push_back({r.k.epoch, r.k.seq});
        obj_punch_keys.emplace_back(r.key, Version{r.k.epoch, r.k.seq});
        continue;
      }
      if (r.k.level == 1) {
        dkey_punches.push_back({r.k.epoch, r.k.seq});
        dkey_punch_keys.emplace_back(r.key, Version{r.k.epoch, r.k.seq});
        continue;
      }
      if (!group.empty() && group.front().k.akey != r.k.akey) flush();
      if (r.k.kind == kExtentTag && !decode_extent(it->value().ToStringView(), &r.ext))
        return error(StatusCode::kCorruption, "malformed extent record");
      group.push_back(std::move(r));
      // parse_object_key's views pointed into the moved-from string only for short (SSO) keys: re-parse.
      parse_object_key(group.back().key, &group.back().k);
    }
    end_object();
    cur_obj.clear();
    return from_rocks(it->status(), "aggregation scan");
  };
  Status scanned = Status::ok();
  if (all) {
    scanned = scan(prefix);
  } else {
    for (const std::string& obj : changed)
      if (scanned = scan(obj); !scanned.is_ok()) break;
  }
  if (!scanned.is_ok()) {
    im.alloc.unreserve(w.commit_runs);  // merged records written for nothing
    return scanned;
  }
  if (w.deletes.empty()) {
    failed = false;
    return stats;
  }
  // An object left with no record loses its punch mark too, unless a commit wrote to it since the boundary
  // went up (its records are not in this scan's view; one may be a punch, which needs its mark).
  w.prepare = [&] {
    auto c = im.conts.find(cont);
    if (c == im.conts.end()) return Status::ok();  // destroyed meanwhile: its records went with it
    for (auto& [obj, mark] : empty_objects)
      if (!c->second.aggregate_all && c->second.changed.count(obj) == 0) w.deletes.push_back(std::move(mark));
    return Status::ok();
  };
  RFOS_RETURN_IF_ERROR(im.commit(&w));
  failed = false;
  {
    std::unique_lock reclaim(im.reclaim_mu);
    im.alloc.release(w.free_runs);
  }
  // Every removed record leaves a tombstone that reads of its neighbours step over until a compaction drops
  // it: measured, 4 KiB random reads fell from 28k to 2k/s after a few rounds of small overwrites were
  // aggregated, the target thread busy skipping deleted entries in the memtable (flushing them to L0 files
  // alone did not help). So once the tombstones reach a quarter of the index (at least 1024 of them), the
  // container's range is compacted here, on the aggregating thread: rewriting the index at most about four
  // times per removed record, while foreground I/O goes on.
  im.tombstones += w.deletes.size();
  uint64_t keys = 0;
  im.db->GetIntProperty("rocksdb.estimate-num-keys", &keys);
  if (im.tombstones >= std::max<uint64_t>(kCompactAfterTombstones, keys / 4)) {
    im.tombstones = 0;
    std::string end = prefix_successor(prefix);
    rocksdb::Slice b(prefix), e(end);
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    RFOS_RETURN_IF_ERROR(from_rocks(im.db->CompactRange(co, &b, &e), "compact after aggregation"));
  }
  return stats;
}

// ---------------------------------------------------------------------------------------------------------
// Consistency check

Status Engine::check() {
  Impl& im = *impl_;
  std::lock_guard admin(im.admin_mu);
  std::unique_ptr<rocksdb::Iterator> it(im.db->NewIterator(rocksdb::ReadOptions()));
  std::map<uint64_t, uint64_t> durable_free;
  std::vector<std::pair<uint64_t, uint64_t>> owned;  // (block, nblocks) of every run, free or owned
  for (it->Seek(std::string(1, kFreeTag)); it->Valid() && it->key()[0] == kFreeTag; it->Next()) {
    uint64_t n;
    std::memcpy(&n, it->value().data(), 8);
    durable_free[get_be64(it->key().data() + 1)] = n;
    owned.push_back({get_be64(it->key().data() + 1), n});
  }
  if (durable_free != im.alloc.durable_map())
    return error(StatusCode::kCorruption, "the allocator's free map differs from its persistent records");
  // In a container that marks punched objects, every object with a punch record has its mark.
  auto punch_marked = [&](uint32_t cid, const ObjectId& oid) {
    {
      std::lock_guard meta(im.meta_mu);
      auto c = im.conts.find(cid);
      if (c == im.conts.end() || !c->second.rec.punch_marks) return true;
    }
    std::string v;
    return im.db->Get(rocksdb::ReadOptions(), mark_key(cid, oid), &v).ok();
  };
  for (it->Seek(std::string(1, kObjTag)); it->Valid() && it->key()[0] == kObjTag; it->Next()) {
    ObjectKey k;
    if (!parse_object_key(it->key().ToStringView(), &k))
      return error(StatusCode::kCorruption, "malformed object key in the index");
    if (k.kind == kPunchTag && !punch_marked(k.cid, k.oid))
      return error(StatusCode::kCorruption, "object " + k.oid.to_string() + " holds a punch and no punch mark");
    if (k.kind == kSingleTag) {
      SingleRecord r;
      if (!decode_single(it->value().ToStringView(), &r))
        return error(StatusCode::kCorruption, "malformed single value");
    } else if (k.kind == kExtentTag) {
      ExtentRecord r;
      if (!decode_extent(it->value().ToStringView(), &r))
        return error(StatusCode::kCorruption, "malformed extent record");
      for (const Run& run : r.runs) owned.push_back({run.block, run.nblocks});
    }
  }
  RFOS_RETURN_IF_ERROR(from_rocks(it->status(), "check scan"));
  std::sort(owned.begin(), owned.end());
  uint64_t next = 1;  // block 0 is the superblock
  for (const auto& [block, n] : owned) {
    if (block < next) return error(StatusCode::kCorruption, "block " + std::to_string(block) + " is owned twice");
    if (block > next)
      return error(StatusCode::kCorruption, "blocks " + std::to_string(next) + ".." + std::to_string(block - 1) +
                                                " are neither free nor owned (leaked)");
    next = block + n;
  }
  if (next != im.block_count)
    return error(StatusCode::kCorruption, "blocks from " + std::to_string(next) + " are neither free nor owned");
  return Status::ok();
}

Result<std::vector<Extent>> Engine::debug_locate(const KeyRef& key, uint64_t offset) {
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  std::vector<Impl::ExtentRef> recs;
  Version floor = Impl::akey_floor(it.get(), key, kEpochLatest);
  RFOS_RETURN_IF_ERROR(
      impl_->visible_extents(it.get(), akey_prefix(key), floor, kEpochLatest, offset, offset + 1, &recs));
  if (recs.empty()) return error(StatusCode::kNotFound, "no extent at that offset");
  std::vector<Extent> out;
  for (const Run& r : recs.back().rec.runs) out.push_back({r.block * kBlockBytes, uint64_t{r.nblocks} * kBlockBytes});
  return out;
}

}  // namespace rfos::engine
