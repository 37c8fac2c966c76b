// Access control lists of pools and containers: who may read, write or administer them. The server checks
// them on every control call (docs/control-plane.md, "Access model"); capabilities carry only the rights an
// ACL granted.
//
// An ACL has an owner (a user name), an owner group (a group name) and entries, written as DAOS writes them:
//   A::OWNER@:rwa     the owner          A:G:GROUP@:r   the owner group
//   A::alice@:rw      user alice          A:G:devs@:r    group devs
//   A::EVERYONE@:r    everyone else, anonymous callers included
// Rights: r read (connect read-only, query, list, snapshots' list), w write (connect read-write, snapshots,
// containers in a pool), a admin (destroy, change the ACL). The owner always has a, so an owner cannot lock
// themselves out. Evaluation, as POSIX ACLs: the owner gets OWNER@; else a user's own entry; else the union of
// the entries of every group the caller is in (GROUP@ when in the owner group); else EVERYONE@. Administrators
// (Principal::admin) have every right.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/principal.h"

namespace rfos::server::acl {

inline constexpr uint32_t kRead = 1;
inline constexpr uint32_t kWrite = 2;
inline constexpr uint32_t kAdmin = 4;
inline constexpr uint32_t kAll = kRead | kWrite | kAdmin;

inline constexpr std::string_view kOwner = "OWNER@";
inline constexpr std::string_view kOwnerGroup = "GROUP@";
inline constexpr std::string_view kEveryone = "EVERYONE@";

struct Entry {
  std::string who;     // "OWNER@", "GROUP@", "EVERYONE@", or a user or group name (without '@')
  bool group = false;  // a named group (GROUP@ is group too)
  uint32_t rights = 0;
  bool operator==(const Entry&) const = default;
};

struct Acl {
  std::string owner;
  std::string owner_group;
  std::vector<Entry> entries;
};

// "A::alice@:rw" and the like. kInvalidArgument naming what is wrong.
Result<Entry> parse_entry(std::string_view text);
std::string format_entry(const Entry& e);
// A principal as `acl delete` names it: "OWNER@", "GROUP@", "EVERYONE@", "u:alice@" (or "alice@"), "g:devs@".
// Returns an Entry with no rights.
Result<Entry> parse_principal(std::string_view text);
// Names of users and groups in entries and owners: letters, digits, '.', '_', '-' (and '$' at the end).
Status check_name(std::string_view name);

// The rights `caller` has under `acl`.
uint32_t rights_of(const Acl& acl, const Principal& caller);

// A new object's ACL: its owner may do everything, its owner group read.
Acl default_acl(const std::string& owner, const std::string& owner_group);
// Adds `e` or replaces the entry for the same principal.
void update(Acl* acl, const Entry& e);
// Removes the entry for `who`. kNotFound when there is none.
Status remove(Acl* acl, const Entry& who);

std::string rights_string(uint32_t rights);  // "rwa", "r", "" ...

}  // namespace rfos::server::acl
