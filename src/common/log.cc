#include "common/log.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace rfos::log {

Status set_level(const std::string& level) {
  auto l = spdlog::level::from_str(level);
  // from_str answers off for names it does not know: only "off" itself means off.
  if (l == spdlog::level::off && level != "off")
    return error(StatusCode::kInvalidArgument,
                 "log level '" + level + "' is not one of trace, debug, info, warn, error, off");
  spdlog::set_level(l);
  return Status::ok();
}

void init_from_env() {
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  const char* env = std::getenv("RFOS_LOG_LEVEL");
  if (!env || !set_level(env).is_ok()) spdlog::set_level(spdlog::level::info);
}

}  // namespace rfos::log
