// rmsnorm.h — RMSNorm reference (ATen), exactly as transformers' Qwen3RMSNorm: normalise in fp32,
// cast back to the input dtype, then multiply by the weight. Used on hidden states and per-head q/k.
#pragma once
#include <ATen/ATen.h>

namespace specpress::ops {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace specpress::ops
