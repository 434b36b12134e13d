// fast_generation.h — the plain and DFlash decoding loops on the CUDA fast path (model/qwen3_fast.h),
// step for step the reference loops of generation.h (same trimming, stop handling, statistics and
// sampler stream), with graph replays instead of eager forwards. Greedy decoding keeps the argmax and
// the DFlash acceptance on the device: one host synchronisation per token (plain) or per speculative
// cycle (DFlash), which the pipelined loops (below) overlap with the next step's work. At T > 0, and with
// repetition penalties or a logit bias at any temperature, the host Sampler picks from the copied logits exactly as
// the reference does (a verify row penalised for the drafted tokens before it, read back with the logits).
// CUDA builds only (SPECPRESS_FAST_PATH).
#pragma once
#include <functional>
#include <vector>

#include "decode/generation.h"
#include "decode/logprobs.h"
#include "model/qwen3_fast.h"

namespace specpress::decode {

GenerationResult generate_plain_fast(model::FastEngine& engine, const model::Qwen3Model& target,
                                     const std::vector<int64_t>& prompt, const GenerationParams& params,
                                     const TokenCallback& on_tokens = {});

GenerationResult generate_dflash_fast(model::FastEngine& engine, const model::Qwen3Model& target,
                                      const model::DFlashDraft& draft, const std::vector<int64_t>& prompt,
                                      const GenerationParams& params, const TokenCallback& on_tokens = {});

// Greedy loops are pipelined by default: the next step (plain) or cycle (DFlash) is queued on the device
// before the host reads the current one's result, so the GPU does not wait for the host's sync, its
// bookkeeping and its next launches; the output is the synchronous loop's, token for token (a step or cycle
// queued past a stop token is discarded). Sampling (T > 0) needs the host's draw before the next step, so
// it stays synchronous, as do loops that report logprobs (they wait for each step's logits).
// SPECPRESS_PIPELINE=0 turns pipelining off (another value than 0 or 1 fails, naming the variable);
// set_pipelined_loops overrides it for the process (tests, benchmarks).
bool pipelined_loops();
void set_pipelined_loops(bool on);

// The engine's target forward over `tokens` as PieceLogits (FastEngine::forward_rows, bf16 logits within noise of the
// reference forward's), which overwrites the engine's cache; the tokens must fit its capacity and their ids the
// vocabulary (unchecked here). The engine must outlive it.
PieceLogits fast_piece_logits(model::FastEngine& engine, const std::vector<int64_t>& tokens);

// decode::prompt_logprobs on the engine (fast_piece_logits in pieces of at most `chunk` tokens).
std::vector<TokenLogprob> prompt_logprobs_fast(model::FastEngine& engine, const std::vector<int64_t>& prompt,
                                               int64_t top_n, int64_t chunk = 256,
                                               const std::function<bool()>& keep_going = {},
                                               at::Tensor* next_logits = nullptr);

// Builds an engine sized for this generation and runs the matching loop (draft may be null).
GenerationResult generate_fast(const model::Qwen3Model& target, const model::DFlashDraft* draft,
                               const std::vector<int64_t>& prompt, const GenerationParams& params,
                               const TokenCallback& on_tokens = {});

}  // namespace specpress::decode
