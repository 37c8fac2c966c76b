// posix::execute over an in-memory store: each operation is one batch, checks what Linux checks, and asks for
// what it cannot see of inodes elsewhere.
#include "posix/dir_ops.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "posix/dir_ops_testing.h"

namespace rfos::posix {
namespace {

const ObjectId kDir{0, 1};
const ObjectId kOther{0, 4};  // another directory
const Cred kAlice{1000, 1000, {}};
const Cred kBob{1001, 1001, {}};

DirRequest create_req(const std::string& name, const ObjectId& oid, uint32_t mode, const Cred& who = kAlice) {
  DirRequest q;
  q.op = DirOp::kCreate;
  q.cred = who;
  q.dir = kDir;
  q.name = name;
  q.oid = oid;
  q.mode = mode;
  q.inode_here = true;
  return q;
}

DirRequest remove_req(const std::string& name, const Cred& who = kAlice) {
  DirRequest q;
  q.op = DirOp::kRemove;
  q.cred = who;
  q.dir = kDir;
  q.name = name;
  return q;
}

class DirOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.mkdir(kDir, 0777);
    store_.mkdir(kOther, 0777);
  }
  testing::MemStore store_;
};

TEST_F(DirOpsTest, CreateIsOneBatchWithItsFirstBytes) {
  DirRequest q = create_req("a", {7, 7}, S_IFREG | 0640);
  q.data = "hello";
  auto r = execute(q, store_, 42);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(store_.batches, 1);
  EXPECT_EQ(store_.durable_batches, 0);  // lazy unless asked
  EXPECT_EQ(r->attr.size, 5u);
  EXPECT_EQ(r->attr.uid, 1000u);
  EXPECT_EQ(r->attr.nlink, 1u);
  EXPECT_TRUE(store_.has_entry(kDir, "a"));
  EXPECT_EQ(store_.inode({7, 7})->mode, static_cast<uint32_t>(S_IFREG | 0640));
  EXPECT_EQ(*store_.data_end({7, 7}), 5u);
  EXPECT_EQ(store_.inode(kDir)->mtime_ns, 42u);
  // The name is taken: nothing changes.
  EXPECT_EQ(execute(create_req("a", {8, 8}, S_IFREG | 0600), store_, 43).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store_.batches, 1);
  EXPECT_FALSE(store_.inode({8, 8}).is_ok());
  // mkdir counts a link in the parent; durable when asked.
  DirRequest d = create_req("sub", {9, 9}, S_IFDIR | 0755);
  d.durable = true;
  ASSERT_TRUE(execute(d, store_, 44).is_ok());
  EXPECT_EQ(store_.inode(kDir)->nlink, 3u);
  EXPECT_EQ(store_.durable_batches, 1);
}

