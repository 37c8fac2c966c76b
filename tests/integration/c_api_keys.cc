#include "c_api_keys.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <cerrno>
#include <string>

#include "engine/engine_testing.h"

namespace rfos::testing {

void check_keys_and_snapshots(rfos_client_t* client, rfos_cont_t* cont, const char* pool, const char* cont_label) {
  const rfos_oid_t oid = {2ull << 56, 9};
  // Values: stored and read back; too small a buffer says how much is needed; a missing one is ENOENT.
  ASSERT_EQ(rfos_put_value(cont, oid, "kv", "v", "a value of 20 bytes.", 20), 0) << rfos_last_error();
  char small[4];
  size_t len = 0;
  EXPECT_EQ(rfos_get_value(cont, oid, "kv", "v", small, sizeof(small), &len), -ENOBUFS);
  EXPECT_EQ(len, 20u);
  char whole[32];
  ASSERT_EQ(rfos_get_value(cont, oid, "kv", "v", whole, sizeof(whole), &len), 0) << rfos_last_error();
  EXPECT_EQ(std::string(whole, len), "a value of 20 bytes.");
  EXPECT_EQ(rfos_get_value(cont, oid, "nope", "v", small, sizeof(small), &len), -ENOENT);
  EXPECT_NE(std::string(rfos_last_error()).find("NotFound"), std::string::npos);
  std::string big((1 << 20) + 1, 'x');
  EXPECT_NE(rfos_put_value(cont, oid, "kv", "big", big.data(), big.size()), 0);

  // Scatter-gather and extent lists.
  rfos_extent_t ext[2] = {{0, 6000}, {10000, 3000}};
  std::string a = engine::testing::pattern(3, 5000), b = engine::testing::pattern(4, 4000);
  struct iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  ASSERT_EQ(rfos_writev(cont, oid, "sg", "d", ext, 2, iov, 2), 0) << rfos_last_error();
  std::string back9(9000, '\0');
  struct iovec one = {back9.data(), back9.size()};
  ASSERT_EQ(rfos_readv(cont, oid, "sg", "d", ext, 2, &one, 1), 0) << rfos_last_error();
  EXPECT_TRUE(back9 == a + b);
  std::string first(5000, '\0'), rest(4000, '\0');
  struct iovec two[2] = {{first.data(), first.size()}, {rest.data(), rest.size()}};
  ASSERT_EQ(rfos_readv(cont, oid, "sg", "d", ext, 2, two, 2), 0) << rfos_last_error();
  EXPECT_TRUE(first + rest == a + b);
  EXPECT_EQ(rfos_writev(cont, oid, "sg", "d", ext, 1, iov, 2), -EINVAL);  // 6000 bytes of extents, 9000 of buffers
  rfos_extent_t listed[2];
  size_t count = 0;
  EXPECT_EQ(rfos_list_extents(cont, oid, "sg", "d", listed, 1, &count), -ENOBUFS);
  EXPECT_EQ(count, 2u);
  ASSERT_EQ(rfos_list_extents(cont, oid, "sg", "d", listed, 2, &count), 0) << rfos_last_error();
  EXPECT_EQ(listed[0].offset, 0u);
  EXPECT_EQ(listed[0].length, 6000u);
  EXPECT_EQ(listed[1].offset, 10000u);
  EXPECT_EQ(listed[1].length, 3000u);

  // Punches: a dkey goes with its akeys, an object with its dkeys.
  ASSERT_EQ(rfos_put_value(cont, oid, "gone", "v", "x", 1), 0);
  ASSERT_EQ(rfos_punch_dkey(cont, oid, "gone"), 0) << rfos_last_error();
  EXPECT_EQ(rfos_get_value(cont, oid, "gone", "v", small, sizeof(small), &len), -ENOENT);
  const rfos_oid_t doomed = {2ull << 56, 10};
  ASSERT_EQ(rfos_put_value(cont, doomed, "k", "v", "y", 1), 0);
  ASSERT_EQ(rfos_punch_object(cont, doomed), 0) << rfos_last_error();
  EXPECT_EQ(rfos_get_value(cont, doomed, "k", "v", small, sizeof(small), &len), -ENOENT);

  // Snapshots: a read-only view of the state when it was taken.
  uint64_t epoch = 0;
  ASSERT_EQ(rfos_put_value(cont, oid, "snap", "v", "old", 3), 0);
  ASSERT_EQ(rfos_snapshot_create(client, pool, cont_label, &epoch), 0) << rfos_last_error();
  ASSERT_EQ(rfos_put_value(cont, oid, "snap", "v", "new", 3), 0);
  uint64_t epochs[4];
  ASSERT_EQ(rfos_snapshot_list(client, pool, cont_label, epochs, 4, &count), 0) << rfos_last_error();
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(epochs[0], epoch);
  ASSERT_EQ(rfos_set_read_epoch(cont, epoch), 0) << rfos_last_error();
  char v[8];
  ASSERT_EQ(rfos_get_value(cont, oid, "snap", "v", v, sizeof(v), &len), 0) << rfos_last_error();
  EXPECT_EQ(std::string(v, len), "old");
  EXPECT_EQ(rfos_put_value(cont, oid, "snap", "v", "x", 1), -EINVAL);
  ASSERT_EQ(rfos_set_read_epoch(cont, 0), 0);
  ASSERT_EQ(rfos_get_value(cont, oid, "snap", "v", v, sizeof(v), &len), 0);
  EXPECT_EQ(std::string(v, len), "new");
  EXPECT_EQ(rfos_snapshot_destroy(client, pool, cont_label, epoch), 0) << rfos_last_error();
  EXPECT_EQ(rfos_snapshot_destroy(client, pool, cont_label, epoch), -ENOENT);
}

}  // namespace rfos::testing

