// data.h — training data: token sequences read from files (records with pre-tokenized "ids", "text", chat
// "messages" or "prompt"+"completion", one a line in .jsonl/.ndjson or in one array in .json, the extension's case
// ignored; a "messages" record ending on an assistant turn has its loss start at that answer, as a completion's does;
// any other file is one plain-text document),
// prompt lists for on-policy generation and evaluation, and batch sampling. Every random choice comes
// from a generator seeded by (seed, step), so a resumed run sees exactly the batches an uninterrupted
// run would have.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace specpress::train {

struct Sequence {
  std::vector<int64_t> ids;
  int64_t loss_start = 0;  // first position whose token is trained on (the prompt before it is context only)
};

// How text becomes token ids. `encode` and `chat` are empty when no tokenizer is available; `missing`
// then says why (it ends the error for text records).
struct TextCodec {
  using Messages = std::vector<std::pair<std::string, std::string>>;  // (role, content)
  std::function<std::vector<int64_t>(const std::string&)> encode;
  // Renders a conversation with the model's chat template (non-thinking); add_generation_prompt
  // appends the assistant header a prompt ends with.
  std::function<std::string(const Messages&, bool add_generation_prompt)> chat;
  std::string missing;
  std::vector<std::string> files;  // the tokenizer's files that decide the ids
  std::shared_ptr<bool> used;      // set by encode and chat once either ran

  // `files` where the codec encoded something (a run then depends on them), else none.
  std::vector<std::string> used_files() const { return used && *used ? files : std::vector<std::string>{}; }
};

// Training documents from `files`; ids must lie in 0..vocab_size-1. Errors name the file and line (or element).
std::vector<Sequence> read_documents(const std::vector<std::string>& files, const TextCodec& codec, int64_t vocab_size);

// Prompts (token ids) from `files`: records (.jsonl, .ndjson or a .json array) with "ids", "turns" (first turn as a
// chat prompt, the layout of ../shared/data), "messages" (a last assistant turn left out: the answer), "prompt" or
// "text"; other files give one prompt per non-empty line.
std::vector<std::vector<int64_t>> read_prompts(const std::vector<std::string>& files, const TextCodec& codec,
                                               int64_t vocab_size);
// Fails naming `flag` (the new tokens a prompt is given) where the longest prompt, `new_tokens` and `block` (a
// speculative block, or 1) exceed `max_positions`, before any generation runs.
void check_generation_fits(const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens, int64_t block,
                           int64_t max_positions, const std::string& flag);

// Sequences as jsonl ({"ids": [...], "loss_start": n} per line), e.g. the on-policy generations.
std::string sequences_jsonl(const std::vector<Sequence>& sequences);

// The generator of `step`'s batch (SplitMix64 of seed and step), and a uniform draw from 0..n-1.
std::mt19937_64 step_rng(uint64_t seed, int64_t step);
int64_t uniform_index(std::mt19937_64& rng, int64_t n);

// All documents back to back, each followed by `eos` unless it already ends with it.
std::vector<int64_t> concat_documents(const std::vector<Sequence>& documents, int64_t eos);
// `batch` random windows of seq_len+1 tokens of `stream`: int64 [batch, seq_len+1].
at::Tensor sample_lm_batch(const std::vector<int64_t>& stream, int64_t batch, int64_t seq_len, std::mt19937_64& rng);

struct DraftBatch {
  at::Tensor ids;                                 // int64 [batch, T], right-padded with 0
  std::vector<std::vector<int64_t>> rows;         // the unpadded ids of each row
  std::vector<std::vector<int64_t>> anchors;      // sorted block starts of each row
};
// Keeps the sequences that can hold at least one block anchor after truncation to seq_len.
std::vector<Sequence> trainable_for_draft(std::vector<Sequence> sequences, int64_t seq_len);
// `batch` random sequences (truncated to seq_len) with up to `anchors_per_seq` distinct anchors each,
// drawn from max(loss_start, 1) .. len-2.
DraftBatch sample_draft_batch(const std::vector<Sequence>& sequences, int64_t batch, int64_t seq_len,
                              int64_t anchors_per_seq, std::mt19937_64& rng);

}  // namespace specpress::train
