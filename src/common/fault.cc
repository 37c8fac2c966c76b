#include "common/fault.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace rfos::fault {
namespace detail {
std::atomic<int> armed_count{0};
}

namespace {
std::mutex mu;
std::map<std::string, int, std::less<>>& points() {
  static std::map<std::string, int, std::less<>> m;  // name -> hits left before firing
  return m;
}
}  // namespace

void arm(std::string_view name, int nth) {
  std::lock_guard lock(mu);
  points()[std::string(name)] = nth < 1 ? 1 : nth;
  detail::armed_count.store(static_cast<int>(points().size()));
}

void disarm_all() {
  std::lock_guard lock(mu);
  points().clear();
  detail::armed_count.store(0);
}

void arm_from_env() {
  const char* env = std::getenv("RFOS_FAULTS");
  if (env == nullptr) return;
  std::string_view spec(env);
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    size_t eq = item.find('=');
    int nth = eq == std::string_view::npos ? 1 : std::atoi(std::string(item.substr(eq + 1)).c_str());
    if (!item.empty()) arm(item.substr(0, eq), nth);
  }
}

bool detail::hit(std::string_view name) {
  std::lock_guard lock(mu);
  auto it = points().find(name);
  if (it == points().end()) return false;
  if (--it->second > 0) return false;
  points().erase(it);
  armed_count.store(static_cast<int>(points().size()));
  return true;
}

}  // namespace rfos::fault