TEST_F(DirOpsTest, PermissionsAndNamesAreChecked) {
  store_.mkdir({0, 9}, 0755, 1000);  // alice's
  DirRequest q = create_req("x", {7, 1}, S_IFREG | 0644, kBob);
  q.dir = {0, 9};
  EXPECT_EQ(execute(q, store_, 1).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(execute(create_req("..", {7, 2}, S_IFREG | 0644), store_, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(execute(create_req(std::string(256, 'n'), {7, 3}, S_IFREG | 0644), store_, 1).status().code(),
            StatusCode::kNameTooLong);
  DirRequest in_file = create_req("y", {7, 4}, S_IFREG | 0644);
  in_file.dir = {7, 7};  // no such inode
  EXPECT_EQ(execute(in_file, store_, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_.batches, 0);
}

TEST_F(DirOpsTest, RemoveDropsALocalLinkAndLeavesARemoteOneToTheClient) {
  ASSERT_TRUE(execute(create_req("a", {7, 7}, S_IFREG | 0644), store_, 1).is_ok());
  auto r = execute(remove_req("a"), store_, 2);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->inode_done);
  EXPECT_EQ(r->attr.nlink, 0u);
  EXPECT_FALSE(store_.has_entry(kDir, "a"));
  EXPECT_EQ(execute(remove_req("a"), store_, 3).status().code(), StatusCode::kNotFound);

  // An inode elsewhere: the entry goes in a durable batch, the link count is the client's to drop.
  store_.here = [](const ObjectId& oid, std::string_view) { return oid.hi == 0; };
  store_.values[{kDir, "b", std::string(kEntryAkey)}] = encode_entry({5, 5}, S_IFREG);
  int durable = store_.durable_batches;
  r = execute(remove_req("b"), store_, 4);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->inode_done);
  EXPECT_EQ(r->other, (ObjectId{5, 5}));
  EXPECT_EQ(store_.durable_batches, durable + 1);
  EXPECT_FALSE(store_.has_entry(kDir, "b"));
}

TEST_F(DirOpsTest, StickyDirectoriesAndRemoteDirectoriesAskForAHint) {
  store_.mkdir({0, 2}, 01777, 0);  // /tmp-like
  store_.here = [](const ObjectId& oid, std::string_view) { return oid.hi == 0; };
  store_.values[{ObjectId{0, 2}, "f", std::string(kEntryAkey)}] = encode_entry({5, 5}, S_IFREG);
  DirRequest q = remove_req("f", kBob);
  q.dir = {0, 2};
  auto r = execute(q, store_, 1);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->need, (ObjectId{5, 5}));  // whose file is it?
  EXPECT_EQ(store_.batches, 0);
  q.hints.push_back({{5, 5}, 1000, false});  // alice's: bob may not
  EXPECT_EQ(execute(q, store_, 2).status().code(), StatusCode::kNotPermitted);
  q.hints[0].uid = 1001;
  r = execute(q, store_, 3);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->need, ObjectId{});
  EXPECT_FALSE(store_.has_entry({0, 2}, "f"));

  // rmdir of a directory elsewhere: only the client knows whether it is empty.
  store_.values[{kDir, "sub", std::string(kEntryAkey)}] = encode_entry({6, 6}, S_IFDIR);
  DirRequest rm = remove_req("sub");
  EXPECT_EQ(execute(rm, store_, 4).status().code(), StatusCode::kIsDirectory);
  rm.flags = kRemoveDir;
  EXPECT_EQ(execute(rm, store_, 5)->need, (ObjectId{6, 6}));
  rm.hints.push_back({{6, 6}, 1000, false});
  EXPECT_EQ(execute(rm, store_, 6).status().code(), StatusCode::kNotEmpty);
  rm.hints[0].empty = true;
  ASSERT_TRUE(execute(rm, store_, 7).is_ok());
  EXPECT_EQ(store_.inode(kDir)->nlink, 1u);
}

