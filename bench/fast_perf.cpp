// fast_perf.cpp — issue-6 performance record on the GPU machine, in one run: random bf16 weights at the
// real Qwen3-4B / Qwen3-8B shapes with their DFlash draft shapes (5 layers, block 16, taps
// [1, 9, 17, 25, 33]), built in memory; measures copy bandwidth, then for the fast path (CUDA graphs)
// and the reference path (eager ATen) side by side: plain decode ms/token, verify ms (block 16), draft
// ms, DFlash cycle ms, each against the bandwidth roofline (bytes that must be read / measured copy
// bandwidth), and the projected DFlash tokens/s at tau 6.5. The decode rows come from an engine without a draft, as
// plain decoding builds it (its decode MLP's form chosen at capture, model::gemv_mlp_timed), the other steps from a
// DFlash engine built after it. The cycle and the "decode + token read" row are
// timed as the greedy loops run them (decode/fast_generation.h): pipelined, the next cycle or step queued before
// the host reads the current one's result; the synchronous loops' times are printed beside them. The fast
// path runs once per matmul mode
// (skinny, cublas, gemv = cuBLAS with the GEMV kernel at M = 1, stream = the GEMV at M = 1 and the streaming
// small-M kernel at 2..16 rows, stream_all = the streaming kernel at 1..16 rows) and once more in gemv mode
// with programmatic dependent launch, each engine built after the caching allocator has released the blocks the
// previous one freed; the table shows the run with the lowest decode + cycle time. Where the engine runs the draft's
// context injection inside the verify graph (SPECPRESS_INJECT_IN_VERIFY, the default), the default engine is timed
// once more with it in the draft graph: the split of the steps, whose verify step is the target's own
// 16-token forward. In gemv and cublas modes the engine tunes per-shape cuBLASLt plans for its verify and draft
// matmuls (kernels/lt_linear.h; SPECPRESS_LT_TUNE=0 turns that off for the whole run); gemv mode is measured once
// more with the plans off, for comparison, and the tuning's choices are printed. A breakdown times each
// kernel class alone, and each Qwen3 projection at M = 1 by the GEMV kernel and by cuBLAS, and at M = 16 by
// the streaming kernel, by cuBLAS (at::mm_out) and by the tuned path (the problem's cuBLASLt plan, or
// at::mm_out where tuning kept none), against the copy bandwidth. Prints a table and one JSON line.
// Usage: fast_perf [--shapes 4B,8B] [--context 512] [--iters 100] [--ref-iters 5] [--tau 6.5] [--json FILE]
//                  [--modes all|default] [--profile MODE [--timeline FILE] [--profile-attention-warps 0|4|8] [--profile-cycles N]]
//                  [--attention 1] [--persistent-trace FILE] [--wg16-trace FILE] [--decode-trace FILE] [--split 0|1]
// --modes default: the fast path only in the engine's default configuration (gemv mode, PDL in the decode
// step), the projections at M = 1 only, and a shorter JSON; for same-run A/Bs (scripts/gpu/ab_compare.sh),
// it skips the nine other engine builds and their cuBLASLt tunings. --modes all (the default): everything above.
// --split 1 (with --modes default; --modes all always does it): also the engine with the draft's context injection in
// the draft graph (SPECPRESS_INJECT_IN_VERIFY=0), as the issue splits the steps (the verify step is the target's own
// 16-token forward), printed as "the split" and recorded as gemv_pdl_decode_only_inject_in_draft_ms; where
// the injection is already in the draft graph the table is that split, and nothing more runs.
// --profile MODE (skinny|cublas|gemv|stream|stream_all): builds the DFlash engine in that matmul mode (its decode MLP
// is the two GEMVs unless SPECPRESS_GEMV_MLP=1), then runs one decode step, one verify step and one draft step (graph
// replays) between cudaProfilerStart/Stop and skips
// the measurements; for a kernel-by-kernel breakdown under `ncu --profile-from-start off`
// (scripts/gpu/profile_kernels.sh). With --timeline FILE the same region is also recorded by LibTorch's Kineto
// profiler (CUPTI: each kernel's start and end as the graphs replay them, PDL overlaps included) and saved as a
// Chrome trace (scripts/gpu/timeline.sh). --profile-attention-warps: that engine's small-T attention blocks (0:
// the kernel's default). --profile-cycles N (0..8): N DFlash cycles as the greedy loop runs them (draft, verify,
// accept, the record's read; pipelined unless SPECPRESS_PIPELINE=0) after the three steps, to see the gaps between the graphs
// (scripts/gpu/cycle_gaps.py). --attention 1: only the attention kernel alone, timed. --persistent-trace FILE (with
// --modes default): the decode step as the persistent kernel (SPECPRESS_DECODE_PERSISTENT) stamping its timeline
// (kernels::DecodeLayersArgs::trace); the last timed step's is written to FILE.<shape>.csv, a row a (block, op)
// with the eight fields in ns or clock64 cycles (scripts/gpu/persistent_trace.py summarises it). --wg16-trace FILE
// (with --modes default): the verify and draft steps' o products on the wgmma kernel, and their gate/up products in
// its SwiGLU form, stamp their blocks' timeline (kernels::Wg16TraceScope); the last timed replay of each is written
// to FILE.<shape>.csv and summarised per layer.
// --decode-trace FILE (with --modes default): the decode step's GEMVs, attention and fused MLP (under
// SPECPRESS_GEMV_MLP=1; else the MLP is pinned to the two GEMVs) stamp their blocks' timeline
// (kernels::StepTraceScope, kernels/step_trace.h); the last timed replay is written to FILE.<shape>.csv, a row a block
// (scripts/gpu/decode_trace.py summarises it per layer).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "decode/fast_generation.h"
#include "decode/sampler.h"
#include "kernels/aten_ops.h"
#include "kernels/attention.h"
#include "kernels/gemm_wg16.h"
#include "kernels/gemv.h"
#include "kernels/launch.h"
#include "kernels/lt_linear.h"
#include "kernels/step_trace.h"
#include "model/qwen3_fast.h"

using namespace specpress;

namespace {

const char* gemv_tma_name(kernels::GemvTma mode) {
  return mode == kernels::GemvTma::kOff ? "off" : mode == kernels::GemvTma::kAuto ? "auto" : "always";
}

struct Shape {
  std::string name;
  int64_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
  bool tied;
};

Shape shape_by_name(const std::string& n) {
  if (n == "4B") return {"Qwen3-4B", 2560, 9728, 36, 32, 8, 128, 151936, true};
  if (n == "8B") return {"Qwen3-8B", 4096, 12288, 36, 32, 8, 128, 151936, false};
  fail("--shapes: unknown shape '{}' (expected 4B or 8B)", n);
}

model::Qwen3Config config_of(const Shape& s, int64_t layers) {
  model::Qwen3Config c;
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.inter;
  c.num_layers = layers;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.max_position_embeddings = 40960;
  c.tie_word_embeddings = s.tied;
  c.checkpoint_dtype = "bfloat16";
  return c;
}

at::Tensor rnd(std::vector<int64_t> shape, double std = 0.02) {
  return at::randn(shape, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA)) * std;
}
at::Tensor norm_w(int64_t n) { return 1 + rnd({n}, 0.05); }

model::DecoderLayerWeights random_layer(const model::Qwen3Config& c) {
  const int64_t H = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  return {norm_w(H), rnd({q, H}), rnd({kv, H}), rnd({kv, H}), rnd({H, q}), norm_w(c.head_dim), norm_w(c.head_dim),
          norm_w(H), rnd({c.intermediate_size, H}), rnd({c.intermediate_size, H}), rnd({H, c.intermediate_size})};
}

void device_sync() { AT_CUDA_CHECK(cudaDeviceSynchronize()); }

