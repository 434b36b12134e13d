// logprobs.h — the log-probabilities a loop reports with its output (GenerationParams::logprobs): each token's
// from the raw logits row it was chosen from, as vLLM reports them with speculative decoding. In a DFlash cycle
// the committed block[0] (the bonus) was chosen from the previous verify's row a (or the prefill's last row),
// block[1..a] from this verify's rows 0..a-1, and the new bonus from its row a; BlockLogprobs keeps that chain.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "decode/generation.h"
#include "model/qwen3.h"

namespace specpress::decode {

// logits: [R, V] raw logits (any float dtype, any device); tokens: the R tokens chosen from them. Each row's
// log_softmax in fp32, the chosen token's entry and the top_n largest (those topk returns; equal values in id order).
std::vector<TokenLogprob> token_logprobs(const at::Tensor& logits, const std::vector<int64_t>& tokens, int64_t top_n);

// A forward over a token sequence from position 0, one piece of rows a call: the raw logits [rows, V] of rows start ..
// start + rows - 1, given the calls before (in order from start 0, each piece after the last). Row i predicts token
// i + 1; row N - 1, where the forward covers it, the token after the sequence.
using PieceLogits = std::function<at::Tensor(int64_t start, int64_t rows)>;

// The reference forward's PieceLogits over `tokens`: rows 0 .. N-2, with `last_row` N - 1 too; it holds its own KV
// cache of that many positions (one piece's logits are all a call keeps) and fails a call out of order. The fast
// path's: decode::fast_piece_logits (decode/fast_generation.h).
PieceLogits reference_piece_logits(const model::Qwen3Model& target, const std::vector<int64_t>& tokens,
                                   bool last_row = false);

// The prompt's own log-probabilities, as OpenAI's completions report them with "echo": entry i - 1 is token i's given
// tokens 0..i-1 (nothing predicts token 0), with top_n alternatives, from the reference forward in pieces of at most
// `chunk` tokens (reference_piece_logits; the last prompt token needs no forward). The prompt must fit the model's
// max_position_embeddings. keep_going, when given, is asked before each piece: false stops there and returns the
// entries so far (fewer than N - 1).
// With `next_logits`, the forward covers the last prompt token too and leaves its raw logits [1, V] there (the row
// a generation draws its first token from), or an undefined tensor when keep_going stopped it first.
std::vector<TokenLogprob> prompt_logprobs(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                          int64_t top_n, int64_t chunk = 256,
                                          const std::function<bool()>& keep_going = {},
                                          at::Tensor* next_logits = nullptr);

// prompt_logprobs with the pieces' logits from `forward` (rows 0 .. N-2, with next_logits N - 1 too).
std::vector<TokenLogprob> prompt_logprobs_from(const PieceLogits& forward, const std::vector<int64_t>& prompt,
                                               int64_t top_n, int64_t chunk, const std::function<bool()>& keep_going,
                                               at::Tensor* next_logits);

// token_logprobs for params.logprobs >= 0, else nothing.
std::vector<TokenLogprob> logprobs_if_asked(const GenerationParams& params, const at::Tensor& logits,
                                            const std::vector<int64_t>& tokens);

// The DFlash loops' chain of logprobs; every method does nothing when the params ask for none.
class BlockLogprobs {
 public:
  explicit BlockLogprobs(const GenerationParams& params) : params_(params) {}
  bool on() const { return params_.logprobs >= 0; }
  // The first bonus, chosen from the prefill's last row.
  void first_bonus(const at::Tensor& prefill_logits, int64_t bonus) {
    bonus_ = logprobs_if_asked(params_, prefill_logits, {bonus});
  }
  // After a verify that accepted a drafted tokens: the logprobs of the committed block[0..a]; keeps row a's for
  // the new bonus posterior[a]. logits: the verify's rows (at least a + 1).
  std::vector<TokenLogprob> commit(const at::Tensor& logits, const std::vector<int64_t>& posterior, int64_t a);
  // The pending bonus's, for its commit on its own (a stop token, or the length reached).
  const std::vector<TokenLogprob>& bonus() const { return bonus_; }

 private:
  const GenerationParams& params_;
  std::vector<TokenLogprob> bonus_;
};

}  // namespace specpress::decode
