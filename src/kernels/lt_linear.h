// lt_linear.h — per-shape cuBLASLt algorithm selection for the fast path's multi-row matmuls (CUDA builds
// only). Verify and the draft run out [M, N] = x [M, K] · weight [N, K]^T at M = B = 16 rows (15 for the
// draft's LM head). at::mm_out takes cuBLAS's default algorithm for each shape; a standalone probe on the
// H200 (branch lt-probe, bench/cublaslt_probe.cu) found cuBLASLt algorithms that read some Qwen3 weights
// faster at M = 16 (4B o-proj 50.8% -> 56.3% of the copy bandwidth, 4B gate_up 87.0 -> 91.4%, 8B o 63.7 ->
// 70.6%, 8B LM head 100.9 -> 104.3%; the others equal). So, as vLLM and TensorRT do, the engine tunes each
// of its M > 1 problems once at set-up, before graph capture (tune_linear), and keeps the winner as a
// plan; linear_out (aten_ops.h) runs a problem that has a plan by cublasLtMatmul (lt_linear_out) and
// everything else by at::mm_out, as before.
//
// Tuning a problem (tune_linear): the candidates are the cuBLASLt heuristic's results (up to 16, within
// the workspace) and, for its first four, split-K variants (1, 2, 3, 4, 6, 8 splits, reduced in the
// compute or the output type; never the in-place reduction, which sums with atomics), each accepted by
// cublasLtMatmulAlgoCheck; at::mm_out competes too. A candidate must give bitwise the same output in two
// runs and stay within max |out - ref| <= 2e-2 max |ref| of at::mm_out (bf16 rounding of a differently
// ordered fp32 sum is at most one bf16 unit, 2^-8 relative); then it is timed as CUDA-graph replays of
// passes over all the given weights (every layer's, so that they are not L2-resident), best of three
// replays after a warm-up one. A plan is kept only when the fastest candidate beats at::mm_out alone by more
// than 3% (SPECPRESS_LT_MIN_GAIN, in percent; smaller gains alone did not carry into the verify step: docs/PERF.md,
// seventeenth pass), or always under SPECPRESS_LT_TUNE=always. A problem that accumulates keeps its plan for its
// accumulating launches regardless, and uses it for plain ones only where it won (tune_linear below).
//
// Plans are process-wide, keyed by (M, N, K, lda = weight row stride, ldb = x row stride, ldc = out row
// stride, device); a plan also records the pointer alignments (bytes, up to 256) it was tuned with, and a
// launch whose pointers are less aligned falls back to at::mm_out. One cuBLASLt handle per device, and one
// 32 MiB workspace per stream that runs plans (an at::Tensor from the caching allocator, allocated by the
// stream's first tuning or planned product, which must not be inside a graph capture, and kept until the process
// ends: at most one for each of the device's streams, the pool streams included). Products on two different
// streams may run at once (the fast engine's draft injection beside the verify forward). A captured graph keeps
// the workspace of the stream it was captured on, so graphs replayed at the same time must have been captured on
// different streams: an engine's streams differ from each other, while two engines' may coincide (pool streams are
// handed out in rotation), as one engine's graphs are never replayed beside another's. Later launches allocate
// nothing and do not synchronise, so they can be captured in a CUDA graph.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace specpress::kernels {

// Whether linear_out uses plans and the engine tunes: kOff = at::mm_out only, as before; kOn (default) =
// tuned plans where they beat at::mm_out; kAlways = a plan for every tuned problem that has a correct
// cuBLASLt candidate, even where at::mm_out is faster (for tests of the plan path). Process-wide; read from
// SPECPRESS_LT_TUNE=0|1|always on first use (another value fails, naming the variable). Graphs keep what
// they were captured with.
enum class LtTuning { kOff, kOn, kAlways };
LtTuning lt_tuning();
void set_lt_tuning(LtTuning tuning);
const char* lt_tuning_name(LtTuning tuning);

// out [M, N] = x [M, K] · weight [N, K]^T (bf16, unit column strides) by the plan tuned for this problem,
// on the current CUDA stream; returns false (and does nothing) when tuning is off, there is no plan for
// the problem, or a pointer is less aligned than the plan was tuned with. No host sync; no allocation but the
// stream's workspace, by its first planned product (which fails inside a graph capture).
// accumulate: out += x · weight^T instead (beta = 1, C = D = out, in place, with the plan's algorithm); only
// for a problem tuned with `accumulates` (false otherwise, as without a plan).
bool lt_linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, bool accumulate = false);

// Tunes the problem out = x · w^T for the weights `weights` (one shape and row stride: one projection of
// every layer) and stores its plan (or that at::mm_out won). Eager, on the current stream (a pool stream
// if that is the default stream; fails if it is capturing a graph), synchronising; allocates (the first
// time on a stream: its workspace).
// Overwrites x (with a fixed test pattern) and out. A problem tuned before with pointers at least as
// aligned is not tuned again (its record gets `label` added). Nothing happens when tuning is off. `label`
// names the problem in the records ("verify o_proj"). `accumulates`: the caller also runs the problem as
// out += x · w^T (lt_linear_out's accumulate, a residual add as the product's epilogue): each candidate is
// also checked with beta = 1 (against at::mm_out's product plus a fixed old out, same bound), and a plan is
// kept whenever a correct candidate exists, for the accumulating launches, since without one the add is a kernel
// of its own (linear_residual_out); plain launches of the problem still use it only where it beat at::mm_out.
// A problem tuned before without that check is tuned again.
void tune_linear(const at::Tensor& out, const at::Tensor& x, const std::vector<at::Tensor>& weights,
                 const std::string& label = "", bool accumulates = false);

// What tuning found for one problem.
struct LtTuneRecord {
  std::string label;                             // the labels it was tuned / requested under, comma-separated
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  int device = 0;
  int64_t weights = 0;                           // weights per timed pass
  bool plan = false;                             // true: cuBLASLt runs it; false: at::mm_out
  bool accumulate_only = false;                  // the plan runs accumulating launches only (at::mm_out was faster)
  std::string algo;                              // the fastest correct cuBLASLt candidate, or why there is none
  double lt_us = 0, mm_us = 0, heuristic_us = 0; // µs per product: that candidate, at::mm_out, the heuristic's first
  int candidates = 0;                            // cuBLASLt candidates tried
  int rejected_launch = 0, rejected_nondeterministic = 0, rejected_inaccurate = 0;
};
std::vector<LtTuneRecord> lt_tune_records();
// One line: label, shape, the choice, µs per product against at::mm_out, candidates and rejections.
std::string format_lt_record(const LtTuneRecord& record);

// Launches by plans so far (counted when issued, so a launch captured into a graph counts once). For tests.
int64_t lt_launch_count();
// Forgets every plan and record (the handles and workspaces stay). For tests.
void clear_lt_plans();

}  // namespace specpress::kernels