// Median of `reps` timings of fn (ms), each timing `inner` calls between a sync and a sync.
template <typename F> double time_ms(F&& fn, int warm, int reps, int inner = 1) {
  for (int i = 0; i < warm; ++i) fn();
  device_sync();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) fn();
    device_sync();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double copy_bandwidth_gbs() {
  const int64_t bytes = int64_t{2} << 30;
  at::Tensor a = at::randn({bytes / 2}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
  at::Tensor b = at::empty_like(a);
  double ms = time_ms([&] { b.copy_(a); }, 3, 15);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;  // bytes read + written
}

// ms per replay of a CUDA graph of body()'s launches, captured on a side stream after one eager warm-up
// call (cuBLAS handle and workspace, kernel attributes), over `reps` replays timed with events.
template <typename F> double graph_replay_ms(F&& body, int reps) {
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(side);
  body();
  side.synchronize();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  body();
  graph.capture_end();
  graph.replay();
  side.synchronize();
  cudaEvent_t e0, e1;
  AT_CUDA_CHECK(cudaEventCreate(&e0));
  AT_CUDA_CHECK(cudaEventCreate(&e1));
  AT_CUDA_CHECK(cudaEventRecord(e0, side.stream()));
  for (int i = 0; i < reps; ++i) graph.replay();
  AT_CUDA_CHECK(cudaEventRecord(e1, side.stream()));
  side.synchronize();
  float ms = 0.f;
  AT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  AT_CUDA_CHECK(cudaEventDestroy(e0));
  AT_CUDA_CHECK(cudaEventDestroy(e1));
  return ms / reps;
}

enum class MatmulKernel { kGemv, kCublas, kStream, kTuned };

// ms per launch of y [M, N] = x [M, K] · W^T by the GEMV kernel (M = 1), cuBLAS, the streaming small-M
// kernel (kernels::gemm_small_out, M <= 16) or the tuned path (kTuned: tune_linear over the copies, which
// keeps the plan an engine already tuned for this problem, then the cuBLASLt plan or at::mm_out as
// linear_out would run it), as replays of a graph of launches that cycle through copies of W totalling
// >= 1 GiB, so that every launch reads W from HBM rather than from the 50 MB L2.
double small_matmul_ms(int64_t M, int64_t N, int64_t K, MatmulKernel kernel, const std::string& label = "") {
  auto opt = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  const double bytes = 2.0 * static_cast<double>(N) * static_cast<double>(K);
  const int copies = std::max(2, static_cast<int>(std::ceil(static_cast<double>(int64_t{1} << 30) / bytes)));
  std::vector<at::Tensor> w;
  for (int i = 0; i < copies; ++i) w.push_back(rnd({N, K}));
  at::Tensor x = rnd({M, K}, 1.0), y = at::empty({M, N}, opt);
  device_sync();
  if (kernel == MatmulKernel::kTuned) kernels::tune_linear(y, x, w, label);
  return graph_replay_ms([&] {
    for (const at::Tensor& wi : w) {
      if (kernel == MatmulKernel::kGemv) {
        kernels::gemv_out(y, x, wi);
      } else if (kernel == MatmulKernel::kStream) {
        kernels::gemm_small_out(y, x, wi);
      } else if (kernel != MatmulKernel::kTuned || !kernels::lt_linear_out(y, x, wi)) {  // cuBLAS, or no plan
        at::Tensor o = y;
        at::mm_out(o, x, wi.t());
      }
    }
  }, 10) / copies;
}

// The small-T attention kernel alone, µs per launch: a graph of 36 launches (one per layer, each over its own
// cache, as in a step) replayed, for T query rows over S keys at the Qwen3 head layout (32 q heads, 8 kv
// heads, head_dim 128) and the engine's split count for a cache of `capacity` positions.
double attention_us(int64_t T, int64_t S, int64_t capacity, int min_split_keys = 0, int block_warps = 0) {
  const int64_t nq = 32, nkv = 8, hd = 128, layers = 36;
  auto opt = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  // as the engine runs it: q/k-norm + RoPE of the T new rows fused in (attention_qkv_out)
  at::Tensor qkv = at::randn({T, (nq + 2 * nkv) * hd}, opt);
  at::Tensor qn = 1 + 0.1 * at::randn({hd}, opt), kn = 1 + 0.1 * at::randn({hd}, opt);
  const ops::RopeTable rope = ops::make_rope_table(hd, 1e6, capacity, at::Device(at::kCUDA));
  at::Tensor kc = at::randn({layers, nkv, capacity, hd}, opt), vc = at::randn({layers, nkv, capacity, hd}, opt);
  at::Tensor out = at::empty({T, nq * hd}, opt);
  at::Tensor base = at::full({1}, static_cast<int>(S - T), at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  kernels::AttentionScratch scratch = kernels::make_attention_scratch(
      T, nq, nkv, hd, kernels::attention_default_splits(capacity, static_cast<int>(T)), at::Device(at::kCUDA));
  scratch.min_split_keys = min_split_keys;
  scratch.block_warps = block_warps;
  device_sync();
  return 1e3 * graph_replay_ms([&] {
    for (int64_t l = 0; l < layers; ++l)
      kernels::attention_qkv_out(out, qkv, nq, nkv, qn, kn, rope, base, kc.select(0, l), vc.select(0, l), true, 1e-6,
                                 scratch);
  }, 20) / layers;
}

// --attention 1: the attention kernel alone (with its fused q/k-norm + RoPE) at decode (T = 1) and verify
// (T = 16) rows, over 512, 2048 and 8192 keys of context, µs per launch, with the kernel's default split size
// and with each of a few, and with blocks of 4 and of 8 warps (the default is 8).
void attention_table() {
  std::printf("attention alone (graph of 36 launches, us per launch; capacity = context + 64)\n");
  for (int64_t T : {1, 16}) {
    for (int warps : {4, 8}) {
      std::printf("T=%-2lld %d warps", static_cast<long long>(T), warps);
      for (int64_t ctx : {512, 2048, 8192}) {
        std::printf("  context %lld: %.2f (fewest keys a split", static_cast<long long>(ctx),
                    attention_us(T, ctx + T, ctx + 64, 0, warps));
        for (int mk : {32, 64, 128, 256, 512}) std::printf(" %d: %.2f", mk, attention_us(T, ctx + T, ctx + 64, mk, warps));
        std::printf(")");
      }
      std::printf("\n");
    }
  }
}

// The persistent decode kernel's timeline (FastEngine::persistent_trace, [blocks][ops + 1][fields]) as CSV: block,
// op, layer, kind, then the fields in kernels::DecodeLayersArgs::trace's order; kind "clock" is a block's last row.
void write_persistent_trace(const at::Tensor& trace, const std::string& path) {
  std::ofstream f(path);
  if (!f) fail("--persistent-trace: cannot write {}", path);
  const int64_t blocks = trace.size(0), rows = trace.size(1), fields = trace.size(2);
  const int64_t* v = trace.data_ptr<int64_t>();
  static const char* kinds[] = {"qkv", "attention", "o", "gate_up", "down"};
  f << "block,op,layer,kind,begin_ns,ready_ns,prologue_ns,end_ns,starve_cycles,first_copy_ns,blocked_cycles,"
       "last_copy_ns\n";
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      const bool last = r == rows - 1;
      f << b << ',' << r << ',' << (last ? -1 : r / 5) << ',' << (last ? "clock" : kinds[r % 5]);
      for (int64_t k = 0; k < fields; ++k) f << ',' << static_cast<uint64_t>(v[(b * rows + r) * fields + k]);
      f << '\n';
    }
  f.close();
  if (!f) fail("--persistent-trace: writing {} failed", path);
  std::printf("persistent decode timeline written to %s (%lld blocks x %lld ops)\n", path.c_str(),
              static_cast<long long>(blocks), static_cast<long long>(rows - 1));
}

// The decode step's timeline (--decode-trace; kernels::StepTraceLaunch, kernels/step_trace.h) from one stamp read after
// the timed replays, which rewrite the same rows: the launches listed during the graph capture, in launch order, a CSV
// row for each block that ran (its start set): launch, kind (gemv, swiglu, residual, attention, o_gate_up, mlp),
// block, sm, then each time field in ns after the earliest start of the step, "last" (1 for the attention block that
// combined its splits), x_ready and staged. A GEMV row holds its warps' ends, warp 0 .. 3, in the columns q_ready ..
// counted, and no end; an o_gate_up row (kernels/gemv_o_gate_up.h) the same, with its grid-barrier arrival in end, its
// release in last (a time), x in shared memory in x_ready and its staged bytes' arrival in staged; an mlp row (the
// fused MLP, ordered sum) its gate/up rows done, SwiGLU done, down rows done and ticket in q_ready .. counted, 1 + its
// part in last (0: not a part), the part's wait released in x_ready; an attention split past the live length has
// start and end only. Fails where a launch of the step got no stamps or ran without writing them.
void write_decode_trace(const at::Tensor& stamps, const std::string& path) {
  using namespace kernels;
  const int64_t* v = stamps.data_ptr<int64_t>();
  const char* kinds[] = {"gemv", "swiglu", "residual", "attention", "o_gate_up", "mlp"};
  std::vector<const StepTraceLaunch*> ran;
  int64_t t0 = INT64_MAX;
  for (const StepTraceLaunch& l : step_trace_launches()) {
    if (!l.captured) continue;
    // every launch of the captured graph ran in its replays: one without stamps ran untraced (a GEMV grid larger than
    // its rows, kernels/gemv.h), and the layers' launches would no longer group by five
    if (v[l.offset + kStStart] == 0)
      fail("--decode-trace: launch {} of the decode graph ran without stamps (a grid larger than its reserved rows?)",
           ran.size());
    ran.push_back(&l);
    for (int b = 0; b < l.blocks; ++b)
      if (v[l.offset + b * kStepTraceFields + kStStart] != 0)
        t0 = std::min(t0, v[l.offset + b * kStepTraceFields + kStStart]);
  }
  if (ran.empty()) fail("--decode-trace: no traced launch ran in the decode graph (is the decode step on the GEMVs?)");
  if (step_trace_dropped() > 0)
    fail("--decode-trace: {} launches ran without stamps (the buffer was full): the timeline would miss layers",
         step_trace_dropped());
  std::ofstream csv(path);
  if (!csv) fail("--decode-trace: cannot write {}", path);
  csv << "launch,kind,block,sm,start,issued,waited,q_ready,tiles,partial,counted,end,last,x_ready,staged\n";
  const int fields[] = {kStStart, kStIssued, kStWaited, kStQReady, kStTiles, kStPartial, kStCounted, kStEnd};
  int64_t rows = 0;
  for (size_t i = 0; i < ran.size(); ++i) {
    const StepTraceLaunch& l = *ran[i];
    for (int b = 0; b < l.blocks; ++b) {
      const int64_t* r = v + l.offset + b * kStepTraceFields;
      if (r[kStStart] == 0) continue;
      csv << i << ',' << kinds[static_cast<int>(l.kind)] << ',' << b << ',' << r[kStSm];
      auto time = [&](int f) { return r[f] == 0 ? std::string() : std::to_string(r[f] - t0); };
      for (int f : fields) csv << ',' << time(f);
      // the fused o + gate/up kernel (kernels/gemv_o_gate_up.h): end is its barrier arrival, last its release, then x
      // in shared memory and the staged bytes arrived; the attention's last is 0 or 1
      if (l.kind == StepTraceKind::kOGateUp)
        csv << ',' << time(kStReleased) << ',' << time(kStXReady) << ',' << time(kStStaged) << '\n';
      else if (l.kind == StepTraceKind::kMlp)  // last: 1 + its part (0: none), x_ready: the part's wait released (a
        // block that is not a part this replay may hold an earlier replay's stamp there)
        csv << ',' << r[kStMlpPart] << ',' << (r[kStMlpPart] > 0 ? time(kStMlpReleased) : std::string()) << ",\n";
      else
        csv << ',' << r[kStLast] << ",,\n";
      ++rows;
    }
  }
  csv.close();
  if (!csv) fail("--decode-trace: writing {} failed", path);
  std::printf("decode step timeline written to %s (%zu launches, %lld blocks; this run's decode times carry the stamps' "
              "cost)\n", path.c_str(), ran.size(), static_cast<long long>(rows));
}

// The multi-row layers' wgmma timeline (--wg16-trace; kernels::Wg16TraceLaunch, Wg16Args::trace) from one stamp read:
// the launches that ran since the previous read (their blocks' Start set), in launch order: each layer's o product,
// then its gate/up product where the wgmma kernel's SwiGLU form ran it. Each layer's stamps are in µs after its o
// product's earliest wait release (the attention's end, as that product sees it), so that the gate/up blocks' start
// and first stage read against the o blocks' ends. Appends a CSV row a block to `csv` (step, product, layer, block,
// sm, last, then each stamp) and prints, as medians over the layers, each stamp's earliest, median and latest block;
// for the o products also the K-split sum's tail (each tile's last block, the one that adds the splits' partials,
// arrival to end), and for the gate/up products how many blocks started before the o product's latest end.
void write_wg16_trace(const at::Tensor& stamps, const std::string& step, const std::string& shape, std::ofstream& csv) {
  using namespace kernels;
  const int64_t* v = stamps.data_ptr<int64_t>();
  const char* names[] = {"start", "waited", "first_stage", "consumed", "arrived", "end"};
  struct Product {  // one product's rows over the layers
    std::vector<std::array<std::vector<double>, 3>> per_field = std::vector<std::array<std::vector<double>, 3>>(6);
    std::vector<double> early_blocks, sm_shared;  // a layer: blocks started before the reference, SMs with two blocks
    const Wg16TraceLaunch* shown = nullptr;
    int layers = 0;
  } o, gate_up;
  std::vector<double> sum_tail;      // the o products' last blocks, end - arrived, us, every layer
  std::vector<double> before_o_end;  // a layer: gate/up blocks started before its o product's latest end
  const std::vector<double>& o_latest_end = o.per_field[kWg16TraceEnd][2];  // a layer: the o product's latest end, us
  int64_t ref = 0;                   // the current layer's o product's earliest wait release, ns
  bool last_was_o = false;           // the launch before this one was an o product (ref is its)
  for (const Wg16TraceLaunch& l : wg16_trace_launches()) {
    const int64_t* row0 = v + l.offset;
    if (row0[kWg16TraceStart] == 0) continue;  // not run since the last read
    Product& p = l.silu_mul ? gate_up : o;
    const bool after_o = l.silu_mul && last_was_o;  // a gate/up product on its layer's o product's scale
    if (!after_o) {  // an o product, or a gate/up product without one before it: its own release
      ref = INT64_MAX;
      for (int b = 0; b < l.blocks; ++b) ref = std::min(ref, row0[b * kWg16TraceFields + kWg16TraceWaited]);
    }
    last_was_o = !l.silu_mul;
    auto us_of = [&](int64_t t) { return static_cast<double>(t - ref) / 1000.0; };
    p.shown = &l;
    std::set<int64_t> sms;
    int early = 0;
    for (int f = 0; f < 6; ++f) {
      std::vector<double> us;
      for (int b = 0; b < l.blocks; ++b) {
        const int64_t t = row0[b * kWg16TraceFields + f];
        if (t != 0) us.push_back(us_of(t));
      }
      if (us.empty()) continue;
      std::sort(us.begin(), us.end());
      p.per_field[f][0].push_back(us.front());
      p.per_field[f][1].push_back(us[us.size() / 2]);
      p.per_field[f][2].push_back(us.back());
    }
    int before_end = 0;
    const int layer = after_o ? o.layers - 1 : p.layers;  // a gate/up product after an o product: that o's layer
    for (int b = 0; b < l.blocks; ++b) {
      const int64_t* r = row0 + b * kWg16TraceFields;
      early += r[kWg16TraceStart] < ref;
      if (after_o && !o_latest_end.empty() && us_of(r[kWg16TraceStart]) < o_latest_end.back()) ++before_end;
      sms.insert(r[kWg16TraceSm]);
      if (r[kWg16TraceLast] == 1 && r[kWg16TraceArrived] != 0 && r[kWg16TraceEnd] != 0)
        sum_tail.push_back(static_cast<double>(r[kWg16TraceEnd] - r[kWg16TraceArrived]) / 1000.0);
      csv << step << ',' << (l.silu_mul ? "gate_up" : "o") << ',' << layer << ',' << b << ',' << r[kWg16TraceSm]
          << ',' << r[kWg16TraceLast];
      for (int f = 0; f < 6; ++f) csv << ',' << (r[f] == 0 ? std::string() : fmt::format("{:.3f}", us_of(r[f])));
      csv << '\n';
    }
    if (after_o) before_o_end.push_back(before_end);
    p.early_blocks.push_back(early);
    p.sm_shared.push_back(static_cast<double>(l.blocks - static_cast<int>(sms.size())));
    ++p.layers;
  }
  if (o.layers == 0 && gate_up.layers == 0) {
    std::printf("%s %s: no traced wgmma o or gate/up product ran (the cuBLASLt configuration, or the trace's "
                "capacity: %lld dropped)\n", shape.c_str(), step.c_str(), static_cast<long long>(wg16_trace_dropped()));
    return;
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  auto print_fields = [&](const Product& p) {
    for (int f = 0; f < 6; ++f) {
      if (p.per_field[f][0].empty()) continue;
      std::printf(" %s %.2f/%.2f/%.2f;", names[f], median(p.per_field[f][0]), median(p.per_field[f][1]),
                  median(p.per_field[f][2]));
    }
  };
  if (o.layers > 0) {
    std::printf("%s %s o products, %d layers, %d blocks (%d splits, %d stages of %d chunks): us after the layer's "
                "earliest wait release, median over the layers of [earliest / median / latest block]:",
                shape.c_str(), step.c_str(), o.layers, o.shown->blocks, o.shown->splits, o.shown->stages,
                o.shown->kb);
    print_fields(o);
    std::printf(" blocks started before the release %.0f; blocks sharing an SM with another %.0f\n",
                median(o.early_blocks), median(o.sm_shared));
  }
  if (!sum_tail.empty()) {
    std::sort(sum_tail.begin(), sum_tail.end());
    std::printf("%s %s o products' K-split sum: a tile's last block from its arrival to its end, us: median %.2f, "
                "90th percentile %.2f, max %.2f over %zu tiles (fiftieth pass, 4B verify: 1.54 / 2.43 / 3.68)\n",
                shape.c_str(), step.c_str(), sum_tail[sum_tail.size() / 2], sum_tail[sum_tail.size() * 9 / 10],
                sum_tail.back(), sum_tail.size());
  }
  if (gate_up.layers > 0) {
    std::printf("%s %s gate/up products (SwiGLU form), %d layers, %d blocks (%d tiles a block, %d stages of %d "
                "chunks): us after the layer's o product's earliest wait release, median over the layers of [earliest "
                "/ median / latest block]:",
                shape.c_str(), step.c_str(), gate_up.layers, gate_up.shown->blocks, gate_up.shown->tiles_per_block,
                gate_up.shown->stages, gate_up.shown->kb);
    print_fields(gate_up);
    std::printf(" blocks started before the o product's latest end (%.2f) %.0f; blocks sharing an SM with another "
                "%.0f\n", o_latest_end.empty() ? 0.0 : median(o_latest_end),
                before_o_end.empty() ? 0.0 : median(before_o_end), median(gate_up.sm_shared));
  }
  if (wg16_trace_dropped() > 0)
    std::printf("%s: %lld wgmma products ran without stamps (the trace buffer was full): layers are missing above\n",
                shape.c_str(), static_cast<long long>(wg16_trace_dropped()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes = "4B,8B", json_path, profile_mode, timeline_path, persistent_trace_path, wg16_trace_path;
  std::string decode_trace_path;
  bool attention_only = false, all_modes = true, split = false;
  int profile_attention_warps = 0, profile_cycles = 0;
  int64_t context = 512, iters = 100, ref_iters = 5;
  double tau = 6.5;
  if (argc % 2 == 0) {
    std::fprintf(stderr, "flag %s expects a value (flags come as --name value pairs)\n", argv[argc - 1]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    // A number flag's whole value must parse, and be positive.
    auto number = [&](auto parse) {
      size_t used = 0;
      decltype(parse(v, &used)) x{};
      try {
        x = parse(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || !(x > 0)) {
        std::fprintf(stderr, "%s: expected a positive number, found '%s'\n", f.c_str(), v.c_str());
        std::exit(2);
      }
      return x;
    };
    auto integer = [](const std::string& t, size_t* n) { return std::stoll(t, n); };
    auto real = [](const std::string& t, size_t* n) { return std::stod(t, n); };
    if (f == "--shapes") shapes = v;
    else if (f == "--context") context = number(integer);
    else if (f == "--iters") iters = number(integer);
    else if (f == "--ref-iters") ref_iters = number(integer);
    else if (f == "--tau") tau = number(real);
    else if (f == "--json") json_path = v;
    else if (f == "--profile") profile_mode = v;
    else if (f == "--timeline") timeline_path = v;
    else if (f == "--persistent-trace") persistent_trace_path = v;
    else if (f == "--wg16-trace") wg16_trace_path = v;
    else if (f == "--decode-trace") decode_trace_path = v;
    else if (f == "--profile-attention-warps") {
      if (v != "0" && v != "4" && v != "8") {
        std::fprintf(stderr, "--profile-attention-warps: expected 0, 4 or 8, found '%s'\n", v.c_str());
        return 2;
      }
      profile_attention_warps = std::stoi(v);
    }
    else if (f == "--profile-cycles") {
      if (v.size() != 1 || v[0] < '0' || v[0] > '8') {
        std::fprintf(stderr, "--profile-cycles: expected 0..8, found '%s'\n", v.c_str());
        return 2;
      }
      profile_cycles = v[0] - '0';
    }
    else if (f == "--split") {
      if (v != "0" && v != "1") { std::fprintf(stderr, "--split: expected 0 or 1, found '%s'\n", v.c_str()); return 2; }
      split = v == "1";
    }
    else if (f == "--modes") {
      if (v != "all" && v != "default") { std::fprintf(stderr, "--modes: expected all or default, found '%s'\n", v.c_str()); return 2; }
      all_modes = v == "all";
    }
    else if (f == "--attention") {
      if (v != "0" && v != "1") { std::fprintf(stderr, "--attention: expected 0 or 1, found '%s'\n", v.c_str()); return 2; }
      attention_only = v == "1";
    }
    else { std::fprintf(stderr, "unknown flag %s\n", f.c_str()); return 2; }
  }
  try {
    c10::InferenceMode mode;
    if (!at::hasCUDA()) fail("fast_perf needs a CUDA device");
    if (attention_only) {
      attention_table();
      return 0;
    }
    if ((!timeline_path.empty() || profile_attention_warps != 0 || profile_cycles != 0) && profile_mode.empty())
      fail("--timeline, --profile-attention-warps and --profile-cycles go with --profile MODE");
    if (split && (!profile_mode.empty() || !persistent_trace_path.empty() || !wg16_trace_path.empty() ||
                  !decode_trace_path.empty()))
      fail("--split 1 goes without --profile and the traces (a second engine would trace over the first's)");
    if (!persistent_trace_path.empty()) {
      if (all_modes || !profile_mode.empty()) fail("--persistent-trace goes with --modes default and no --profile");
      model::set_decode_persistent(true);
      model::set_decode_persistent_trace(true);
    }
    if (!wg16_trace_path.empty()) {
      if (all_modes || !profile_mode.empty()) fail("--wg16-trace goes with --modes default and no --profile");
      model::set_wg16_layer_trace(true);
    }
    if (!decode_trace_path.empty()) {
      if (all_modes || !profile_mode.empty()) fail("--decode-trace goes with --modes default and no --profile");
      if (model::gemv_mlp_timed()) {
        // one decode graph (a timed choice captures two)
        model::set_gemv_mlp_fused(false);
        std::printf("note: --decode-trace pins the decode MLP to two GEMVs (SPECPRESS_GEMV_MLP=1 traces the fused "
                    "kernel, ordered sum)\n");
      }
    }
    cudaDeviceProp prop{};
    AT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    nlohmann::ordered_json out;
    out["device"] = prop.name;
    out["context"] = context;
    out["tau"] = tau;
    out["decode_persistent"] = model::decode_persistent();  // SPECPRESS_DECODE_PERSISTENT or --persistent-trace
    out["persistent_trace"] = !persistent_trace_path.empty();
    const double bw = copy_bandwidth_gbs();
    out["copy_bandwidth_GBps"] = bw;
    std::printf("device %s, copy bandwidth %.0f GB/s (read + write), context %lld, block 16\n", prop.name, bw,
                static_cast<long long>(context));
    std::string rest = shapes;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const Shape s = shape_by_name(rest.substr(0, comma));
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      at::manual_seed(0);
      const size_t lt_records_before = kernels::lt_tune_records().size();  // this shape's tuning records follow
      // ---- random target and draft, in memory
      model::Qwen3Config tc = config_of(s, s.layers);
      model::Qwen3Weights tw;
      tw.embed_tokens = rnd({s.vocab, s.hidden});
      for (int64_t l = 0; l < s.layers; ++l) tw.layers.push_back(random_layer(tc));
      tw.final_norm = norm_w(s.hidden);
      tw.lm_head = s.tied ? tw.embed_tokens : rnd({s.vocab, s.hidden});
      model::Qwen3Model target(tc, std::move(tw), at::kBFloat16, at::Device(at::kCUDA));
      model::DFlashConfig dc;
      dc.arch = config_of(s, 5);
      dc.block_size = 16;
      dc.num_target_layers = s.layers;
      dc.target_layer_ids = {1, 9, 17, 25, 33};
      dc.mask_token_id = 151669;
      model::DFlashWeights dw;
      dw.fc = rnd({s.hidden, 5 * s.hidden});
      dw.hidden_norm = norm_w(s.hidden);
      dw.final_norm = norm_w(s.hidden);
      for (int l = 0; l < 5; ++l) dw.layers.push_back(random_layer(dc.arch));
      model::DFlashDraft draft(dc, std::move(dw), target);
      const int64_t B = 16;
      device_sync();
      std::vector<int64_t> prompt(context);
      for (int64_t i = 0; i < context; ++i) prompt[i] = (i * 7919) % 150000;

      if (!profile_mode.empty()) {
        kernels::set_gemm_mode(kernels::parse_gemm_mode(profile_mode, "--profile"));
        kernels::set_attention_block_warps(profile_attention_warps);  // the engine's attention scratch takes it
        // room for the steps and for every profiled cycle committing a whole block
        model::FastEngine engine(target, &draft, context + (4 + profile_cycles) * B, B);
        at::Tensor logits = engine.prefill(prompt);
        engine.first_draft(logits.argmax().item<int64_t>());
        engine.set_start(context, context);
        device_sync();
        // the profiled region: decode, verify, draft, in that order (each ends with its argmax kernel)
        namespace kp = torch::profiler::impl;
        const kp::ProfilerConfig timeline_config(kp::ProfilerState::KINETO);
        const std::set<kp::ActivityType> timeline_activities{kp::ActivityType::CUDA};
        if (!timeline_path.empty()) {
          torch::autograd::profiler::prepareProfiler(timeline_config, timeline_activities);
          torch::autograd::profiler::enableProfiler(timeline_config, timeline_activities);
        }
        AT_CUDA_CHECK(cudaProfilerStart());
        engine.decode_step();
        engine.sync();
        engine.verify_step();
        engine.sync();
        engine.draft_step();
        engine.sync();
        // then whole DFlash cycles as the greedy loop runs them (pipelined, unless SPECPRESS_PIPELINE=0): draft,
        // verify, accept, the record's copy, and the read of the previous cycle's record (of this one's, synchronous)
        const bool pipelined = decode::pipelined_loops();
        for (int c = 0; c < profile_cycles; ++c) {
          engine.draft_step();
          engine.verify_step();
          engine.accept_into(c % 2);
          if (!pipelined) (void)engine.wait_record(c % 2);
          else if (c > 0) (void)engine.wait_record((c - 1) % 2);
        }
        engine.sync();
        AT_CUDA_CHECK(cudaProfilerStop());
        if (!timeline_path.empty()) {
          const std::string path = timeline_path + "." + s.name + ".json";  // one trace per shape
          torch::autograd::profiler::disableProfiler()->save(path);
          std::printf("%s: timeline written to %s\n", s.name.c_str(), path.c_str());
        }
        std::printf("%s: profiled one decode, verify and draft step in %s mode\n", s.name.c_str(), profile_mode.c_str());
        continue;
      }

      // ---- fast path, once per matmul mode (skinny tensor-core kernel, cuBLAS, cuBLAS + GEMV at M = 1)
      struct FastNumbers {
        double decode, decode_loop, verify, draft, cycle, gemm1, gemm16, attn1, elem1, head1, attn16, elem16;
        double decode_loop_sync, cycle_sync;  // the loops without pipelining (SPECPRESS_PIPELINE=0)
        std::array<int, 3> lc_edges;  // launch-completion edges in the decode, verify and draft graphs
        std::array<double, 2> multirow_ms;  // FastEngine::multirow_ms: the capture-time choice's timings ({0, 0}: none)
        bool multirow_wgmma;  // the verify and draft graphs run the wgmma kernel and its SwiGLU form
        std::array<double, 2> decode_mlp_ms;  // FastEngine::decode_mlp_ms of the plain engine ({0, 0}: no choice)
        bool decode_mlp_fused;                // its decode graph runs the fused MLP kernel
      };
      double dec_bytes = 0, drf_bytes = 0;
      // the fast engine's injection inside its verify step (model::inject_in_verify): bytes it moves from the draft
      // step's floor (fc and its norm) and adds to the verify step's (those and the draft's K/V rows)
      double inject_moved = 0, inject_added = 0;
      auto measure_fast = [&](kernels::GemmMode mode, bool pdl, int attention_warps = 0, bool pdl_multirow = true) {
        kernels::set_gemm_mode(mode);
        kernels::set_pdl(pdl);  // captured into the engine's graphs
        kernels::set_pdl_in_multirow_steps(pdl_multirow);
        kernels::set_attention_block_warps(attention_warps);  // the engine's attention scratch takes it
        // Each engine on fresh allocations, as `specpress generate`'s one engine is: built in the blocks the allocator
        // kept from the modes measured before it, the table's engine timed its 4B verify step 1% slower than on
        // fresh ones (3.002-3.003 against 2.972-2.976 ms, alternated in one call; docs/PERF.md, thirtieth pass).
        c10::cuda::CUDACachingAllocator::emptyCache();
        const int64_t cap = context + iters * (B + 2) + 4 * B;
        FastNumbers f{};
        std::array<int, 3> plain_lc{};
        {
          // Plain decoding's rows on an engine without a draft, as `specpress generate` builds for it (its decode
          // MLP's form chosen at capture: model::gemv_mlp_timed), freed before the DFlash engine is built.
          // its decode graph alone is captured stamping the --decode-trace timeline (the DFlash engine's decode graph
          // is not timed here)
          if (!decode_trace_path.empty()) kernels::step_trace_start(int64_t{1} << 22);  // 32 MB of stamps
          model::FastEngine plain(target, nullptr, cap);
          model::set_decode_step_trace(!decode_trace_path.empty());
          plain.capture_graphs();
          model::set_decode_step_trace(false);
          if (plain.decode_mlp_ms()[0] > 0)
            std::printf("%s: decode MLP chosen at capture (SPECPRESS_GEMV_MLP unset): decode replay %.3f ms with two "
                        "GEMVs, %.3f ms with the fused kernel (positions 0..): kept %s\n",
                        s.name.c_str(), plain.decode_mlp_ms()[0], plain.decode_mlp_ms()[1],
                        plain.decode_mlp_fused() ? "the fused kernel" : "the two GEMVs");
          plain.set_token(plain.prefill(prompt).argmax().item<int64_t>());
          device_sync();
          c10::cuda::CUDAStreamGuard guard(plain.stream());
          const int inner = static_cast<int>(std::max<int64_t>(iters / 5, 1));
          plain.set_start(context, 0);
          f.decode = time_ms([&] { plain.decode_step(); }, 5, 7, inner);
          if (!decode_trace_path.empty())
            write_decode_trace(kernels::step_trace_take(), decode_trace_path + "." + s.name + ".csv");
          if (!persistent_trace_path.empty()) {
            if (!plain.decodes_persistent()) fail("--persistent-trace: the {} engine does not take the persistent "
                                                  "decode kernel (kernels::decode_layers_supported)", s.name);
            write_persistent_trace(plain.persistent_trace(), persistent_trace_path + "." + s.name + ".csv");
          }
          // plain decode as the loop runs it: graph replay + read of the argmax token, pipelined or not
          int64_t steps = 0;
          plain.set_start(context, 0);
          f.decode_loop = time_ms([&] {
            plain.decode_step();
            plain.queue_token_copy(static_cast<int>(steps++ % 2));
            if (steps > 1) (void)plain.wait_token(static_cast<int>((steps - 2) % 2));
          }, 5, 5, inner);
          plain.set_start(context, 0);
          f.decode_loop_sync = time_ms([&] {
            plain.decode_step();
            (void)plain.read_token();
          }, 5, 5, inner);
          plain.sync();
          plain_lc = plain.launch_completion_edges();
          f.decode_mlp_ms = plain.decode_mlp_ms();
          f.decode_mlp_fused = plain.decode_mlp_fused();
        }
        c10::cuda::CUDACachingAllocator::emptyCache();
        if (!wg16_trace_path.empty()) kernels::wg16_trace_start(int64_t{1} << 22);  // 32 MB of stamps, this engine's
        model::FastEngine engine(target, &draft, cap, B);
        if (model::record_mapped() && !engine.records_mapped())
          std::printf("note: pinned host memory is not mapped into the device's address space here: the cycle copies "
                      "its record (SPECPRESS_RECORD_MAPPED has no effect)\n");
        dec_bytes = engine.decode_bytes(context);
        drf_bytes = engine.draft_bytes(context);
        inject_moved = engine.injects_in_verify() ? engine.inject_bytes(false) : 0;
        inject_added = engine.injects_in_verify() ? engine.inject_bytes(true) : 0;
        engine.capture_graphs();
        if (engine.multirow_ms()[0] > 0)
          std::printf("%s: multi-row products chosen at capture (SPECPRESS_WG16_AUTO): verify + draft replay %.3f ms "
                      "with cuBLASLt, %.3f ms with the wgmma kernel (positions 0..): kept %s\n",
                      s.name.c_str(), engine.multirow_ms()[0], engine.multirow_ms()[1],
                      engine.multirow_wgmma() ? "the wgmma kernel" : "cuBLASLt");
        if (engine.matmul_tuning_ms() > 0)
          std::printf("%s: cuBLASLt tuning of the verify and draft matmuls took %.0f ms (mode %s)\n", s.name.c_str(),
                      engine.matmul_tuning_ms(), kernels::gemm_mode_name(mode));
        at::Tensor logits = engine.prefill(prompt);
        engine.first_draft(logits.argmax().item<int64_t>());
        device_sync();
        c10::cuda::CUDAStreamGuard guard(engine.stream());
        const int inner = static_cast<int>(std::max<int64_t>(iters / 5, 1));
        f.lc_edges = engine.launch_completion_edges();
        f.lc_edges[0] = plain_lc[0];  // the decode graph timed above
        f.multirow_ms = engine.multirow_ms();
        f.multirow_wgmma = engine.multirow_wgmma();
        engine.set_start(context, context);
        std::ofstream wg16_csv;
        if (!wg16_trace_path.empty()) {
          const std::string path = wg16_trace_path + "." + s.name + ".csv";
          wg16_csv.open(path);
          if (!wg16_csv) fail("--wg16-trace: cannot write {}", path);
          wg16_csv << "step,product,layer,block,sm,last,start_us,waited_us,first_stage_us,consumed_us,arrived_us,"
                      "end_us\n";
          (void)kernels::wg16_trace_take();  // zeroes: the next read shows the verify replays' stamps
        }
        f.verify = time_ms([&] { engine.verify_step(); }, 3, 7, inner);
        if (wg16_csv.is_open()) write_wg16_trace(kernels::wg16_trace_take(), "verify", s.name, wg16_csv);
        f.draft = time_ms([&] { engine.draft_step(); }, 3, 7, inner);
        if (wg16_csv.is_open()) {
          write_wg16_trace(kernels::wg16_trace_take(), "draft", s.name, wg16_csv);
          wg16_csv.close();
          if (!wg16_csv) fail("--wg16-trace: writing {}.{}.csv failed", wg16_trace_path, s.name);
          std::printf("%s: wgmma o and gate/up product timeline written to %s.%s.csv (the verify and draft times "
                      "above carry the stamps' cost)\n", s.name.c_str(), wg16_trace_path.c_str(), s.name.c_str());
        }
        // a full cycle as the decoding loop runs it (decode/fast_generation.h): draft + verify + accept with its
        // record into a host slot (accept_into), with cycle k + 1 queued before cycle k's record is read
        // (pipelined, the default) or after it (synchronous: the one host sync a cycle on the critical path)
        const int cycle_inner = static_cast<int>(std::max<int64_t>(iters / 10, 1));
        int64_t queued = 0;
        auto queue_cycle = [&] {
          engine.draft_step();
          engine.verify_step();
          engine.accept_into(static_cast<int>(queued++ % 2));
        };
        engine.set_start(context, context);
        f.cycle = time_ms([&] {
          queue_cycle();
          if (queued > 1) (void)engine.wait_record(static_cast<int>((queued - 2) % 2));
        }, 3, 5, cycle_inner);
        engine.set_start(context, context);
        f.cycle_sync = time_ms([&] {
          engine.draft_step();
          engine.verify_step();
          engine.accept();
          (void)engine.read_record();
        }, 3, 5, cycle_inner);
        engine.set_start(context, context);
        f.gemm1 = engine.kernel_class_ms("matmul", 1, 20);
        f.gemm16 = engine.kernel_class_ms("matmul", B, 20);
        f.attn1 = engine.kernel_class_ms("attention", 1, 20);
        f.attn16 = engine.kernel_class_ms("attention", B, 20);
        f.elem1 = engine.kernel_class_ms("elementwise", 1, 20);
        f.elem16 = engine.kernel_class_ms("elementwise", B, 20);
        f.head1 = engine.kernel_class_ms("head", 1, 20);
        return f;
      };
      const kernels::GemmMode default_mode = kernels::gemm_mode();
      const bool default_pdl = kernels::pdl_enabled(), default_pdl_multirow = kernels::pdl_in_multirow_steps();
      // --modes default: only the engine's default configuration (gemv mode, PDL in the decode step only)
      FastNumbers fs{}, fc{}, fg{}, fp{}, fpd{}, fp4{}, fst{}, fsa{}, fpi{};
      const kernels::LtTuning default_tuning = kernels::lt_tuning();
      FastNumbers fgu{};
      const FastNumbers* fb = &fpd;
      const char* best_mode = "gemv+pdl(decode)";
      if (!all_modes) {
        fpd = measure_fast(kernels::GemmMode::kGemv, true, 0, false);
        if (split && model::inject_in_verify()) {  // the split, as --modes all measures it below
          model::set_inject_in_verify(false);
          fpi = measure_fast(kernels::GemmMode::kGemv, true, 0, false);
          model::set_inject_in_verify(true);
        }
      } else {
        fs = measure_fast(kernels::GemmMode::kSkinny, false);
        fc = measure_fast(kernels::GemmMode::kCublas, false);
        fg = measure_fast(kernels::GemmMode::kGemv, false);
        // gemv mode again with programmatic dependent launch in every step (SPECPRESS_PDL=1, kernels/launch.h)
        fp = measure_fast(kernels::GemmMode::kGemv, true);
        // ... with PDL in the decode graph only (SPECPRESS_PDL=decode, the default): verify and draft without it
        fpd = measure_fast(kernels::GemmMode::kGemv, true, 0, false);
        // ... with the draft's context injection in the draft graph (SPECPRESS_INJECT_IN_VERIFY=0), as the issue splits
        // the steps: the verify step is then the target's own 16-token forward (the engines after it restore the
        // injection's floors)
        if (model::inject_in_verify()) {
          model::set_inject_in_verify(false);
          fpi = measure_fast(kernels::GemmMode::kGemv, true, 0, false);
          model::set_inject_in_verify(true);
        }
        // ... with the small-T attention in blocks of 4 warps at every row count (its default before 2026-11-30's
        // sixth pass, and for decode's 4 rows a block until the ninth; 8 warps now), the baseline for those changes
        fp4 = measure_fast(kernels::GemmMode::kGemv, true, 4);
        kernels::set_attention_block_warps(0);
        // the streaming small-M kernel for verify and draft (stream), and for decode too (stream_all)
        fst = measure_fast(kernels::GemmMode::kStream, false);
        fsa = measure_fast(kernels::GemmMode::kStreamAll, false);
        // gemv mode with the cuBLASLt plans off (SPECPRESS_LT_TUNE=0): every M > 1 product by at::mm_out, as
        // before the tuning; for comparison only, not a candidate for the table
        fgu = fg;
        if (default_tuning != kernels::LtTuning::kOff) {
          kernels::set_lt_tuning(kernels::LtTuning::kOff);
          fgu = measure_fast(kernels::GemmMode::kGemv, false);
          kernels::set_lt_tuning(default_tuning);
        }
        // the best mode for the main table: lowest decode + cycle (gemv differs from cublas only at M = 1)
        fb = &fs;
        best_mode = "skinny";
        const std::pair<const FastNumbers*, const char*> modes[] = {
            {&fc, "cublas"}, {&fg, "gemv"}, {&fp, "gemv+pdl"}, {&fpd, "gemv+pdl(decode)"}, {&fst, "stream"},
            {&fsa, "stream_all"}};
        for (const auto& [numbers, name] : modes)
          if (numbers->decode + numbers->cycle < fb->decode + fb->cycle) {
            fb = numbers;
            best_mode = name;
          }
      }
      kernels::set_gemm_mode(default_mode);
      kernels::set_pdl(default_pdl);
      kernels::set_pdl_in_multirow_steps(default_pdl_multirow);
      const double f_decode = fb->decode, f_decode_loop = fb->decode_loop, f_verify = fb->verify, f_draft = fb->draft,
                   f_cycle = fb->cycle, f_decode_loop_sync = fb->decode_loop_sync, f_cycle_sync = fb->cycle_sync;

      // ---- each projection alone, against the copy bandwidth: at M = 1 the GEMV kernel vs cuBLAS, at M = 16
      // (verify) the streaming small-M kernel and the tuned path vs cuBLAS
      struct Proj { const char* name; int64_t N, K; double gemv_ms, cublas_ms, stream16_ms, cublas16_ms, tuned16_ms; };
      const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
      std::vector<Proj> projs = {{"qkv", q_width + 2 * kv_width, s.hidden, 0, 0, 0, 0, 0},
                                 {"o", s.hidden, q_width, 0, 0, 0, 0, 0},
                                 {"gate_up", 2 * s.inter, s.hidden, 0, 0, 0, 0, 0},
                                 {"down", s.hidden, s.inter, 0, 0, 0, 0, 0},
                                 {"lm_head", s.vocab, s.hidden, 0, 0, 0, 0, 0}};
      for (Proj& pr : projs) {
        pr.gemv_ms = small_matmul_ms(1, pr.N, pr.K, MatmulKernel::kGemv);
        pr.cublas_ms = small_matmul_ms(1, pr.N, pr.K, MatmulKernel::kCublas);
        if (!all_modes) continue;
        pr.stream16_ms = small_matmul_ms(B, pr.N, pr.K, MatmulKernel::kStream);
        pr.cublas16_ms = small_matmul_ms(B, pr.N, pr.K, MatmulKernel::kCublas);
        pr.tuned16_ms = small_matmul_ms(B, pr.N, pr.K, MatmulKernel::kTuned, std::string("fast_perf ") + pr.name);
      }

      // ---- reference path (eager ATen), same weights
      c10::cuda::CUDAStreamGuard ref_guard(c10::cuda::getDefaultCUDAStream());
      model::KVCache cache = target.make_cache(context + 2 * B);
      auto lopt = at::TensorOptions().dtype(at::kLong).device(at::kCUDA);
      at::Tensor ids = at::tensor(prompt, at::kLong).to(at::kCUDA);
      model::ForwardOutput pre = target.forward(ids, 0, cache, {false, dc.target_layer_ids, false});
      model::DraftCache dcache = draft.make_cache(context + 2 * B);
      at::Tensor block = at::full({B}, dc.mask_token_id, lopt);
      draft.forward(pre.taps.narrow(0, 0, context - B), block, dcache);
      at::Tensor new_ctx = pre.taps.narrow(0, context - B, B);
      at::Tensor one = ids.narrow(0, 0, 1), blk = ids.narrow(0, 0, B);
      const int ri = static_cast<int>(ref_iters);
      const double r_decode = time_ms([&] {
        cache.rollback(context);
        decode::argmax_rows(target.forward(one, context, cache, {}).logits);
      }, 2, ri);
      const double r_verify = time_ms([&] {
        cache.rollback(context);
        decode::argmax_rows(target.forward(blk, context, cache, {true, dc.target_layer_ids, false}).logits);
      }, 2, ri);
      const double r_draft = time_ms([&] {
        dcache.length = context - B;
        at::Tensor h = draft.forward(new_ctx, block, dcache);
        decode::argmax_rows(target.lm_head_logits(h.narrow(0, 1, B - 1)));
      }, 2, ri);
      const double r_cycle = r_verify + r_draft;

      // ---- rooflines
      auto floor_ms = [&](double bytes) { return bytes / (bw * 1e9) * 1e3; };
      const double dec_floor = floor_ms(dec_bytes), drf_floor = floor_ms(drf_bytes);
      const double cyc_floor = dec_floor + drf_floor;
      // the fast engine's verify and draft floors, where its verify step runs the draft's injection
      const double f_ver_floor = floor_ms(dec_bytes + inject_added), f_drf_floor = floor_ms(drf_bytes - inject_moved);
      auto pct = [](double floor, double ms) { return 100.0 * floor / ms; };
      std::printf("\n%s (%.2f GB read per decode step, %.2f GB per draft step; floors %.3f / %.3f ms)\n", s.name.c_str(),
                  dec_bytes / 1e9, drf_bytes / 1e9, dec_floor, drf_floor);
      if (inject_added > 0)
        std::printf("the fast verify step also runs the draft's context injection (SPECPRESS_INJECT_IN_VERIFY): its floor "
                    "is %.3f ms (+%.3f GB: fc, its norm, the draft's K/V rows), the fast draft step's %.3f ms (-%.3f GB); "
                    "the reference path's steps keep the floors above, and the cycle's is the same for both\n",
                    f_ver_floor, inject_added / 1e9, f_drf_floor, inject_moved / 1e9);
      std::printf("%-28s %12s %10s %14s %10s %10s\n", "step", "fast ms", "roofline", "reference ms", "roofline", "speedup");
      auto row = [&](const char* name, double f, double r, double floor, double fast_floor) {
        std::printf("%-28s %12.3f %9.1f%% %14.3f %9.1f%% %9.1fx\n", name, f, pct(fast_floor, f), r, pct(floor, r), r / f);
      };
      row("decode (1 token)", f_decode, r_decode, dec_floor, dec_floor);
      row("decode + token read (loop)", f_decode_loop, r_decode, dec_floor, dec_floor);
      row("verify (16 tokens)", f_verify, r_verify, dec_floor, f_ver_floor);
      row("draft step", f_draft, r_draft, drf_floor, f_drf_floor);
      row("DFlash cycle", f_cycle, r_cycle, cyc_floor, cyc_floor);
      std::printf("loops (decode/fast_generation.h): decode + token read %.3f ms pipelined, %.3f synchronous; DFlash "
                  "cycle %.3f pipelined, %.3f synchronous (SPECPRESS_PIPELINE=0); verify + draft %.3f\n",
                  f_decode_loop, f_decode_loop_sync, f_cycle, f_cycle_sync, f_verify + f_draft);
      if (all_modes) {
        std::printf("matmul mode in the table: %s; per mode (skinny | cublas | gemv) ms: decode %.3f | %.3f | %.3f, "
                    "verify %.3f | %.3f | %.3f, draft %.3f | %.3f | %.3f, cycle %.3f | %.3f | %.3f\n",
                    best_mode, fs.decode, fc.decode, fg.decode, fs.verify, fc.verify, fg.verify, fs.draft, fc.draft,
                    fg.draft, fs.cycle, fc.cycle, fg.cycle);
        std::printf("breakdown: target matmuls alone (graph) M=1 %.3f | %.3f | %.3f ms (%.1f%% | %.1f%% | %.1f%% of roofline), "
                    "M=16 %.3f | %.3f | %.3f ms; the rest of decode (norms, RoPE, attention, SwiGLU, argmax, launch gaps) "
                    "%.3f | %.3f | %.3f ms\n",
                    fs.gemm1, fc.gemm1, fg.gemm1, pct(dec_floor, fs.gemm1), pct(dec_floor, fc.gemm1), pct(dec_floor, fg.gemm1),
                    fs.gemm16, fc.gemm16, fg.gemm16, fs.decode - fs.gemm1, fc.decode - fc.gemm1, fg.decode - fg.gemm1);
        std::printf("GEMV: M=1 matmuls alone (graph, gemv mode: 4 per layer + LM head) %.3f ms, %.1f%% of the decode roofline; "
                    "cuBLAS %.3f ms\n",
                    fg.gemm1, pct(dec_floor, fg.gemm1), fc.gemm1);
        std::printf("PDL in every step (gemv mode, SPECPRESS_PDL=1) ms: decode %.3f (%.1f%% of roofline, %.3f without), "
                    "decode loop %.3f, verify %.3f, draft %.3f, cycle %.3f; M=1 matmuls alone %.3f, elementwise alone %.3f\n",
                    fp.decode, pct(dec_floor, fp.decode), fg.decode, fp.decode_loop, fp.verify, fp.draft, fp.cycle, fp.gemm1,
                    fp.elem1);
        std::printf("PDL in every step | in decode only (SPECPRESS_PDL=decode), gemv mode, ms: decode %.3f | %.3f, verify %.3f | "
                    "%.3f, draft %.3f | %.3f, cycle %.3f | %.3f\n",
                    fp.decode, fpd.decode, fp.verify, fpd.verify, fp.draft, fpd.draft, fp.cycle, fpd.cycle);
        std::printf("small-T attention blocks (gemv+pdl): default | 4 warps always, ms: decode %.3f | %.3f, "
                    "verify %.3f | %.3f, draft %.3f | %.3f, cycle %.3f | %.3f; attention alone M=16 %.3f | %.3f\n",
                    fp.decode, fp4.decode, fp.verify, fp4.verify, fp.draft, fp4.draft, fp.cycle, fp4.cycle, fp.attn16, fp4.attn16);
        std::printf("stream (GEMV at M=1, gemm_small at M=2..16) ms: decode %.3f, verify %.3f, draft %.3f, cycle %.3f "
                    "(verify/decode %.2f, cycle/decode %.2f); M=16 matmuls alone %.3f (cublas %.3f)\n",
                    fst.decode, fst.verify, fst.draft, fst.cycle, fst.verify / fst.decode, fst.cycle / fst.decode, fst.gemm16,
                    fc.gemm16);
        std::printf("stream_all (gemm_small at M=1..16, batch-invariant matmuls) ms: decode %.3f, verify %.3f, draft %.3f, "
                    "cycle %.3f (verify/decode %.2f); M=1 matmuls alone %.3f (gemv %.3f)\n",
                    fsa.decode, fsa.verify, fsa.draft, fsa.cycle, fsa.verify / fsa.decode, fsa.gemm1, fg.gemm1);
      } else {
        std::printf("matmul mode in the table: %s (--modes default: the engine's default configuration only)\n", best_mode);
        std::printf("GEMV: M=1 matmuls alone (graph, gemv mode: 4 per layer + LM head) %.3f ms, %.1f%% of the decode roofline\n",
                    fpd.gemm1, pct(dec_floor, fpd.gemm1));
      }
      if (fpi.verify > 0)  // --modes all, or --split 1
        std::printf("the issue's split of the steps (the draft's context injection in the draft graph, "
                    "SPECPRESS_INJECT_IN_VERIFY=0), gemv+pdl(decode), ms: decode %.3f, verify (the target's own forward) "
                    "%.3f (%.3fx decode, target <= 1.1), draft %.3f (%.2fx), cycle %.3f (%.4fx, target <= 1.4)\n",
                    fpi.decode, fpi.verify, fpi.verify / fpi.decode, fpi.draft, fpi.draft / fpi.decode, fpi.cycle,
                    fpi.cycle / fpi.decode);
      // One projection by our kernel and by cuBLAS, each as ms, GB/s and % of the copy bandwidth.
      auto print_proj = [&](const char* label, const char* ours, const Proj& pr, double ours_ms, double cublas_ms) {
        const double gb = 2.0 * static_cast<double>(pr.N) * static_cast<double>(pr.K) / 1e9;
        std::printf("  %s %-8s N=%-6lld K=%-6lld %7.1f MB: %s %.4f ms (%.0f GB/s, %.1f%% of copy bw), cublas %.4f ms "
                    "(%.0f GB/s, %.1f%%)\n",
                    label, pr.name, static_cast<long long>(pr.N), static_cast<long long>(pr.K), gb * 1e3, ours, ours_ms,
                    gb / (ours_ms * 1e-3), 100.0 * gb / (ours_ms * 1e-3) / bw, cublas_ms, gb / (cublas_ms * 1e-3),
                    100.0 * gb / (cublas_ms * 1e-3) / bw);
      };
      for (const Proj& pr : projs) print_proj("GEMV", "gemv", pr, pr.gemv_ms, pr.cublas_ms);
      if (all_modes) {
        for (const Proj& pr : projs) print_proj("M=16", "gemm_small", pr, pr.stream16_ms, pr.cublas16_ms);
        for (const Proj& pr : projs) print_proj("M=16", "tuned", pr, pr.tuned16_ms, pr.cublas16_ms);
        std::printf("cuBLASLt plans (SPECPRESS_LT_TUNE=%s), gemv mode with them vs at::mm_out only, ms: verify %.3f vs %.3f, "
                    "draft %.3f vs %.3f, cycle %.3f vs %.3f; M=16 matmuls alone %.3f vs %.3f\n",
                    kernels::lt_tuning_name(default_tuning), fg.verify, fgu.verify, fg.draft, fgu.draft, fg.cycle, fgu.cycle,
                    fg.gemm16, fgu.gemm16);
      }
      const std::vector<kernels::LtTuneRecord> lt_records = kernels::lt_tune_records();
      nlohmann::ordered_json lt_json = nlohmann::ordered_json::array();
      std::printf("cuBLASLt tuning (us per product, timed over all layers' weights):\n");
      for (size_t i = lt_records_before; i < lt_records.size(); ++i) {
        const kernels::LtTuneRecord& r = lt_records[i];
        std::printf("  %s\n", kernels::format_lt_record(r).c_str());
        lt_json.push_back({{"label", r.label}, {"M", r.M}, {"N", r.N}, {"K", r.K}, {"weights", r.weights},
                           {"plan", r.plan}, {"algo", r.algo}, {"lt_us", r.lt_us}, {"mm_us", r.mm_us},
                           {"heuristic_us", r.heuristic_us}, {"candidates", r.candidates}});
      }
      if (all_modes)
        std::printf("kernel classes alone (graphs, cublas engine; unfused kernels: at M=1 gemv mode runs the two RMSNorms and "
                    "SwiGLU inside the GEMVs), M=1 | M=16 ms: attention with q/k-norm + RoPE x36 %.3f | %.3f, "
                    "elementwise (2 RMSNorm + SwiGLU) x36 %.3f | %.3f, embedding + argmax %.3f\n",
                    fc.attn1, fc.attn16, fc.elem1, fc.elem16, fc.head1);
      std::printf("ratios (fast): verify/decode %.2f (target <= 1.1), draft/decode %.2f (<= 0.3), cycle/decode %.2f (<= 1.4)\n",
                  f_verify / f_decode, f_draft / f_decode, f_cycle / f_decode);
      std::printf("folded norms (SPECPRESS_FOLD_NORMS, model/qwen3_fast.h): %s; the draft's K/V injection in one "
                  "product (SPECPRESS_DRAFT_KV_BATCH): %s; inside the verify step (SPECPRESS_INJECT_IN_VERIFY): %s; "
                  "records written into host memory by the accept kernel (SPECPRESS_RECORD_MAPPED): %s; W_o prefetched "
                  "into the L2 beside the multi-row attention (SPECPRESS_L2_PREFETCH): %s, with the multi-row layers' gate/up and "
                  "down row heads (SPECPRESS_L2_PREFETCH_GATE_UP / _DOWN): %d%% / %d%%; GEMVs streaming W by TMA "
                  "(SPECPRESS_GEMV_TMA, kernels/gemv.h): %s, more W loads a lane where that saves round trips "
                  "(SPECPRESS_GEMV_WIDE, 0-2): %d; multi-row products by the wgmma kernel (SPECPRESS_WG16, "
                  "kernels/gemm_wg16.h): %s, its gate/up + SwiGLU form (SPECPRESS_WG16_SWIGLU): %s, the two chosen at "
                  "capture by timing (SPECPRESS_WG16_AUTO): %s, the o products' ring on it (SPECPRESS_WG16_O_RING_KB): "
                  "%d KB and K splits at most (SPECPRESS_WG16_O_SPLITS, 0: the plan's rule): %d, "
                  "its products letting the next kernel launch (SPECPRESS_WG16_TRIGGER_EARLY): %s, its qkv products "
                  "computing their norm's row factors (SPECPRESS_WG16_QKV_NORM): %s, its folded gate/up products' ring "
                  "stages held until their wait (SPECPRESS_WG16_SILU_HOLD): %d, the LM heads with their argmax on it "
                  "(SPECPRESS_WG16_HEAD_ARGMAX): %s, its K splits summed in a cluster where one wave holds them "
                  "(SPECPRESS_WG16_CLUSTER_SUM): %s; the table's verify and draft graphs: %s\n",
                  model::fold_norms() ? "on" : "off", model::draft_kv_batch() ? "on" : "off",
                  model::inject_in_verify() ? "on" : "off", model::record_mapped() ? "on" : "off",
                  model::l2_prefetch_o() ? "on" : "off", model::l2_prefetch_gate_up_percent(),
                  model::l2_prefetch_down_percent(), gemv_tma_name(kernels::gemv_tma()),
                  kernels::gemv_wide_level(), kernels::wg16_switch().on() ? "on" : "off",
                  kernels::wg16_swiglu_switch().on() ? "on" : "off",
                  fb->multirow_ms[0] > 0 ? "yes"
                  : model::multirow_auto()
                      ? "no (a wgmma switch is set, the matmul mode is not gemv or cublas, or no sm_90)"
                      : "off",
                  model::o_ring_kb(), model::o_splits(),
                  kernels::wg16_trigger_early() ? "as they start" : "once their loads are issued",
                  model::qkv_norm_in_product() ? "on" : "off", kernels::wg16_silu_hold(),
                  kernels::wg16_head_argmax_switch().on() ? "on" : "off", kernels::wg16_cluster_sum() ? "on" : "off",
                  fb->multirow_wgmma ? "the wgmma kernel" : "cuBLASLt");
      if (model::inject_in_verify())
        std::printf("note: the fast \"draft step\" is the draft graph, the block forward; its context injection runs inside "
                    "the fast verify step (beside its last layers), so those two rows' speedups compare different splits "
                    "of the same work; the cycle's compares the same work\n");
      std::printf("launch-completion edges into our kernels (SPECPRESS_LC_EDGES=%d, used with PDL; SPECPRESS_LC_SKIP=%s) in the "
                  "table's graphs: decode %d, verify %d, draft %d\n", kernels::lc_edges_flag() ? 1 : 0,
                  kernels::lc_skip_names(kernels::lc_skip_mask()).c_str(), fb->lc_edges[0], fb->lc_edges[1], fb->lc_edges[2]);
      std::printf("tokens/s: plain %.1f fast vs %.1f reference; DFlash projected at tau %.1f: %.1f fast vs %.1f reference\n",
                  1e3 / f_decode_loop, 1e3 / r_decode, tau, tau * 1e3 / f_cycle, tau * 1e3 / r_cycle);
      nlohmann::ordered_json proj_json = nlohmann::ordered_json::array();
      for (const Proj& pr : projs) {
        const double gb = 2.0 * static_cast<double>(pr.N) * static_cast<double>(pr.K) / 1e9;
        nlohmann::ordered_json pj = {{"name", pr.name}, {"N", pr.N}, {"K", pr.K}, {"gemv_ms", pr.gemv_ms},
                                     {"cublas_ms", pr.cublas_ms},
                                     {"gemv_pct_copy_bw", 100.0 * gb / (pr.gemv_ms * 1e-3) / bw},
                                     {"cublas_pct_copy_bw", 100.0 * gb / (pr.cublas_ms * 1e-3) / bw}};
        if (all_modes) {
          pj["m16_gemm_small_ms"] = pr.stream16_ms;
          pj["m16_cublas_ms"] = pr.cublas16_ms;
          pj["m16_gemm_small_pct_copy_bw"] = 100.0 * gb / (pr.stream16_ms * 1e-3) / bw;
          pj["m16_cublas_pct_copy_bw"] = 100.0 * gb / (pr.cublas16_ms * 1e-3) / bw;
          pj["m16_tuned_ms"] = pr.tuned16_ms;
          pj["m16_tuned_pct_copy_bw"] = 100.0 * gb / (pr.tuned16_ms * 1e-3) / bw;
        }
        proj_json.push_back(pj);
      }
      nlohmann::ordered_json shape_json = {{"decode_bytes", dec_bytes}, {"draft_bytes", drf_bytes},
                                           {"matmul_mode", std::string(best_mode)}};
      auto append = [&](const nlohmann::ordered_json& entries) {
        for (auto it = entries.begin(); it != entries.end(); ++it) shape_json[it.key()] = it.value();
      };
      if (all_modes) {
        const nlohmann::ordered_json per_mode = {{"skinny_ms", {{"decode", fs.decode}, {"verify", fs.verify}, {"draft", fs.draft}, {"cycle", fs.cycle}, {"gemm_only_m1", fs.gemm1}, {"gemm_only_m16", fs.gemm16}}},
            {"cublas_ms", {{"decode", fc.decode}, {"verify", fc.verify}, {"draft", fc.draft}, {"cycle", fc.cycle}, {"gemm_only_m1", fc.gemm1}, {"gemm_only_m16", fc.gemm16},
                           {"attention_only_m1", fc.attn1}, {"attention_only_m16", fc.attn16}, {"elementwise_only_m1", fc.elem1},
                           {"elementwise_only_m16", fc.elem16}, {"embed_argmax_m1", fc.head1}}},
            {"gemv_ms", {{"decode", fg.decode}, {"verify", fg.verify}, {"draft", fg.draft}, {"cycle", fg.cycle}, {"gemm_only_m1", fg.gemm1}, {"gemm_only_m16", fg.gemm16}}},
            {"gemv_pdl_decode_only_ms", {{"decode", fpd.decode}, {"verify", fpd.verify}, {"draft", fpd.draft}, {"cycle", fpd.cycle}}},
            {"gemv_pdl_decode_only_inject_in_draft_ms", {{"decode", fpi.decode}, {"verify", fpi.verify}, {"draft", fpi.draft}, {"cycle", fpi.cycle}}},
            {"gemv_pdl_attention4_ms", {{"decode", fp4.decode}, {"verify", fp4.verify}, {"draft", fp4.draft}, {"cycle", fp4.cycle}, {"attention_only_m16", fp4.attn16}}},
            {"gemv_pdl_ms", {{"decode", fp.decode}, {"decode_loop", fp.decode_loop}, {"verify", fp.verify}, {"draft", fp.draft}, {"cycle", fp.cycle}, {"gemm_only_m1", fp.gemm1}, {"elementwise_only_m1", fp.elem1}}},
            {"stream_ms", {{"decode", fst.decode}, {"verify", fst.verify}, {"draft", fst.draft}, {"cycle", fst.cycle}, {"gemm_only_m1", fst.gemm1}, {"gemm_only_m16", fst.gemm16}}},
            {"stream_all_ms", {{"decode", fsa.decode}, {"verify", fsa.verify}, {"draft", fsa.draft}, {"cycle", fsa.cycle}, {"gemm_only_m1", fsa.gemm1}, {"gemm_only_m16", fsa.gemm16}}},
            {"gemv_lt_off_ms", {{"decode", fgu.decode}, {"verify", fgu.verify}, {"draft", fgu.draft}, {"cycle", fgu.cycle}, {"gemm_only_m16", fgu.gemm16}}}};
        append(per_mode);
      } else {
        shape_json["modes"] = "default";
        if (fpi.verify > 0)
          shape_json["gemv_pdl_decode_only_inject_in_draft_ms"] = {
              {"decode", fpi.decode}, {"verify", fpi.verify}, {"draft", fpi.draft}, {"cycle", fpi.cycle}};
      }
      append({{"lt_tuning", std::string(kernels::lt_tuning_name(default_tuning))},
              {"lt_plans", lt_json},
              {"gemv_projections_m1", proj_json},
              {"fast_ms", {{"decode", f_decode}, {"decode_loop", f_decode_loop}, {"verify", f_verify}, {"draft", f_draft}, {"cycle", f_cycle},
                           {"decode_loop_sync", f_decode_loop_sync}, {"cycle_sync", f_cycle_sync}}},
              {"reference_ms", {{"decode", r_decode}, {"verify", r_verify}, {"draft", r_draft}, {"cycle", r_cycle}}},
              {"roofline_pct_fast", {{"decode", pct(dec_floor, f_decode)}, {"verify", pct(f_ver_floor, f_verify)},
                                     {"draft", pct(f_drf_floor, f_draft)}, {"cycle", pct(cyc_floor, f_cycle)}}},
              {"launch_completion_edges", {{"decode", fb->lc_edges[0]}, {"verify", fb->lc_edges[1]}, {"draft", fb->lc_edges[2]},
                                           {"skipped", kernels::lc_skip_names(kernels::lc_skip_mask())}}},
              {"fold_norms", model::fold_norms()},
              {"draft_kv_batch", model::draft_kv_batch()},
              {"inject_in_verify", model::inject_in_verify()},
              {"record_mapped", model::record_mapped()},
              {"l2_prefetch_o", model::l2_prefetch_o()},
              {"l2_prefetch_gate_up_percent", model::l2_prefetch_gate_up_percent()},
              {"l2_prefetch_down_percent", model::l2_prefetch_down_percent()},
              {"gemv_tma", gemv_tma_name(kernels::gemv_tma())},
              {"gemv_wide", kernels::gemv_wide_level()},
              {"wg16", kernels::wg16_switch().on()},
              {"wg16_swiglu", kernels::wg16_swiglu_switch().on()},
              {"wg16_o_ring_kb", model::o_ring_kb()},
              {"wg16_o_splits", model::o_splits()},
              {"wg16_trigger_early", kernels::wg16_trigger_early()},
              {"wg16_qkv_norm", model::qkv_norm_in_product()},
              {"wg16_silu_hold", kernels::wg16_silu_hold()},
              {"wg16_head_argmax", kernels::wg16_head_argmax_switch().on()},
              {"wg16_cluster_sum", kernels::wg16_cluster_sum()},
              {"multirow_auto", {{"chose", fb->multirow_ms[0] > 0}, {"cublaslt_ms", fb->multirow_ms[0]},
                                 {"wgmma_ms", fb->multirow_ms[1]}, {"wgmma", fb->multirow_wgmma}}},
              {"decode_mlp", {{"chose", fb->decode_mlp_ms[0] > 0}, {"two_gemvs_ms", fb->decode_mlp_ms[0]},
                              {"fused_ms", fb->decode_mlp_ms[1]}, {"fused", fb->decode_mlp_fused},
                              {"ordered", model::gemv_mlp_ordered()}}},
              {"projected_dflash_tok_s", {{"fast", tau * 1e3 / f_cycle}, {"reference", tau * 1e3 / r_cycle}}},
              {"plain_tok_s", {{"fast", 1e3 / f_decode_loop}, {"reference", 1e3 / r_decode}}}});
      out[s.name] = shape_json;
    }
    std::printf("\nJSON %s\n", out.dump().c_str());
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
