// sampler_bench.cpp — times decode::Sampler::sample on Qwen3-sized logits (V = 151936) for one row (a plain decode
// step) and a verify block of rows (a DFlash cycle), under the sampling settings researchers run: greedy, Qwen3's
// recommended thinking (temperature 0.6, top-p 0.95, top-k 20) and non-thinking (0.7, 0.8, 20) settings, top-p
// alone, min-p alone and plain temperature. Each line gives ms per call on the sampler's candidate path (the
// default) and on the whole-vocabulary path (SPECPRESS_SAMPLER_CANDIDATES=0), measured in the same run, and
// their ratio. The logits are drawn so that a few hundred tokens carry most of the mass, as a trained LM's do.
// In CUDA builds, --device cuda adds a third column: the sampler as the fast loops run it, the candidate path with
// the device kernels (decode/device_draw.h): the draw for plain-temperature rows, top-p's normaliser without top-k,
// and the candidates themselves (SPECPRESS_DEVICE_CANDIDATES=0 leaves those to topk, as the first column reads them).
// Usage: sampler_bench [--device cpu|cuda] [--rows 1,16] [--iters K]
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "decode/sampler.h"
#ifdef SPECPRESS_FAST_PATH
#include "decode/device_draw.h"
#endif

using namespace specpress;

namespace {

struct Setting {
  const char* name;
  decode::SamplingParams params;
};

decode::SamplingParams make(double temperature, double top_p, int64_t top_k, double min_p) {
  decode::SamplingParams p;
  p.temperature = temperature, p.top_p = top_p, p.top_k = top_k, p.min_p = min_p, p.seed = 1;
  return p;
}

// A positive count, or an Error naming `flag`, what it expects and its text.
int64_t parse_count(const std::string& item, const std::string& flag, const std::string& text,
                    const char* expected = "a positive count") {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(item, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != item.size() || item.empty() || n < 1) fail("{}: expected {}, found '{}'", flag, expected, text);
  return n;
}

std::vector<int64_t> parse_rows(const std::string& text) {
  std::vector<int64_t> rows;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    rows.push_back(parse_count(text.substr(at, comma - at), "--rows", text, "positive counts like 1,16"));
    at = comma + 1;
  }
  return rows;
}

// ms per call of sampler.sample on `logits`, after one warm-up call (the device synchronised at both ends).
double time_sample(const decode::SamplingParams& params, const at::Tensor& logits, int64_t iters,
                   decode::TemperatureDraw* draw = nullptr) {
  decode::Sampler sampler(params);
  sampler.set_temperature_draw(draw);
  sampler.sample(logits);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) sampler.sample(logits);  // returns host ids: synchronised
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(iters);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu", rows_text = "1,16", iters_text = "20";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    std::string* value = flag == "--device" ? &device_name : flag == "--rows" ? &rows_text
                         : flag == "--iters"                ? &iters_text
                                                            : nullptr;
    if (value == nullptr || i + 1 >= argc) {
      if (value != nullptr) std::fprintf(stderr, "sampler_bench: %s needs a value\n", flag.c_str());
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--rows 1,16] [--iters K]\n", argv[0]);
      return flag == "--help" || flag == "-h" ? 0 : 2;
    }
    *value = argv[i + 1];
  }
  try {
    const int64_t iters = parse_count(iters_text, "--iters", iters_text);
    c10::InferenceMode mode;
    if (device_name != "cpu" && device_name != "cuda") fail("--device: expected cpu or cuda, found '{}'", device_name);
    const at::Device device(device_name == "cpu" ? at::kCPU : at::kCUDA);
    const std::vector<int64_t> row_counts = parse_rows(rows_text);
    const std::vector<Setting> settings = {
        {"greedy", make(0.0, 1.0, 0, 0.0)},
        {"qwen3 thinking (T 0.6, top-p 0.95, top-k 20)", make(0.6, 0.95, 20, 0.0)},
        {"qwen3 non-thinking (T 0.7, top-p 0.8, top-k 20)", make(0.7, 0.8, 20, 0.0)},
        {"top-p 0.95 (T 0.8)", make(0.8, 0.95, 0, 0.0)},
        {"min-p 0.05 (T 1)", make(1.0, 1.0, 0, 0.05)},
        {"temperature 1 alone", make(1.0, 1.0, 0, 0.0)},
    };
    constexpr int64_t V = 151936;
    std::unique_ptr<decode::TemperatureDraw> device_draw;
#ifdef SPECPRESS_FAST_PATH
    if (device.is_cuda()) {
      int64_t most_rows = 1;
      for (const int64_t r : row_counts) most_rows = std::max(most_rows, r);
      device_draw = std::make_unique<decode::DeviceTemperatureDraw>(most_rows, device);
    }
#endif
    fmt::print("sampler_bench: device {}, V {}, {} calls a line; ms per call (candidate path | whole vocabulary{})\n",
               device_name, V, iters, device_draw ? " | fast loops, with the device kernels" : "");
    at::manual_seed(0);
    for (const int64_t rows : row_counts) {
      // a peaked distribution: standard normal logits plus a few hundred boosted tokens a row
      at::Tensor logits = at::randn({rows, V}) * 2.0;
      logits.narrow(1, 1000, 300).add_(at::randn({rows, 300}) * 2.0 + 8.0);
      logits = logits.to(device);
      for (const Setting& s : settings) {
        decode::set_sampler_candidates(true);
        const double fast = time_sample(s.params, logits, iters);
        decode::set_sampler_candidates(false);
        const double whole = time_sample(s.params, logits, iters);
        fmt::print("rows {:>3}  {:<50} {:>9.3f} | {:>9.3f} ms  ({:.1f}x)", rows, s.name, fast, whole, whole / fast);
        if (device_draw) {
          decode::set_sampler_candidates(true);
          const double loops = time_sample(s.params, logits, iters, device_draw.get());
          fmt::print("  | {:>9.3f} ms  ({:.1f}x the whole vocabulary)", loops, whole / loops);
        }
        fmt::print("\n");
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sampler_bench: %s\n", e.what());
    return 1;
  }
}
