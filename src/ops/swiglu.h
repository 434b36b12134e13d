// swiglu.h — the Qwen3 MLP: down(silu(gate(x)) * up(x)), no biases.
#pragma once
#include <ATen/ATen.h>

namespace specpress::ops {

at::Tensor swiglu_mlp(const at::Tensor& x, const at::Tensor& gate_w, const at::Tensor& up_w, const at::Tensor& down_w);

}  // namespace specpress::ops
