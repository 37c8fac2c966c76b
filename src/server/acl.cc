#include "server/acl.h"

#include <algorithm>
#include <cctype>

namespace rfos::server::acl {

namespace {
bool special(std::string_view who) { return who == kOwner || who == kOwnerGroup || who == kEveryone; }
bool same_principal(const Entry& a, const Entry& b) { return a.who == b.who && a.group == b.group; }
}  // namespace

Status check_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return error(StatusCode::kInvalidArgument, "a name is 1..64 characters");
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = std::isalnum(c) || c == '.' || c == '_' || c == '-' || (c == '$' && i + 1 == name.size());
    if (!ok) return error(StatusCode::kInvalidArgument, "'" + std::string(name) + "' is not a user or group name");
  }
  return Status::ok();
}

std::string rights_string(uint32_t rights) {
  std::string s;
  if (rights & kRead) s += 'r';
  if (rights & kWrite) s += 'w';
  if (rights & kAdmin) s += 'a';
  return s;
}

Result<Entry> parse_entry(std::string_view text) {
  // A:<flags>:<principal>:<rights>
  auto bad = [&](const std::string& why) {
    return error(StatusCode::kInvalidArgument,
                 "ACL entry '" + std::string(text) + "': " + why + " (e.g. A::alice@:rw, A:G:devs@:r, A::EVERYONE@:r)");
  };
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ':') {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  if (parts.size() != 4) return bad("four fields separated by ':' expected");
  if (parts[0] != "A") return bad("only allow entries (type A) exist");
  if (parts[1] != "" && parts[1] != "G") return bad("flags are empty or G (a group)");
  std::string_view who = parts[2];
  if (who.empty() || who.back() != '@') return bad("a principal ends in '@'");
  Entry e;
  e.group = parts[1] == "G";
  if (special(who)) {
    e.who = std::string(who);
    if (e.group != (who == kOwnerGroup)) return bad("GROUP@ and only GROUP@ among the special principals takes G");
  } else {
    who.remove_suffix(1);
    RFOS_RETURN_IF_ERROR(check_name(who));
    e.who = std::string(who);
  }
  for (char c : parts[3]) {
    if (c == 'r')
      e.rights |= kRead;
    else if (c == 'w')
      e.rights |= kWrite;
    else if (c == 'a')
      e.rights |= kAdmin;
    else
      return bad(std::string("unknown right '") + c + "' (r, w, a)");
  }
  return e;
}

std::string format_entry(const Entry& e) {
  std::string who = special(e.who) ? e.who : e.who + "@";
  return std::string("A:") + (e.group ? "G" : "") + ":" + who + ":" + rights_string(e.rights);
}

Result<Entry> parse_principal(std::string_view text) {
  Entry e;
  if (special(text)) {
    e.who = std::string(text);
    e.group = text == kOwnerGroup;
    return e;
  }
  if (text.starts_with("g:")) {
    e.group = true;
    text.remove_prefix(2);
  } else if (text.starts_with("u:")) {
    text.remove_prefix(2);
  }
  if (text.empty() || text.back() != '@')
    return error(StatusCode::kInvalidArgument,
                 "principal '" + std::string(text) + "': OWNER@, GROUP@, EVERYONE@, u:NAME@ or g:NAME@");
  text.remove_suffix(1);
  RFOS_RETURN_IF_ERROR(check_name(text));
  e.who = std::string(text);
  return e;
}

uint32_t rights_of(const Acl& acl, const Principal& caller) {
  if (caller.admin) return kAll;
  auto find = [&](std::string_view who, bool group) -> const Entry* {
    for (const Entry& e : acl.entries)
      if (e.who == who && e.group == group) return &e;
    return nullptr;
  };
  if (!caller.anonymous()) {
    if (caller.name == acl.owner) {
      const Entry* e = find(kOwner, false);
      return (e ? e->rights : 0) | kAdmin;
    }
    if (const Entry* e = find(caller.name, false)) return e->rights;
    bool matched = false;
    uint32_t rights = 0;
    for (const Entry& e : acl.entries) {
      bool mine = e.group && ((e.who == kOwnerGroup && caller.in_group(acl.owner_group)) ||
                              (e.who != kOwnerGroup && caller.in_group(e.who)));
      if (mine) {
        matched = true;
        rights |= e.rights;
      }
    }
    if (matched) return rights;
  }
  const Entry* e = find(kEveryone, false);
  return e ? e->rights : 0;
}

Acl default_acl(const std::string& owner, const std::string& owner_group) {
  Acl a;
  a.owner = owner;
  a.owner_group = owner_group;
  a.entries = {{std::string(kOwner), false, kAll}, {std::string(kOwnerGroup), true, kRead}};
  return a;
}

void update(Acl* acl, const Entry& e) {
  for (Entry& have : acl->entries)
    if (same_principal(have, e)) {
      have.rights = e.rights;
      return;
    }
  acl->entries.push_back(e);
}

Status remove(Acl* acl, const Entry& who) {
  auto it =
      std::find_if(acl->entries.begin(), acl->entries.end(), [&](const Entry& e) { return same_principal(e, who); });
  if (it == acl->entries.end()) return error(StatusCode::kNotFound, "no ACL entry for " + format_entry(who));
  acl->entries.erase(it);
  return Status::ok();
}

}  // namespace rfos::server::acl
