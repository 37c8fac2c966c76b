#include "agent/seal.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/coding.h"

namespace rfos::agent {

namespace {

constexpr uint64_t kReserveStep = 1u << 20;  // counters reserved per state-file write
// The additional data's first bytes, one per record format: the format byte is not under the tag, so the two
// formats' places (which could spell the same bytes) must never make the same additional data.
constexpr std::string_view kAadTags[] = {"rfos-gcm-v1", "rfos-gcm-v2"};

Status sys_error(const std::string& what) { return error(StatusCode::kIoError, what + ": " + std::strerror(errno)); }

// The additional data of a place's blocks: what they are, where they belong; each block's index is the last 8
// bytes (set_block).
class Aad {
 public:
  Aad(uint8_t format, std::string_view place) : a_(kAadTags[format]) {
    put_be32(&a_, static_cast<uint32_t>(place.size()));
    a_.append(place);
    put_be64(&a_, 0);
  }
  const uint8_t* set_block(uint64_t block) {
    for (int i = 0; i < 8; ++i) a_[a_.size() - 1 - i] = static_cast<char>(block >> (8 * i));
    return reinterpret_cast<const uint8_t*>(a_.data());
  }
  int size() const { return static_cast<int>(a_.size()); }

 private:
  std::string a_;
};

// A place's additional data in each record format, made once for all the blocks of a call; the earlier
// format's only when a record of it turns up.
class PlaceAads {
 public:
  explicit PlaceAads(const SealPlace& place) : place_(place), current_(kSealFormat, place.aad()) {}
  Aad& current() { return current_; }
  // nullptr for a format this agent does not know.
  Aad* of(uint8_t format) {
    if (format == kSealFormat) return &current_;
    if (format != 0) return nullptr;
    if (!legacy_) legacy_.emplace(0, place_.legacy());
    return &*legacy_;
  }

 private:
  const SealPlace& place_;
  Aad current_;
  std::optional<Aad> legacy_;
};

// Seals one block (or value) of `n` bytes from `in` into `out` at `block` of `aad`'s place, with the nonce of
// agent `agent_id` and `counter`; its record at `rec`, with `n` as its length where a block is shorter than whole.
// (The length is not under the tag, but GCM's tag covers the ciphertext's length: a record whose length was
// changed does not open.)
bool seal_one(EVP_CIPHER_CTX* ctx, Aad& aad, uint32_t agent_id, uint64_t counter, uint64_t block, const uint8_t* in,
              size_t n, uint8_t* out, uint8_t* rec) {
  std::memset(rec, 0, kSealRecord);
  std::memcpy(rec, &agent_id, 4);
  std::memcpy(rec + 4, &counter, 8);
  rec[28] = kSealFormat;
  if (block != kValueBlock && n < kSealBlock) {
    client::set_length_field(rec, static_cast<uint16_t>(n));
  }
  int len = 0;
  return EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, rec) == 1 &&
         EVP_EncryptUpdate(ctx, nullptr, &len, aad.set_block(block), aad.size()) == 1 &&
         (n == 0 || EVP_EncryptUpdate(ctx, out, &len, in, static_cast<int>(n)) == 1) &&
         EVP_EncryptFinal_ex(ctx, out + (n == 0 ? 0 : len), &len) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, rec + 12) == 1;
}

// Opens what seal_one made; false when it does not authenticate (or its record is of no format this agent knows).
bool open_one(EVP_CIPHER_CTX* ctx, PlaceAads& aads, uint64_t block, const uint8_t* in, size_t n, uint8_t* out,
              const uint8_t* rec) {
  Aad* aad = aads.of(rec[28]);
  // A whole block's length is 0, one way only (format 0 has none).
  const unsigned length = client::length_field(rec);
  if (aad == nullptr || rec[31] != 0 || length >= kSealBlock || (rec[28] == 0 && length != 0)) return false;
  uint8_t tag[16];
  std::memcpy(tag, rec + 12, 16);
  int len = 0;
  return EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, rec) == 1 &&
         EVP_DecryptUpdate(ctx, nullptr, &len, aad->set_block(block), aad->size()) == 1 &&
         (n == 0 || EVP_DecryptUpdate(ctx, out, &len, in, static_cast<int>(n)) == 1) &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1 &&
         EVP_DecryptFinal_ex(ctx, out + (n == 0 ? 0 : len), &len) == 1;
}

std::atomic<uint64_t> next_sealer_id{1};

