#include "server/principal.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>

namespace rfos::server {

bool Principal::in_group(const std::string& group) const {
  return std::find(groups.begin(), groups.end(), group) != groups.end();
}

std::string Principal::describe() const {
  switch (via) {
    case Via::kLocal:
      return name + " (uid " + std::to_string(uid) + ")";
    case Via::kTls:
      return "tls:" + name;
    case Via::kAnonymous:
      break;
  }
  return "anonymous";
}

std::string user_name(uint32_t uid) {
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) return pw.pw_name;
  return std::to_string(uid);
}

std::string group_name(uint32_t gid) {
  std::vector<char> buf(16384);
  group gr{}, *found = nullptr;
  if (getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found) return gr.gr_name;
  return std::to_string(gid);
}

Principal local_principal(uint32_t uid, uint32_t gid, const std::vector<uint32_t>& groups) {
  Principal p;
  p.via = Principal::Via::kLocal;
  p.uid = uid;
  p.gid = gid;
  p.name = user_name(uid);
  p.groups.push_back(group_name(gid));
  for (uint32_t g : groups)
    if (g != gid) p.groups.push_back(group_name(g));
  p.admin = uid == 0 || uid == geteuid();
  return p;
}

}  // namespace rfos::server
