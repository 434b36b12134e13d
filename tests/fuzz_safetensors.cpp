// fuzz_safetensors.cpp — a bounded randomized fuzz of the safetensors header parser, built with
// AddressSanitizer: valid files are mutated (bytes flipped, truncated, header length rewritten, JSON
// fragments spliced in) and parsed; every outcome must be a parse or a specpress::Error, never a crash,
// an ASan report or another exception type.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

using namespace specpress::io;

namespace {

std::string seed_file(std::mt19937_64& rng) {
  std::vector<std::vector<float>> store;
  std::vector<TensorBytes> tensors;
  const int n = 1 + static_cast<int>(rng() % 4);
  store.reserve(n);
  for (int i = 0; i < n; ++i) {
    int64_t a = 1 + rng() % 5, b = 1 + rng() % 3;
    store.emplace_back(a * b, 0.5f);
    tensors.push_back({"t" + std::to_string(i), DType::F32, {a, b}, store.back().data(), store.back().size() * 4});
  }
  return serialize_safetensors(tensors, {{"format", "pt"}});
}

const char* kFragments[] = {"{", "}", "[", "]", "\"dtype\"", "\"F32\"", "\"BF16\"", "\"shape\"", "\"data_offsets\"",
                            "18446744073709551615", "-1", "1e308", "null", ",", ":", "\"__metadata__\"", "\\u0000"};

std::string mutate(std::string f, std::mt19937_64& rng) {
  const int ops = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < ops && !f.empty(); ++i) {
    switch (rng() % 6) {
      case 0: f[rng() % f.size()] = static_cast<char>(rng()); break;                    // flip a byte
      case 1: f.resize(rng() % f.size()); break;                                          // truncate
      case 2: {                                                                           // rewrite header length
        uint64_t n = (rng() % 3 == 0) ? rng() : rng() % (f.size() + 16);
        for (int b = 0; b < 8 && b < static_cast<int>(f.size()); ++b) f[b] = static_cast<char>((n >> (8 * b)) & 0xff);
        break;
      }
      case 3: {                                                                           // splice JSON fragment
        size_t at = 8 + rng() % (f.size() > 8 ? f.size() - 8 : 1);
        if (at > f.size()) at = f.size();
        f.insert(at, kFragments[rng() % (sizeof(kFragments) / sizeof(kFragments[0]))]);
        break;
      }
      case 4: f.append(rng() % 16, static_cast<char>(rng())); break;                      // extra bytes
      default: {                                                                          // digit change in header
        size_t at = rng() % f.size();
        for (size_t k = at; k < f.size(); ++k)
          if (f[k] >= '0' && f[k] <= '9') {
            f[k] = static_cast<char>('0' + rng() % 10);
            break;
          }
      }
    }
  }
  return f;
}

TEST(SafetensorsFuzz, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(12345);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  int parsed = 0, rejected = 0, iterations = 0;
  while (std::chrono::steady_clock::now() < deadline && iterations < 200000) {
    std::string f = mutate(seed_file(rng), rng);
    // Parse from an exactly-sized heap copy so ASan sees any read past the end.
    std::vector<uint8_t> buf(f.begin(), f.end());
    try {
      parse_safetensors(buf.data(), buf.size(), "fuzz.safetensors");
      ++parsed;
    } catch (const specpress::Error&) {
      ++rejected;
    }
    ++iterations;
  }
  EXPECT_GT(iterations, 1000);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(parsed, 0);
  std::printf("fuzz: %d iterations, %d parsed, %d rejected\n", iterations, parsed, rejected);
}

}  // namespace
