#include "common/proc_stat.h"

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

}  // namespace rfos
