// dflash_forward.h — the DFlash draft's training forward (the recipe of dflash-spec.md §5.4): many
// blocks per sequence in one pass. Each block is [anchor token, MASK x (B-1)] at positions
// anchor..anchor+B-1; its queries see the context K/V (fc -> hidden_norm of the frozen target's tapped
// features) strictly before the anchor, plus their own block bidirectionally, and no other block.
// Loss: cross-entropy of block position k (1..B-1) against the true token anchor+k, weighted by
// exp(-(k-1)/gamma), through the target's lm_head. Same arithmetic as model::DFlashDraft::forward.
#pragma once
#include <vector>

#include <ATen/ATen.h>

#include "model/dflash_draft.h"

namespace specpress::train {

// One batch of blocks, built on the CPU (make_blocks) and moved to the device with to().
struct DraftBlocks {
  at::Tensor block_ids;  // int64 [batch, n*B]: anchor token then mask ids
  at::Tensor positions;  // int64 [batch, n*B]: anchor + k
  at::Tensor allowed;    // bool [batch, 1, n*B, T + n*B]: context keys, then block keys
  at::Tensor labels;     // int64 [batch, n*B]: token anchor+k (0 where the weight is 0)
  at::Tensor weights;    // float [batch, n*B]: exp(-(k-1)/gamma) for valid labels, else 0
  int64_t block_size = 0;
  DraftBlocks to(at::Device device) const;
};

// rows: the token ids of each sequence (padded to T by the caller's ids tensor); anchors: per row, the
// block starts (each in 0 .. len-2); rows with fewer anchors get dummy blocks of weight 0.
DraftBlocks make_blocks(const std::vector<std::vector<int64_t>>& rows, const std::vector<std::vector<int64_t>>& anchors,
                        int64_t T, int64_t block_size, int64_t mask_token_id, double gamma);

struct DraftMetrics {
  double top1 = 0;              // weighted-free fraction of labelled block positions the draft gets right
  double accepted_length = 0;   // mean over blocks of 1 + the run of correct positions from k=1 (teacher-forced tau)
};

// The draft's final-norm hidden states of every block row, [batch, n*B, H]. `taps`: the frozen
// target's tap features [batch, T, n_taps*H] (no grad); `embed_tokens`: the target's.
at::Tensor draft_hidden(const model::DFlashConfig& config, const model::DFlashWeights& weights, const ops::RopeTable& rope,
                        const at::Tensor& embed_tokens, const at::Tensor& taps, const DraftBlocks& blocks);

// One training step's forward and backward: the weighted loss through the target's `lm_head`,
// gradients accumulated into the draft weights. Returns the loss; fills `metrics` when given.
double draft_forward_backward(const model::DFlashConfig& config, const model::DFlashWeights& weights,
                              const ops::RopeTable& rope, const at::Tensor& embed_tokens, const at::Tensor& lm_head,
                              const at::Tensor& taps, const DraftBlocks& blocks, DraftMetrics* metrics);

}  // namespace specpress::train
