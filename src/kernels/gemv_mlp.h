// gemv_mlp.h — the decode layer's whole MLP in one launch, its down product split over the intermediate dimension
// (split-K), torch-free: x [H] += W_down · act with act = silu(Wg · n(x)) * (Wu · n(x)) (the folded post-attention
// norm: n(x) = x * rsqrt(mean(x^2) + eps), its weight already in W_gu's columns), rounded as gemv_swiglu followed by
// gemv_residual rounds (each product to bf16, the residual add in bf16). Why: in the two-GEMV step the down GEMV's
// blocks start only when the gate/up grid has drained, so each layer pays gate/up's tail (its last blocks streaming
// alone) and down's launch and PDL wait before down's first loads. Here block b of G (one an SM) owns intermediates
// [b I / G, (b + 1) I / G) end to end: their gate and up rows, their SwiGLU, then the matching rows of W_down^T (W_down
// transposed at load time, [I, H], so a block's down slice is contiguous), so no block waits for another until its own
// bytes are read. Each block adds its H partial sums into an fp32 accumulator at the L2 by vector reductions
// (red.global.add.v4.f32); the last block to arrive (an arrival counter) adds it into x, writes the tap and zeroes it.
// The additions happen in arrival order, so a sum at a bf16 rounding boundary can round either way from run to run: x
// is the two GEMVs' to bf16 precision, not bitwise, and not bitwise from run to run (tests/gpu:
// Kernels.GemvMlpMatchesTheTwoGemvs; its ATen twin is at::linear in float64). Qwen3-4B's decode step is 3.0-3.5% faster
// with it, Qwen3-8B's 1.3-1.6% slower (docs/PERF.md, forty-second pass, with the run-to-run-exact sums measured and
// dropped: a 64-bit fixed-point accumulator, 9% slower, and a grid barrier with each block adding its outputs' G sums
// in a fixed order, 7% slower than this, 4% slower than the two GEMVs). The launch takes no decode-trace stamps
// (scripts/gpu/decode_trace.py names the layout it finds and stops).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace specpress::kernels {

// Whether the fused MLP takes these shapes on this device: H % 8 == 0 with H / 8 dividing 32 or a multiple of 32 (every
// thread of a block owns one 16-byte chunk of a row in a group of H / 8 threads, and a group's warps hold no other
// group), H <= 5120 (a block holds at most 640 threads), I >= 1, compute capability 9.0 or above (vector reductions),
// and the block's shared memory within the device's limit. False also where a CUDA query fails.
bool gemv_mlp_takes(int H, int I);

// x [H] (in place) += W_dT^T · SwiGLU(W_gu · x, folded norm); W_gu [2I, H] (gate rows, then up rows), W_dT [I, H] (row
// i = column i of W_down); tap [H] (optional) = the new x. acc: fp32 [H] and counter: one unsigned, both zero before
// the first launch; the kernel leaves both zero, so launches of any shapes may share them, one launch at a time.
// Pointers 16-byte aligned; x must not overlap the weights, acc or tap. cudaErrorInvalidValue where gemv_mlp_takes is
// false.
cudaError_t gemv_mlp(__nv_bfloat16* x, const __nv_bfloat16* Wgu, const __nv_bfloat16* WdT, __nv_bfloat16* tap,
                     float* acc, unsigned* counter, int H, int I, float eps, cudaStream_t stream);

}  // namespace specpress::kernels
