#include "common/proc_stat.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace rfos {

std::vector<uint64_t> proc_stat_fields(uint64_t pid, std::initializer_list<int> fields) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t end = stat.rfind(')');
  if (end == std::string::npos) return {};
  std::vector<uint64_t> out;
  for (int want : fields) {
    // After ") " come the state (field 3) and fields 4..
    const char* p = stat.c_str() + end + 1;
    for (int field = 3; field < want; ++field) {
      p = std::strchr(p + 1, ' ');
      if (p == nullptr) return {};
    }
    out.push_back(std::strtoull(p + 1, nullptr, 10));
  }
  return out;
}

double cpu_seconds_of(uint64_t pid) {
  auto ticks = proc_stat_fields(pid, {14, 15});
  return ticks.empty() ? -1 : double(ticks[0] + ticks[1]) / double(sysconf(_SC_CLK_TCK));
}

double cpu_seconds_of_self() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace rfos
