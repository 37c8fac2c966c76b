// Diagnostics go through spdlog (include <spdlog/spdlog.h> where you log; keep it out of headers), on stderr,
// at the level the server's config (`log_level`), `--log-level` or RFOS_LOG_LEVEL sets. What a command is asked
// to print (its results, its errors) is its own output, not a log.
#pragma once

#include <string>

#include "common/status.h"

namespace rfos::log {

// trace, debug, info (the default), warn, error or off. kInvalidArgument for anything else.
Status set_level(const std::string& level);
// RFOS_LOG_LEVEL when set (and valid), else info.
void init_from_env();

}  // namespace rfos::log
