#include "common/status.h"

#include <cerrno>

namespace rfos {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
#define RFOS_X(name, num, err, http) \
  case StatusCode::name:             \
    return std::string_view(#name).substr(1);
    RFOS_STATUS_CODES(RFOS_X)
#undef RFOS_X
  }
  return "Unknown";
}

int status_code_errno(StatusCode code) {
  switch (code) {
#define RFOS_X(name, num, err, http) \
  case StatusCode::name:             \
    return err;
    RFOS_STATUS_CODES(RFOS_X)
#undef RFOS_X
  }
  return EIO;
}

int status_code_http(StatusCode code) {
  switch (code) {
#define RFOS_X(name, num, err, http) \
  case StatusCode::name:             \
    return http;
    RFOS_STATUS_CODES(RFOS_X)
#undef RFOS_X
  }
  return 500;
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_shared<const State>(State{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  std::string s(status_code_name(code()));
  if (!state_->message.empty()) s += ": " + state_->message;
  return s;
}

}  // namespace rfos
