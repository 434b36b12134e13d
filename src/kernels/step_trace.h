// step_trace.h — the decode step's diagnostic timeline (fast_perf --decode-trace; kernels::StepTraceScope,
// aten_ops.h): when a launch of the register GEMV or the small-T attention carries a stamp buffer, thread 0 of each
// block writes %globaltimer (ns) into the fields below of its row (kStepTraceFields a block, blocks in linear order
// x + gridDim.x * (y + gridDim.y * z)). Fields a block does not reach stay as they were. The stamps are compiled only into
// the kernels' traced instances, launched where a buffer is set; the others are the engine's kernels unchanged.
#pragma once

namespace specpress::kernels {

constexpr int kStepTraceFields = 12;
// Every traced kernel: its first instruction, its loads ahead of the PDL wait issued, the wait released, its last
// instruction (the GEMV: before its launch trigger), and %smid (a value, not a time).
constexpr int kStStart = 0, kStIssued = 1, kStWaited = 2, kStEnd = 7, kStSm = 11;
// The attention: its query rows (and new keys) transformed into shared memory, its key tiles done, its partial row
// written, its arrival counted (the split's last block: kStLast holds 1), all before kStEnd.
constexpr int kStQReady = 3, kStTiles = 4, kStPartial = 5, kStCounted = 6, kStLast = 8;
// The GEMV (4 warps a block): each warp's end, warp w into kStWarpEnd + w (no kStEnd).
constexpr int kStWarpEnd = 3;

}  // namespace specpress::kernels
