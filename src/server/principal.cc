#include "server/principal.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

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

namespace {

template <typename T>
bool parse_number(std::string_view s, T* v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}
bool parse_u32(std::string_view s, uint32_t* v) { return parse_number(s, v); }

}  // namespace

Result<Principal> act_for(const Principal& agent, std::string_view header, const TrustedAgents& trusted,
                          const std::vector<std::string>& admins) {
  auto it = agent.anonymous() ? trusted.end() : trusted.find(agent.name);
  if (it == trusted.end())
    return error(StatusCode::kPermissionDenied,
                 agent.describe() + " is not a trusted agent: it may act only for itself");
  auto bad = [] { return error(StatusCode::kInvalidArgument, "malformed rfos-act-for header"); };
  if (header.size() > 4096) return bad();
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t colon = header.find(':', start);
    parts.push_back(header.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  uint32_t uid, gid;
  if (parts.size() < 2 || parts.size() > 3 || !parse_u32(parts[0], &uid) || !parse_u32(parts[1], &gid)) return bad();
  std::vector<uint32_t> groups;
  if (parts.size() == 3) {
    for (size_t start = 0; start <= parts[2].size();) {
      size_t comma = parts[2].find(',', start);
      uint32_t g;
      if (!parse_u32(parts[2].substr(start, comma == std::string_view::npos ? comma : comma - start), &g) ||
          groups.size() >= 256)
        return bad();
      groups.push_back(g);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  Principal p = local_principal(uid, gid, groups);
  if (std::find(admins.begin(), admins.end(), p.name) != admins.end()) p.admin = true;
  const std::vector<std::string>& may = it->second;
  bool named = std::find(may.begin(), may.end(), p.name) != may.end();
  bool covered = named || (!p.admin && std::find(may.begin(), may.end(), "*") != may.end());
  for (const std::string& g : p.groups)
    covered = covered || (!p.admin && std::find(may.begin(), may.end(), "group:" + g) != may.end());
  if (!covered)
    return error(StatusCode::kPermissionDenied,
                 "agent " + agent.describe() + " is not trusted to act for " + p.describe());
  return p;
}

Result<wire::CapabilityQos> tenant_limits(std::string_view header) {
  auto bad = [] { return error(StatusCode::kInvalidArgument, "malformed rfos-qos header"); };
  if (header.size() > 1024) return bad();
  std::string_view fields[4];
  for (auto& f : fields) {
    size_t colon = header.find(':');
    if (colon == std::string_view::npos) return bad();
    f = header.substr(0, colon);
    header.remove_prefix(colon + 1);
  }
  wire::CapabilityQos q;
  if (!parse_number(fields[0], &q.iops) || !parse_number(fields[1], &q.burst_ios) ||
      !parse_number(fields[2], &q.bytes_per_s) || !parse_number(fields[3], &q.burst_bytes) || header.empty() ||
      !q.limited())
    return bad();
  q.key = wire::qos_key_of(header);
  return q;
}

}  // namespace rfos::server
