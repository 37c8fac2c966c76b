// Stand-in driver for fuzz targets when libFuzzer is not available (gcc builds): feeds seeded random inputs,
// and mutations of earlier inputs, to LLVMFuzzerTestOneInput. Usage: <target> [iterations] [seed].
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  long iterations = argc > 1 ? std::atol(argv[1]) : 100000;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : std::random_device{}();
  std::printf("fuzzing %ld inputs, seed %llu\n", iterations, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::string> pool;
  for (long i = 0; i < iterations; ++i) {
    std::string in;
    if (!pool.empty() && rng() % 2) {
      in = pool[rng() % pool.size()];
      int edits = 1 + rng() % 4;
      for (int e = 0; e < edits && !in.empty(); ++e) {
        switch (rng() % 3) {
          case 0:
            in[rng() % in.size()] = static_cast<char>(rng());
            break;
          case 1:
            in.resize(rng() % (in.size() + 1));
            break;
          default:
            in.insert(rng() % (in.size() + 1), 1, static_cast<char>(rng()));
            break;
        }
      }
    } else {
      in.resize(rng() % 96);
      for (char& c : in) c = static_cast<char>(rng() % 4 ? rng() % 8 : rng());
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    if (pool.size() < 256)
      pool.push_back(in);
    else
      pool[rng() % pool.size()] = in;
  }
  std::printf("1 passed, 0 failed\n");
  return 0;
}
