// What the commands that reach a container's POSIX namespace without a mount share: rfos fs, and rfos
// put/get/stat/rm of a path.
#include <cstdlib>

#include "cli/cli.h"

namespace rfos::cli {

Result<Mounted> open_namespace(const Context& ctx, const std::string& pool_id, const std::string& cont_id,
                               const std::string& provider) {
  Mounted m;
  m.control = ctx.control();
  auto info = m.control->cont_query(pool_id, cont_id);  // a clear error before anything else
  RFOS_RETURN_IF_ERROR(info.status());
  m.owner = info->owner;
  m.open_sessions = info->open_sessions;
  client::ContainerOptions o;
  o.provider = provider.empty() && std::getenv("RFOS_PROVIDER") ? std::getenv("RFOS_PROVIDER") : provider;
  RFOS_ASSIGN_OR_RETURN(m.ns, posix::Namespace::open(*m.control, pool_id, cont_id, o));
  return m;
}

// The directory that will hold `path` and the last name in it.
Result<std::pair<posix::Attr, std::string>> parent_of(posix::Namespace& ns, const posix::Cred& cred,
                                                      std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  std::string_view dir = slash == std::string_view::npos ? "" : path.substr(0, slash);
  std::string name(slash == std::string_view::npos ? path : path.substr(slash + 1));
  RFOS_ASSIGN_OR_RETURN(posix::Attr d, ns.resolve(dir, cred));
  return std::make_pair(d, name);
}

}  // namespace rfos::cli
