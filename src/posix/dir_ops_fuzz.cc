// Fuzz target for the namespace requests a target decodes and carries out (wire kNamespace: bytes from a client),
// and for the replies and notices a client decodes. Accepted requests also run against an in-memory store where some
// keys are elsewhere, so the operations' own checks see arbitrary input.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "posix/dir_ops.h"
#include "posix/dir_ops_testing.h"

extern "C" {
uint64_t rfos_fuzz_accepted = 0;  // inputs some decoder accepted (tests/fuzz_main.cc)
}

namespace {
using namespace rfos;
using namespace rfos::posix;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto q = decode_dir_request(in);
  if (q.is_ok()) {
    ++rfos_fuzz_accepted;
    if (encode_dir_request(*q) != in) std::abort();  // one encoding per request
    testing::MemStore store;
    store.here = [](const ObjectId& oid, std::string_view) { return oid.lo % 3 != 2; };
    store.mkdir({0, 1}, 01777);
    store.mkdir({0, 4}, 0755, 1000);
    (void)execute(*q, store, 1);
  }
  auto page = decode_dir_page(in);
  if (page.is_ok()) {
    ++rfos_fuzz_accepted;
    if (encode_dir_page(*page) != in) std::abort();
  }
  auto r = decode_dir_reply(in);
  if (r.is_ok()) {
    ++rfos_fuzz_accepted;
    if (encode_dir_reply(*r) != in) std::abort();
  }
  auto n = decode_notice(in);
  if (n.is_ok()) {
    ++rfos_fuzz_accepted;
    if (encode_notice(*n) != in) std::abort();
  }
  return 0;
}

// One request of each operation (tests/fuzz/corpus/dir_ops_fuzz), and a reply.
extern "C" void rfos_fuzz_seeds(void (*emit)(void*, const char*, const uint8_t*, size_t), void* ctx) {
  auto put = [&](const char* name, const std::string& bytes) {
    emit(ctx, name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  DirRequest q;
  q.cred = {1000, 1000, {10, 20}};
  q.dir = {0, 1};
  q.name = "file";
  q.oid = {5, 6};
  q.mode = S_IFREG | 0644;
  q.inode_here = true;
  q.data = "first bytes";
  put("create", encode_dir_request(q));
  q.op = DirOp::kRemove;
  q.data.clear();
  q.hints.push_back({{5, 8}, 1000, true});
  q.flags = kPurgeUnlinked;
  q.keep = {{5, 6}, {5, 9}};
  put("remove", encode_dir_request(q));
  q.keep.clear();
  q.op = DirOp::kRename;
  q.dir2 = {0, 4};
  q.name2 = "other";
  q.flags = kRenameNoReplace;
  put("rename", encode_dir_request(q));
  q.op = DirOp::kLink;
  put("link", encode_dir_request(q));
  q.op = DirOp::kSetattr;
  q.set.set_mode = true;
  q.set.mode = 0600;
  q.set.touch = true;
  put("setattr", encode_dir_request(q));
  DirReply r;
  r.attr.oid = {5, 6};
  r.attr.mode = S_IFREG | 0644;
  r.other = {5, 7};
  r.inode_done = false;
  put("reply", encode_dir_reply(r));
  r.has_data = true;
  r.data = "small file";
  put("reply-data", encode_dir_reply(r));
  put("notice", encode_notice(notice_of(q, r)));
  q = {};
  q.op = DirOp::kWrite;
  q.oid = {0, 6};
  q.offset = 10;
  q.data = "bytes";
  put("write", encode_dir_request(q));
  q.op = DirOp::kGetattr;
  q.flags = kWithData;
  put("getattr", encode_dir_request(q));
  q.op = DirOp::kLookup;
  q.dir = {0, 1};
  q.name = "file";
  put("lookup", encode_dir_request(q));
  q.op = DirOp::kPurge;
  put("purge", encode_dir_request(q));
  q.op = DirOp::kReadDir;
  q.data = "anchor";
  q.offset = 100;
  put("readdir", encode_dir_request(q));
  DirPlusPage p;
  p.anchor = "b";
  p.entries.push_back({{"a", {0, 9}, S_IFREG}, true, true, {}});
  p.entries.push_back({{"b", {5, 9}, S_IFDIR}, false, true, {}});
  put("page", encode_dir_page(p));
}