TEST_F(DirOpsTest, RenameReplacesInOneBatch) {
  ASSERT_TRUE(execute(create_req("a", {7, 1}, S_IFREG | 0644), store_, 1).is_ok());
  ASSERT_TRUE(execute(create_req("b", {7, 2}, S_IFREG | 0644), store_, 2).is_ok());
  DirRequest q;
  q.op = DirOp::kRename;
  q.cred = kAlice;
  q.dir = q.dir2 = kDir;
  q.name = "a";
  q.name2 = "b";
  q.flags = kRenameNoReplace;
  EXPECT_EQ(execute(q, store_, 3).status().code(), StatusCode::kAlreadyExists);
  q.flags = 0;
  int batches = store_.batches;
  auto r = execute(q, store_, 4);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(store_.batches, batches + 1);
  EXPECT_EQ(r->other, (ObjectId{7, 2}));
  EXPECT_TRUE(r->inode_done);
  EXPECT_EQ(r->attr.nlink, 0u);
  EXPECT_FALSE(store_.has_entry(kDir, "a"));
  EXPECT_EQ(decode_entry("b", store_.values[{kDir, "b", std::string(kEntryAkey)}])->oid, (ObjectId{7, 1}));
  EXPECT_EQ(store_.inode({7, 2})->nlink, 0u);
  // Into another directory of this target, a directory too: its parent link and both link counts move.
  q.dir2 = kOther;
  q.name = "b";
  q.name2 = "c";
  ASSERT_TRUE(execute(q, store_, 5).is_ok());
  EXPECT_TRUE(store_.has_entry(kOther, "c"));
  ASSERT_TRUE(execute(create_req("d", {9, 1}, S_IFDIR | 0755), store_, 6).is_ok());
  EXPECT_EQ(store_.inode(kDir)->nlink, 3u);
  q.name = "d";
  q.name2 = "d";
  ASSERT_TRUE(execute(q, store_, 7).is_ok());
  EXPECT_EQ(store_.inode({9, 1})->parent, kOther);
  EXPECT_EQ(store_.inode(kDir)->nlink, 2u);
  EXPECT_EQ(store_.inode(kOther)->nlink, 3u);
  // Not into itself: kOther/d moved below kOther/d/sub.
  DirRequest sub = create_req("sub", {9, 2}, S_IFDIR | 0755);
  sub.dir = {9, 1};
  ASSERT_TRUE(execute(sub, store_, 8).is_ok());
  DirRequest loop = q;
  loop.dir = kOther;
  loop.name = "d";
  loop.dir2 = {9, 2};
  loop.name2 = "x";
  EXPECT_EQ(execute(loop, store_, 9).status().code(), StatusCode::kInvalidArgument);
  // Exchange within one directory.
  q.dir = q.dir2 = kOther;
  q.name = "d";
  q.name2 = "c";
  q.flags = kRenameExchange;
  ASSERT_TRUE(execute(q, store_, 10).is_ok());
  EXPECT_EQ(decode_entry("c", store_.values[{kOther, "c", std::string(kEntryAkey)}])->oid, (ObjectId{9, 1}));
  EXPECT_EQ(decode_entry("d", store_.values[{kOther, "d", std::string(kEntryAkey)}])->oid, (ObjectId{7, 1}));
}

TEST_F(DirOpsTest, LinkAndSetattr) {
  ASSERT_TRUE(execute(create_req("a", {7, 1}, S_IFREG | 04755), store_, 1).is_ok());
  DirRequest l;
  l.op = DirOp::kLink;
  l.cred = kAlice;
  l.dir = kOther;
  l.name = "a2";
  l.oid = {7, 1};
  auto r = execute(l, store_, 2);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->attr.nlink, 2u);
  EXPECT_TRUE(store_.has_entry(kOther, "a2"));
  EXPECT_EQ(execute(l, store_, 3).status().code(), StatusCode::kAlreadyExists);

  DirRequest s;
  s.op = DirOp::kSetattr;
  s.cred = kBob;
  s.oid = {7, 1};
  s.set.set_mode = true;
  s.set.mode = 0777;
  EXPECT_EQ(execute(s, store_, 4).status().code(), StatusCode::kNotPermitted);
  s.cred = kAlice;
  s.set.touch = true;
  r = execute(s, store_, 5);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->attr.mode, static_cast<uint32_t>(S_IFREG | 0777));
  EXPECT_EQ(r->attr.mtime_ns, 5u);
  EXPECT_EQ(r->attr.ctime_ns, 5u);
  s.set = {};
  s.set.set_size = true;
  s.set.size = 100;
  r = execute(s, store_, 6);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->floor, 100u);
  EXPECT_EQ(r->attr.size, 100u);
}

