// fast_generation.h — the plain and DFlash decoding loops on the CUDA fast path (model/qwen3_fast.h),
// step for step the reference loops of generation.h (same trimming, stop handling, statistics and
// sampler stream), with graph replays instead of eager forwards. Greedy decoding keeps the argmax and
// the DFlash acceptance on the device: one host synchronisation per token (plain) or per speculative
// cycle (DFlash). At T > 0 the host Sampler draws from the copied logits exactly as the reference does.
// CUDA builds only (SPECPRESS_FAST_PATH).
#pragma once
#include "decode/generation.h"
#include "model/qwen3_fast.h"

namespace specpress::decode {

GenerationResult generate_plain_fast(model::FastEngine& engine, const model::Qwen3Model& target,
                                     const std::vector<int64_t>& prompt, const GenerationParams& params,
                                     const TokenCallback& on_tokens = {});

GenerationResult generate_dflash_fast(model::FastEngine& engine, const model::Qwen3Model& target,
                                      const model::DFlashDraft& draft, const std::vector<int64_t>& prompt,
                                      const GenerationParams& params, const TokenCallback& on_tokens = {});

// Builds an engine sized for this generation and runs the matching loop (draft may be null).
GenerationResult generate_fast(const model::Qwen3Model& target, const model::DFlashDraft* draft,
                               const std::vector<int64_t>& prompt, const GenerationParams& params,
                               const TokenCallback& on_tokens = {});

}  // namespace specpress::decode
