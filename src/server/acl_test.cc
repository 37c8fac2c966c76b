#include "server/acl.h"

#include <gtest/gtest.h>

namespace rfos::server::acl {
namespace {

Principal user(const std::string& name, std::vector<std::string> groups = {}) {
  Principal p;
  p.via = Principal::Via::kLocal;
  p.name = name;
  p.groups = std::move(groups);
  return p;
}

Acl parse(const std::string& owner, const std::string& group, std::vector<std::string> entries) {
  Acl a;
  a.owner = owner;
  a.owner_group = group;
  for (const std::string& t : entries) {
    auto e = parse_entry(t);
    EXPECT_TRUE(e.is_ok()) << t << ": " << e.status().to_string();
    if (e.is_ok()) a.entries.push_back(*e);
  }
  return a;
}

TEST(Acl, EntriesParseAndFormatBack) {
  for (const char* t : {"A::OWNER@:rwa", "A:G:GROUP@:r", "A::EVERYONE@:", "A::alice@:rw", "A:G:devs@:a",
                        "A::svc.backup$@:r", "A::1000@:w"}) {
    auto e = parse_entry(t);
    ASSERT_TRUE(e.is_ok()) << t << ": " << e.status().to_string();
    EXPECT_EQ(format_entry(*e), t);
  }
  auto e = parse_entry("A::bob@:wr");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->rights, kRead | kWrite);
  EXPECT_FALSE(e->group);
}

TEST(Acl, MalformedEntriesAreRefused) {
  for (const char* t : {"", "A::alice:rw", "D::alice@:rw", "A:X:alice@:rw", "A::alice@:rwx", "A::alice@", "A:::rw",
                        "A::@:r", "A::al/ice@:r", "A::a b@:r", "A:G:OWNER@:r", "A::GROUP@:r", "A:G:EVERYONE@:r",
                        "A::alice@:r:extra", "A::$x@:r"}) {
    auto e = parse_entry(t);
    EXPECT_FALSE(e.is_ok()) << t;
    if (!e.is_ok()) {
      EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_FALSE(parse_entry(std::string(70, 'a') + "@").is_ok());
}

TEST(Acl, PrincipalsAsDeleteNamesThem) {
  EXPECT_EQ(parse_principal("OWNER@")->who, "OWNER@");
  EXPECT_TRUE(parse_principal("GROUP@")->group);
  EXPECT_EQ(parse_principal("u:alice@")->who, "alice");
  EXPECT_FALSE(parse_principal("alice@")->group);
  EXPECT_TRUE(parse_principal("g:devs@")->group);
  EXPECT_FALSE(parse_principal("alice").is_ok());
  EXPECT_FALSE(parse_principal("g:@").is_ok());
}

TEST(Acl, OwnerThenUserThenGroupsThenEveryone) {
  Acl a = parse("alice", "staff",
                {"A::OWNER@:r", "A:G:GROUP@:r", "A::bob@:w", "A:G:devs@:w", "A:G:ops@:a", "A::EVERYONE@:r"});
  EXPECT_EQ(rights_of(a, user("alice")), kRead | kAdmin);  // the owner always administers
  // A user's own entry wins over their groups (bob is in devs, which would give w anyway, and ops).
  EXPECT_EQ(rights_of(a, user("bob", {"ops"})), kWrite);
  // Groups add up; the owner group through GROUP@.
  EXPECT_EQ(rights_of(a, user("carol", {"staff", "devs", "ops"})), kRead | kWrite | kAdmin);
  EXPECT_EQ(rights_of(a, user("dave", {"devs"})), kWrite);
  // A caller in a matching group does not fall through to EVERYONE@ (as POSIX ACLs: a mask, not a union).
  Acl b = parse("alice", "staff", {"A:G:devs@:", "A::EVERYONE@:rw"});
  EXPECT_EQ(rights_of(b, user("dave", {"devs"})), 0u);
  EXPECT_EQ(rights_of(b, user("erin", {"other"})), kRead | kWrite);
  Principal anon;
  EXPECT_EQ(rights_of(b, anon), kRead | kWrite);
  EXPECT_EQ(rights_of(a, anon), kRead);
  // Anonymous callers never match a name, even an empty owner.
  Acl unowned = parse("", "", {"A::OWNER@:rwa"});
  EXPECT_EQ(rights_of(unowned, anon), 0u);
}

TEST(Acl, NoEntryNoRights) {
  Acl a = default_acl("alice", "staff");
  EXPECT_EQ(rights_of(a, user("alice")), kAll);
  EXPECT_EQ(rights_of(a, user("bob", {"staff"})), kRead);
  EXPECT_EQ(rights_of(a, user("mallory", {"users"})), 0u);
  Principal anon;
  EXPECT_EQ(rights_of(a, anon), 0u);
  Principal root = user("root");
  root.admin = true;
  EXPECT_EQ(rights_of(a, root), kAll);
}

TEST(Acl, UpdateReplacesAndRemoveDeletes) {
  Acl a = default_acl("alice", "staff");
  update(&a, *parse_entry("A::bob@:r"));
  update(&a, *parse_entry("A::bob@:rw"));
  update(&a, *parse_entry("A:G:bob@:a"));  // a group named bob is another principal
  ASSERT_EQ(a.entries.size(), 4u);
  EXPECT_EQ(rights_of(a, user("bob")), kRead | kWrite);
  ASSERT_TRUE(remove(&a, *parse_principal("u:bob@")).is_ok());
  EXPECT_EQ(rights_of(a, user("bob", {"bob"})), kAdmin);
  EXPECT_EQ(remove(&a, *parse_principal("u:bob@")).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rfos::server::acl

namespace rfos::server {
namespace {

// Agents act for local users only where the config trusts them for those users (principal.h, act_for).
TEST(ActFor, OnlyATrustedAgentActsAndOnlyForWhomItIsTrusted) {
  Principal agent;
  agent.via = Principal::Via::kLocal;
  agent.name = "agentd";
  std::string nobody = "65534:65534";
  // Not named in the config: refused, whoever it asks for.
  EXPECT_EQ(act_for(agent, nobody, {}, {}).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(act_for(Principal{}, nobody, {{"", {"*"}}}, {}).status().code(), StatusCode::kPermissionDenied);
  // "*": any user but an administrator.
  auto p = act_for(agent, nobody, {{"agentd", {"*"}}}, {});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->uid, 65534u);
  EXPECT_EQ(p->name, "nobody");
  EXPECT_FALSE(p->admin);
  EXPECT_EQ(act_for(agent, "0:0", {{"agentd", {"*"}}}, {}).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(act_for(agent, nobody, {{"agentd", {"*"}}}, {"nobody"}).status().code(), StatusCode::kPermissionDenied);
  // An administrator only by name, and then as one.
  auto root = act_for(agent, "0:0", {{"agentd", {"root"}}}, {});
  ASSERT_TRUE(root.is_ok());
  EXPECT_TRUE(root->admin);
  // By user name, or by a group the user is in (here the supplementary group 0, root's).
  EXPECT_TRUE(act_for(agent, nobody, {{"agentd", {"nobody"}}}, {}).is_ok());
  EXPECT_EQ(act_for(agent, nobody, {{"agentd", {"alice"}}}, {}).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(act_for(agent, "65534:65534:0", {{"agentd", {"group:root"}}}, {}).is_ok());
  // Malformed headers.
  for (const char* bad : {"", "x:1", "1", "1:2:3:4", "1:2:", "1:2:a", "-1:2", "1:2:3,,4", "99999999999:1"})
    EXPECT_EQ(act_for(agent, bad, {{"agentd", {"*"}}}, {}).status().code(), StatusCode::kInvalidArgument) << bad;
}

// A trusted agent's tenant limits (rfos-qos): what the server signs into the capability.
TEST(ActFor, TenantLimitsAreParsedAndKeyedByTenant) {
  auto q = tenant_limits("5000:50:0:0:team:a");
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->iops, 5000u);
  EXPECT_EQ(q->burst_ios, 50u);
  EXPECT_EQ(q->bytes_per_s, 0u);
  EXPECT_EQ(q->key, wire::qos_key_of("team:a"));  // the tenant's name is what follows the fourth colon
  auto b = tenant_limits("0:0:1073741824:0:b");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->bytes_per_s, 1u << 30);
  for (const char* bad :
       {"", "1:1:1:1", "1:1:1:1:", "0:0:0:0:t", "x:0:0:0:t", "-1:0:0:0:t", "4294967296:0:0:0:t", "1:0:0:t"})
    EXPECT_EQ(tenant_limits(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace rfos::server