TEST_F(DirOpsTest, ATruncateCutsItsFileInTheSameBatchWhenItAllLiesHere) {
  DirRequest c = create_req("f", {7, 2}, S_IFREG | 0644);
  c.data = std::string(3000, 'x');
  ASSERT_TRUE(execute(c, store_, 1).is_ok());
  DirRequest s;
  s.op = DirOp::kSetattr;
  s.cred = kBob;
  s.oid = {7, 2};
  s.flags = kCutHere;
  s.set.set_size = true;
  s.set.size = 1000;
  int before = store_.batches;
  EXPECT_EQ(execute(s, store_, 2).status().code(), StatusCode::kPermissionDenied);  // not bob's to write
  EXPECT_EQ(*store_.first_chunk_end({7, 2}), 3000u) << "a refused cut cuts nothing";
  s.cred = kAlice;
  int sized = store_.sized;
  auto r = execute(s, store_, 3);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->inode_done);
  EXPECT_EQ(store_.batches, before + 1) << "the cut and the inode in one batch";
  EXPECT_EQ(store_.sized, sized) << "a cut of a 1 MiB chunk punches to its end, not to the data's";
  EXPECT_EQ(r->attr.size, 1000u);
  EXPECT_EQ(r->attr.mtime_ns, 3u);
  EXPECT_EQ(*store_.first_chunk_end({7, 2}), 1000u);
  EXPECT_EQ(*store_.read_data({7, 2}, 1000), std::string(1000, 'x'));
  s.set.size = 5000;  // growing cuts nothing
  r = execute(s, store_, 4);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->attr.size, 5000u);
  EXPECT_EQ(*store_.first_chunk_end({7, 2}), 1000u);

  // A file of a larger chunk: its cut finds the data's end and punches up to it.
  DirRequest big = create_req("big", {7, 3}, S_IFREG | 0644);
  big.chunk = 64u << 20;
  big.data = std::string(3000, 'y');
  ASSERT_TRUE(execute(big, store_, 4).is_ok());
  s.oid = {7, 3};
  s.set.size = 10;
  sized = store_.sized;
  r = execute(s, store_, 4);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_GT(store_.sized, sized);
  EXPECT_EQ(r->attr.size, 10u);
  EXPECT_EQ(*store_.first_chunk_end({7, 3}), 10u);
  s.oid = {7, 2};

  // A file whose data may lie elsewhere (kSpans), or whose first chunk is elsewhere: nothing done here.
  DirRequest spans;
  spans.op = DirOp::kSetattr;
  spans.cred = kAlice;
  spans.oid = {7, 2};
  spans.set.spans = true;
  ASSERT_TRUE(execute(spans, store_, 5).is_ok());
  before = store_.batches;
  s.set.size = 10;
  r = execute(s, store_, 6);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->inode_done);
  EXPECT_EQ(store_.batches, before);
  EXPECT_EQ(store_.inode({7, 2})->size, 5000u);
  EXPECT_EQ(*store_.first_chunk_end({7, 2}), 1000u);
}

TEST_F(DirOpsTest, PurgeTakesOnlyAnUnlinkedInode) {
  DirRequest q = create_req("a", {7, 1}, S_IFREG | 0644);
  q.data = "bytes";
  ASSERT_TRUE(execute(q, store_, 1).is_ok());
  DirRequest p;
  p.op = DirOp::kPurge;
  p.oid = {7, 1};
  auto r = execute(p, store_, 2);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->inode_done);  // still named
  EXPECT_TRUE(store_.inode({7, 1}).is_ok());
  ASSERT_TRUE(execute(remove_req("a"), store_, 3).is_ok());
  r = execute(p, store_, 4);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->inode_done);
  EXPECT_EQ(r->attr.size, 5u);
  EXPECT_FALSE(store_.inode({7, 1}).is_ok());
  EXPECT_EQ(*store_.data_end({7, 1}), 0u);
  EXPECT_TRUE(execute(p, store_, 5).is_ok());  // again: nothing left, nothing to do
}

TEST_F(DirOpsTest, RemoveMayPurgeWhatNobodyHasOpen) {
  for (int i = 1; i <= 2; ++i) {
    DirRequest q = create_req("f" + std::to_string(i), {7, uint64_t(i)}, S_IFREG | 0644);
    q.data = "data";
    ASSERT_TRUE(execute(q, store_, 1).is_ok());
  }
  DirRequest rm = remove_req("f1");
  rm.flags = kPurgeUnlinked;
  rm.keep = {{7, 2}};  // f2 is open somewhere
  auto r = execute(rm, store_, 2);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->purged);
  EXPECT_FALSE(store_.inode({7, 1}).is_ok());
  EXPECT_EQ(*store_.data_end({7, 1}), 0u);
  rm.name = "f2";
  r = execute(rm, store_, 3);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->purged);
  EXPECT_EQ(store_.inode({7, 2})->nlink, 0u);  // left for the purge after its last close
  EXPECT_EQ(*store_.data_end({7, 2}), 4u);
}

