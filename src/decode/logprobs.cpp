// logprobs.cpp — see logprobs.h.
#include "decode/logprobs.h"

#include <algorithm>
#include <iterator>
#include <memory>

#include "core/error.h"

namespace specpress::decode {

std::vector<TokenLogprob> token_logprobs(const at::Tensor& logits, const std::vector<int64_t>& tokens, int64_t top_n) {
  const int64_t R = static_cast<int64_t>(tokens.size());
  if (logits.dim() != 2 || logits.size(0) != R)
    fail("internal: logprobs of {} tokens from logits of {} dimensions and {} rows", R, logits.dim(),
         logits.dim() > 0 ? logits.size(0) : 0);
  if (top_n < 0 || top_n > kMaxLogprobs) fail("internal: {} top logprobs (expected 0..{})", top_n, kMaxLogprobs);
  const at::Tensor lsm = at::log_softmax(logits.to(at::kFloat), -1);
  const at::Tensor ids = at::tensor(tokens, at::kLong).to(lsm.device()).unsqueeze(1);
  // one copy to the host: [chosen, top values..., top ids...] a row, in fp64 (exact for both)
  at::Tensor packed = lsm.gather(1, ids).to(at::kDouble);
  if (top_n > 0) {
    auto top = lsm.topk(top_n, /*dim=*/-1, /*largest=*/true, /*sorted=*/true);
    packed = at::cat({packed, std::get<0>(top).to(at::kDouble), std::get<1>(top).to(at::kDouble)}, 1);
  }
  packed = packed.contiguous().to(at::kCPU);
  const double* row = packed.data_ptr<double>();
  std::vector<TokenLogprob> out(R);
  for (int64_t r = 0; r < R; ++r, row += 1 + 2 * top_n) {
    out[r].logprob = static_cast<float>(row[0]);
    auto& top = out[r].top;
    for (int64_t k = 0; k < top_n; ++k)
      top.emplace_back(static_cast<int64_t>(row[1 + top_n + k]), static_cast<float>(row[1 + k]));
    // equal values in id order, whatever order the device's topk left them in
    std::stable_sort(top.begin(), top.end(), [](const auto& x, const auto& y) {
      return x.second > y.second || (x.second == y.second && x.first < y.first);
    });
  }
  return out;
}

PieceLogits reference_piece_logits(const model::Qwen3Model& target, const std::vector<int64_t>& tokens,
                                   bool last_row) {
  const int64_t rows = static_cast<int64_t>(tokens.size()) - (last_row ? 0 : 1);
  if (rows < 0) fail("internal: a forward over no tokens");
  struct Forward {
    model::KVCache cache;
    at::Tensor ids;
    int64_t next = 0;  // the first row the next piece must start at
  };
  auto f = std::make_shared<Forward>();
  if (rows > 0) {
    f->cache = target.make_cache(rows);
    f->ids = at::tensor(tokens, at::kLong).to(target.device());
  }
  return [&target, f, rows](int64_t start, int64_t T) {
    if (start != f->next || T < 1 || start + T > rows)
      fail("internal: the reference forward's rows {} .. {} asked where rows {} .. {} come next", start,
           start + T - 1, f->next, rows - 1);
    f->next += T;
    model::ForwardOptions options;
    options.all_logits = true;
    return target.forward(f->ids.narrow(0, start, T), start, f->cache, options).logits;
  };
}

std::vector<TokenLogprob> prompt_logprobs(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                          int64_t top_n, int64_t chunk, const std::function<bool()>& keep_going,
                                          at::Tensor* next_logits) {
  if (prompt.empty()) fail("internal: the logprobs of an empty prompt");
  return prompt_logprobs_from(reference_piece_logits(target, prompt, /*last_row=*/next_logits != nullptr), prompt,
                              top_n, chunk, keep_going, next_logits);
}

std::vector<TokenLogprob> prompt_logprobs_from(const PieceLogits& forward, const std::vector<int64_t>& prompt,
                                               int64_t top_n, int64_t chunk, const std::function<bool()>& keep_going,
                                               at::Tensor* next_logits) {
  if (prompt.empty()) fail("internal: the logprobs of an empty prompt");
  if (chunk < 1) fail("internal: a forward in pieces of {} tokens", chunk);
  // rows 0 .. N-2 predict tokens 1 .. N-1; row N - 1, with next_logits, predicts the token after the prompt
  const int64_t scored_rows = static_cast<int64_t>(prompt.size()) - 1;
  const int64_t rows = scored_rows + (next_logits != nullptr ? 1 : 0);
  std::vector<TokenLogprob> out;
  out.reserve(static_cast<size_t>(scored_rows));
  if (next_logits != nullptr) *next_logits = at::Tensor();
  for (int64_t start = 0; start < rows && (!keep_going || keep_going()); start += chunk) {
    const int64_t T = std::min(chunk, rows - start);
    const at::Tensor logits = forward(start, T);
    const int64_t scored = std::min(T, scored_rows - start);
    if (scored < T) *next_logits = logits.narrow(0, scored, 1).clone();
    if (scored == 0) continue;
    const auto first = prompt.begin() + start + 1;
    std::vector<TokenLogprob> entries =
        token_logprobs(logits.narrow(0, 0, scored), std::vector<int64_t>(first, first + scored), top_n);
    out.insert(out.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
  }
  return out;
}

std::vector<TokenLogprob> logprobs_if_asked(const GenerationParams& params, const at::Tensor& logits,
                                            const std::vector<int64_t>& tokens) {
  if (params.logprobs < 0) return {};
  return token_logprobs(logits, tokens, params.logprobs);
}

std::vector<TokenLogprob> BlockLogprobs::commit(const at::Tensor& logits, const std::vector<int64_t>& posterior,
                                                int64_t a) {
  if (!on()) return {};
  std::vector<int64_t> chosen(posterior.begin(), posterior.begin() + a + 1);
  std::vector<TokenLogprob> rows = token_logprobs(logits.narrow(0, 0, a + 1), chosen, params_.logprobs);
  std::vector<TokenLogprob> committed = bonus_;
  committed.insert(committed.end(), rows.begin(), rows.begin() + a);
  bonus_.assign(1, rows[a]);
  return committed;
}

}  // namespace specpress::decode
