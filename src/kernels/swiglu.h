// swiglu.h — the SwiGLU activation on the fused gate/up projection (bf16, torch-free):
// out[t, i] = bf16(bf16(silu(gate[t, i])) * up[t, i]) with gate = gate_up[t, 0:I], up = gate_up[t, I:2I].
// Reference twin: at::silu(gate) * up inside ops::swiglu_mlp.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace specpress::kernels {

// row_scale (optional, fp32 [rows]): gate and up of row t are first scaled by row_scale[t] and rounded to bf16,
// i.e. the kernel's input is bf16(gate_up * row_scale) (a folded RMSNorm's factor, rmsnorm.h: row_rms).
cudaError_t silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int rows, int inter, cudaStream_t stream,
                     const float* row_scale = nullptr);

}  // namespace specpress::kernels