// A directory page with the attributes of the inodes held here, resumed from its anchor.
TEST_F(DirOpsTest, ReadDirPagesCarryTheAttributes) {
  store_.here = [](const ObjectId& oid, std::string_view) { return oid.hi != 5; };
  for (int i = 0; i < 5; ++i) {
    DirRequest q = create_req("f" + std::to_string(i), {7, uint64_t(i)}, S_IFREG | 0644);
    q.data = std::string(10 + i, 'x');
    ASSERT_TRUE(execute(q, store_, 1).is_ok());
  }
  store_.values[{kDir, "remote", std::string(kEntryAkey)}] = encode_entry({5, 5}, S_IFREG);  // an old layout's
  DirRequest q;
  q.op = DirOp::kReadDir;
  q.dir = kDir;
  q.offset = 4;
  std::vector<DirPlusEntry> all;
  for (int pages = 0; pages < 10; ++pages) {
    auto r = execute(q, store_, 2);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    auto page = decode_dir_page(r->data);
    ASSERT_TRUE(page.is_ok());
    EXPECT_LE(page->entries.size(), 4u);
    all.insert(all.end(), page->entries.begin(), page->entries.end());
    if (page->done) break;
    q.data = page->anchor;
  }
  ASSERT_EQ(all.size(), 6u);
  for (const DirPlusEntry& e : all) {
    if (e.entry.name == "remote") {
      EXPECT_FALSE(e.has_attr);
      continue;
    }
    ASSERT_TRUE(e.has_attr) << e.entry.name;
    EXPECT_EQ(e.attr.oid, e.entry.oid);
    EXPECT_EQ(e.attr.size, 10u + (e.entry.name[1] - '0'));
    EXPECT_TRUE(e.size_final);
  }
  q.dir = {7, 1};  // a file
  q.data.clear();
  EXPECT_EQ(execute(q, store_, 3).status().code(), StatusCode::kNotDirectory);
}

TEST_F(DirOpsTest, AFailedBatchAnswersItsError) {
  store_.fail_apply = error(StatusCode::kNoSpace, "full");
  EXPECT_EQ(execute(create_req("a", {7, 1}, S_IFREG | 0644), store_, 1).status().code(), StatusCode::kNoSpace);
  EXPECT_FALSE(store_.has_entry(kDir, "a"));
}

