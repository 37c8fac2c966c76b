// The C API against a real server: connect, open, sync and async I/O, values, errors as negative errno.
#include "rfos/rfos.h"
#include "rfos/rfos_fs.h"

#include <gtest/gtest.h>

#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "c_api_keys.h"
#include "engine/engine_testing.h"
#include "server_process.h"

extern "C" int rfos_c_roundtrip(rfos_cont_t* cont);
extern "C" int rfos_c_files(rfos_fs_t* fs, const char* dir);

namespace rfos {
namespace {

using testing::check_keys_and_snapshots;

TEST(CApi, ConnectOpenReadWrite) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--create-defaults"});
  ASSERT_TRUE(server.start());
  rfos_client_t* client = nullptr;
  ASSERT_EQ(rfos_connect(server.address().c_str(), 2000, &client), 0) << rfos_last_error();
  rfos_cont_t* cont = nullptr;
  ASSERT_EQ(rfos_cont_open(client, "default", "default", 1, nullptr, &cont), 0) << rfos_last_error();
  EXPECT_EQ(rfos_c_roundtrip(cont), 0) << rfos_last_error();

  rfos_oid_t oid = {2ull << 56, 7};
  std::string data = engine::testing::pattern(1, 300000), back(data.size(), '\0');
  ASSERT_EQ(rfos_write(cont, oid, "0", "d", 0, data.data(), data.size()), 0) << rfos_last_error();
  ASSERT_EQ(rfos_read(cont, oid, "0", "d", 0, back.data(), back.size()), 0) << rfos_last_error();
  EXPECT_TRUE(back == data);
  uint64_t size = 0;
  ASSERT_EQ(rfos_array_size(cont, oid, "0", "d", &size), 0);
  EXPECT_EQ(size, data.size());

  // Event queue: 8 reads of 4 KiB in flight, into one registered buffer.
  std::string arena(8 * 4096, '\0');
  ASSERT_EQ(rfos_register(cont, arena.data(), arena.size()), 0) << rfos_last_error();
  ASSERT_EQ(rfos_set_data_path(cont, RFOS_DATA_PATH_EXPLICIT), 0);
  EXPECT_EQ(rfos_set_data_path(cont, static_cast<rfos_data_path_t>(7)), -EINVAL);
  for (int i = 0; i < 8; ++i) {
    uint64_t t = 0;
    ASSERT_EQ(rfos_submit_read(cont, oid, "0", "d", i * 4096, arena.data() + i * 4096, 4096, &t), 0)
        << rfos_last_error();
  }
  EXPECT_EQ(rfos_unregister(cont, arena.data()), -EAGAIN);
  int done = 0;
  rfos_completion_t comps[8];
  while (done < 8) {
    int n = rfos_poll(cont, comps, 8, 5000);
    ASSERT_GT(n, 0) << rfos_last_error();
    for (int i = 0; i < n; ++i) EXPECT_EQ(comps[i].status, 0);
    done += n;
  }
  EXPECT_TRUE(arena == data.substr(0, arena.size()));
  EXPECT_EQ(rfos_unregister(cont, arena.data()), 0);
  EXPECT_EQ(rfos_unregister(cont, arena.data()), -ENOENT);

  // Fabric memory on the auto path.
  ASSERT_EQ(rfos_set_data_path(cont, RFOS_DATA_PATH_AUTO), 0);
  void* fm = nullptr;
  ASSERT_EQ(rfos_alloc(cont, 1 << 20, &fm), 0) << rfos_last_error();
  ASSERT_NE(fm, nullptr);
  ASSERT_EQ(rfos_read(cont, oid, "0", "d", 0, fm, 200000), 0) << rfos_last_error();
  EXPECT_EQ(std::memcmp(fm, data.data(), 200000), 0);
  EXPECT_EQ(rfos_free(cont, fm), 0);
  EXPECT_EQ(rfos_free(cont, fm), -ENOENT);
  EXPECT_EQ(rfos_alloc(cont, 0, &fm), -EINVAL);

