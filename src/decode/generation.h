// generation.h — the two decoding loops of the engine and what they report. Plain decoding is the
// target alone (prefill, then one token per forward); DFlash decoding is dflash-spec.md §3: draft a
// block, verify it in one target forward, commit the longest matching prefix plus the bonus token.
// Both trim outputs as the reference does: at max_new_tokens, and right after the first stop token.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "decode/sampler.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"

namespace specpress::decode {

// One run of committed tokens, as a CommitObserver sees it.
struct CommittedSpan {
  int64_t begin = 0, end = 0;   // positions [begin, end); their K/V are in the target cache
  std::vector<int64_t> ids;     // their token ids
  at::Tensor features;          // [end - begin, n * H]: outputs of the observer's feature_layers(), if any
};

// Told about every run of committed tokens once their K/V are in the target cache; the hook of
// accepted-span compression, which may then rewrite older cache slots. A learned compressor also asks
// for span features and fuses latent rows into the loop's next target forward (observed_forward).
class CommitObserver {
 public:
  virtual ~CommitObserver() = default;
  // Called once before the loop allocates the target cache, with the most positions one commit can
  // add; returns the extra cache slots the observer needs (fused latent rows are written before the
  // raw units they replace are freed).
  virtual int64_t reserve(int64_t max_commit) { return 0; }
  // The target cache slots (before that headroom) for a generation of at most `positions` positions, rows of a
  // forward included, when one forward writes at most `max_commit` token rows: a compressing observer that replaces
  // every aged unit by at most one slot needs fewer, so the cache it allocates is smaller. Never more than `positions`.
  virtual int64_t cache_slots(int64_t positions, int64_t max_commit) { return positions; }
  // Called once when the loop has allocated the target cache, before the prefill.
  virtual void on_cache_created(model::KVCache& cache) {}
  // Target layers whose raw outputs on_commit needs as features (empty: none).
  virtual const std::vector<int64_t>& feature_layers() const {
    static const std::vector<int64_t> none;
    return none;
  }
  // Latent rows to fuse into the next target forward, or null; after_forward runs right after it.
  virtual const model::LatentRows* pending_latents() const { return nullptr; }
  virtual void after_forward(model::KVCache& cache) {}
  virtual void on_commit(model::KVCache& cache, const CommittedSpan& span) = 0;
};

// A loop's target forward with its observer (may be null): the observer's feature layers are tapped
// after `options.tap_layers` and returned in `features` ([T, n * H]; out.taps keeps the loop's own),
// and its pending latents are fused into this forward, then after_forward runs.
model::ForwardOutput observed_forward(const model::Qwen3Model& target, const at::Tensor& ids, int64_t start,
                                      model::KVCache& cache, const model::ForwardOptions& options,
                                      CommitObserver* observer, at::Tensor* features);

// One output token's log-probability under the target: log_softmax of the raw logits row it was chosen from
// (before temperature, top-k, top-p or min-p, as vLLM's default raw logprobs), and that row's `logprobs` most
// likely tokens, most likely first.
struct TokenLogprob {
  float logprob = 0.f;
  std::vector<std::pair<int64_t, float>> top;  // (token id, log-probability)
};
constexpr int64_t kMaxLogprobs = 20;  // top alternatives a token may report, as OpenAI's top_logprobs

struct GenerationParams {
  int64_t max_new_tokens = 64;
  std::vector<int64_t> stop_ids;
  SamplingParams sampling;
  int64_t block_size = 0;       // DFlash only; 0 = the draft's trained block size
  bool record_steps = false;    // keep every verify step's block/posterior/accepted
  CommitObserver* observer = nullptr;  // e.g. a KV compressor; null = the plain engine
  // When set (by the token callback or another thread), the generation ends after the commit in progress,
  // as if the output were complete: a server's client that went away, or a stop string in the text.
  const std::atomic<bool>* cancel = nullptr;
  // -1: none; 0..kMaxLogprobs: GenerationResult::logprobs, each with that many top alternatives. The fast path
  // then waits for every step's logits and does not pipeline its greedy loops.
  int64_t logprobs = -1;
};

struct StepRecord {
  int64_t start = 0;                // index of the bonus token in the full sequence
  std::vector<int64_t> block;       // bonus + drafted tokens
  std::vector<int64_t> posterior;   // the target's token for each block row
  int64_t accepted = 0;             // a: accepted drafted tokens
};

struct GenerationResult {
  std::vector<int64_t> output_ids;          // generated ids only, stop token included
  std::vector<int64_t> acceptance_lengths;  // a+1 per verify step (DFlash)
  std::vector<StepRecord> steps;            // when record_steps
  std::vector<TokenLogprob> logprobs;       // one per output id, when params.logprobs >= 0
  int64_t block_size = 1;
  int64_t prompt_tokens = 0;
  double prefill_ms = 0;      // time to first token
  double first_draft_ms = 0;  // DFlash: the draft's prompt-context pass, excluded from decode time
  double decode_ms = 0;       // after prefill (and the first draft call) to the end
  double draft_ms = 0;        // DFlash: total draft time including the first call
  double verify_ms = 0;       // DFlash: total verify time
  bool stopped = false;       // ended on a stop token (else on max_new_tokens)

