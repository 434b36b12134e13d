// swiglu.cpp — see swiglu.h.
#include "ops/swiglu.h"

namespace specpress::ops {

at::Tensor swiglu_mlp(const at::Tensor& x, const at::Tensor& gate_w, const at::Tensor& up_w, const at::Tensor& down_w) {
  return at::linear(at::silu(at::linear(x, gate_w)) * at::linear(x, up_w), down_w);
}

}  // namespace specpress::ops
