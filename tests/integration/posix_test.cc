// The POSIX namespace library against a real `rfos server` on loopback (no FUSE): every operation and its
// errno, permission checks, two clients on one container, a large directory, stable resumable readdir.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client/container.h"
#include "client/control_client.h"
#include "engine/engine_testing.h"
#include "posix/namespace.h"
#include "server_process.h"

namespace rfos::posix {
namespace {

const Cred kRoot{0, 0, {}};
const Cred kAlice{1000, 1000, {}};
const Cred kBob{1001, 1001, {50}};

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

class Posix : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::ServerProcess>(dir_.path(), std::vector<std::string>{"--provider", "ucx+tcp"});
    ASSERT_TRUE(server_->start());
    control_ = client::ControlClient::create(server_->address());
    ASSERT_TRUE(control_->pool_create("p").is_ok());
    ASSERT_TRUE(control_->cont_create("p", "c", {}).is_ok());
    ns_ = mount();
    ASSERT_TRUE(ns_);
    root_ = ns_->root();
  }

  void operations_survive_a_kill(bool durable);

  // A namespace as another client would open it: its own sessions.
  std::unique_ptr<Namespace> mount() {
    auto* control = control_.get();
    auto ns = Namespace::open([control]() { return client::Container::open(*control, "p", "c"); },
                              [control]() -> Result<StatFs> {
                                RFOS_ASSIGN_OR_RETURN(auto pool, control->pool_query("p"));
                                StatFs s;
                                s.total_bytes = pool.total_bytes;
                                s.free_bytes = pool.free_bytes;
                                return s;
                              },
                              0777);
    EXPECT_TRUE(ns.is_ok()) << ns.status().to_string();
    return ns.is_ok() ? std::move(ns).value() : nullptr;
  }