// A thread's cipher contexts, keyed for the last sealer it used: the key schedule and GHASH key are set once
// per thread and key, each block sets only its nonce (most of a 4 KiB block's cost beside the cipher is
// OpenSSL's dispatch). Freed (and cleansed) when the thread ends.
struct ThreadContexts {
  uint64_t sealer = 0;
  EVP_CIPHER_CTX* enc = nullptr;
  EVP_CIPHER_CTX* dec = nullptr;
  ~ThreadContexts() {
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
  }
};

const EVP_CIPHER* aes_256_gcm() {
  static EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);  // fetched once, never freed
  return c;
}

}  // namespace

Result<EVP_CIPHER_CTX*> Sealer::context(bool encrypt) {
  thread_local ThreadContexts t;
  if (t.sealer != id_) {
    t.sealer = 0;
    if (!t.enc) t.enc = EVP_CIPHER_CTX_new();
    if (!t.dec) t.dec = EVP_CIPHER_CTX_new();
    const auto* key = reinterpret_cast<const uint8_t*>(key_.data());
    if (!t.enc || !t.dec || aes_256_gcm() == nullptr ||
        EVP_EncryptInit_ex(t.enc, aes_256_gcm(), nullptr, key, nullptr) != 1 ||
        EVP_DecryptInit_ex(t.dec, aes_256_gcm(), nullptr, key, nullptr) != 1)
      return error(StatusCode::kInternal, "AES-GCM set-up failed");
    t.sealer = id_;
  }
  return encrypt ? t.enc : t.dec;
}

Result<std::unique_ptr<Sealer>> Sealer::open(std::string_view key, const std::string& state_file, uint32_t agent_id) {
  if (key.size() != 32) return error(StatusCode::kInvalidArgument, "an AES-256 key is 32 bytes");
  std::unique_ptr<Sealer> s(new Sealer());
  s->key_.assign(key);
  s->state_file_ = state_file;
  s->agent_id_ = agent_id;
  s->id_ = next_sealer_id.fetch_add(1);
  // Above everything reserved before: the last run may have handed out any counter below its reservation.
  uint64_t above = 1;
  std::ifstream in(state_file);
  if (in) {
    std::string text;
    in >> text;
    uint64_t v = 0;
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
        (v = std::strtoull(text.c_str(), nullptr, 10)) == 0)
      return error(StatusCode::kCorruption, "the nonce state file " + state_file + " does not hold a counter");
    above = v;
  } else if (errno != ENOENT) {
    return sys_error("read " + state_file);
  }
  s->next_ = above;
  RFOS_RETURN_IF_ERROR(s->reserve(above));
  return s;
}

Sealer::~Sealer() { OPENSSL_cleanse(key_.data(), key_.size()); }

// Writes the new ceiling to a temporary file, syncs it, renames it over the state file and syncs the directory:
// no counter at or above the old ceiling is handed out before the new one is durable.
Status Sealer::reserve(uint64_t above) {
  uint64_t ceiling = above + kReserveStep;
  std::string tmp = state_file_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error("create " + tmp);
  std::string text = std::to_string(ceiling) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  ::close(fd);
  if (!ok || rename(tmp.c_str(), state_file_.c_str()) != 0) return sys_error("write " + state_file_);
  std::string dir = state_file_.substr(0, state_file_.rfind('/') == std::string::npos ? 0 : state_file_.rfind('/'));
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    ::close(dfd);
  }
  reserved_ = ceiling;
  return Status::ok();
}

Result<uint64_t> Sealer::take_counter() {
  uint64_t n = next_.fetch_add(1);
  if (n < reserved_.load()) return n;
  std::lock_guard lock(mu_);
  while (n >= reserved_.load()) RFOS_RETURN_IF_ERROR(reserve(reserved_.load()));
  return n;
}

Status Sealer::seal(std::span<const uint8_t> plain, const SealPlace& place, uint64_t first_block,
                    std::span<uint8_t> cipher, std::span<uint8_t> records) {
  size_t blocks = (plain.size() + kSealBlock - 1) / kSealBlock;
  if (cipher.size() != plain.size() || records.size() != blocks * kSealRecord || first_block >= kValueBlock - blocks)
    return error(StatusCode::kInvalidArgument, "sealing takes blocks, as much ciphertext and a record for each");
  RFOS_ASSIGN_OR_RETURN(EVP_CIPHER_CTX * ctx, context(true));
  Aad aad(kSealFormat, place.aad());
  for (size_t b = 0; b < blocks; ++b) {
    RFOS_ASSIGN_OR_RETURN(uint64_t counter, take_counter());
    size_t n = std::min(kSealBlock, plain.size() - b * kSealBlock);
    if (!seal_one(ctx, aad, agent_id_, counter, first_block + b, plain.data() + b * kSealBlock, n,
                  cipher.data() + b * kSealBlock, records.data() + b * kSealRecord))
      return error(StatusCode::kInternal, "AES-GCM encryption failed");
  }
  return Status::ok();
}

