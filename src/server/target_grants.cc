// Grants (wire kGrant): memory one session lends to the fetches and updates of another that name it, the S3
// gateway's RDMA path (docs/s3.md, "RDMA"). The target keeps each grant with the endpoint of the session that made
// it, and moves the bytes of a request that uses it over that endpoint only.
#include "common/clock.h"
#include "server/target_impl.h"

namespace rfos::server {

using Impl = Target::Impl;

namespace {
// Not kPermissionDenied, which a client takes for its own session ended (and opens a new one).
Status refused(const std::string& why) { return error(StatusCode::kNotPermitted, "grant refused: " + why); }
}  // namespace

void Impl::handle_grant(Call& c) {
  const wire::Request& q = c.q;
  std::string id = q.grant.substr(0, wire::kGrantIdBytes);
  uint64_t now = wall_ms();
  auto it = grants.find(id);
  if (q.length == 0) {  // a revocation: by the session that made it only; one already gone is no error
    if (it != grants.end()) {
      if (it->second.session != c.cap.session) return reply_error(c.to(), c.id(), refused("another session's grant"));
      grants.erase(it);
    }
    return reply_length(c, 0);
  }
  if (it != grants.end()) return reply_error(c.to(), c.id(), error(StatusCode::kAlreadyExists, "grant id in use"));
  size_t mine = 0;
  for (auto g = grants.begin(); g != grants.end();) {
    if (g->second.until_ms <= now) {
      g = grants.erase(g);
      continue;
    }
    mine += g->second.session == c.cap.session;
    ++g;
  }
  if (mine >= kMaxGrantsPerSession || grants.size() >= kMaxGrants)
    return reply_error(c.to(), c.id(), error(StatusCode::kNoSpace, "too many grants held; revoke some"));
  Grant g;
  g.via = c.to();
  g.session = c.cap.session;
  g.addr = q.remote_addr;
  g.length = q.length;
  g.rkey = q.rkey;
  g.fetch = q.flags & wire::kGrantFetch;
  g.scope = q.grant.substr(wire::kGrantIdBytes);
  g.until_ms = now + (q.offset ? q.offset : kDefaultGrantMs);
  grants.emplace(std::move(id), std::move(g));
  reply_length(c, 0);
}

Result<Impl::Remote> Impl::remote_of(const Call& c) {
  const wire::Request& q = c.q;
  if (q.grant.empty()) return Remote{c.to(), q.remote_addr, q.rkey, false};
  std::string_view ref = q.grant;
  auto it = grants.find(std::string(ref.substr(0, wire::kGrantIdBytes)));
  if (it == grants.end()) return refused("no such grant here (expired, revoked, or never made)");
  Grant& g = it->second;
  uint64_t now = wall_ms();
  if (g.until_ms <= now || revocations->revoked(g.session, now)) {
    grants.erase(it);
    return refused("it has expired, or its session ended");
  }
  if (ref.substr(wire::kGrantIdBytes + wire::kGrantUseBytes) != g.scope) return refused("it is for another request");
  if (g.fetch != (q.op == wire::Op::kFetch))
    return refused(g.fetch ? "it lends memory to write into, not to read" : "it lends memory to read, not to write");
  if (q.remote_addr > g.length || q.length > g.length - q.remote_addr)
    return error(StatusCode::kInvalidArgument, "grant refused: the bytes lie outside the granted memory");
  if (!claims->claim(it->first, ref.substr(wire::kGrantIdBytes, wire::kGrantUseBytes), c.cap.session, g.until_ms, now))
    return refused("another request used it (a replay?)");
  return Remote{g.via, g.addr + q.remote_addr, g.rkey, true};
}

bool GrantClaims::claim(std::string_view id, std::string_view use, const Uuid& session, uint64_t until_ms,
                        uint64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = claims_.find(id);
  if (it != claims_.end() && it->second.until_ms <= now_ms) {
    claims_.erase(it);
    it = claims_.end();
  }
  if (it != claims_.end()) return it->second.use == use && it->second.session == session;
  // Bounded by the grants the targets hold (each claim ends with its grant): what has ended goes first.
  if (claims_.size() >= 4 * Target::Impl::kMaxGrants)
    std::erase_if(claims_, [now_ms](const auto& c) { return c.second.until_ms <= now_ms; });
  claims_.emplace(std::string(id), Claim{std::string(use), session, until_ms});
  return true;
}

void Impl::drop_grants(transport::EpHandle via) {
  std::erase_if(grants, [via](const auto& g) { return g.second.via == via; });
}

}  // namespace rfos::server