  double tpot_ms() const { return output_ids.empty() ? 0.0 : decode_ms / static_cast<double>(output_ids.size()); }
  double mean_acceptance_length() const;  // tau of this generation
  int64_t drafted_tokens() const;         // draft_n: tokens proposed (block - 1 per step)
  int64_t accepted_tokens() const;        // draft_n_accepted
  // steps that accepted the drafted token at position i (1-based, index i-1): steps with a >= i
  std::vector<int64_t> accepted_per_position() const;
  // acceptance rate at draft position i (1-based, index i-1): fraction of steps with a >= i
  std::vector<double> per_position_acceptance() const;
};

// Called with each newly committed run of output tokens (already trimmed), for streaming; `logprobs` holds one
// entry a token when GenerationParams::logprobs >= 0, else none.
using TokenCallback =
    std::function<void(const std::vector<int64_t>& tokens, const std::vector<TokenLogprob>& logprobs)>;

GenerationResult generate_plain(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                const GenerationParams& params, const TokenCallback& on_tokens = {});

// A generation of one token (params.max_new_tokens 1) whose prefill ran elsewhere: drawn from `last_logits`, the
// raw logits [1, V] of the row after the prompt's last token, as generate_plain draws its first (a Sampler of
// params.sampling over the prompt; the logprobs when asked), and committed through on_tokens. The server's echo
// with logprobs computes that row in its scoring forward (decode::prompt_logprobs), so max_tokens 1, as
// lm-evaluation-harness's loglikelihood requests send it, needs no second forward over the prompt.
GenerationResult generate_one_from_logits(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                          const at::Tensor& last_logits, const GenerationParams& params,
                                          const TokenCallback& on_tokens = {});

GenerationResult generate_dflash(const model::Qwen3Model& target, const model::DFlashDraft& draft,
                                 const std::vector<int64_t>& prompt, const GenerationParams& params,
                                 const TokenCallback& on_tokens = {});

// The block size a DFlash generation runs with: `requested`, or the draft's trained size when 0;
// errors name --block-size when it is below 2 or above the trained size.
int64_t resolve_block_size(const model::DFlashDraft& draft, int64_t requested);

// The prompt's ids: at least one, each in the target's vocabulary (errors name the prompt and the index).
void validate_prompt_ids(const model::Qwen3Model& target, const std::vector<int64_t>& prompt);

// Checks the prompt (validate_prompt_ids) and lengths before any allocation; errors name the flag.
void validate_generation(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                         const GenerationParams& params, int64_t block_size);

// After the prefill: logits that hold NaN (broken weights, or a config whose values make them) are an error, not
// token 0 over and over.
void check_prefill_logits(const at::Tensor& logits);

}  // namespace specpress::decode
