// The server's data directory is private: targets' block files and indexes, the management store and the
// capability secret are the server user's alone. A directory someone else created first (to plant a secret or
// read the data) or that others may read is refused, with what to do about it.
//
// Thread-safety: call before the server starts its threads (it sets the process umask).
#pragma once

#include <string>

#include "common/status.h"

namespace rfos::server {

// Sets the umask to 077 (everything the server creates from now on is its user's only), then creates `dir`
// (0700) when missing, or checks the existing one and everything under it: owned by this user and not
// accessible to group or others. kPermissionDenied naming the first offender and the command that fixes it;
// kIoError when it cannot be created.
Status prepare_data_dir(const std::string& dir);

}  // namespace rfos::server
