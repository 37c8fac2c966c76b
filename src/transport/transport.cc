#include "transport/transport.h"

namespace rfos::transport {

Result<std::unique_ptr<Worker>> make_ucx_worker(const std::string& provider);
Result<std::unique_ptr<Worker>> make_ofi_worker(const std::string& provider);

Result<std::unique_ptr<Worker>> Worker::create(const std::string& provider) {
  if (provider.rfind("ucx+", 0) == 0) return make_ucx_worker(provider);
  if (provider.rfind("ofi+", 0) == 0) return make_ofi_worker(provider);
  return error(StatusCode::kNotSupported, "unknown data-plane provider '" + provider + "'");
}

}  // namespace rfos::transport
