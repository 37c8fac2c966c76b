// Named objects (put, get, rm, stat, ls) against targets over the simulated fabric: all or nothing, the old object
// readable until the new one is complete, nothing left behind by a failed put, objects of the older layout read.
#include "client/named_objects.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "client/file_layout.h"
#include "client/file_stream.h"
#include "placement/placement.h"
#include "server/sim_cluster_testing.h"

namespace rfos::client {
namespace {

using server::testing::bytes;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A source giving `data` in reads of at most `step` bytes; fails with `fail` once `fail_at` bytes were given.
NamedObjects::Source source_of(const std::string& data, size_t step = 100000, size_t fail_at = SIZE_MAX,
                               Status fail = Status::ok()) {
  auto at = std::make_shared<size_t>(0);
  return [=, &data](std::span<uint8_t> buf) -> Result<size_t> {
    if (*at >= fail_at) return fail;
    size_t n = std::min({buf.size(), step, data.size() - *at});
    std::memcpy(buf.data(), data.data() + *at, n);
    *at += n;
    return n;
  };
}

// The record's akey of a put pending (or a data object marked replaced) on `data`, as docs/object-layout.md gives it:
// "pending.<32 hex digits>".
std::string pending_key(const ObjectId& data) {
  char id[40];
  std::snprintf(id, sizeof(id), "%016llx%016llx", static_cast<unsigned long long>(data.hi),
                static_cast<unsigned long long>(data.lo));
  return std::string("pending.") + id;
}

class NamedObjectsTest : public server::testing::SimCluster {
 protected:
  void SetUp() override {
    SimCluster::SetUp();
    c_ = open(session());
    ASSERT_TRUE(c_);
  }
  Result<std::string> get(NamedObjects& o, const std::string& name) {
    std::string out;
    Status s = o.get(name, [&](std::span<const uint8_t> b) {
      out.append(reinterpret_cast<const char*>(b.data()), b.size());
      return Status::ok();
    });
    if (!s.is_ok()) return s;
    return out;
  }
  // Every name of the index with `prefix`, a page of `page` at a time.
  std::vector<ObjectStat> listed(NamedObjects& o, std::string_view prefix = {}, size_t page = 2) {
    std::vector<ObjectStat> out;
    std::string from;
    for (int pages = 0; pages < 100; ++pages) {
      auto got = o.list_index(prefix, from, page);
      EXPECT_TRUE(got.is_ok()) << got.status().to_string();
      if (!got.is_ok()) break;
      EXPECT_LE(got->names.size(), page);
      std::move(got->names.begin(), got->names.end(), std::back_inserter(out));
      if (got->done) return out;
      from = got->next;
    }
    ADD_FAILURE() << "the listing did not end";
    return out;
  }
  static std::vector<std::string> names_of(const std::vector<ObjectStat>& stats) {
    std::vector<std::string> out;
    for (const ObjectStat& st : stats) out.push_back(st.name);
    return out;
  }
  size_t object_count() {
    auto all = c_->list_objects();
    EXPECT_TRUE(all.is_ok());
    return all.is_ok() ? all->size() : 0;
  }
  std::unique_ptr<Container> c_;
};

TEST_F(NamedObjectsTest, PutGetStatListRemove) {
  NamedObjects o(*c_, 4);
  for (size_t size : {size_t{0}, size_t{1}, size_t{(3u << 20) + 5}}) {
    std::string data = random_bytes(size, size);
    std::string name = "obj-" + std::to_string(size);
    uint64_t reported = 0;
    ASSERT_TRUE(o.put(name, source_of(data), [&](uint64_t b) { reported = b; }).is_ok());
    EXPECT_EQ(reported, size);
    auto back = get(o, name);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_TRUE(*back == data) << size;
    auto st = o.stat(name);
    ASSERT_TRUE(st.is_ok());
    EXPECT_EQ(st->size, size);
    EXPECT_FALSE(st->legacy);
  }
  // The data object is laid out as a file: the file layout's end is the object's size.
  auto st = o.stat("obj-3145733");
  EXPECT_EQ(*c_->object_end(st->data, layout::kDataAkey), (3u << 20) + 5);
  auto listing = o.list();
  ASSERT_TRUE(listing.is_ok());
  ASSERT_EQ(listing->named.size(), 3u);
  EXPECT_EQ(listing->named[0].name, "obj-0");
  EXPECT_TRUE(listing->other.empty());
  ASSERT_TRUE(o.remove("obj-1").is_ok());
  EXPECT_EQ(o.remove("obj-1").code(), StatusCode::kNotFound);
  EXPECT_EQ(get(o, "obj-1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(o.list()->named.size(), 2u);
}

// Objects of up to kInlineBytes live in their records: no data object, one request to read (stat gives the
// bytes), and the swap still replaces and removes what was there, either way.
TEST_F(NamedObjectsTest, SmallObjectsLiveInTheirRecords) {
  NamedObjects o(*c_, 4);
  PutOptions tagged;
  tagged.attrs = [](uint64_t size) -> Result<std::string> { return "etag " + std::to_string(size); };
  const std::string small = random_bytes(NamedObjects::kInlineBytes, 30);
  ASSERT_TRUE(o.put("s", source_of(small, 1000), {}, tagged).is_ok());
  auto st = o.stat("s");
  ASSERT_TRUE(st.is_ok());
  EXPECT_TRUE(st->inlined);
  EXPECT_TRUE(st->bytes == small);
  EXPECT_EQ(st->attrs, "etag " + std::to_string(small.size()));
  EXPECT_EQ(object_count(), 2u);  // the record and the index
  EXPECT_TRUE(*get(o, "s") == small);
  std::string part;
  ASSERT_TRUE(o.read_range(*st, 100, 50, [&](std::span<const uint8_t> b) {
                 part.append(reinterpret_cast<const char*>(b.data()), b.size());
                 return Status::ok();
               }).is_ok());
  EXPECT_TRUE(part == small.substr(100, 50));
  EXPECT_EQ(o.read_range(*st, 100, small.size(), [](std::span<const uint8_t>) { return Status::ok(); }).code(),
            StatusCode::kInvalidArgument);
  std::string pieces;
  ASSERT_TRUE(o.read_range_pieces(*st, 7, 9000, [&](StreamPiece p) {
                 pieces.append(reinterpret_cast<const char*>(p.bytes().data()), p.size());
                 return Status::ok();
               }).is_ok());
  EXPECT_TRUE(pieces == small.substr(7, 9000));
  // Listed without its bytes.
  auto index = listed(o, "s");
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(index.at(0).size, small.size());
  EXPECT_EQ(index.at(0).attrs, st->attrs);
  EXPECT_TRUE(index.at(0).bytes.empty());

  // One byte more: a data object, its first bytes those put() read to decide.
  const std::string big = random_bytes(NamedObjects::kInlineBytes + 1, 31);
  ASSERT_TRUE(o.put("s", source_of(big, 777)).is_ok());
  EXPECT_FALSE(o.stat("s")->inlined);
  EXPECT_TRUE(*get(o, "s") == big);
  EXPECT_EQ(object_count(), 3u);
  // Back to small: the data object goes.
  ASSERT_TRUE(o.put("s", source_of("tiny")).is_ok());
  EXPECT_TRUE(*get(o, "s") == "tiny");
  EXPECT_EQ(object_count(), 2u);
  // An input that fails before its end changes nothing.
  EXPECT_EQ(o.put("s", source_of(small, 100, 500, error(StatusCode::kIoError, "gone"))).code(), StatusCode::kIoError);
  EXPECT_TRUE(*get(o, "s") == "tiny");
  // Empty, then removed with nothing left.
  ASSERT_TRUE(o.put("e", source_of("")).is_ok());
  EXPECT_TRUE(o.stat("e")->inlined);
  EXPECT_TRUE(get(o, "e")->empty());
  EXPECT_EQ(o.list()->named.size(), 2u);
  ASSERT_TRUE(o.remove("s").is_ok());
  ASSERT_TRUE(o.remove("e").is_ok());
  EXPECT_EQ(object_count(), 0u);
}

TEST_F(NamedObjectsTest, TheIndexListsNamesInByteOrderWithTheirAttributes) {
  NamedObjects o(*c_, 4);
  // Lengths differ, so the engine's order (length first) is not byte order.
  for (std::string name : {"b", "a/x", "aa", "a/yy", "a"}) {
    PutOptions opts;
    opts.attrs = [name](uint64_t size) -> Result<std::string> {
      return "attrs of " + name + " " + std::to_string(size);
    };
    ASSERT_TRUE(o.put(name, source_of(name + name), {}, opts).is_ok()) << name;
  }
  auto all = listed(o);
  EXPECT_EQ(names_of(all), (std::vector<std::string>{"a", "a/x", "a/yy", "aa", "b"}));
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[2].size, 8u);
  EXPECT_EQ(all[2].attrs, "attrs of a/yy 8");
  EXPECT_EQ(o.stat("a/yy")->attrs, "attrs of a/yy 8");
  EXPECT_EQ(names_of(listed(o, "a/")), (std::vector<std::string>{"a/x", "a/yy"}));
  // A page starts at any name (inclusive), after one, or past every name under a prefix; it stops at the end of
  // its prefix.
  auto page = o.list_index({}, "a/y", 2);
  ASSERT_TRUE(page.is_ok());
  EXPECT_EQ(names_of(page->names), (std::vector<std::string>{"a/yy", "aa"}));
  EXPECT_FALSE(page->done);
  EXPECT_EQ(names_of(o.list_index({}, page->next, 2)->names), std::vector<std::string>{"b"});
  EXPECT_EQ(names_of(o.list_index({}, NamedObjects::after("a/x"), 1)->names), std::vector<std::string>{"a/yy"});
  EXPECT_EQ(names_of(o.list_index({}, prefix_successor("a/"), 10)->names), (std::vector<std::string>{"aa", "b"}));
  auto in_a = o.list_index("a/", "a/xz", 10);
  ASSERT_TRUE(in_a.is_ok());
  EXPECT_TRUE(in_a->done);
  EXPECT_EQ(names_of(in_a->names), std::vector<std::string>{"a/yy"});
  // A put whose attributes fail is abandoned: the old object and its entry stay as they were.
  PutOptions failing;
  failing.attrs = [](uint64_t) -> Result<std::string> { return error(StatusCode::kChecksumMismatch, "bad digest"); };
  EXPECT_EQ(o.put("a/yy", source_of("other bytes"), {}, failing).code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(*get(o, "a/yy"), "a/yya/yy");
  EXPECT_EQ(listed(o, "a/yy").at(0).attrs, "attrs of a/yy 8");
  // A replacement without attributes, and a removal, show in the index; the index is no object of its own.
  ASSERT_TRUE(o.put("b", source_of("x")).is_ok());
  EXPECT_EQ(listed(o, "b").at(0).attrs, "");
  EXPECT_EQ(listed(o, "b").at(0).size, 1u);
  ASSERT_TRUE(o.remove("a").is_ok());
  EXPECT_EQ(listed(o).size(), 4u);
  EXPECT_TRUE(o.list()->other.empty());
  EXPECT_EQ(o.list()->named.size(), 4u);
}

TEST_F(NamedObjectsTest, ANameTheIndexCannotKeepIsRefusedBeforeAnythingIsWritten) {
  NamedObjects o(*c_, 4);
  const std::string nul("a\0b", 3);
  EXPECT_EQ(o.put(nul, source_of("x")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(o.put(nul, source_of(random_bytes(NamedObjects::kInlineBytes + 1, 3))).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(o.put(std::string(NamedObjects::kNameMaxBytes + 1, 'n'), source_of("x")).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(o.begin_upload({"u1", nul, "", 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(object_count(), 0u);
  EXPECT_EQ(o.remove(nul).code(), StatusCode::kNotFound);  // not refused: one put before names were checked goes
  EXPECT_EQ(NamedObjects::after(nul), "a\x01");            // the least name after it: none holds a NUL
  ASSERT_TRUE(o.put(std::string(NamedObjects::kNameMaxBytes, 'n'), source_of("x")).is_ok());
  EXPECT_EQ(listed(o).size(), 1u);
}

// The index of an earlier version kept its names by length; a listing through a read-only handle merges it,
// checked against the records, and the first listing by a handle that may write moves it into the index.
TEST_F(NamedObjectsTest, AnIndexOfAnEarlierVersionIsListedThenMoved) {
  NamedObjects o(*c_, 4);
  for (const char* name : {"new-b", "old-a", "old-c", "old-gone", "both"})
    ASSERT_TRUE(o.put(name, source_of(std::string(name) + " bytes")).is_ok());
  // As an earlier version left them: "old-*" and "both" listed in the earlier index only, or in both, and
  // "old-gone" removed since by this version (which no longer looks at the earlier index).
  const ObjectId earlier = placement::with_class(ObjectId{0, 0x72666f73696e6478ull}, placement::ObjectClass::kS1);
  for (const char* name : {"old-a", "old-c", "old-gone", "both"}) {
    auto v = c_->get_value(NamedObjects::index_object(), name, "o");
    ASSERT_TRUE(v.is_ok());
    ASSERT_TRUE(c_->put_value(earlier, name, "o", *v).is_ok());
    if (std::string_view(name) != "both") {
      ASSERT_TRUE(c_->punch_dkey(NamedObjects::index_object(), name).is_ok());
    }
  }
  ASSERT_TRUE(o.remove("old-gone").is_ok());
  const std::vector<std::string> want = {"both", "new-b", "old-a", "old-c"};

  auto reader = open(session(wire::Capability::kRead));
  ASSERT_TRUE(reader);
  NamedObjects ro(*reader, 4);
  EXPECT_EQ(names_of(listed(ro)), want);
  EXPECT_EQ(names_of(listed(ro, "old-")), (std::vector<std::string>{"old-a", "old-c"}));
  EXPECT_EQ(listed(ro, "old-a").at(0).size, std::string("old-a bytes").size());
  EXPECT_FALSE(c_->list_dkeys(earlier).value().empty()) << "a read-only listing moved nothing";

  EXPECT_EQ(names_of(listed(o)), want);
  EXPECT_TRUE(c_->list_dkeys(earlier).value().empty());
  EXPECT_EQ(names_of(listed(ro)), want);
  ASSERT_TRUE(o.remove("old-a").is_ok());
  EXPECT_EQ(names_of(listed(ro)), (std::vector<std::string>{"both", "new-b", "old-c"}));
  EXPECT_TRUE(o.list()->other.empty());
}

TEST_F(NamedObjectsTest, AReplacementIsAllOrNothing) {
  NamedObjects o(*c_, 4);
  std::string first = random_bytes(2 << 20, 1), second = random_bytes(5 << 20, 2), third = random_bytes(100, 3);
  ASSERT_TRUE(o.put("model", source_of(first)).is_ok());
  size_t objects = object_count();
  // A put whose input fails half-way: the old object stays, and nothing of the new one remains.
  Status failed = o.put("model", source_of(second, 100000, 3 << 20, error(StatusCode::kIoError, "disk gone")));
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  EXPECT_TRUE(*get(o, "model") == first);
  EXPECT_EQ(object_count(), objects);
  // A longer one, then a shorter one: each replaces the whole object, and the old data goes.
  ASSERT_TRUE(o.put("model", source_of(second)).is_ok());
  EXPECT_TRUE(*get(o, "model") == second);
  ASSERT_TRUE(o.put("model", source_of(third)).is_ok());
  EXPECT_TRUE(*get(o, "model") == third);
  EXPECT_EQ(object_count(), objects - 1);  // 100 bytes live in the record: no data object
  // Replacements kept the name (the first put wrote it; they found it there and did not write it again).
  auto listing = o.list();
  ASSERT_TRUE(listing.is_ok());
  ASSERT_EQ(listing->named.size(), 1u);
  EXPECT_EQ(listing->named[0].name, "model");
  // A first put that fails leaves no name behind.
  EXPECT_FALSE(o.put("never", source_of(second, 100000, 1 << 20, error(StatusCode::kIoError, "x"))).is_ok());
  EXPECT_EQ(o.stat("never").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(object_count(), objects - 1);
}

// A reader holds the name's `object` it read (ObjectStat) while a put replaces the object and removes its data: the
// data it then reads is missing (kNotFound), never holes, so S3's GET need not read the name again after its bytes.
TEST_F(NamedObjectsTest, TheDataOfAReplacedObjectReadsAsMissingNeverAsHoles) {
  NamedObjects o(*c_, 4);
  const std::string first = random_bytes((2 << 20) + 5000, 30);
  ASSERT_TRUE(o.put("m", source_of(first)).is_ok());
  auto old = o.stat("m");
  ASSERT_TRUE(old.is_ok());
  // Parts of an object, replaced too.
  NamedObjects::Part part{NamedObjects::fresh_data_object(), 0};
  ASSERT_TRUE(write_file_object(*c_, part.data, 0, source_of(first), 4, {}, &part.size).is_ok());
  const std::vector<NamedObjects::Part> parts = {part};
  ASSERT_TRUE(o.put_parts("p", parts, {}).is_ok());
  auto old_parts = o.stat("p");
  ASSERT_TRUE(old_parts.is_ok());
  ASSERT_TRUE(old_parts->composite);
  std::string read_before;
  ASSERT_TRUE(o.read_range(*old, 0, old->size, [&](std::span<const uint8_t> b) {
                 read_before.append(reinterpret_cast<const char*>(b.data()), b.size());
                 return Status::ok();
               }).is_ok());
  EXPECT_TRUE(read_before == first);
  ASSERT_TRUE(o.put("m", source_of(random_bytes(3 << 20, 31))).is_ok());
  ASSERT_TRUE(o.put("p", source_of(random_bytes(100, 32))).is_ok());
  for (const ObjectStat& st : {*old, *old_parts})
    for (auto [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 10}, {(2 << 20) + 1, 4000}, {0, st.size}}) {
      size_t bytes = 0;
      Status s = o.read_range_pieces(st, off, len, [&](StreamPiece piece) {
        bytes += piece.size();
        return Status::ok();
      });
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << off << "+" << len << ": " << s.to_string();
      EXPECT_LT(bytes, len) << "a whole range was read from removed data";
    }
}

// A client that dies half-way through a put leaves its data pending under the name: readers still see the old
// object, ls shows nothing strange, and the next put (or rm) of the name clears it.
TEST_F(NamedObjectsTest, APutThatDiedIsClearedByTheNext) {
  NamedObjects o(*c_, 4);
  std::string old = random_bytes(1 << 20, 4), next = random_bytes(3 << 20, 5);
  ASSERT_TRUE(o.put("ckpt", source_of(old)).is_ok());
  size_t objects = object_count();
  {
    auto& fabric = transport::sim::Fabric::process();
    auto before = fabric.addresses();
    auto dying = open(session(), 500);
    ASSERT_TRUE(dying);
    std::string own;  // the dying client's worker: the one address that is new
    for (const std::string& a : fabric.addresses())
      if (std::find(before.begin(), before.end(), a) == before.end()) own = a;
    ASSERT_FALSE(own.empty());
    NamedObjects d(*dying, 4);
    size_t given = 0;
    std::atomic<uint64_t> stored{0};
    Status s = d.put(
        "ckpt",
        [&](std::span<uint8_t> buf) -> Result<size_t> {
          // Half-way, once some of the new data is stored: the client's process dies (its worker, for the
          // fabric). The source runs on the put's reader thread; the put's own thread reports what is stored.
          if (given >= (2u << 20)) {
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (stored.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
            fabric.kill(own);
            return error(StatusCode::kShutdown, "killed");
          }
          size_t n = std::min(buf.size(), next.size() - given);
          std::memcpy(buf.data(), next.data() + given, n);
          given += n;
          return n;
        },
        [&](uint64_t bytes) { stored = bytes; });
    EXPECT_FALSE(s.is_ok());
  }
  EXPECT_TRUE(*get(o, "ckpt") == old);
  auto listing = o.list();
  ASSERT_TRUE(listing.is_ok());
  EXPECT_EQ(listing->named.size(), 1u);
  EXPECT_TRUE(listing->other.empty()) << "the dead put's data shows as a stray object";
  EXPECT_GT(object_count(), objects) << "the dying put left nothing pending: nothing was tested";
  ASSERT_TRUE(o.put("ckpt", source_of(next)).is_ok());
  EXPECT_TRUE(*get(o, "ckpt") == next);
  // The dead put's data may be a put still under way for all the next put knows: it stays (a day) ...
  EXPECT_EQ(object_count(), objects + 1);
  EXPECT_TRUE(o.list()->other.empty());
  // ... and a remove of the name clears it with the rest.
  ASSERT_TRUE(o.remove("ckpt").is_ok());
  EXPECT_EQ(object_count(), 0u);
}

// A put that died after its swap but before it dropped its pending entry left that entry naming the data its
// record now names. A day later the entry is stale, and the next put clears it: the entry goes, the data stays
// (it is the object readers get until that put swaps).
TEST_F(NamedObjectsTest, AStalePendingEntryOfTheLiveDataLeavesTheData) {
  NamedObjects o(*c_, 4);
  const std::string live = random_bytes(1 << 20, 40), next = random_bytes(2 << 20, 41);
  ASSERT_TRUE(o.put("ckpt", source_of(live)).is_ok());
  auto st = o.stat("ckpt");
  ASSERT_TRUE(st.is_ok());
  const ObjectId record = NamedObjects::record_of("ckpt");
  const std::string entry = pending_key(st->data);
  ASSERT_TRUE(c_->put_value(record, "meta", entry, "1").is_ok());  // started at 1 ms
  // A put whose input fails clears the stale entry first and then changes nothing: the object is whole.
  EXPECT_FALSE(o.put("ckpt", source_of(next, 100, 1 << 20, error(StatusCode::kIoError, "x"))).is_ok());
  auto akeys = c_->list_akeys(record, "meta");
  ASSERT_TRUE(akeys.is_ok());
  EXPECT_EQ(std::count(akeys->begin(), akeys->end(), entry), 0) << "the stale entry stayed";
  auto back = get(o, "ckpt");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(*back == live);
  ASSERT_TRUE(o.put("ckpt", source_of(next)).is_ok());
  EXPECT_TRUE(*get(o, "ckpt") == next);
  ASSERT_TRUE(o.remove("ckpt").is_ok());
  EXPECT_EQ(object_count(), 0u);
}

// A put that died after its swap but before it removed the object of parts it replaced left that marked ("r");
// the next put clears it, but a part the record's object took over (a completion tried again) stays.
TEST_F(NamedObjectsTest, AMarkedObjectOfPartsLeavesThePartsTheLiveOneShares) {
  NamedObjects o(*c_, 4);
  const std::vector<std::string> data = {random_bytes(1 << 20, 50), random_bytes(4000, 51), random_bytes(3000, 52)};
  std::vector<NamedObjects::Part> p;
  for (const std::string& d : data) {
    p.push_back({NamedObjects::fresh_data_object(), 0});
    ASSERT_TRUE(write_file_object(*c_, p.back().data, 0, source_of(d), 4, {}, &p.back().size).is_ok());
  }
  // The replaced object of parts {0, 1}, still there (as under "other"), and the live one {0, 2}.
  const std::vector<NamedObjects::Part> before = {p[0], p[1]}, now = {p[0], p[2]};
  ASSERT_TRUE(o.put_parts("other", before, {}).is_ok());
  ASSERT_TRUE(o.put_parts("big", now, {}).is_ok());
  auto replaced = o.stat("other");
  ASSERT_TRUE(replaced.is_ok());
  ASSERT_TRUE(c_->put_value(NamedObjects::record_of("big"), "meta", pending_key(replaced->data), "r").is_ok());
  EXPECT_FALSE(o.put("big", source_of(data[0], 100, 20000, error(StatusCode::kIoError, "x"))).is_ok());
  auto back = get(o, "big");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(*back == data[0] + data[2]);
  EXPECT_FALSE(get(o, "other").is_ok()) << "the marked object's own part stayed";
}

// An object made of parts written elsewhere (an S3 multipart upload): read whole and by ranges across parts,
// replaced by one that shares a part (which stays), removed with all its parts.
TEST_F(NamedObjectsTest, ObjectsOfParts) {
  NamedObjects o(*c_, 4);
  std::vector<std::string> data = {random_bytes((1 << 20) + 100, 20), random_bytes(5000, 21),
                                   random_bytes(3 << 20, 22)};
  std::vector<NamedObjects::Part> parts;
  for (const std::string& d : data) {
    NamedObjects::Part p{NamedObjects::fresh_data_object(), 0};
    ASSERT_TRUE(write_file_object(*c_, p.data, 0, source_of(d), 4, {}, &p.size).is_ok());
    parts.push_back(p);
  }
  PutOptions opts;
  opts.attrs = [](uint64_t) -> Result<std::string> { return std::string("etag-3"); };
  ASSERT_TRUE(o.put_parts("big", parts, opts).is_ok());
  const std::string all = data[0] + data[1] + data[2];
  EXPECT_TRUE(*get(o, "big") == all);
  auto st = o.stat("big");
  ASSERT_TRUE(st.is_ok());
  EXPECT_TRUE(st->composite);
  EXPECT_EQ(st->size, all.size());
  EXPECT_EQ(listed(o, "big").at(0).attrs, "etag-3");
  for (auto [off, len] :
       std::vector<std::pair<size_t, size_t>>{{0, 10}, {(1 << 20) + 50, 6000}, {1000, all.size() - 1000}}) {
    std::string out;
    ASSERT_TRUE(o.read_range(*st, off, len, [&](std::span<const uint8_t> b) {
                   out.append(reinterpret_cast<const char*>(b.data()), b.size());
                   return Status::ok();
                 }).is_ok());
    EXPECT_TRUE(out == all.substr(off, len)) << off;
    // The same range as pieces kept to the end (the S3 gateway hands them to its loop): each keeps its buffer,
    // which the stream never writes again (one piece in flight: it would reuse the only one it has), and goes
    // back to the pool when dropped.
    std::vector<StreamPiece> kept;
    ASSERT_TRUE(NamedObjects(*c_, 1)
                    .read_range_pieces(*st, off, len,
                                       [&](StreamPiece piece) {
                                         EXPECT_GT(piece.size(), 0u);
                                         kept.push_back(std::move(piece));
                                         return Status::ok();
                                       })
                    .is_ok());
    std::string joined;
    for (const StreamPiece& piece : kept)
      joined.append(reinterpret_cast<const char*>(piece.bytes().data()), piece.size());
    EXPECT_TRUE(joined == all.substr(off, len)) << off;
  }
  // Replaced by parts 2 and a new one: part 2 stays, parts 0 and 1 go.
  NamedObjects::Part fresh{NamedObjects::fresh_data_object(), 0};
  ASSERT_TRUE(write_file_object(*c_, fresh.data, 0, source_of("tail"), 4, {}, &fresh.size).is_ok());
  std::vector<NamedObjects::Part> next = {parts[2], fresh};
  ASSERT_TRUE(o.put_parts("big", next).is_ok());
  EXPECT_TRUE(*get(o, "big") == data[2] + "tail");
  EXPECT_EQ(object_count(), 5u);  // record, index, manifest, two parts
  EXPECT_TRUE(o.list()->other.empty());
  ASSERT_TRUE(o.remove("big").is_ok());
  EXPECT_EQ(object_count(), 0u);
}

// Multipart uploads: parts staged under an upload, listed, replaced by number, owned by the layout while staged
// (no stray objects), then made one object or dropped with their data.
TEST_F(NamedObjectsTest, UploadsStagePartsUntilCompletedOrDropped) {
  NamedObjects o(*c_, 4);
  ASSERT_TRUE(o.begin_upload({"u1", "dir/big", "attrs", 7}).is_ok());
  ASSERT_TRUE(o.begin_upload({"u2", "other", "", 8}).is_ok());
  auto staged = [&](const std::string& data) {
    NamedObjects::Part p{NamedObjects::fresh_data_object(), 0};
    EXPECT_TRUE(write_file_object(*c_, p.data, 0, source_of(data), 4, {}, &p.size).is_ok());
    return p;
  };
  ASSERT_TRUE(o.add_part("u1", 1, staged("first"), "e1").is_ok());
  ASSERT_TRUE(o.add_part("u1", 2, staged("second"), "e2").is_ok());
  ASSERT_TRUE(o.add_part("u1", 2, staged("second again"), "e2b").is_ok());  // replaces part 2 (its data goes)
  ASSERT_TRUE(o.add_part("u2", 1, staged("x"), "ex").is_ok());
  // A part still being written is the upload's already (dropped with it), and not yet one of its parts.
  NamedObjects::Part writing{NamedObjects::fresh_data_object(), 0};
  ASSERT_TRUE(o.begin_part("u2", writing.data).is_ok());
  ASSERT_TRUE(write_file_object(*c_, writing.data, 0, source_of("half"), 4, {}, &writing.size).is_ok());
  EXPECT_EQ(o.parts("u2")->size(), 1u);
  auto u = o.upload("u1");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->name, "dir/big");
  EXPECT_EQ(u->attrs, "attrs");
  EXPECT_EQ(u->started_ms, 7u);
  EXPECT_EQ(o.upload("nope").status().code(), StatusCode::kNotFound);
  auto parts = o.parts("u1");
  ASSERT_TRUE(parts.is_ok());
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ(parts->at(2).etag, "e2b");
  EXPECT_EQ(parts->at(2).part.size, 12u);
  auto ups = o.uploads("dir/");
  ASSERT_TRUE(ups.is_ok());
  ASSERT_EQ(ups->size(), 1u);
  EXPECT_EQ(ups->at(0).id, "u1");
  EXPECT_EQ(o.uploads("")->size(), 2u);
  auto listing = o.list();
  ASSERT_TRUE(listing.is_ok());
  EXPECT_TRUE(listing->other.empty()) << "a staged part shows as a stray object";
  EXPECT_TRUE(listing->owned.count(parts->at(1).part.data));
  EXPECT_EQ(listing->uploads.size(), 2u);
  // Completed: the parts become the object's, the upload goes.
  std::vector<NamedObjects::Part> chosen = {parts->at(1).part, parts->at(2).part};
  ASSERT_TRUE(o.put_parts("dir/big", chosen).is_ok());
  ASSERT_TRUE(o.drop_upload("u1", {chosen[0].data, chosen[1].data}).is_ok());
  EXPECT_EQ(*get(o, "dir/big"), "firstsecond again");
  EXPECT_EQ(o.uploads("")->size(), 1u);
  // Dropped: nothing of it stays.
  ASSERT_TRUE(o.drop_upload("u2", {}).is_ok());
  ASSERT_TRUE(o.remove("dir/big").is_ok());
  EXPECT_EQ(object_count(), 0u);
}

// Puts of one name from several clients at once: the last swap wins whole, and nothing is left behind.
TEST_F(NamedObjectsTest, PutsOfOneNameAtOnce) {
  std::vector<std::string> bodies;
  std::vector<std::unique_ptr<Container>> clients;
  for (int i = 0; i < 4; ++i) {  // two of a data object, two kept in the record
    bodies.push_back(random_bytes(i < 2 ? (1 << 20) + i * 5000 : 1000 + i, 10 + i));
    clients.push_back(open(session()));
    ASSERT_TRUE(clients.back());
  }
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> failed{0};
    for (int i = 0; i < 4; ++i)
      threads.emplace_back([&, i] {
        NamedObjects o(*clients[i], 4);
        if (!o.put("same", source_of(bodies[i])).is_ok()) ++failed;
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failed.load(), 0);
    NamedObjects o(*c_, 4);
    auto got = get(o, "same");
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_NE(std::find(bodies.begin(), bodies.end(), *got), bodies.end()) << "a mix of two puts";
    // The record, one data object (none for a small one), the index.
    EXPECT_EQ(object_count(), got->size() > NamedObjects::kInlineBytes ? 3u : 2u) << "a replaced object left behind";
  }
}

// Objects `rfos put` stored before this layout: data under the record, dkeys the decimal chunk index.
TEST_F(NamedObjectsTest, ObjectsOfTheOlderLayoutAreReadAndReplaced) {
  NamedObjects o(*c_, 4);
  std::string data = random_bytes((2 << 20) + 7, 6);
  ObjectId record = NamedObjects::record_of("old");
  for (uint64_t pos = 0, index = 0; pos < data.size(); ++index, pos += 1 << 20) {
    std::string piece = data.substr(pos, 1 << 20);
    ASSERT_TRUE(c_->write(record, std::to_string(index), "d", pos, bytes(piece)).is_ok());
  }
  ASSERT_TRUE(c_->put_value(record, "meta", "name", "old").is_ok());
  ASSERT_TRUE(c_->put_value(record, "meta", "size", std::to_string(data.size())).is_ok());
  auto st = o.stat("old");
  ASSERT_TRUE(st.is_ok());
  EXPECT_TRUE(st->legacy);
  EXPECT_TRUE(*get(o, "old") == data);
  EXPECT_EQ(o.list()->named.size(), 1u);
  std::string fresh = "new bytes";
  ASSERT_TRUE(o.put("old", source_of(fresh)).is_ok());
  EXPECT_TRUE(*get(o, "old") == fresh);
  EXPECT_EQ(*c_->list_dkeys(record), std::vector<std::string>{"meta"}) << "the older layout's data is left";
  ASSERT_TRUE(o.remove("old").is_ok());
  EXPECT_EQ(object_count(), 0u);
}

}  // namespace
}  // namespace rfos::client
