// gemv_mlp.h — the decode layer's whole MLP in one launch, its down product split over the intermediate dimension
// (split-K), torch-free: x [H] += W_down · act with act = silu(Wg · n(x)) * (Wu · n(x)) (the folded post-attention
// norm: n(x) = x * rsqrt(mean(x^2) + eps), its weight already in W_gu's columns), rounded as gemv_swiglu followed by
// gemv_residual rounds (each product to bf16, the residual add in bf16). Why: in the two-GEMV step the down GEMV's
// blocks start only when the gate/up grid has drained, so each layer pays gate/up's tail (its last blocks streaming
// alone) and down's launch and PDL wait before down's first loads. Here block b of G (one an SM) owns intermediates
// [b I / G, (b + 1) I / G) end to end: their gate and up rows, their SwiGLU, then the matching rows of W_down^T (W_down
// transposed at load time, [I, H], so a block's down slice is contiguous), so no block waits for another until its own
// bytes are read. The G blocks' H partial sums are then added in one of two ways:
// - ordered (the engine's default): each block writes its sums to its own row at the L2 and takes an arrival ticket;
//   the last P to arrive (P such that each thread then issues one batch of 4 float4 loads; 34 at Qwen3-4B) wait for
//   the last arrival, then each adds a slice of the outputs over the G rows in a fixed order, so x is the same bits
//   every run (tests/gpu: Kernels.GemvMlpOrderedSumMatchesItsOrderOnTheHost). Qwen3-4B's decode step 3.0% faster
//   than with the two GEMVs, Qwen3-8B's 0.9% slower (docs/PERF.md, forty-sixth pass).
// - arrival order: each block adds its sums into an fp32 accumulator by vector reductions (red.global.add.v4.f32); the
//   last block to arrive adds it into x, writes the tap and zeroes it. A sum at a bf16 rounding boundary can then
//   round either way from run to run (Kernels.GemvMlpMatchesTheTwoGemvs); 1.4% faster than the ordered sum at 4B
//   before the forty-sixth pass shortened the ordered sum's tail (not compared since).
// Either way x is the two GEMVs' to bf16 precision, not bitwise (the gate, up and down sums are added in other
// orders); the ATen twin is at::linear in float64. Dropped forms of an exact sum (forty-second to forty-fourth passes):
// a 64-bit fixed-point accumulator, a grid barrier, sums by groups of blocks, 16 parts of scalar loads. The ordered
// form's launch takes decode-trace stamps (fast_perf --decode-trace under SPECPRESS_GEMV_MLP=1).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace specpress::kernels {

// Whether the fused MLP takes these shapes on this device: H % 8 == 0 with H / 8 dividing 32 or a multiple of 32 (every
// thread of a block owns one 16-byte chunk of a row in a group of H / 8 threads, and a group's warps hold no other
// group), H <= 5120 (a block holds at most 640 threads), I >= 1, compute capability 9.0 or above (vector reductions),
// and the block's shared memory within the device's limit. False also where a CUDA query fails.
bool gemv_mlp_takes(int H, int I);

// The fp32 floats acc must hold for these shapes: H for the arrival-order sum; for the ordered sum (`ordered`, below)
// one row of H a block. 0 where gemv_mlp_takes is false.
size_t gemv_mlp_acc_floats(int H, int I, bool ordered);
// The ordered sum's parts for these shapes: SPECPRESS_GEMV_MLP_PARTS, or where unset (0) as many as give each thread
// one batch of 4 row loads; at most the blocks. 0 where gemv_mlp_takes is false.
int gemv_mlp_ordered_parts(int H, int I);

// x [H] (in place) += W_dT^T · SwiGLU(W_gu · x, folded norm); W_gu [2I, H] (gate rows, then up rows), W_dT [I, H] (row
// i = column i of W_down); tap [H] (optional) = the new x. acc: fp32 [H] and counter: one unsigned, both zero before
// the first launch; the kernel leaves both zero, so launches of any shapes may share them, one launch at a time.
// ordered: the sum in a fixed order instead (the same bits every run): each block writes its H sums to its own row of
// acc (gemv_mlp_acc_floats floats, any values at rest), every block takes an arrival ticket, and the last
// gemv_mlp_ordered_parts() to arrive each add a slice of the outputs over the rows in a fixed order; counter: one
// unsigned word, zero before the first launch and left zero (set back by the last block to arrive).
// Pointers 16-byte aligned; x must not overlap the weights, acc or tap. cudaErrorInvalidValue where gemv_mlp_takes is
// false.
cudaError_t gemv_mlp(__nv_bfloat16* x, const __nv_bfloat16* Wgu, const __nv_bfloat16* WdT, __nv_bfloat16* tap,
                     float* acc, unsigned* counter, int H, int I, float eps, cudaStream_t stream,
                     bool ordered = false, unsigned long long* trace = nullptr);
// trace (diagnostic, step_trace.h; the ordered form only): the launch's stamps, kStepTraceFields a block for its
// blocks (at most the SMs): start, loads issued, wait released, %smid, phase 1 (gate/up) done, SwiGLU done, phase 2
// (down) done, ticket taken, 1 + the part (0: not a part), the part's wait released, end.

}  // namespace specpress::kernels
