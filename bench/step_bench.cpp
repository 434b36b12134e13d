// step_bench.cpp — times the three forwards of a DFlash cycle on the reference path: target decode
// (1 token), target verify (block B), draft step (B-token block with a+1 new context rows), and prints
// verify/decode and draft/decode ratios (the issue-6 targets are <= 1.1 and <= 0.3).
// Usage: step_bench TARGET_DIR DRAFT_DIR [--device cpu|cuda] [--dtype f32|bf16] [--context N] [--iters K]
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"

using namespace specpress;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET_DIR DRAFT_DIR [--device D] [--dtype T] [--context N] [--iters K]\n", argv[0]);
    return 2;
  }
  std::string device_name = "cpu", dtype_name = "f32";
  int64_t context = 128, iters = 50;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device") device_name = value;
    else if (flag == "--dtype") dtype_name = value;
    else if (flag == "--context") context = std::stoll(value);
    else if (flag == "--iters") iters = std::stoll(value);
    else { std::fprintf(stderr, "unknown flag %s\n", flag.c_str()); return 2; }
  }
  try {
    c10::InferenceMode mode;
    const at::Device device = model::parse_device(device_name, "--device");
    const at::ScalarType dtype = model::parse_compute_dtype(dtype_name, device, "--dtype");
    model::Qwen3Model target = model::Qwen3Model::load(argv[1], dtype, device);
    model::DFlashDraft draft = model::DFlashDraft::load(argv[2], target, dtype, device);
    const int64_t B = draft.config().block_size;
    auto opts = at::TensorOptions().dtype(at::kLong).device(device);
    at::Tensor prompt = at::randint(0, target.config().vocab_size - 1, {context}, opts);
    model::KVCache cache = target.make_cache(context + 2 * B);
    model::ForwardOutput pre = target.forward(prompt, 0, cache, {false, draft.config().target_layer_ids, false});
    model::DraftCache dcache = draft.make_cache(context + 2 * B);
    at::Tensor block = at::full({B}, draft.config().mask_token_id, opts);
    draft.forward(pre.taps.narrow(0, 0, context - 4), block, dcache);
    at::Tensor new_ctx = pre.taps.narrow(0, context - 4, 4);
    auto sync = [&] { if (device.is_cuda()) target.lm_head_logits(at::zeros({1, target.config().hidden_size}, at::TensorOptions().dtype(dtype).device(device))).cpu(); };
    auto time_it = [&](auto&& fn) {
      for (int w = 0; w < 3; ++w) fn();
      sync();
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t k = 0; k < iters; ++k) fn();
      sync();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
    };
    at::Tensor one = prompt.narrow(0, 0, 1);
    at::Tensor blk = prompt.narrow(0, 0, B);
    double decode = time_it([&] { cache.rollback(context); target.forward(one, context, cache, {}); });
    double verify = time_it([&] {
      cache.rollback(context);
      target.forward(blk, context, cache, {true, draft.config().target_layer_ids, false});
    });
    double draft_ms = time_it([&] {
      dcache.length = context - 4;
      draft.forward(new_ctx, block, dcache);
    });
    std::printf("device %s dtype %s context %lld block %lld\n", device.str().c_str(),
                model::compute_dtype_name(dtype).c_str(), static_cast<long long>(context), static_cast<long long>(B));
    std::printf("decode  %8.3f ms\nverify  %8.3f ms  (%.2fx decode)\ndraft   %8.3f ms  (%.2fx decode)\ncycle   %8.3f ms  (%.2fx decode)\n",
                decode, verify, verify / decode, draft_ms, draft_ms / decode, verify + draft_ms, (verify + draft_ms) / decode);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
