#include "server/data_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "engine/engine_testing.h"

namespace rfos::server {
namespace {

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(DataDir, CreatedPrivateAndFilesStayPrivate) {
  engine::testing::TempDir tmp;
  std::string dir = tmp.path() + "/data";
  ASSERT_TRUE(prepare_data_dir(dir).is_ok());
  EXPECT_EQ(mode_of(dir), 0700u);
  std::ofstream(dir + "/secret") << "x";  // created under the server's umask
  EXPECT_EQ(mode_of(dir + "/secret"), 0600u);
  EXPECT_TRUE(prepare_data_dir(dir).is_ok());  // a second start
}

TEST(DataDir, ReadableByOthersIsRefused) {
  engine::testing::TempDir tmp;
  std::string dir = tmp.path() + "/data";
  ASSERT_TRUE(prepare_data_dir(dir).is_ok());
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  Status s = prepare_data_dir(dir);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("chmod -R go-rwx"), std::string::npos) << s.message();
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  // A file inside that others may read (a block file from before, a secret copied in).
  std::string file = dir + "/mgmt-secret";
  std::ofstream(file) << "x";
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  s = prepare_data_dir(dir);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find(file), std::string::npos) << s.message();
  ASSERT_EQ(chmod(file.c_str(), 0600), 0);
  EXPECT_TRUE(prepare_data_dir(dir).is_ok());
}

// A directory someone else created first (to plant a secret) is refused. Changing a file's owner needs root,
// which CI has (RFOS_REQUIRE_ROOT).
TEST(DataDir, SomeoneElsesDirectoryIsRefused) {
  RFOS_REQUIRE_ROOT("to give a directory to another user");
  engine::testing::TempDir tmp;
  std::string dir = tmp.path() + "/data";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  Status s = prepare_data_dir(dir);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("owned by uid 65534"), std::string::npos) << s.message();
  // The same for a planted file inside a directory of ours.
  ASSERT_EQ(chown(dir.c_str(), 0, 0), 0);
  std::string planted = dir + "/mgmt";
  ASSERT_EQ(mkdir(planted.c_str(), 0700), 0);
  ASSERT_EQ(chown(planted.c_str(), 65534, 65534), 0);
  EXPECT_EQ(prepare_data_dir(dir).code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace rfos::server
