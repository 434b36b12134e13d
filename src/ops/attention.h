// attention.h — reference attention (ATen matmul + softmax) with GQA, as transformers' eager path:
// scores in the activation dtype, softmax in fp32, cast back, then times V. Two masks exist in this
// engine: causal with the queries at the end of the keys (target prefill/decode/verify over a cache),
// and none (DFlash draft: block queries see all context keys and the whole block).
#pragma once
#include <ATen/ATen.h>

namespace specpress::ops {

enum class AttentionMask { kCausalBottomRight, kNone };

// q: [Hq, T, hd]; k, v: [Hkv, S, hd] with S >= T. Returns [T, Hq*hd].
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionMask mask);

}  // namespace specpress::ops
