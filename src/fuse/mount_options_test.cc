#include <gtest/gtest.h>

#include "fuse/mount.h"

namespace rfos::fuse {
namespace {

// No local root through the mount: setuid files and device nodes take effect only when root mounts a container
// root owns.
TEST(MountOptions, SuidAndDevOnlyForRootOnRootsContainers) {
  EXPECT_FALSE(*check_mount_options("", 0, "root"));
  EXPECT_FALSE(*check_mount_options("ro,noatime", 1000, "alice"));
  EXPECT_FALSE(*check_mount_options("nosuid,nodev,suidx", 1000, "alice"));
  EXPECT_TRUE(*check_mount_options("suid", 0, "root"));
  EXPECT_TRUE(*check_mount_options("ro,dev", 0, "root"));
  for (const char* opts : {"suid", "dev", "ro,suid", "dev,ro", "noatime,suid,dev"}) {
    EXPECT_EQ(check_mount_options(opts, 0, "alice").status().code(), StatusCode::kPermissionDenied) << opts;
    EXPECT_EQ(check_mount_options(opts, 1000, "root").status().code(), StatusCode::kPermissionDenied) << opts;
    EXPECT_EQ(check_mount_options(opts, 1000, "alice").status().code(), StatusCode::kPermissionDenied) << opts;
  }
}

}  // namespace
}  // namespace rfos::fuse