namespace rfos::testing {

std::vector<std::string> c_api_edge_outcomes(rfos_cont_t* cont, uint64_t lo) {
  std::vector<std::string> out;
  auto rec = [&](const std::string& what, int rc, const std::string& more = "") {
    out.push_back(what + ": " + std::to_string(rc) + (more.empty() ? "" : " " + more));
  };
  auto oid = [&](uint64_t k) { return rfos_oid_t{2ull << 56, lo + k}; };
  auto hash = [](const std::string& s) { return std::to_string(std::hash<std::string>{}(s)); };
  std::string data = engine::testing::pattern(5, 9 << 20);
  std::string buf(16 << 20, '\0');
  uint64_t size = 0;
  size_t len = 0, count = 0;
  // Arrays: empty, missing and odd arguments; the ends of the offsets; large and hole-crossing reads.
  rec("write 0 bytes", rfos_write(cont, oid(1), "d", "a", 0, data.data(), 0));
  rec("write from NULL", rfos_write(cont, oid(1), "d", "a", 0, nullptr, 10));
  rec("write NULL dkey", rfos_write(cont, oid(1), nullptr, "a", 0, data.data(), 10));
  rec("write empty dkey", rfos_write(cont, oid(1), "", "a", 0, data.data(), 10));
  rec("write empty akey", rfos_write(cont, oid(1), "d", "", 0, data.data(), 10));
  rec("write long dkey", rfos_write(cont, oid(1), std::string(5000, 'k').c_str(), "a", 0, data.data(), 10));
  rec("write at 2^62 - 2", rfos_write(cont, oid(1), "d", "a", (1ull << 62) - 2, data.data(), 2));
  rec("write across 2^62", rfos_write(cont, oid(1), "d", "a", (1ull << 62) - 1, data.data(), 2));
  rec("write at 2^64 - 1", rfos_write(cont, oid(1), "d", "a", ~0ull, data.data(), 1));
  rec("write 9 MiB", rfos_write(cont, oid(2), "d", "a", 1000, data.data(), data.size()));
  {
    int rc = rfos_read(cont, oid(2), "d", "a", 1000, buf.data(), data.size());
    rec("read 9 MiB", rc, hash(buf.substr(0, data.size())));
  }
  {
    int rc = rfos_read(cont, oid(2), "d", "a", 0, buf.data(), 12 << 20);
    rec("read across the end", rc, hash(buf.substr(0, 12 << 20)));
  }
  rec("read 0 bytes", rfos_read(cont, oid(2), "d", "a", 0, buf.data(), 0));
  rec("read a missing object", rfos_read(cont, oid(3), "d", "a", 0, buf.data(), 100));
  rec("read a missing akey", rfos_read(cont, oid(2), "d", "zz", 0, buf.data(), 100));
  rec("read at 2^64 - 1", rfos_read(cont, oid(2), "d", "a", ~0ull, buf.data(), 1));
  {
    int rc = rfos_array_size(cont, oid(2), "d", "a", &size);
    rec("size", rc, std::to_string(size));
  }
  rec("size of a missing object", rfos_array_size(cont, oid(3), "d", "a", &size));
  rec("size NULL out", rfos_array_size(cont, oid(2), "d", "a", nullptr));
  // Scatter-gather: no extents, a zero-length one, overlapping and out of order.
  struct iovec iov = {data.data(), 100};
  rfos_extent_t none[1] = {{0, 0}};
  rec("writev no extents", rfos_writev(cont, oid(4), "d", "a", none, 0, &iov, 1));
  rec("writev a zero extent", rfos_writev(cont, oid(4), "d", "a", none, 1, &iov, 0));
  rfos_extent_t overlap[2] = {{0, 60}, {30, 40}};
  rec("writev overlapping", rfos_writev(cont, oid(4), "d", "a", overlap, 2, &iov, 1));
  rfos_extent_t backwards[2] = {{500, 50}, {0, 50}};
  rec("writev out of order", rfos_writev(cont, oid(4), "d", "a", backwards, 2, &iov, 1));
  struct iovec into = {buf.data(), 600};
  rfos_extent_t all[1] = {{0, 600}};
  {
    int rc = rfos_readv(cont, oid(4), "d", "a", all, 1, &into, 1);
    rec("readv", rc, hash(buf.substr(0, 600)));
  }
  rfos_extent_t listed[8];
  {
    int rc = rfos_list_extents(cont, oid(4), "d", "a", listed, 8, &count);
    rec("list extents", rc, std::to_string(count));
  }
  {
    int rc = rfos_list_extents(cont, oid(4), "d", "a", listed, 0, &count);
    rec("list extents, room for none", rc, std::to_string(count));
  }
  rec("list extents of a missing object", rfos_list_extents(cont, oid(3), "d", "a", listed, 8, &count));
  // Values: empty, the largest, one byte more, the wrong kind.
  rec("put an empty value", rfos_put_value(cont, oid(5), "k", "v", "", 0));
  {
    int rc = rfos_get_value(cont, oid(5), "k", "v", buf.data(), 10, &len);
    rec("get an empty value", rc, std::to_string(len));
  }
  rec("put 1 MiB", rfos_put_value(cont, oid(5), "k", "big", data.data(), 1 << 20));
  {
    int rc = rfos_get_value(cont, oid(5), "k", "big", buf.data(), 2 << 20, &len);
    rec("get 1 MiB", rc, std::to_string(len) + " " + hash(buf.substr(0, len)));
  }
  rec("put 1 MiB + 1", rfos_put_value(cont, oid(5), "k", "big", data.data(), (1 << 20) + 1));
  rec("get a value NULL len", rfos_get_value(cont, oid(5), "k", "v", buf.data(), 10, nullptr));
  rec("get an array as a value", rfos_get_value(cont, oid(2), "d", "a", buf.data(), 10, &len));
  rec("write into a value", rfos_write(cont, oid(5), "k", "v", 0, data.data(), 10));
  // Punches of what is not there, then reads of what was punched.
  rec("punch a missing dkey", rfos_punch_dkey(cont, oid(5), "nothing"));
  rec("punch a missing object", rfos_punch_object(cont, oid(6)));
  rec("punch an object", rfos_punch_object(cont, oid(4)));
  rec("read a punched object", rfos_read(cont, oid(4), "d", "a", 0, buf.data(), 10));
  // Read epochs: one that is no snapshot; writes while one is set.
  rec("read epoch of no snapshot", rfos_set_read_epoch(cont, 12345));
  rec("read at it", rfos_read(cont, oid(2), "d", "a", 0, buf.data(), 10));
  rec("write at it", rfos_write(cont, oid(2), "d", "a", 0, data.data(), 10));
  rec("read epoch back to 0", rfos_set_read_epoch(cont, 0));
  rec("data path 7", rfos_set_data_path(cont, static_cast<rfos_data_path_t>(7)));
  // The event queue over allocated memory: sizes and ranges it refuses, a poll for nothing.
  void* mem = nullptr;
  rec("alloc 0 bytes", rfos_alloc(cont, 0, &mem));
  rec("alloc 2^64 - 1 bytes", rfos_alloc(cont, ~size_t{0}, &mem));
  int alloc = rfos_alloc(cont, 2 << 20, &mem);
  rec("alloc 2 MiB", alloc);
  if (alloc == 0) {
    uint64_t ticket = 0;
    rec("submit 0 bytes", rfos_submit_write(cont, oid(7), "d", "a", 0, mem, 0, &ticket));
    rec("submit 1 MiB + 1", rfos_submit_write(cont, oid(7), "d", "a", 0, mem, (1 << 20) + 1, &ticket));
    rec("submit across 1 MiB", rfos_submit_write(cont, oid(7), "d", "a", 1000, mem, 1 << 20, &ticket));
    rec("submit NULL ticket", rfos_submit_write(cont, oid(7), "d", "a", 0, mem, 100, nullptr));
    rec("submit a read of a missing object", rfos_submit_read(cont, oid(8), "d", "a", 0, mem, 100, &ticket));
    rfos_completion_t done[2];
    int n = 0;
    for (int i = 0; i < 100 && n == 0; ++i) n = rfos_poll(cont, done, 2, 100);
    {
      int rc = n;
      rec("its completion", rc, n > 0 ? std::to_string(done[0].status) : "");
    }
    rec("poll for none", rfos_poll(cont, done, 0, 0));
    rec("poll, nothing in flight", rfos_poll(cont, done, 2, 0));
    // Two buffers: one may go while the other's I/O is in flight, not the busy one.
    void* other = nullptr;
    rec("alloc another", rfos_alloc(cont, 4096, &other));
    rec("register an allocated buffer", rfos_register(cont, other, 4096));
    rec("submit into the first", rfos_submit_write(cont, oid(7), "d", "a", 0, mem, 4096, &ticket));
    rec("free the other while the first is busy", rfos_free(cont, other));
    rec("free the busy one", rfos_free(cont, mem));
    n = 0;
    for (int i = 0; i < 100 && n == 0; ++i) n = rfos_poll(cont, done, 2, 100);
    {
      int rc = n;
      rec("its completion", rc, n > 0 ? std::to_string(done[0].status) : "");
    }
    rec("free", rfos_free(cont, mem));
    rec("free again", rfos_free(cont, mem));
    rec("free what was never allocated", rfos_free(cont, data.data()));
  }
  rec("free NULL", rfos_free(cont, nullptr));
  rec("unregister what was never registered", rfos_unregister(cont, data.data()));
  rec("register 0 bytes", rfos_register(cont, data.data(), 0));
  rec("register", rfos_register(cont, data.data(), 4096));
  rec("register it again", rfos_register(cont, data.data(), 4096));
  rec("write from it", rfos_write(cont, oid(9), "d", "a", 0, data.data(), 4096));
  rec("unregister", rfos_unregister(cont, data.data()));
  rec("unregister again", rfos_unregister(cont, data.data()));
  // A key longer than a request may carry: refused before it is sent.
  rec("read a long akey", rfos_read(cont, oid(2), "d", std::string(4097, 'k').c_str(), 0, buf.data(), 10));
  rec("put a long dkey", rfos_put_value(cont, oid(5), std::string(4097, 'k').c_str(), "v", "x", 1));
  return out;
}

}  // namespace rfos::testing