  std::string read_all(Namespace& ns, const ObjectId& oid) {
    auto a = ns.getattr(oid);
    EXPECT_TRUE(a.is_ok());
    std::string out(a->size, '\0');
    auto n = ns.read(oid, 0, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
    EXPECT_TRUE(n.is_ok()) << n.status().to_string();
    out.resize(n.is_ok() ? *n : 0);
    return out;
  }

  engine::testing::TempDir dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<client::ControlClient> control_;
  std::unique_ptr<Namespace> ns_;
  ObjectId root_;
};

TEST_F(Posix, FilesDirectoriesAndTheirErrors) {
  auto d = ns_->mkdir(root_, "data", 0755, kRoot);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_TRUE(S_ISDIR(d->mode));
  EXPECT_EQ(ns_->mkdir(root_, "data", 0755, kRoot).status().code(), StatusCode::kAlreadyExists);
  auto f = ns_->mknod(d->oid, "a.txt", S_IFREG | 0644, 0, kRoot);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(ns_->getattr(root_)->nlink, 3u);  // ".", its own entry, data's ".."

  // Writes at offsets, sparse, across chunks; reads short at the end; holes read as zeros.
  std::string head = "hello, world";
  ASSERT_TRUE(ns_->write(f->oid, 0, bytes(head)).is_ok());
  EXPECT_EQ(read_all(*ns_, f->oid), head);
  std::string far = engine::testing::pattern(3, 100000);
  uint64_t at = (3u << 20) - 500;  // straddles a chunk boundary
  ASSERT_TRUE(ns_->write(f->oid, at, bytes(far)).is_ok());
  EXPECT_EQ(ns_->getattr(f->oid)->size, at + far.size());
  std::string all = read_all(*ns_, f->oid);
  ASSERT_EQ(all.size(), at + far.size());
  EXPECT_EQ(all.substr(0, head.size()), head);
  EXPECT_EQ(all.substr(head.size(), 1000), std::string(1000, '\0'));
  EXPECT_EQ(all.substr(at), far);

  // Truncate: shrink inside a chunk, grow sparse, shrink to zero.
  SetAttr t;
  t.set_size = true;
  t.size = 5;
  ASSERT_TRUE(ns_->setattr(f->oid, t, kRoot).is_ok());
  EXPECT_EQ(read_all(*ns_, f->oid), "hello");
  t.size = 10000;
  ASSERT_TRUE(ns_->setattr(f->oid, t, kRoot).is_ok());
  EXPECT_EQ(read_all(*ns_, f->oid), "hello" + std::string(9995, '\0'));
  t.size = 0;
  ASSERT_TRUE(ns_->setattr(f->oid, t, kRoot).is_ok());
  EXPECT_EQ(ns_->getattr(f->oid)->size, 0u);

  EXPECT_EQ(ns_->lookup(d->oid, "nope", kRoot).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ns_->lookup(f->oid, "x", kRoot).status().code(), StatusCode::kNotDirectory);
  EXPECT_EQ(ns_->mkdir(root_, std::string(256, 'n'), 0755, kRoot).status().code(), StatusCode::kNameTooLong);
  EXPECT_EQ(ns_->mkdir(root_, "a/b", 0755, kRoot).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ns_->rmdir(root_, "data", kRoot).code(), StatusCode::kNotEmpty);
  EXPECT_EQ(ns_->unlink(root_, "data", kRoot).status().code(), StatusCode::kIsDirectory);
  EXPECT_EQ(ns_->rmdir(d->oid, "a.txt", kRoot).code(), StatusCode::kNotDirectory);
  EXPECT_EQ(ns_->setattr(d->oid, t, kRoot).status().code(), StatusCode::kIsDirectory);
  EXPECT_EQ(ns_->resolve("/data/a.txt", kRoot)->oid, f->oid);
  EXPECT_EQ(ns_->lookup(d->oid, "..", kRoot)->oid, root_);

  auto gone = ns_->unlink(d->oid, "a.txt", kRoot);
  ASSERT_TRUE(gone.is_ok());
  EXPECT_EQ(gone->nlink, 0u);
  ASSERT_TRUE(ns_->forget(f->oid).is_ok());
  EXPECT_EQ(ns_->getattr(f->oid).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(ns_->rmdir(root_, "data", kRoot).is_ok());
  EXPECT_EQ(ns_->lookup(root_, "data", kRoot).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ns_->getattr(root_)->nlink, 2u);
}

TEST_F(Posix, ChunkSizePerFile) {
  // The container's default, a size given at create, and one set through the xattr while the file is empty;
  // data crosses chunk boundaries of each and reads back.
  auto def = ns_->mknod(root_, "default", S_IFREG | 0644, 0, kRoot);
  auto small = ns_->mknod(root_, "small", S_IFREG | 0644, 0, kRoot, 64 * 1024);
  auto later = ns_->mknod(root_, "later", S_IFREG | 0644, 0, kRoot);
  ASSERT_TRUE(def.is_ok() && small.is_ok() && later.is_ok());
  EXPECT_EQ(*ns_->getxattr(def->oid, kChunkXattr), std::to_string(1 << 20));
  EXPECT_EQ(*ns_->getxattr(small->oid, kChunkXattr), "65536");
  ASSERT_TRUE(ns_->setxattr(later->oid, kChunkXattr, "8192", 0, kRoot).is_ok());
  EXPECT_EQ(*ns_->getxattr(later->oid, kChunkXattr), "8192");
  EXPECT_EQ(ns_->setxattr(later->oid, kChunkXattr, "5000", 0, kRoot).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ns_->mknod(root_, "bad", S_IFREG | 0644, 0, kRoot, 100).status().code(), StatusCode::kInvalidArgument);
  std::string data = engine::testing::pattern(11, 300000);
  for (const auto& f : {*def, *small, *later}) {
    ASSERT_TRUE(ns_->write(f.oid, 1000, bytes(data)).is_ok());
    EXPECT_EQ(read_all(*ns_, f.oid), std::string(1000, '\0') + data);
  }
  EXPECT_EQ(ns_->setxattr(later->oid, kChunkXattr, "4096", 0, kRoot).code(), StatusCode::kInvalidArgument);  // has data
  EXPECT_EQ(*ns_->listxattr(later->oid), std::vector<std::string>{});  // a layout, not a stored xattr
}

TEST_F(Posix, SymlinksHardLinksAndXattrs) {
  auto f = ns_->mknod(root_, "f", S_IFREG | 0644, 0, kRoot);
  ASSERT_TRUE(f.is_ok());
  auto l = ns_->symlink(root_, "l", "f", kRoot);
  ASSERT_TRUE(l.is_ok());
  EXPECT_TRUE(S_ISLNK(l->mode));
  EXPECT_EQ(*ns_->readlink(l->oid), "f");
  EXPECT_EQ(ns_->readlink(f->oid).status().code(), StatusCode::kInvalidArgument);

  auto h = ns_->link(f->oid, root_, "h", kRoot);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(h->nlink, 2u);
  ASSERT_TRUE(ns_->write(f->oid, 0, bytes("shared")).is_ok());
  EXPECT_EQ(read_all(*ns_, ns_->lookup(root_, "h", kRoot)->oid), "shared");
  EXPECT_EQ(ns_->unlink(root_, "f", kRoot)->nlink, 1u);
  EXPECT_EQ(read_all(*ns_, h->oid), "shared");  // still there through the other name
  auto dir = ns_->mkdir(root_, "d", 0755, kRoot);
  EXPECT_EQ(ns_->link(dir->oid, root_, "dl", kRoot).status().code(), StatusCode::kNotPermitted);

  ASSERT_TRUE(ns_->setxattr(h->oid, "user.tag", "v1", 0, kRoot).is_ok());
  EXPECT_EQ(*ns_->getxattr(h->oid, "user.tag"), "v1");
  EXPECT_EQ(ns_->setxattr(h->oid, "user.tag", "v2", 1 /* XATTR_CREATE */, kRoot).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ns_->setxattr(h->oid, "user.new", "v", 2 /* XATTR_REPLACE */, kRoot).code(), StatusCode::kNoData);
  ASSERT_TRUE(ns_->setxattr(h->oid, "user.tag", "v2", 2, kRoot).is_ok());
  ASSERT_TRUE(ns_->setxattr(h->oid, "user.b", "", 0, kRoot).is_ok());
  EXPECT_EQ(*ns_->listxattr(h->oid), (std::vector<std::string>{"user.b", "user.tag"}));
  EXPECT_EQ(ns_->getxattr(h->oid, "user.none").status().code(), StatusCode::kNoData);
  EXPECT_EQ(ns_->setxattr(h->oid, "bogus", "v", 0, kRoot).code(), StatusCode::kNotSupported);
  ASSERT_TRUE(ns_->removexattr(h->oid, "user.tag", kRoot).is_ok());
  EXPECT_EQ(ns_->removexattr(h->oid, "user.tag", kRoot).code(), StatusCode::kNoData);
  EXPECT_EQ(*ns_->listxattr(h->oid), (std::vector<std::string>{"user.b"}));
  // Xattrs and the inode live in the directory object too, but never show up as entries.
  ASSERT_TRUE(ns_->setxattr(dir->oid, "user.x", "1", 0, kRoot).is_ok());
  EXPECT_TRUE(ns_->readdir(dir->oid, "", 100)->entries.empty());
  EXPECT_TRUE(ns_->rmdir(root_, "d", kRoot).is_ok());
}

TEST_F(Posix, RenameInAllItsForms) {
  auto a = ns_->mkdir(root_, "a", 0755, kRoot);
  auto b = ns_->mkdir(root_, "b", 0755, kRoot);
  auto f = ns_->mknod(a->oid, "f", S_IFREG | 0644, 0, kRoot);
  auto g = ns_->mknod(b->oid, "g", S_IFREG | 0644, 0, kRoot);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && f.is_ok() && g.is_ok());
  ASSERT_TRUE(ns_->write(f->oid, 0, bytes("F")).is_ok());
  ASSERT_TRUE(ns_->write(g->oid, 0, bytes("G")).is_ok());

  // Within a directory, then across, then replacing a file.
  ASSERT_TRUE(ns_->rename(a->oid, "f", a->oid, "f2", 0, kRoot).is_ok());
  EXPECT_EQ(ns_->lookup(a->oid, "f", kRoot).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(ns_->rename(a->oid, "f2", b->oid, "f", 0, kRoot).is_ok());
  EXPECT_EQ(ns_->rename(b->oid, "f", b->oid, "g", kRenameNoReplace, kRoot).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(ns_->rename(b->oid, "f", b->oid, "g", 0, kRoot).is_ok());
  EXPECT_EQ(read_all(*ns_, ns_->lookup(b->oid, "g", kRoot)->oid), "F");
  EXPECT_EQ(ns_->getattr(g->oid).status().code(), StatusCode::kNotFound);  // the replaced file is gone

  // Exchange swaps two names, even a file and a directory.
  ASSERT_TRUE(ns_->mkdir(a->oid, "sub", 0755, kRoot).is_ok());
  ASSERT_TRUE(ns_->rename(b->oid, "g", a->oid, "sub", kRenameExchange, kRoot).is_ok());
  EXPECT_TRUE(S_ISREG(ns_->lookup(a->oid, "sub", kRoot)->mode));
  auto moved = ns_->lookup(b->oid, "g", kRoot);
  ASSERT_TRUE(moved.is_ok());
  EXPECT_TRUE(S_ISDIR(moved->mode));
  EXPECT_EQ(ns_->lookup(moved->oid, "..", kRoot)->oid, b->oid);
  EXPECT_EQ(ns_->rename(a->oid, "none", b->oid, "x", kRenameExchange, kRoot).code(), StatusCode::kNotFound);

  // Directories: not into themselves, not over a non-empty one, not file-over-dir or dir-over-file.
  EXPECT_EQ(ns_->rename(root_, "b", moved->oid, "b", 0, kRoot).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(ns_->mknod(moved->oid, "inside", S_IFREG | 0644, 0, kRoot).is_ok());
  EXPECT_EQ(ns_->rename(root_, "a", b->oid, "g", 0, kRoot).code(), StatusCode::kNotEmpty);
  EXPECT_EQ(ns_->rename(a->oid, "sub", b->oid, "g", 0, kRoot).code(), StatusCode::kIsDirectory);
  EXPECT_EQ(ns_->rename(b->oid, "g", a->oid, "sub", 0, kRoot).code(), StatusCode::kNotDirectory);
  // A directory moved across keeps its contents; link counts follow.
  uint32_t a_links = ns_->getattr(a->oid)->nlink, b_links = ns_->getattr(b->oid)->nlink;
  ASSERT_TRUE(ns_->rename(b->oid, "g", a->oid, "moved", 0, kRoot).is_ok());
  EXPECT_EQ(ns_->getattr(a->oid)->nlink, a_links + 1);
  EXPECT_EQ(ns_->getattr(b->oid)->nlink, b_links - 1);
  EXPECT_TRUE(ns_->resolve("/a/moved/inside", kRoot).is_ok());
  EXPECT_EQ(ns_->lookup(moved->oid, "..", kRoot)->oid, a->oid);
}

TEST_F(Posix, PermissionsAsLinuxChecksThem) {
  auto home = ns_->mkdir(root_, "home", 0755, kRoot);
  ASSERT_TRUE(home.is_ok());
  SetAttr own;
  own.set_uid = own.set_gid = true;
  own.uid = kAlice.uid;
  own.gid = kAlice.gid;
  ASSERT_TRUE(ns_->setattr(home->oid, own, kRoot).is_ok());
  auto f = ns_->mknod(home->oid, "notes", S_IFREG | 0600, 0, kAlice);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->uid, kAlice.uid);
  EXPECT_EQ(ns_->mknod(home->oid, "intruder", S_IFREG | 0644, 0, kBob).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ns_->unlink(home->oid, "notes", kBob).status().code(), StatusCode::kPermissionDenied);
  SetAttr chmod;
  chmod.set_mode = true;
  chmod.mode = 0644;
  EXPECT_EQ(ns_->setattr(f->oid, chmod, kBob).status().code(), StatusCode::kNotPermitted);
  ASSERT_TRUE(ns_->setattr(f->oid, chmod, kAlice).is_ok());
  SetAttr give;
  give.set_uid = true;
  give.uid = kBob.uid;
  EXPECT_EQ(ns_->setattr(f->oid, give, kAlice).status().code(), StatusCode::kNotPermitted);
  SetAttr regroup;
  regroup.set_gid = true;
  regroup.gid = 50;
  EXPECT_EQ(ns_->setattr(f->oid, regroup, kAlice).status().code(), StatusCode::kNotPermitted);  // not her group
  // No search permission on a directory: nothing below it can be looked up.
  chmod.mode = 0700;
  ASSERT_TRUE(ns_->setattr(home->oid, chmod, kAlice).is_ok());
  EXPECT_EQ(ns_->lookup(home->oid, "notes", kBob).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(ns_->lookup(home->oid, "notes", kAlice).is_ok());
  EXPECT_TRUE(ns_->lookup(home->oid, "notes", kRoot).is_ok());
  // Supplementary groups count.
  auto shared = ns_->mkdir(root_, "shared", 0770, kRoot);
  SetAttr g50;
  g50.set_gid = true;
  g50.gid = 50;
  ASSERT_TRUE(ns_->setattr(shared->oid, g50, kRoot).is_ok());
  EXPECT_TRUE(ns_->mknod(shared->oid, "bobs", S_IFREG | 0644, 0, kBob).is_ok());
  EXPECT_EQ(ns_->mknod(shared->oid, "alices", S_IFREG | 0644, 0, kAlice).status().code(),
            StatusCode::kPermissionDenied);
  // Sticky directories: others' entries stay (EPERM, as Linux answers).
  auto tmp = ns_->mkdir(root_, "tmp", 01777, kRoot);
  ASSERT_TRUE(tmp.is_ok());
  ASSERT_TRUE(ns_->mknod(tmp->oid, "mine", S_IFREG | 0644, 0, kAlice).is_ok());
  EXPECT_EQ(ns_->unlink(tmp->oid, "mine", kBob).status().code(), StatusCode::kNotPermitted);
  EXPECT_EQ(ns_->rename(tmp->oid, "mine", tmp->oid, "stolen", 0, kBob).code(), StatusCode::kNotPermitted);
  EXPECT_TRUE(ns_->unlink(tmp->oid, "mine", kAlice).is_ok());
  // Setgid directories hand down their group, and the bit to subdirectories.
  chmod.mode = 02777;
  ASSERT_TRUE(ns_->setattr(shared->oid, chmod, kRoot).is_ok());
  auto sub = ns_->mkdir(shared->oid, "sub", 0755, kBob);
  ASSERT_TRUE(sub.is_ok());
  EXPECT_EQ(sub->gid, 50u);
  EXPECT_TRUE(sub->mode & S_ISGID);
  EXPECT_EQ(ns_->mknod(shared->oid, "dev", S_IFCHR | 0600, 0x0101, kBob).status().code(), StatusCode::kNotPermitted);
}

TEST_F(Posix, TwoClientsSeeEachOther) {
  auto other = mount();
  ASSERT_TRUE(other);
  auto f = ns_->mknod(root_, "shared.bin", S_IFREG | 0644, 0, kRoot);
  ASSERT_TRUE(f.is_ok());
  std::string data = engine::testing::pattern(9, 50000);
  ASSERT_TRUE(ns_->write(f->oid, 0, bytes(data)).is_ok());
  auto seen = other->lookup(other->root(), "shared.bin", kRoot);
  ASSERT_TRUE(seen.is_ok());
  EXPECT_EQ(seen->size, data.size());
  EXPECT_EQ(read_all(*other, seen->oid), data);
  // Racing creates of one name: exactly one wins.
  std::atomic<int> wins{0};
  std::thread t1([&] { wins += ns_->mknod(root_, "race", S_IFREG | 0644, 0, kRoot).is_ok(); });
  std::thread t2([&] { wins += other->mknod(other->root(), "race", S_IFREG | 0644, 0, kRoot).is_ok(); });
  t1.join();
  t2.join();
  EXPECT_EQ(wins.load(), 1);
  ASSERT_TRUE(other->unlink(other->root(), "shared.bin", kRoot).is_ok());
  EXPECT_EQ(ns_->lookup(root_, "shared.bin", kRoot).status().code(), StatusCode::kNotFound);
}

// Namespace operations and small writes are acknowledged before they are synced (lazy), but once acknowledged
// they are in the targets' logs: a kill -9 of the server right after the last acknowledgement loses none of them,
// and the namespace is consistent after the restart. A durable operation (the mount's -o sync) is answered after
// that log's sync too, which the target leaves to a helper and answers from there: a kill keeps the page cache, so
// what this checks of that path is that its answers come and are right (the engine's power-cut test checks syncs).
void Posix::operations_survive_a_kill(bool durable) {
  ns_->set_durable(durable);
  auto d = ns_->mkdir(root_, "kept", 0755, kRoot);
  ASSERT_TRUE(d.is_ok());
  for (int i = 0; i < 40; ++i) {
    auto f = ns_->mknod(d->oid, "f" + std::to_string(i), S_IFREG | 0644, 0, kRoot);
    ASSERT_TRUE(f.is_ok());
    std::string data = engine::testing::pattern(i, 100 + i * 50);
    ASSERT_TRUE(ns_->write(f->oid, 0, bytes(data)).is_ok());
    if (i % 4 == 0) {
      ASSERT_TRUE(ns_->rename(d->oid, "f" + std::to_string(i), d->oid, "r" + std::to_string(i), 0, kRoot).is_ok());
    }
    if (i % 5 == 0) {
      auto gone = ns_->unlink(d->oid, (i % 4 == 0 ? "r" : "f") + std::to_string(i), kRoot);
      ASSERT_TRUE(gone.is_ok());
      if (gone->nlink == 0) {
        ASSERT_TRUE(ns_->forget(gone->oid).is_ok());
      }
    }
  }
  ns_.reset();
  server_->kill();  // SIGKILL right after the last acknowledgement, nothing synced
  server_ = std::make_unique<testing::ServerProcess>(dir_.path(), std::vector<std::string>{"--provider", "ucx+tcp"});
  ASSERT_TRUE(server_->start());
  control_ = client::ControlClient::create(server_->address());
  ns_ = mount();
  ASSERT_TRUE(ns_);
  auto kept = ns_->resolve("/kept", kRoot);
  ASSERT_TRUE(kept.is_ok());
  for (int i = 0; i < 40; ++i) {
    std::string name = (i % 4 == 0 ? "r" : "f") + std::to_string(i);
    auto f = ns_->lookup(kept->oid, name, kRoot);
    if (i % 5 == 0) {
      EXPECT_EQ(f.status().code(), StatusCode::kNotFound) << name;
      continue;
    }
    ASSERT_TRUE(f.is_ok()) << name << ": " << f.status().to_string();
    EXPECT_EQ(read_all(*ns_, f->oid), engine::testing::pattern(i, 100 + i * 50)) << name;
  }
  auto report = ns_->check();
  ASSERT_TRUE(report.is_ok());
  EXPECT_TRUE(report->consistent());
  EXPECT_TRUE(report->unlinked.empty());
}

TEST_F(Posix, AcknowledgedOperationsSurviveAKillOfTheServer) { operations_survive_a_kill(false); }
TEST_F(Posix, DurableOperationsSurviveAKillOfTheServer) { operations_survive_a_kill(true); }

// Two clients race to make the same names while a third writes durably (the engine is often committing and
// syncing another's batch, so the target runs namespace operations on its helper as well as on its own thread,
// target_namespace.cc): each name is made exactly once, as one operation's check and commit are never split by
// another's.
TEST_F(Posix, RacingCreatesEachWinOnceBesideDurableWrites) {
  auto d = ns_->mkdir(root_, "race", 0755, kRoot);
  ASSERT_TRUE(d.is_ok());
  auto writer = mount();
  auto a = mount();
  auto b = mount();
  ASSERT_TRUE(writer && a && b);
  writer->set_durable(true);
  auto f = writer->mknod(root_, "durable.bin", S_IFREG | 0644, 0, kRoot);
  ASSERT_TRUE(f.is_ok());
  std::atomic<bool> stop{false};
  std::thread durable([&] {
    std::string block = engine::testing::pattern(7, 64 << 10);
    for (uint64_t i = 0; !stop; ++i) {
      Status s = writer->write(f->oid, (i % 16) * block.size(), bytes(block));
      if (!s.is_ok()) return ADD_FAILURE() << s.to_string();
    }
  });
  constexpr int kNames = 1000;
  std::vector<int> made(kNames, 0);
  std::mutex mu;
  auto race = [&](Namespace* ns) {
    for (int i = 0; i < kNames; ++i) {
      auto got = ns->mknod(d->oid, "n" + std::to_string(i), S_IFREG | 0644, 0, kRoot);
      if (got.status().code() != StatusCode::kOk && got.status().code() != StatusCode::kAlreadyExists)
        return ADD_FAILURE() << got.status().to_string();
      std::lock_guard lock(mu);
      made[i] += got.is_ok() ? 1 : 0;
    }
  };
  std::thread other(race, b.get());
  race(a.get());
  other.join();
  stop = true;
  durable.join();
  for (int i = 0; i < kNames; ++i) {
    EXPECT_EQ(made[i], 1) << "n" << i;
    EXPECT_TRUE(ns_->lookup(d->oid, "n" + std::to_string(i), kRoot).is_ok()) << "n" << i;
  }
  auto report = ns_->check();
  ASSERT_TRUE(report.is_ok());
  EXPECT_TRUE(report->consistent());
}

TEST_F(Posix, LargeDirectoryListsStablyAndResumes) {
  auto d = ns_->mkdir(root_, "big", 0755, kRoot);
  ASSERT_TRUE(d.is_ok());
  const int n = 3000;  // CI-sized; the benchmark goes to 100k
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < n; i += 4)
        ASSERT_TRUE(ns_->mknod(d->oid, "file-" + std::to_string(i), S_IFREG | 0644, 0, kRoot).is_ok());
    });
  for (auto& t : threads) t.join();
  // Page through while another client removes entries already listed and adds ones past the cursor: every
  // entry present throughout appears exactly once.
  auto other = mount();
  std::set<std::string> seen;
  std::string anchor;
  int pages = 0;
  for (bool done = false; !done; ++pages) {
    auto page = ns_->readdir(d->oid, anchor, 500);
    ASSERT_TRUE(page.is_ok()) << page.status().to_string();
    for (auto& e : page->entries) {
      EXPECT_TRUE(seen.insert(e.name).second) << e.name << " listed twice";
      EXPECT_TRUE(S_ISREG(e.type));
    }
    if (pages == 1) {
      for (int i = 0; i < 10; ++i) {
        std::string early = *std::next(seen.begin(), i);
        ASSERT_TRUE(other->unlink(d->oid, early, kRoot).is_ok());
      }
      ASSERT_TRUE(other->mknod(d->oid, "zzz-late", S_IFREG | 0644, 0, kRoot).is_ok());
    }
    anchor = page->anchor;
    done = page->done;
  }
  EXPECT_GT(pages, 3);
  EXPECT_EQ(seen.size(), static_cast<size_t>(n) + 1);
  EXPECT_TRUE(seen.count("zzz-late"));
  auto st = ns_->statfs();
  ASSERT_TRUE(st.is_ok());
  EXPECT_GT(st->total_bytes, 0u);
}

}  // namespace
}  // namespace rfos::posix

int main(int argc, char** argv) {
  setenv("UCX_NET_DEVICES", "lo", 0);
  setenv("FI_TCP_IFACE", "lo", 0);
  setenv("FI_NET_IFACE", "lo", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