Status Sealer::open(std::span<const uint8_t> cipher, std::span<const uint8_t> records, const SealPlace& place,
                    uint64_t first_block, std::span<uint8_t> plain) {
  size_t blocks = cipher.size() / kSealBlock;
  if (cipher.size() % kSealBlock != 0 || plain.size() != cipher.size() || records.size() != blocks * kSealRecord)
    return error(StatusCode::kInvalidArgument, "opening takes whole 4 KiB blocks");
  RFOS_ASSIGN_OR_RETURN(EVP_CIPHER_CTX * ctx, context(false));
  PlaceAads aads(place);
  static const uint8_t kZero[kSealRecord] = {};
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* rec = records.data() + b * kSealRecord;
    if (std::memcmp(rec, kZero, kSealRecord) == 0) {  // never written: a hole, if the bytes are one too
      if (std::any_of(cipher.begin() + b * kSealBlock, cipher.begin() + (b + 1) * kSealBlock,
                      [](uint8_t x) { return x != 0; }))
        return error(StatusCode::kChecksumMismatch,
                     "block " + std::to_string(first_block + b) + " holds bytes but no nonce and tag");
      std::memset(plain.data() + b * kSealBlock, 0, kSealBlock);
      continue;
    }
    // A block shorter than whole (the last of its array) opens as long as it is; zeros follow, whatever lies there.
    const size_t n = client::sealed_length({rec, kSealRecord});
    if (n > kSealBlock ||
        !open_one(ctx, aads, first_block + b, cipher.data() + b * kSealBlock, n, plain.data() + b * kSealBlock, rec)) {
      OPENSSL_cleanse(plain.data() + b * kSealBlock, kSealBlock);  // nothing of a block that failed is handed out
      return error(StatusCode::kChecksumMismatch,
                   "block " + std::to_string(first_block + b) + " does not authenticate (tampered or misplaced)");
    }
    std::memset(plain.data() + b * kSealBlock + n, 0, kSealBlock - n);
  }
  return Status::ok();
}

Result<std::string> Sealer::seal_value(std::string_view plain, const SealPlace& place) {
  RFOS_ASSIGN_OR_RETURN(EVP_CIPHER_CTX * ctx, context(true));
  RFOS_ASSIGN_OR_RETURN(uint64_t counter, take_counter());
  std::string out(kSealRecord + plain.size(), '\0');
  auto* o = reinterpret_cast<uint8_t*>(out.data());
  Aad aad(kSealFormat, place.aad());
  if (!seal_one(ctx, aad, agent_id_, counter, kValueBlock, reinterpret_cast<const uint8_t*>(plain.data()), plain.size(),
                o + kSealRecord, o))
    return error(StatusCode::kInternal, "AES-GCM encryption failed");
  return out;
}

Result<std::string> Sealer::open_value(std::string_view sealed, const SealPlace& place) {
  if (sealed.size() < kSealRecord)
    return error(StatusCode::kChecksumMismatch, "a sealed value is shorter than its record");
  RFOS_ASSIGN_OR_RETURN(EVP_CIPHER_CTX * ctx, context(false));
  std::string plain(sealed.size() - kSealRecord, '\0');
  const auto* in = reinterpret_cast<const uint8_t*>(sealed.data());
  // Values were never sealed in format 0: a record that says so is not one.
  PlaceAads aads(place);
  if (in[28] != kSealFormat || in[29] != 0 || in[30] != 0 ||
      !open_one(ctx, aads, kValueBlock, in + kSealRecord, plain.size(), reinterpret_cast<uint8_t*>(plain.data()), in)) {
    OPENSSL_cleanse(plain.data(), plain.size());
    return error(StatusCode::kChecksumMismatch, "a sealed value does not authenticate (tampered or misplaced)");
  }
  return plain;
}

Result<std::string> load_key_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return sys_error("key file " + path);
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return error(StatusCode::kPermissionDenied, "key file " + path + " may be read by others than its owner");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string k = ss.str();
  if (k.size() == 32) return k;
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
  if (k.size() == 64 && k.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
    std::string raw(32, '\0');
    for (size_t i = 0; i < 32; ++i) raw[i] = static_cast<char>(std::stoi(k.substr(2 * i, 2), nullptr, 16));
    OPENSSL_cleanse(k.data(), k.size());
    return raw;
  }
  return error(StatusCode::kInvalidArgument, "key file " + path + " holds neither 32 bytes nor 64 hex digits");
}

}  // namespace rfos::agent
