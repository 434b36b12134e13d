// step_trace.h — the decode step's diagnostic timeline (fast_perf --decode-trace; kernels::StepTraceScope,
// aten_ops.h): when a launch of the register GEMV or the small-T attention carries a stamp buffer, its blocks write
// %globaltimer (ns) into the fields below of their rows (kStepTraceFields a block, blocks in linear order
// x + gridDim.x * (y + gridDim.y * z)): thread 0 of the block, but the GEMV's warp ends (lane 0 of each warp). Fields a
// block does not reach keep what the buffer held (zero after a read, or an earlier replay's stamp). The stamps are
// compiled only into the kernels' traced instances, launched where a buffer is set; the engine's kernels are unchanged.
#pragma once

namespace specpress::kernels {

constexpr int kStepTraceFields = 12;
// Every traced kernel: its first instruction, its loads ahead of the PDL wait issued, the wait released, and %smid (a
// value, not a time); the attention's last instruction (kStEnd).
constexpr int kStStart = 0, kStIssued = 1, kStWaited = 2, kStEnd = 7, kStSm = 11;
// The attention: its query rows (and new keys) transformed into shared memory, its key tiles done, thread 0's share of
// the partial row stored, its arrival counted, then 1 in kStLast for the split's block that combines, else 0 (a split
// past the live length stamps kStStart and kStEnd only).
constexpr int kStQReady = 3, kStTiles = 4, kStPartial = 5, kStCounted = 6, kStLast = 8;
// The GEMV (4 warps a block): each warp's end, before its launch trigger, warp w into kStWarpEnd + w (no kStEnd).
constexpr int kStWarpEnd = 3;
// The fused o + gate/up GEMV (gemv_o_gate_up.h): the GEMV's fields, then thread 0's grid-barrier arrival (its block's o
// rows written) in kStEnd and its release in kStLast (times), x in shared memory, and warp 0's staged bytes arrived.
constexpr int kStArrived = kStEnd, kStReleased = kStLast, kStXReady = 9, kStStaged = 10;
// The fused decode MLP (gemv_mlp.h, ordered sum; thread 0): the GEMV's first fields, then its gate/up rows read and
// summed, the SwiGLU values in shared memory, its down rows read (before the launch trigger), its arrival ticket taken,
// in kStMlpPart 1 + its part (0: not a part, which then ends), the part's wait for the last arrival released, kStEnd.
constexpr int kStMlpPhase1 = 3, kStMlpSwiglu = 4, kStMlpPhase2 = 5, kStMlpTicket = 6, kStMlpPart = 8,
              kStMlpReleased = 9;

}  // namespace specpress::kernels
