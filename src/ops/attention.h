// attention.h — reference attention (ATen matmul + softmax) with GQA, as transformers' eager path:
// scores in the activation dtype, softmax in fp32, cast back, then times V. Two masks exist in the
// decoding engine: causal with the queries at the end of the keys (target prefill/decode/verify over a
// cache), and none (DFlash draft: block queries see all context keys and the whole block). Training
// passes an explicit boolean mask instead (full-sequence causal, DFlash block-sparse), with the same
// arithmetic.
#pragma once
#include <ATen/ATen.h>

namespace specpress::ops {

enum class AttentionMask { kCausalBottomRight, kNone };

// Optional extras used by compressed KV caches: an explicit visibility mask (a forward that fuses beacon
// latents, whose token rows must not see the raw spans being replaced), an additive per-key logit bias (e.g. log n on a slot
// that stands for n merged tokens) and an accumulator of the attention each key received (the H2O /
// SnapKV score), both per KV head.
struct AttentionExtras {
  at::Tensor allowed;         // bool [T, S] (true = the query may see the key), replacing the enum mask; or undefined
  at::Tensor key_bias;        // fp32 [Hkv, S] or undefined
  at::Tensor received_mass;   // fp32 [Hkv, S] or undefined: += attention probability, summed over queries and group heads
  at::Tensor received_mass_by_row;  // fp32 [Hkv, T', S], T' <= T, or undefined: written, the first T' rows' shares
};

// q: [Hq, T, hd]; k, v: [Hkv, S, hd] with S >= T. Returns [T, Hq*hd].
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionMask mask,
                     const AttentionExtras* extras = nullptr);

// q: [..., Hq, T, hd]; k, v: [..., Hkv, S, hd]; `allowed`: bool, broadcastable to [..., Hq, T, S]
// (true = the query may see the key). Every query must see at least one key. Returns [..., T, Hq*hd].
// Differentiable (plain ATen), used by the trainers.
at::Tensor attention_masked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed);

}  // namespace specpress::ops
