// gemv_o_gate_up.h — the decode layer's o projection (with its residual add) and the gate/up projection after it
// (with the folded post-attention RMSNorm and the SwiGLU) in one launch: bitwise gemv_residual (x += W_o · attn) then
// gemv_swiglu (act = silu(Wg · n(x)) * (Wu · n(x)), folded norm), torch-free. Why: in the two-launch decode step the
// DRAM has nothing to stream from W_o's arrival (its loads go out beside the attention) until gate/up's first loads,
// about 5.5 us a layer at Qwen3-4B (docs/PERF.md, thirty-ninth pass): gate/up's blocks can only start once o's have
// left the SM. Here one grid does both: each warp holds its o row in registers as the o GEMV's 16-load instance does
// (one row a warp, loaded before the PDL wait), and each block also copies the first `stage` steps of its warps' first
// gate/up unit into shared memory (cp.async.bulk), so those bytes stream during the attention; after o's sums a grid
// barrier (every block is resident: the launch is refused otherwise) separates o's writes of x from gate/up's reads,
// and each warp issues its next gate/up loads before that barrier. Reference twin: the two one-op GEMVs (gemv.h), and
// at::linear through them (tests/gpu: Kernels.GemvOGateUpIsBitwiseTheTwoGemvs). Measured: the staged bytes shorten
// the gate/up phase by 4.4-5 us a layer, but the grid barrier (1.4-1.9 us from the last arrival to the release) and
// the o rows of the blocks that start only as the attention leaves (their W_o arrives behind the others' gate/up loads)
// cost more; the decode step stays 0.5% slower at best (docs/PERF.md, fortieth pass), so the engine keeps it opt-in.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace specpress::kernels {

// The fused kernel's settings, read from the environment once (the engine's switch is SPECPRESS_GEMV_O_GATE_UP,
// model/qwen3_fast.h). The defaults are the fastest combination measured at Qwen3-4B on the H200 (docs/PERF.md,
// fortieth pass), which was still 0.5% slower than the two GEMVs.
//   stage_steps (SPECPRESS_OGU_STAGE, 0..2, default 2): steps of 1 KB of each row of a warp's first gate/up unit
//     (4 rows) copied into shared memory; 0 stages nothing (the fusion alone).
//   stage_when (SPECPRESS_OGU_STAGE_WHEN, 0..2, default 1): 0 right after the o row's loads are issued, 1 once the
//     warp's o row has arrived, 2 after o's sums (before the grid barrier).
//   carveout (SPECPRESS_OGU_CARVEOUT, 0..100 or driver, default driver): the kernel's preferred shared-memory
//     carveout in percent (cudaFuncAttributePreferredSharedMemoryCarveout); driver (-1 here) leaves the driver's
//     choice. 100 (and 86) made the decode step 3-5% slower: the SMs keep that configuration, with an L1 of 28 KB, for
//     the kernels after it. A block waiting at the grid barrier keeps its SM from being reconfigured; the occupancy
//     check counts 5 blocks an SM at this kernel's shared memory, and the barrier's one-second trap (below) is the
//     guard if the driver's configuration held fewer.
// The fortieth pass's other forms (a generation-word barrier, pauses between the barrier's loads, gate/up's first
// step loaded after the barrier) measured no faster and were taken out in the forty-first.
struct GemvOGateUpSettings {
  int stage_steps = 2, stage_when = 1, carveout = -1;
};
const GemvOGateUpSettings& gemv_o_gate_up_settings();

// Whether the fused kernel takes this layer: K_o % 8 == 0 and K_o <= 4096 (a warp's o row in 16 loads a lane),
// H % 8 == 0 and H <= 16384, I >= 1, compute capability 9.0 or above, and its grid (one o row a warp: H / 4 blocks)
// resident at once on the device. False also where a CUDA query fails. (A block that waits more than a second at the
// grid barrier traps: a launch error, not a hang.)
bool gemv_o_gate_up_takes(int H, int Ko, int I);

// x [H] += W_o [H, Ko] · attn [Ko] (rounded as gemv_residual), then act [I] = SwiGLU of W_gu [2I, H] · x with the
// folded norm's factor rsqrt(mean(x^2) + eps) (as gemv_swiglu with GemvNorm::folded). barrier: kGemvOGateUpBarrierWords
// unsigned words, zero before the first launch; the grid barrier's arrival count, which grows by the grid each launch;
// a launch at a time may use it. Pointers 16-byte aligned; attn, W_o, W_gu and act must not overlap x.
// cudaErrorInvalidValue where gemv_o_gate_up_takes is false.
constexpr int kGemvOGateUpBarrierWords = 1;
cudaError_t gemv_o_gate_up(const __nv_bfloat16* attn, const __nv_bfloat16* Wo, __nv_bfloat16* x,
                           const __nv_bfloat16* Wgu, __nv_bfloat16* act, int H, int Ko, int I, float eps,
                           unsigned* barrier, cudaStream_t stream, unsigned long long* trace = nullptr);
// trace (diagnostic, step_trace.h): the launch's stamps, kStepTraceFields a block for its (H + 3) / 4 blocks: the
// GEMV's fields (start, issued, waited, each warp's end), then kStEnd: the block's arrival at the grid barrier (its o
// rows written), kStLast: its release, field 9: x in shared memory, field 10: warp 0's staged bytes arrived.

}  // namespace specpress::kernels
