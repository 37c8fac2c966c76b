// Stand-in driver for fuzz targets when libFuzzer is not available (gcc builds). It starts from the checked-in
// corpus of valid encoded inputs (tests/fuzz/corpus/<target>/), so mutations get past magic numbers and
// versions into the decoders' depths, and fails when they never do.
//
//   <target> ITERATIONS CORPUS_DIR [SEED]     fuzz; every corpus file must decode as it is
//   <target> --write-corpus DIR               (re)write the corpus from the target's own encoders
//
// Every target defines rfos_fuzz_accepted (inputs some decoder accepted) and rfos_fuzz_seeds (valid inputs).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" uint64_t rfos_fuzz_accepted;
extern "C" void rfos_fuzz_seeds(void (*emit)(void* ctx, const char* name, const uint8_t* data, size_t size), void* ctx);

namespace {
int write_corpus(const std::string& dir) {
  std::filesystem::create_directories(dir);
  int n = 0;
  auto emit = [](void* ctx, const char* name, const uint8_t* data, size_t size) {
    auto* d = static_cast<std::pair<std::string, int>*>(ctx);
    std::ofstream(d->first + "/" + name, std::ios::binary).write(reinterpret_cast<const char*>(data), size);
    ++d->second;
  };
  std::pair<std::string, int> ctx{dir, 0};
  rfos_fuzz_seeds(emit, &ctx);
  n = ctx.second;
  std::printf("wrote %d corpus files to %s\n", n, dir.c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-corpus") return write_corpus(argv[2]);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ITERATIONS CORPUS_DIR [SEED] | --write-corpus DIR\n", argv[0]);
    return 2;
  }
  long iterations = std::atol(argv[1]);
  std::string dir = argv[2];
  uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : std::random_device{}();
  std::vector<std::string> pool;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string in = ss.str();
    uint64_t before = rfos_fuzz_accepted;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    if (rfos_fuzz_accepted == before) {
      std::printf("FAILED: corpus file %s no longer decodes (rewrite the corpus with --write-corpus)\n",
                  e.path().c_str());
      return 1;
    }
    pool.push_back(std::move(in));
  }
  if (pool.empty()) {
    std::printf("FAILED: no corpus in %s: random bytes would stop at the magic numbers\n", dir.c_str());
    return 1;
  }
  std::printf("fuzzing %ld inputs from %zu corpus files, seed %llu\n", iterations, pool.size(),
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  uint64_t accepted_before = rfos_fuzz_accepted;
  for (long i = 0; i < iterations; ++i) {
    std::string in;
    if (rng() % 16) {  // mostly small edits of inputs that decoded or nearly did
      in = pool[rng() % pool.size()];
      int edits = 1 + rng() % 4;
      for (int e = 0; e < edits && !in.empty(); ++e) {
        switch (rng() % 4) {
          case 0:
            in[rng() % in.size()] = static_cast<char>(rng());
            break;
          case 1:
            in[rng() % in.size()] ^= static_cast<char>(1u << (rng() % 8));
            break;
          case 2:
            in.resize(rng() % (in.size() + 1));
            break;
          default:
            in.insert(rng() % (in.size() + 1), 1, static_cast<char>(rng()));
            break;
        }
      }
    } else {
      in.resize(rng() % 96);
      for (char& c : in) c = static_cast<char>(rng());
    }
    uint64_t before = rfos_fuzz_accepted;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    if (rfos_fuzz_accepted != before && pool.size() < 4096) pool.push_back(in);  // accepted: worth mutating more
  }
  uint64_t decoded = rfos_fuzz_accepted - accepted_before;
  std::printf("%llu of %ld mutated inputs decoded\n", static_cast<unsigned long long>(decoded), iterations);
  if (decoded == 0) {
    std::printf("FAILED: no mutated input decoded: the fuzzer never reached past the decoders' first checks\n");
    return 1;
  }
  std::printf("1 passed, 0 failed\n");
  return 0;
}
