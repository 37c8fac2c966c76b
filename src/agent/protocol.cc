#include "agent/protocol.h"

#include <cstring>

#include "common/coding.h"

namespace rfos::agent {

namespace {

void put_string(std::string* out, std::string_view s) {
  put_le<uint16_t>(out, static_cast<uint16_t>(s.size()));
  out->append(s.data(), s.size());
}

// Bytes after their length, a Len (u16: a string, u32: a blob).
template <typename Len>
bool get_sized(ByteReader* in, std::string* s) {
  Len n;
  std::string_view v;
  if (!in->get_le(&n) || !in->get_bytes(n, &v)) return false;
  s->assign(v);
  return true;
}
bool get_string(ByteReader* in, std::string* s) { return get_sized<uint16_t>(in, s); }
bool get_blob(ByteReader* in, std::string* s) { return get_sized<uint32_t>(in, s); }

bool get_oid(ByteReader* in, uint8_t* oid) {
  std::string_view v;
  if (!in->get_bytes(16, &v)) return false;
  std::memcpy(oid, v.data(), 16);
  return true;
}

Status malformed(const char* what) {
  return error(StatusCode::kInvalidArgument, std::string("malformed agent message: ") + what);
}

}  // namespace

std::string encode_message(const Message& m) {
  std::string out;
  out.push_back(static_cast<char>(m.type));
  put_le<uint32_t>(&out, m.id);
  switch (m.type) {
    case MsgType::kHello:
      put_le<uint32_t>(&out, m.version);
      break;
    case MsgType::kSetup:
    case MsgType::kReady:
      put_le<uint32_t>(&out, m.sq_entries);
      put_le<uint32_t>(&out, m.cq_entries);
      put_le<uint64_t>(&out, m.buffer_bytes);
      break;
    case MsgType::kOpen:
      put_string(&out, m.pool);
      put_string(&out, m.cont);
      out.push_back(m.write ? 1 : 0);
      break;
    case MsgType::kMount:
      put_string(&out, m.pool);
      put_string(&out, m.cont);
      put_string(&out, m.text);
      break;
    case MsgType::kObject:
      put_string(&out, m.pool);
      put_string(&out, m.cont);
      put_string(&out, m.text);
      put_le<uint64_t>(&out, m.value);
      put_le<uint32_t>(&out, m.handle);
      put_le<uint64_t>(&out, m.buffer_bytes);
      put_string(&out, m.dkey);
      put_le<uint64_t>(&out, m.epoch);
      break;
    case MsgType::kChunk:
    case MsgType::kNext:
      put_le<uint64_t>(&out, m.value);
      break;
    case MsgType::kControl:
      put_string(&out, m.text);
      put_le<uint32_t>(&out, static_cast<uint32_t>(m.blob.size()));
      out += m.blob;
      break;
    case MsgType::kControlled:
      put_le<uint32_t>(&out, static_cast<uint32_t>(m.blob.size()));
      out += m.blob;
      break;
    case MsgType::kClose:
    case MsgType::kOpened:
      put_le<uint32_t>(&out, m.handle);
      break;
    case MsgType::kKeys:
      put_le<uint32_t>(&out, m.handle);
      out.append(reinterpret_cast<const char*>(m.oid), 16);
      put_string(&out, m.dkey);
      put_string(&out, m.akey);
      put_le<uint64_t>(&out, m.value);
      put_le<uint64_t>(&out, m.buffer_bytes);
      break;
    case MsgType::kGrant:
      put_le<uint32_t>(&out, m.handle);
      put_le<uint64_t>(&out, m.value);
      put_le<uint64_t>(&out, m.buffer_bytes);
      out.push_back(m.write ? 1 : 0);
      put_string(&out, m.akey);
      put_le<uint64_t>(&out, m.epoch);
      break;
    case MsgType::kRevoke:
      put_le<uint32_t>(&out, m.handle);
      put_string(&out, m.dkey);
      break;
    case MsgType::kWelcome:
      put_le<uint32_t>(&out, m.version);
      put_string(&out, m.text);
      break;
    case MsgType::kDone:
      put_le<uint64_t>(&out, m.value);
      put_string(&out, m.text);
      break;
    case MsgType::kError:
      put_le<uint16_t>(&out, m.code);
      put_string(&out, m.text);
      break;
  }
  return out;
}

Result<Message> decode_message(std::string_view bytes) {
  if (bytes.size() > kMaxMessageBytes) return malformed("too long");
  ByteReader in(bytes);
  Message m;
  uint8_t type;
  if (!in.get_le(&type) || !in.get_le(&m.id)) return malformed("short header");
  m.type = static_cast<MsgType>(type);
  bool ok = false;
  switch (m.type) {
    case MsgType::kHello:
      ok = in.get_le(&m.version);
      break;
    case MsgType::kSetup:
    case MsgType::kReady:
      ok = in.get_le(&m.sq_entries) && in.get_le(&m.cq_entries) && in.get_le(&m.buffer_bytes);
      break;
    case MsgType::kOpen: {
      uint8_t w = 0;
      ok = get_string(&in, &m.pool) && get_string(&in, &m.cont) && in.get_le(&w) && w <= 1;
      m.write = w == 1;
      break;
    }
    case MsgType::kMount:
      ok = get_string(&in, &m.pool) && get_string(&in, &m.cont) && get_string(&in, &m.text);
      break;
    case MsgType::kObject:
      ok = get_string(&in, &m.pool) && get_string(&in, &m.cont) && get_string(&in, &m.text) && in.get_le(&m.value) &&
           in.get_le(&m.handle) && in.get_le(&m.buffer_bytes) && get_string(&in, &m.dkey) && in.get_le(&m.epoch) &&
           m.value >= 1 && m.value <= static_cast<uint64_t>(ObjectOp::kReadlink);
      break;
    case MsgType::kChunk:
    case MsgType::kNext:
      ok = in.get_le(&m.value);
      break;
    case MsgType::kControl:
      ok = get_string(&in, &m.text) && get_blob(&in, &m.blob);
      break;
    case MsgType::kControlled:
      ok = get_blob(&in, &m.blob);
      break;
    case MsgType::kClose:
    case MsgType::kOpened:
      ok = in.get_le(&m.handle);
      break;
    case MsgType::kKeys:
      ok = in.get_le(&m.handle) && get_oid(&in, m.oid) && get_string(&in, &m.dkey) && get_string(&in, &m.akey) &&
           in.get_le(&m.value) && in.get_le(&m.buffer_bytes) && m.value >= 1 &&
           m.value <= static_cast<uint64_t>(KeyOp::kReadEpoch);
      break;
    case MsgType::kGrant: {
      uint8_t w = 0;
      ok = in.get_le(&m.handle) && in.get_le(&m.value) && in.get_le(&m.buffer_bytes) && in.get_le(&w) && w <= 1 &&
           get_string(&in, &m.akey) && in.get_le(&m.epoch);
      m.write = w == 1;
      break;
    }
    case MsgType::kRevoke:
      ok = in.get_le(&m.handle) && get_string(&in, &m.dkey);
      break;
    case MsgType::kWelcome:
      ok = in.get_le(&m.version) && get_string(&in, &m.text);
      break;
    case MsgType::kDone:
      ok = in.get_le(&m.value) && get_string(&in, &m.text);
      break;
    case MsgType::kError:
      ok = in.get_le(&m.code) && get_string(&in, &m.text) && m.code != 0;
      break;
    default:
      return malformed("unknown type");
  }
  if (!ok) return malformed("short or invalid body");
  if (in.remaining() != 0) return malformed("bytes after the body");
  return m;
}

Result<std::vector<BatchFile>> decode_file_batch(std::string_view bytes, bool put, uint64_t room) {
  ByteReader in(bytes);
  uint32_t n = 0;
  if (!in.get_le(&n) || n > kMaxBatchFiles) return malformed("a batch of more than 4096 files");
  std::vector<BatchFile> files(n);
  for (BatchFile& f : files) {
    uint64_t len = 0;
    std::string_view data;
    bool ok = get_string(&in, &f.name) && (put ? in.get_le(&f.mode) && in.get_le(&len) && in.get_bytes(len, &data)
                                               : in.get_le(&f.capacity) && f.capacity <= room);
    if (!ok) return malformed("a batch's file, or capacities past the shared buffer");
    room -= f.capacity;
    f.data.assign(data);
  }
  return files;
}

std::string encode_file_batch(const std::vector<BatchFile>& files, bool put) {
  std::string out;
  put_le<uint32_t>(&out, static_cast<uint32_t>(files.size()));
  for (const BatchFile& f : files) {
    put_string(&out, f.name);
    if (put) {
      put_le<uint32_t>(&out, f.mode);
      put_le<uint64_t>(&out, f.data.size());
      out += f.data;
    } else {
      put_le<uint64_t>(&out, f.capacity);
    }
  }
  return out;
}

Status status_of(const Message& m) {
  if (m.type != MsgType::kError) return Status::ok();
  return error(static_cast<StatusCode>(m.code), m.text);
}

Message error_message(uint32_t id, const Status& s) {
  Message m;
  m.type = MsgType::kError;
  m.id = id;
  m.code = static_cast<uint16_t>(s.code());
  if (m.code == 0) m.code = static_cast<uint16_t>(StatusCode::kInternal);
  m.text = s.message().substr(0, 1024);
  return m;
}

}  // namespace rfos::agent
