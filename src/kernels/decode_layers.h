// decode_layers.h — every target layer of a one-row decode step in one persistent kernel (torch-free; Hopper).
//
// Why: at batch 1 a layer is five dependent kernels (qkv GEMV, attention, o, gate/up, down). Each launch restarts
// its weight stream, so the DRAM idles at every boundary and during the attention (docs/PERF.md, issue 6: the 4B
// GEMVs alone reach 84% of the roofline, the step 73.5%). Here one resident block an SM runs the whole layer
// stack. In each block a producer warp copies the block's share of every projection's weights, in program order,
// into a ring of shared-memory stages with the TMA engine (cp.async.bulk), and never waits on an activation: only on
// a free stage. The consumer warps wait on a grid-wide counter for an op's input, then reduce the tiles already on
// chip. So the weight stream runs on through the op boundaries and the attention.
//
// Ops a layer, each ending in a grid-wide arrival: qkv (folded input norm) -> attention (q/k-norm + RoPE, the new
// K/V written into the cache, split over key chunks, merged by the last chunk of each KV head) -> o (+ residual) ->
// gate/up (folded post norm, SwiGLU) -> down (+ residual). The GEMV ops reduce their tiles on the tensor cores: bf16
// products and fp32 sums, in another order than the one-op GEMVs' (gemv.h; the folded norm's sum of squares too), with
// the same epilogue roundings, so an output can differ from theirs in its last bf16 bit: not bitwise. The attention
// agrees with kernels::attention to bf16 precision (fp32 softmax; probabilities not rounded), as both agree with the
// ATen reference.
// Reference twin: the one-op kernels in sequence (gemv_out, attention_qkv_out, gemv_residual_out,
// gemv_silu_mul_out), which tests/gpu compares it with over decode steps; the engine uses it with
// SPECPRESS_DECODE_PERSISTENT (model/qwen3_fast.h).
//
// Status (docs/PERF.md, nineteenth and twentieth passes): correct, and slower than the launches it replaces (Qwen3-4B
// decode 2.72 against 2.60 ms, 8B 4.44 against 4.26), so it is opt-in. Its weight stream with the grid-wide waits
// alone reaches 86% (4B) and 93% (8B) of the roofline. The tensor-core consumers reduce tiles faster than the stream
// delivers them, so what is left is the time the ring is full while the consumers wait at an op boundary or run the
// attention (trace: fast_perf --persistent-trace; SPECPRESS_DECODE_PERSISTENT_ABLATE leaves parts out).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specpress::kernels {

// One target layer as the kernel reads it (device pointers). qkv and gate_up hold the folded weights
// (W diag(norm weight)); the kernel scales their sums by x's 1 / rms, as gemv() with GemvNorm::folded does.
struct DecodeLayer {
  const __nv_bfloat16* qkv = nullptr;      // [(nq + 2 nkv) hd, H]
  const __nv_bfloat16* o = nullptr;        // [H, nq hd]
  const __nv_bfloat16* gate_up = nullptr;  // [2 I, H]: gate rows, then up rows
  const __nv_bfloat16* down = nullptr;     // [H, I]
  const __nv_bfloat16* q_norm = nullptr;   // [hd]
  const __nv_bfloat16* k_norm = nullptr;   // [hd]
  __nv_bfloat16* k_cache = nullptr;        // [nkv, cache_capacity, hd]
  __nv_bfloat16* v_cache = nullptr;
};

struct DecodeLayersArgs {
  const DecodeLayer* layers = nullptr;  // device array [n_layers]
  int n_layers = 0;
  int H = 0, I = 0, nq = 0, nkv = 0, hd = 0;
  int64_t cache_capacity = 0;
  float eps = 1e-6f;                    // the folded norms' and the q/k norms'
  const float* rope_cos = nullptr;      // [max_positions, hd] fp32
  const float* rope_sin = nullptr;
  const int* pos = nullptr;             // device: the new token's position (keys before it)
  __nv_bfloat16* x = nullptr;           // [H]: the residual row, in (embedding) and out (after the last layer)
  __nv_bfloat16* qkv_out = nullptr;     // [(nq + 2 nkv) hd] scratch
  __nv_bfloat16* attn_out = nullptr;    // [nq hd] scratch
  __nv_bfloat16* act = nullptr;         // [I] scratch
  float* workspace = nullptr;           // decode_layers_workspace_floats(nq, nkv, hd) floats
  unsigned* counters = nullptr;         // decode_layers_counter_count(nkv) zeroed uints; left zeroed
  // Diagnostic timeline (null: off; fast_perf --persistent-trace): [blocks][5 n_layers + 1][kDecodeTraceFields]
  // uint64, each launch overwriting it. Row op of a block (ops in layer order: qkv, attention, o, gate/up, down),
  // %globaltimer ns unless named cycles: consumer thread 0 before its grid-wide wait, after it, after the op's
  // prologue (x loaded and its norm factor; attention: q/k rows staged and transformed), before its arrival, and
  // the clock64 cycles warp 0 spent waiting for full stages in the op; the producer's first copy of the op's tiles,
  // the clock64 cycles it spent waiting for free stages to issue them, its last copy. The last row: %globaltimer and
  // clock64 at the block's start and end (fields 0-3), to convert cycles into ns.
  unsigned long long* trace = nullptr;
};
constexpr int kDecodeTraceFields = 8;

// Whether the kernel takes these shapes on the current device: sm_90 or newer, hd in {32, 64, 128}, nq / nkv in
// {1, 2, 4, 8}, H, I and nq hd multiples of 16 (whole MMA k-steps; the engine's fast path takes multiples of 8, and
// runs the launches where this is false) that fit its shared memory, and one resident block an SM. decode_layers()
// launches one block an SM cooperatively, so where the GPU cannot hold them all at once (another kernel running
// beside it, an MPS limit) the launch fails (cudaErrorCooperativeLaunchTooLarge) instead of hanging; it returns
// cudaErrorInvalidValue for arguments or shapes it does not take.
bool decode_layers_supported(int H, int I, int nq, int nkv, int hd);
size_t decode_layers_workspace_floats(int nq, int nkv, int hd);
int decode_layers_counter_count(int nkv);

cudaError_t decode_layers(const DecodeLayersArgs& a, cudaStream_t stream);

}  // namespace specpress::kernels
