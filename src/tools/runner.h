// runner.h — runs plain and DFlash generations for the tools on the fastest path that applies: the
// CUDA fast path (CUDA builds, bf16 weights on a CUDA device, no commit observer such as a KV
// compressor) with its engines kept across samples, else the reference loops. bench, diagnose and
// generate all go through it, so speedups are measured on the path users run.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "decode/generation.h"
#include "decode/logprobs.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"

namespace specpress::model {
class FastEngine;  // model/qwen3_fast.h, CUDA builds only
}  // namespace specpress::model

namespace specpress::tools {

// The device as reports and checkpoints name it: "cpu", or "cuda:0 NVIDIA H200" (its name in CUDA builds).
std::string device_description(const at::Device& device);

class GenerationRunner {
 public:
  // draft may be null (plain decoding only); reference_only forces the reference loops.
  GenerationRunner(const model::Qwen3Model& target, const model::DFlashDraft* draft, bool reference_only = false);
  ~GenerationRunner();
  GenerationRunner(const GenerationRunner&) = delete;
  GenerationRunner& operator=(const GenerationRunner&) = delete;

  decode::GenerationResult plain(const std::vector<int64_t>& prompt, const decode::GenerationParams& params,
                                 const decode::TokenCallback& on_tokens = {});
  decode::GenerationResult dflash(const std::vector<int64_t>& prompt, const decode::GenerationParams& params,
                                  const decode::TokenCallback& on_tokens = {});
  // The prompt's own logprobs (decode::prompt_logprobs' contract, for echo): on the fast path where a generation of
  // `params` would run there, from the engine that generation takes (built or grown for it; bf16 logits within noise
  // of the reference's), else from the reference forward.
  std::vector<decode::TokenLogprob> prompt_logprobs(const std::vector<int64_t>& prompt,
                                                    const decode::GenerationParams& params, int64_t top_n,
                                                    int64_t chunk = 256,
                                                    const std::function<bool()>& keep_going = {},
                                                    at::Tensor* next_logits = nullptr);
  // Builds now the engine that generations of `block_size` (decode::resolve_block_size's; ignored without a draft:
  // plain decoding) take, holding `positions` (prompt + output + block), and captures its graphs, so that no request
  // within them waits for either (a server's -c/--ctx-size: llama-server also allocates its context at start).
  // Returns the wall time it took, ms; 0 on the reference path, where nothing is built. Throws specpress::Error
  // naming the positions where the engine does not fit the device's memory.
  double reserve(int64_t positions, int64_t block_size = 0);
  // reserve() for the plain-decoding engine of a runner with a draft (bench decodes each prompt both ways).
  double reserve_plain(int64_t positions);
  // Whether generations without an observer run on the CUDA fast path, and if not, why (model::fast_path_supported's
  // reason, "the reference path was asked for", or that the build has no CUDA fast path).
  bool fast() const { return fast_ != nullptr; }
  const std::string& why_not_fast() const { return why_not_fast_; }
  // Engines built so far (a longer generation than the engine holds, or another block size, builds a new one).
  int64_t fast_engines_built() const { return engines_built_; }

 private:
  struct FastEngines;  // defined only in CUDA builds
  // The plain or DFlash engine (of that block size), rebuilt where it holds fewer positions than `capacity`.
  // CUDA builds only.
  model::FastEngine& fast_engine(bool dflash, int64_t block, int64_t capacity);
  // Builds that engine now and captures its graphs (reserve, reserve_plain); the wall time, ms.
  double build_now(bool dflash, int64_t block, int64_t positions);
  const model::Qwen3Model* target_;
  const model::DFlashDraft* draft_;
  std::unique_ptr<FastEngines> fast_;
  int64_t engines_built_ = 0;
  std::string why_not_fast_;
};

}  // namespace specpress::tools