  // Errors are negative errno values with a message.
  char small[4];
  size_t len = 0;
  EXPECT_EQ(rfos_get_value(cont, {2ull << 56, 42}, "from-c", "v", small, sizeof(small), &len), -ENOBUFS);
  EXPECT_EQ(len, 12u);
  EXPECT_EQ(rfos_get_value(cont, oid, "nope", "v", small, sizeof(small), &len), -ENOENT);
  EXPECT_NE(std::string(rfos_last_error()).find("NotFound"), std::string::npos);
  rfos_cont_t* missing = nullptr;
  EXPECT_EQ(rfos_cont_open(client, "default", "nope", 0, nullptr, &missing), -ENOENT);
  EXPECT_EQ(rfos_write(nullptr, oid, "0", "d", 0, "x", 1), -EINVAL);

  check_keys_and_snapshots(client, cont, "default", "default");
  rfos_cont_close(cont);
  rfos_disconnect(client);
}

// The namespace's C API: a batch of small files made and read back (as the calling user, root here), each
// entry with its own status, and the errors a file system gives.
TEST(CApi, ManySmallFiles) {
  engine::testing::TempDir dir;
  testing::ServerProcess server(dir.path(), {"--create-defaults"});
  ASSERT_TRUE(server.start());
  rfos_client_t* client = nullptr;
  ASSERT_EQ(rfos_connect(server.address().c_str(), 2000, &client), 0) << rfos_last_error();
  rfos_fs_t* fs = nullptr;
  ASSERT_EQ(rfos_fs_open(client, "default", "default", nullptr, &fs), 0) << rfos_last_error();
  ASSERT_EQ(rfos_fs_mkdir(fs, "/data", 0755), 0) << rfos_last_error();
  EXPECT_EQ(rfos_fs_mkdir(fs, "/data", 0755), -EEXIST);
  EXPECT_EQ(rfos_fs_mkdir(fs, "/missing/x", 0755), -ENOENT);
  EXPECT_EQ(rfos_c_files(fs, "/data"), 0) << rfos_last_error();

  std::vector<std::string> names, bodies;
  for (int i = 0; i < 200; ++i) {
    names.push_back("s" + std::to_string(i));
    bodies.push_back(engine::testing::pattern(i, 1 + i * 37 % 3500));
  }
  names.push_back("s7");  // made twice: the second gets EEXIST
  bodies.push_back("again");
  std::vector<rfos_fs_put_t> put;
  for (size_t i = 0; i < names.size(); ++i)
    put.push_back({names[i].c_str(), 0644, bodies[i].data(), bodies[i].size(), 1});
  EXPECT_EQ(rfos_fs_put_files(fs, "/data", put.data(), put.size(), 16), 200) << rfos_last_error();
  EXPECT_EQ(put[7].status, 0);
  EXPECT_EQ(put.back().status, -EEXIST);
  EXPECT_EQ(rfos_fs_put_files(fs, "/data/a", put.data(), 1, 0), -ENOTDIR);
  EXPECT_EQ(rfos_fs_sync(fs), 0);

  std::vector<std::string> buf(names.size() + 1, std::string(4096, '\0'));
  std::vector<rfos_fs_get_t> get;
  for (size_t i = 0; i + 1 < names.size(); ++i) get.push_back({names[i].c_str(), buf[i].data(), buf[i].size(), 0, 1});
  get.push_back({"s150", buf[names.size() - 1].data(), 10, 0, 1});  // too small a buffer
  get.push_back({"nothing", buf[names.size()].data(), 4096, 0, 1});
  EXPECT_EQ(rfos_fs_get_files(fs, "/data", get.data(), get.size(), 16), 200) << rfos_last_error();
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    ASSERT_EQ(get[i].status, 0) << names[i];
    ASSERT_EQ(get[i].len, bodies[i].size());
    EXPECT_EQ(std::memcmp(get[i].buf, bodies[i].data(), get[i].len), 0) << names[i];
  }
  EXPECT_EQ(get[names.size() - 1].status, -ENOBUFS);
  EXPECT_EQ(get[names.size() - 1].len, bodies[150].size());
  EXPECT_EQ(get.back().status, -ENOENT);
  EXPECT_EQ(rfos_fs_get_files(nullptr, "/data", get.data(), 1, 0), -EINVAL);
  rfos_fs_close(fs);
  rfos_disconnect(client);
}

}  // namespace
}  // namespace rfos
