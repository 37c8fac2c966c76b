// An in-memory DirStore for tests of posix::execute (dir_ops_test, dir_ops_fuzz): single values and file data by
// key, and a choice of which keys are "here".
#pragma once

#include <sys/stat.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "client/file_layout.h"
#include "posix/dir_ops.h"

namespace rfos::posix::testing {

class MemStore final : public DirStore {
 public:
  using Key = std::tuple<ObjectId, std::string, std::string>;
  std::map<Key, std::string> values;  // single values and (akey "d") file data at offset 0
  std::function<bool(const ObjectId&, std::string_view)> here = [](const ObjectId&, std::string_view) { return true; };
  int batches = 0, durable_batches = 0;
  int sized = 0;  // calls of data_end and first_chunk_end
  Status fail_apply = Status::ok();

  bool owns(const ObjectId& oid, std::string_view dkey) const override { return here(oid, dkey); }
  Result<std::string> get(const ObjectId& oid, std::string_view dkey, std::string_view akey) override {
    if (!here(oid, dkey)) return error(StatusCode::kInternal, "read of a key that is not here");
    auto it = values.find({oid, std::string(dkey), std::string(akey)});
    if (it == values.end()) return error(StatusCode::kNotFound, "none");
    return it->second;
  }
  Result<bool> has_entries(const ObjectId& dir) override {
    for (const auto& [k, v] : values)
      if (std::get<0>(k) == dir && std::get<1>(k) != kInodeDkey && std::get<1>(k) != kXattrDkey) return true;
    return false;
  }
  Result<uint64_t> data_end(const ObjectId& oid) override {
    ++sized;
    uint64_t end = 0;
    for (const auto& [k, v] : values)
      if (std::get<0>(k) == oid && std::get<2>(k) == client::layout::kDataAkey) end = std::max<uint64_t>(end, v.size());
    return end;
  }
  Result<uint64_t> first_chunk_end(const ObjectId& oid) override {
    ++sized;
    auto it = values.find({oid, client::layout::chunk_key(0), std::string(client::layout::kDataAkey)});
    return it == values.end() ? uint64_t{0} : uint64_t{it->second.size()};
  }
  Result<std::string> read_data(const ObjectId& oid, uint64_t len) override {
    std::string out(len, '\0');
    auto it = values.find({oid, client::layout::chunk_key(0), std::string(client::layout::kDataAkey)});
    if (it != values.end()) out.replace(0, std::min<size_t>(len, it->second.size()), it->second.substr(0, len));
    return out;
  }
  Result<std::vector<std::pair<std::string, std::string>>> list(const ObjectId& dir, std::string* anchor, size_t max,
                                                                bool* done) override {
    std::vector<std::pair<std::string, std::string>> out;
    std::set<std::string> dkeys;  // in key order, after the anchor
    for (const auto& [k, v] : values)
      if (std::get<0>(k) == dir && std::get<1>(k) > *anchor) dkeys.insert(std::get<1>(k));
    for (const std::string& d : dkeys) {
      if (out.size() == max) break;
      auto it = values.find({dir, d, std::string(kEntryAkey)});
      out.emplace_back(d, it == values.end() ? std::string() : it->second);
    }
    *done = out.size() == dkeys.size();
    if (!out.empty()) *anchor = out.back().first;
    return out;
  }
  Status apply(const std::vector<Change>& changes, bool durable) override {
    if (!fail_apply.is_ok()) return fail_apply;
    for (const Change& c : changes)
      if (c.kind != Change::Kind::kPunchObject && !here(c.oid, c.dkey))
        return error(StatusCode::kInternal, "a change of a key that is not here");
    for (const Change& c : changes) {
      if (c.kind == Change::Kind::kPunchObject) {
        std::erase_if(values, [&](const auto& kv) { return std::get<0>(kv.first) == c.oid; });
      } else if (c.kind == Change::Kind::kPunch) {
        std::erase_if(
            values, [&](const auto& kv) { return std::get<0>(kv.first) == c.oid && std::get<1>(kv.first) == c.dkey; });
      } else if (c.kind == Change::Kind::kPunchData) {  // a hole; at the end, the data ends before it
        auto it = values.find({c.oid, c.dkey, c.akey});
        if (it == values.end() || it->second.size() <= c.offset) continue;
        std::string& v = it->second;
        if (c.offset + c.length >= v.size())
          v.resize(c.offset);
        else
          std::fill_n(v.begin() + static_cast<ptrdiff_t>(c.offset), c.length, '\0');
      } else if (c.kind == Change::Kind::kPutData) {
        std::string& v = values[{c.oid, c.dkey, c.akey}];
        if (v.size() < c.offset + c.value.size()) v.resize(c.offset + c.value.size(), '\0');
        v.replace(c.offset, c.value.size(), c.value);
      } else {
        values[{c.oid, c.dkey, c.akey}] = c.value;
      }
    }
    ++batches;
    if (durable) ++durable_batches;
    return Status::ok();
  }

  // A directory inode, owned by `uid`, mode `mode`.
  void mkdir(const ObjectId& oid, uint32_t mode, uint32_t uid = 0, uint32_t gid = 0) {
    Attr a;
    a.oid = oid;
    a.mode = S_IFDIR | mode;
    a.uid = uid;
    a.gid = gid;
    a.nlink = 2;
    a.parent = oid;
    values[{oid, std::string(kInodeDkey), std::string(kInodeAkey)}] = encode_inode(a, 0);
  }
  Result<Attr> inode(const ObjectId& oid) {
    uint64_t floor = 0;
    RFOS_ASSIGN_OR_RETURN(std::string raw, get(oid, kInodeDkey, kInodeAkey));
    return decode_inode(oid, raw, &floor);
  }
  bool has_entry(const ObjectId& dir, const std::string& name) {
    return values.count({dir, name, std::string(kEntryAkey)}) > 0;
  }
};

}  // namespace rfos::posix::testing
