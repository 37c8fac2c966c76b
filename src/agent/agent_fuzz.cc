// Fuzz target for what an app sends the agent: control messages (decode_message), batches of files in its shared
// buffer (decode_file_batch), and a ring region's contents (its header's indices and the submissions in it), which
// the agent reads from memory the app writes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "agent/protocol.h"
#include "agent/ring.h"

extern "C" {
uint64_t rfos_fuzz_accepted = 0;  // inputs some decoder accepted (tests/fuzz_main.cc)
}

namespace {
using namespace rfos;
using namespace rfos::agent;
std::unique_ptr<RingRegion> region = RingRegion::create(8, 8).value();
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto m = decode_message(in);
  if (m.is_ok()) {
    ++rfos_fuzz_accepted;
    if (encode_message(*m) != in) std::abort();  // one encoding per message
  }
  // The same bytes as a batch of files an app left in its shared buffer (rfos_fs_put_files, rfos_fs_get_files).
  for (bool put : {true, false}) {
    auto batch = decode_file_batch(in, put, 1 << 20);
    if (!batch.is_ok()) continue;
    ++rfos_fuzz_accepted;
    uint64_t room = 0;
    for (const BatchFile& f : *batch) room += f.capacity;
    if (batch->size() > kMaxBatchFiles || room > (1 << 20)) std::abort();
  }
  // The same bytes as what an app left in the ring: the tail, then submissions.
  if (size >= 4) {
    AgentEnds ends(*region);
    uint32_t tail;
    std::memcpy(&tail, data, 4);
    region->header()->sq_tail.store(region->header()->sq_head.load() + tail);
    size_t n = std::min<size_t>((size - 4) / sizeof(Sqe), region->sq_entries());
    std::memcpy(region->sqes(), data + 4, n * sizeof(Sqe));
    auto ready = ends.sq.ready();
    if (ready.is_ok()) {
      if (*ready > region->sq_entries()) std::abort();
      for (uint32_t i = 0; i < *ready; ++i) {
        Sqe e = ends.sq.take();
        if (check_sqe(e, 1 << 20, 1 << 20).is_ok()) {
          ++rfos_fuzz_accepted;
          if (e.op != 0 && (e.buf + e.length > (1 << 20) || e.dkey_len + e.akey_len > kSqeKeyBytes)) std::abort();
        }
      }
      ends.sq.release();
    }
  }
  return 0;
}

extern "C" void rfos_fuzz_seeds(void (*emit)(void*, const char*, const uint8_t*, size_t), void* ctx) {
  auto out = [&](const char* name, const std::string& s) {
    emit(ctx, name, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  Message m;
  m.type = MsgType::kHello;
  m.version = kProtocolVersion;
  out("hello", encode_message(m));
  m.type = MsgType::kSetup;
  m.sq_entries = m.cq_entries = 256;
  m.buffer_bytes = 1 << 20;
  out("setup", encode_message(m));
  m.type = MsgType::kOpen;
  m.pool = "pool";
  m.cont = "cont";
  m.write = true;
  out("open", encode_message(m));
  m.type = MsgType::kMount;
  m.text = "fsname=rfos:p/c\nattr_timeout_s=1\n";
  out("mount", encode_message(m));
  m.type = MsgType::kControl;
  m.text = "rfos.wire.PoolQueryRequest";
  m.blob = std::string("\x0a\x01p", 3);
  out("control", encode_message(m));
  m.type = MsgType::kControlled;
  out("controlled", encode_message(m));
  m.type = MsgType::kKeys;
  m.handle = 1;
  m.dkey = "d";
  m.akey = "a";
  m.value = static_cast<uint64_t>(KeyOp::kGetValue);
  m.buffer_bytes = 4096;
  out("keys", encode_message(m));
  m.type = MsgType::kObject;
  m.pool = "p";
  m.cont = "c";
  m.text = "name";
  m.value = static_cast<uint64_t>(ObjectOp::kGet);
  m.epoch = 5;
  out("object", encode_message(m));
  m.type = MsgType::kGrant;
  m.value = 4096;
  m.buffer_bytes = 1 << 20;
  m.akey = std::string(32, 's');
  m.epoch = 60000;
  out("grant", encode_message(m));
  m.type = MsgType::kRevoke;
  m.dkey = std::string(16, 'g');
  out("revoke", encode_message(m));
  m.type = MsgType::kWelcome;
  m.text = "tenant";
  out("welcome", encode_message(m));
  out("error", encode_message(error_message(1, error(StatusCode::kBusy, "busy"))));
  // Batches: two files to put ("a", mode 0644, "xyz"; "b", 0600, empty), two to get (capacities 4096 and 16).
  auto le = [](std::string* s, auto v) { s->append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  auto named = [&](std::string* s, const std::string& name) {
    le(s, static_cast<uint16_t>(name.size()));
    *s += name;
  };
  std::string put, get;
  le(&put, uint32_t{2});
  le(&get, uint32_t{2});
  for (auto [name, mode, bytes, cap] :
       {std::tuple<std::string, uint32_t, std::string, uint64_t>{"a", 0644, "xyz", 4096}, {"b", 0600, "", 16}}) {
    named(&put, name);
    le(&put, mode);
    le(&put, static_cast<uint64_t>(bytes.size()));
    put += bytes;
    named(&get, name);
    le(&get, cap);
  }
  out("put-batch", put);
  out("get-batch", get);
  std::string ring(4, '\0');
  uint32_t two = 2;
  std::memcpy(ring.data(), &two, 4);
  for (int i = 0; i < 2; ++i) {
    Sqe e;
    e.op = static_cast<uint8_t>(RingOp::kWrite);
    e.dkey_len = e.akey_len = 1;
    e.keys[0] = 'd';
    e.keys[1] = 'a';
    e.length = 4096;
    e.buf = 4096 * i;
    ring.append(reinterpret_cast<const char*>(&e), sizeof(e));
  }
  out("ring", ring);
}