// A caller that left its supplementary groups out (the mount) is refused with kGroupsNeeded, and nothing
// changes, only where membership decides; where it does not, the operation goes on without them.
TEST_F(DirOpsTest, GroupsLeftOutAreAskedForOnlyWhereTheyDecide) {
  auto as_target_sees = [](DirRequest q, std::vector<uint32_t>* groups) {
    q.cred = groups ? Cred(kBob.uid, kBob.gid, *groups)
                    : Cred::with_groups_later(kBob.uid, kBob.gid, nullptr);  // never learnt before sending
    auto back = decode_dir_request(encode_dir_request(q));
    EXPECT_TRUE(back.is_ok());
    EXPECT_EQ(back->cred.groups_known, groups != nullptr);
    return *back;
  };
  std::vector<uint32_t> member{500}, none;
  const ObjectId team{0, 20}, open_to_others{0, 21};
  store_.mkdir(team, 0770, 1000, 500);            // alice's, group 500 may write
  store_.mkdir(open_to_others, 0707, 1000, 500);  // group 500 may not, others may
  auto create_in = [&](const ObjectId& dir, const std::string& name, std::vector<uint32_t>* groups) {
    DirRequest q = create_req(name, {7, dir.lo * 100 + name.size()}, S_IFREG | 0644);
    q.dir = dir;
    return execute(as_target_sees(q, groups), store_, 5);
  };
  int batches = store_.batches;
  EXPECT_EQ(create_in(team, "a", nullptr).status().code(), StatusCode::kGroupsNeeded);
  EXPECT_EQ(create_in(open_to_others, "a", nullptr).status().code(), StatusCode::kGroupsNeeded);  // no grant
  EXPECT_EQ(store_.batches, batches);
  EXPECT_FALSE(store_.has_entry(team, "a"));
  EXPECT_TRUE(create_in(team, "a", &member).is_ok());
  EXPECT_EQ(create_in(team, "bb", &none).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(create_in(open_to_others, "a", &member).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(create_in(open_to_others, "a", &none).is_ok());
  // 0777: the group's bits and the others' agree, so the groups are not asked for.
  DirRequest q = create_req("c", {7, 99}, S_IFREG | 0644);
  EXPECT_TRUE(execute(as_target_sees(q, nullptr), store_, 6).is_ok());
  // A read needs them just the same.
  DirRequest look;
  look.op = DirOp::kLookup;
  look.dir = team;
  look.name = "a";
  EXPECT_EQ(execute(as_target_sees(look, nullptr), store_, 7).status().code(), StatusCode::kGroupsNeeded);
  EXPECT_TRUE(execute(as_target_sees(look, &member), store_, 7).is_ok());
}

// On the caller's side, groups left out are learnt once, the first time they decide something.
TEST(DirOpsCred, GroupsLeftOutAreLearntOnceWhenTheyDecide) {
  int fetched = 0;
  Cred c = Cred::with_groups_later(1001, 1001, [&]() -> Result<std::vector<uint32_t>> {
    ++fetched;
    return std::vector<uint32_t>{500};
  });
  Attr dir;
  dir.mode = S_IFDIR | 0775;
  dir.uid = 1000;
  dir.gid = 500;
  EXPECT_TRUE(permits(dir, c, R_OK | X_OK));  // the group's bits and the others' agree
  EXPECT_EQ(fetched, 0);
  EXPECT_TRUE(permits(dir, c, W_OK));
  EXPECT_TRUE(permits(dir, c, W_OK));
  EXPECT_EQ(fetched, 1);
  EXPECT_FALSE(groups_needed(c));
  // Sent after they were learnt, they travel with the request.
  DirRequest q = create_req("x", {1, 1}, S_IFREG | 0644, c);
  auto back = decode_dir_request(encode_dir_request(q));
  ASSERT_TRUE(back.is_ok());
  EXPECT_TRUE(back->cred.groups_known);
  EXPECT_EQ(back->cred.groups, std::vector<uint32_t>{500});
  // Groups that cannot be had: refused, and said so.
  Cred gone = Cred::with_groups_later(
      1001, 1001, []() -> Result<std::vector<uint32_t>> { return error(StatusCode::kGroupsNeeded, "gone"); });
  EXPECT_FALSE(permits(dir, gone, W_OK));
  EXPECT_TRUE(groups_needed(gone));
}

TEST(DirOpsCodec, RequestsAndRepliesRoundTrip) {
  DirRequest q = create_req("name", {1, 2}, S_IFLNK | 0777);
  q.cred.groups = {4, 5, 6};
  q.data = "target";
  q.dir2 = {3, 4};
  q.name2 = "n2";
  q.set.set_gid = true;
  q.set.gid = 9;
  q.hints.push_back({{8, 8}, 7, true});
  auto back = decode_dir_request(encode_dir_request(q));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(encode_dir_request(*back), encode_dir_request(q));
  EXPECT_EQ(back->cred.groups, q.cred.groups);
  EXPECT_EQ(back->hints, q.hints);
  std::string bytes = encode_dir_request(q);
  for (size_t cut = 0; cut < bytes.size(); ++cut) EXPECT_FALSE(decode_dir_request(bytes.substr(0, cut)).is_ok()) << cut;
  EXPECT_FALSE(decode_dir_request(bytes + "x").is_ok());
  DirReply r;
  r.attr.nlink = 3;
  r.need = {1, 1};
  r.inode_done = false;
  auto rb = decode_dir_reply(encode_dir_reply(r));
  ASSERT_TRUE(rb.is_ok());
  DirPlusPage page;
  page.anchor = "f9";
  page.entries.push_back({{"f9", {7, 9}, S_IFREG}, true, false, {}});
  page.entries.back().attr.size = 123;
  auto pb = decode_dir_page(encode_dir_page(page));
  ASSERT_TRUE(pb.is_ok());
  EXPECT_EQ(pb->entries.size(), 1u);
  EXPECT_EQ(pb->entries[0].attr.size, 123u);
  EXPECT_FALSE(pb->entries[0].size_final);
  std::string pbytes = encode_dir_page(page);
  EXPECT_FALSE(decode_dir_page(pbytes.substr(0, pbytes.size() - 1)).is_ok());
  EXPECT_EQ(rb->attr.nlink, 3u);
  EXPECT_EQ(rb->need, (ObjectId{1, 1}));
  EXPECT_FALSE(rb->inode_done);
}

// What each change tells other clients to drop: the names it touched and the inodes whose attributes moved.
TEST(DirOpsNotice, EachChangeNamesWhatItLeftStale) {
  ObjectId d1{1, 1}, d2{1, 2}, f{2, 1}, g{2, 2};
  DirReply r;
  auto entries = [](const Notice& n) { return n.entries; };
  using Entries = std::vector<std::pair<ObjectId, std::string>>;

  DirRequest q = create_req("a", f, S_IFREG | 0644);
  q.dir = d1;
  Notice n = notice_of(q, r);
  EXPECT_EQ(entries(n), (Entries{{d1, "a"}}));
  EXPECT_EQ(n.inodes, std::vector<ObjectId>{d1});

  q.op = DirOp::kRemove;
  r.other = f;
  n = notice_of(q, r);
  EXPECT_EQ(entries(n), (Entries{{d1, "a"}}));
  EXPECT_EQ(n.inodes, (std::vector<ObjectId>{d1, f}));

  q.op = DirOp::kRename;
  q.dir2 = d2;
  q.name2 = "b";
  r.other = g;  // replaced
  n = notice_of(q, r);
  EXPECT_EQ(entries(n), (Entries{{d1, "a"}, {d2, "b"}}));
  EXPECT_EQ(n.inodes, (std::vector<ObjectId>{d1, d2, g}));
  q.dir2 = d1;  // within one directory: the directory once
  n = notice_of(q, r);
  EXPECT_EQ(n.inodes, (std::vector<ObjectId>{d1, g}));

  q.op = DirOp::kLink;
  q.oid = f;
  r.other = {};
  n = notice_of(q, r);
  EXPECT_EQ(entries(n), (Entries{{d1, "a"}}));
  EXPECT_EQ(n.inodes, (std::vector<ObjectId>{d1, f}));

  for (DirOp op : {DirOp::kSetattr, DirOp::kWrite}) {
    q.op = op;
    n = notice_of(q, r);
    EXPECT_TRUE(n.entries.empty());
    EXPECT_EQ(n.inodes, std::vector<ObjectId>{f});
  }
  for (DirOp op : {DirOp::kPurge, DirOp::kLookup, DirOp::kGetattr, DirOp::kReadDir}) {
    q.op = op;
    EXPECT_TRUE(notice_of(q, r).empty()) << static_cast<int>(op);
  }
}

TEST(DirOpsNotice, RoundTripsAndRefusesWhatIsMalformed) {
  Notice n;
  n.entries = {{{1, 1}, "a"}, {{1, 2}, std::string(kNameMax, 'n')}};
  n.inodes = {{1, 1}, {1, 2}, {3, 4}};
  std::string bytes = encode_notice(n);
  auto back = decode_notice(bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->entries, n.entries);
  EXPECT_EQ(back->inodes, n.inodes);
  for (size_t cut = 0; cut < bytes.size(); ++cut) EXPECT_FALSE(decode_notice(bytes.substr(0, cut)).is_ok()) << cut;
  EXPECT_FALSE(decode_notice(bytes + "x").is_ok());
  Notice long_name;
  long_name.entries = {{{1, 1}, std::string(kNameMax + 1, 'n')}};
  EXPECT_FALSE(decode_notice(encode_notice(long_name)).is_ok());
  Notice many;
  many.inodes.resize(1000);
  EXPECT_FALSE(decode_notice(encode_notice(many)).is_ok());
}

}  // namespace
}  // namespace rfos::posix