namespace rfos::testing {

std::vector<std::string> c_api_fs_edge_outcomes(rfos_fs_t* fs, const std::string& top) {
  std::vector<std::string> out;
  auto rec = [&](const std::string& what, int rc, const std::string& more = "") {
    out.push_back(what + ": " + std::to_string(rc) + (more.empty() ? "" : " " + more));
  };
  auto put_one = [&](const std::string& dir, const std::string& name, const std::string& bytes, uint32_t mode) {
    rfos_fs_put_t p = {name.c_str(), mode, bytes.data(), bytes.size(), 1};
    int rc = rfos_fs_put_files(fs, dir.c_str(), &p, 1, 0);
    return std::to_string(rc) + "/" + std::to_string(p.status);
  };
  auto get_one = [&](const std::string& dir, const std::string& name, size_t cap) {
    std::string buf(cap, '\0');
    rfos_fs_get_t g = {name.c_str(), buf.data(), cap, 0, 1};
    int rc = rfos_fs_get_files(fs, dir.c_str(), &g, 1, 0);
    size_t n = std::min(g.len, cap);
    return std::to_string(rc) + "/" + std::to_string(g.status) + " len " + std::to_string(g.len) + " " +
           std::to_string(std::hash<std::string>{}(g.status == 0 ? buf.substr(0, n) : std::string()));
  };
  rec("mkdir", rfos_fs_mkdir(fs, top.c_str(), 0755));
  rec("mkdir again", rfos_fs_mkdir(fs, top.c_str(), 0755));
  rec("mkdir relative", rfos_fs_mkdir(fs, "relative", 0755));
  rec("mkdir under a missing one", rfos_fs_mkdir(fs, (top + "/none/sub").c_str(), 0755));
  rec("mkdir a 256-byte name", rfos_fs_mkdir(fs, (top + "/" + std::string(256, 'n')).c_str(), 0755));
  rec("mkdir a 255-byte name", rfos_fs_mkdir(fs, (top + "/" + std::string(255, 'n')).c_str(), 0755));
  rec("mkdir with a trailing slash", rfos_fs_mkdir(fs, (top + "/trail/").c_str(), 0755));
  rec("mkdir dot-dot", rfos_fs_mkdir(fs, (top + "/..").c_str(), 0755));
  rec("mkdir the root", rfos_fs_mkdir(fs, "/", 0755));
  std::string small(3000, 's'), edge(4095, 'e'), over(4096, 'o'), big(3u << 20, 'b');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  out.push_back("put small: " + put_one(top, "small", small, 0644));
  out.push_back("put 4095: " + put_one(top, "edge", edge, 0600));
  out.push_back("put 4096: " + put_one(top, "over", over, 0644));
  out.push_back("put 3 MiB: " + put_one(top, "big", big, 0644));
  out.push_back("put empty: " + put_one(top, "empty", "", 0644));
  out.push_back("put again: " + put_one(top, "small", small, 0644));
  out.push_back("put a name with a slash: " + put_one(top, "a/b", small, 0644));
  out.push_back("put an empty name: " + put_one(top, "", small, 0644));
  out.push_back("put dot: " + put_one(top, ".", small, 0644));
  out.push_back("put a 256-byte name: " + put_one(top, std::string(256, 'x'), small, 0644));
  out.push_back("put mode 07777: " + put_one(top, "modes", small, 07777));
  out.push_back("put into a file: " + put_one(top + "/small", "x", small, 0644));
  out.push_back("put into a missing directory: " + put_one(top + "/none", "x", small, 0644));
  out.push_back("put into a relative path: " + put_one("relative", "x", small, 0644));
  {
    rfos_fs_put_t none = {nullptr, 0644, small.data(), small.size(), 1};
    int rc = rfos_fs_put_files(fs, top.c_str(), &none, 1, 0);
    rec("put a NULL name", rc, std::to_string(none.status));
    rc = rfos_fs_put_files(fs, top.c_str(), nullptr, 0, 0);
    rec("put nothing", rc);
  }
  out.push_back("get small: " + get_one(top, "small", 4096));
  out.push_back("get 4095: " + get_one(top, "edge", 4095));
  out.push_back("get 4096: " + get_one(top, "over", 4096));
  out.push_back("get 3 MiB: " + get_one(top, "big", 4u << 20));
  out.push_back("get 3 MiB, too little room: " + get_one(top, "big", 1 << 20));
  out.push_back("get empty: " + get_one(top, "empty", 10));
  out.push_back("get empty, no room: " + get_one(top, "empty", 0));
  out.push_back("get a directory: " + get_one("/", top.substr(1), 100));
  out.push_back("get a missing one: " + get_one(top, "none", 100));
  out.push_back("get from a missing directory: " + get_one(top + "/none", "x", 100));
  out.push_back("get from a file: " + get_one(top + "/small", "x", 100));
  out.push_back("get dot-dot: " + get_one(top, "..", 100));
  rec("sync", rfos_fs_sync(fs));
  return out;
}

}  // namespace rfos::testing
