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
