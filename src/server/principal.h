// Who a control-plane caller is. Local callers are named by the kernel (the control socket's peer credentials:
// uid, gid, supplementary groups); remote callers by the common name of the client certificate their mutual TLS
// handshake verified; callers of a TCP listener without TLS (--insecure) are anonymous.
//
// Names are the currency of access control (server/acl.h): a local uid counts as its passwd name (or its
// decimal number when it has none), a certificate as its common name, groups as their group names. A TLS
// principal "alice" and the local user "alice" are therefore the same principal: the CA the server trusts is
// the administrator's, and names are what it vouches for.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "wire/capability.h"

namespace rfos::server {

struct Principal {
  enum class Via { kAnonymous, kLocal, kTls };
  Via via = Via::kAnonymous;
  std::string name;                 // user name; empty when anonymous
  std::vector<std::string> groups;  // group names (local: primary first); none for TLS and anonymous callers
  uint32_t uid = UINT32_MAX;        // local callers only
  uint32_t gid = UINT32_MAX;
  bool admin = false;  // root, the server's own user, or a name in ServerConfig::admins
  // The limits of the tenant a trusted agent acts for (tenant_limits); signed into the capabilities it gets.
  wire::CapabilityQos qos;

  bool anonymous() const { return via == Via::kAnonymous; }
  bool in_group(const std::string& group) const;
  // For messages and logs: "alice (uid 1000)", "tls:alice", "anonymous".
  std::string describe() const;
};

// A local caller from its kernel credentials: names looked up in the system's user and group databases.
Principal local_principal(uint32_t uid, uint32_t gid, const std::vector<uint32_t>& groups);
// The user and group names of a uid and gid (the decimal number when the database has no name).
std::string user_name(uint32_t uid);
std::string group_name(uint32_t gid);

// Agents (`rfos agent`, docs/agent.md) act for the local users of their host: a call that carries
// "rfos-act-for: UID:GID[:G1,G2...]" (the kernel's credentials of the agent's app) is made as that user when
// `trusted` names the caller's principal with a list that holds the user's name, "group:NAME" of one of its
// groups, or "*". "*" never covers an administrator (root, the server's user, a name in `admins`): acting for
// one needs its name. Errors: kPermissionDenied (an untrusted caller, or one not trusted for that user),
// kInvalidArgument (a malformed header).
using TrustedAgents = std::map<std::string, std::vector<std::string>>;
Result<Principal> act_for(const Principal& agent, std::string_view header, const TrustedAgents& trusted,
                          const std::vector<std::string>& admins);
inline constexpr const char* kActForKey = "rfos-act-for";

// A trusted agent's tenant limits for the user it acts for: "rfos-qos: IOPS:BURST_IOS:BYTES_PER_S:BURST_BYTES:
// TENANT" (decimal; 0: no limit, or the default burst). Heard only beside rfos-act-for, which act_for has
// accepted; the targets then hold every session of that tenant to the limits together (wire::CapabilityQos).
// Errors: kInvalidArgument (malformed, no limit, no tenant name).
Result<wire::CapabilityQos> tenant_limits(std::string_view header);
inline constexpr const char* kQosKey = "rfos-qos";

}  // namespace rfos::server
