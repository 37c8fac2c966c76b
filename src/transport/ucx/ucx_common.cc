#include "transport/ucx/ucx_common.h"

namespace rfos::transport::ucx {

std::mutex& ucx_setup_mutex() {
  static std::mutex mu;
  return mu;
}

Status ucs_error(ucs_status_t s, const std::string& what) {
  StatusCode code = StatusCode::kIoError;
  if (s == UCS_ERR_UNREACHABLE || s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_CONNECTION_RESET ||
      s == UCS_ERR_CANCELED || s == UCS_ERR_REJECTED || s == UCS_ERR_NOT_CONNECTED)
    code = StatusCode::kShutdown;
  if (s == UCS_ERR_NO_MEMORY || s == UCS_ERR_NO_RESOURCE) code = StatusCode::kBusy;
  if (s == UCS_ERR_UNSUPPORTED || s == UCS_ERR_NO_DEVICE) code = StatusCode::kNotSupported;
  return error(code, what + ": " + ucs_status_string(s));
}

}  // namespace rfos::transport::ucx
