#include "server/data_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace rfos::server {

namespace fs = std::filesystem;

namespace {
Status check_private(const std::string& path, const struct stat& st, const std::string& dir) {
  if (st.st_uid != geteuid())
    return error(StatusCode::kPermissionDenied,
                 path + " is owned by uid " + std::to_string(st.st_uid) + ", not by the server's user (uid " +
                     std::to_string(geteuid()) + "): someone else may have prepared it. Remove " + dir +
                     " if it holds nothing of yours, or `chown -R` it to the server's user after checking it");
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return error(StatusCode::kPermissionDenied,
                 path + " is accessible to group or others (mode " + std::to_string((st.st_mode >> 6) & 7) +
                     std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) + "); `chmod -R go-rwx " +
                     dir + "` makes it the server's alone");
  return Status::ok();
}
}  // namespace

Status prepare_data_dir(const std::string& dir) {
  umask(077);
  std::error_code ec;
  fs::path p(dir);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);  // parents as the system would make them
  if (mkdir(dir.c_str(), 0700) == 0) return Status::ok();
  if (errno != EEXIST) return error(StatusCode::kIoError, "create " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return error(StatusCode::kIoError, "stat " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return error(StatusCode::kInvalidArgument, dir + " is not a directory");
  RFOS_RETURN_IF_ERROR(check_private(dir, st, dir));
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string path = it->path().string();
    if (lstat(path.c_str(), &st) != 0) continue;  // gone meanwhile
    RFOS_RETURN_IF_ERROR(check_private(path, st, dir));
  }
  if (ec) return error(StatusCode::kIoError, "read " + dir + ": " + ec.message());
  return Status::ok();
}

}  // namespace rfos::server
