// gemv_mlp.cu — see gemv_mlp.h. One block an SM (G = min(SMs, I) blocks), T = groups * H / 8 threads (at most 640,
// groups = 640 / (H / 8)): thread t owns chunk c = t % (H / 8) of every row it touches and rows g, g + groups, .. of
// each of the block's row lists (g = t / (H / 8)); a warp reads 512 contiguous bytes of a row, and its lanes' x chunks
// stay in registers for the whole kernel.
//   Phase 1: the block's 2 n rows (gate rows i0.., then up rows I + i0..), kBatch rows a thread a batch, the next
//   batch's loads issued before the current one's arithmetic; each row's warp partial sums go to shared memory.
//   Then each intermediate's SwiGLU (the partials summed in warp order, times the folded norm's factor), into shared
//   memory, after the first batch of phase 2 is issued.
//   Phase 2: the block's n rows of W_dT, each thread's 8 outputs (its chunk) accumulated over its rows in fp32; the
//   groups' sums added in group order.
//   The sum: two vector reductions a chunk into the accumulator, a fence, the arrival counter; the last block to
//   arrive reads the accumulator (at the L2), writes x and the tap, and zeroes the accumulator and the counter. Or,
//   ordered (its own kernel instance, ORDERED): ordered_sum below.
// The first batch of weights is loaded before the PDL wait (weights never depend on an earlier kernel); the next
// kernel is let launch once every weight is read.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/gemv_math.cuh"
#include "kernels/gemv_mlp.h"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kMaxThreads = 640, kBatch = 8;  // a block's threads at most (96 registers a thread), rows a batch

struct Args {
  bf16* x = nullptr;
  const bf16* Wgu = nullptr;
  const bf16* WdT = nullptr;
  bf16* tap = nullptr;
  float* acc = nullptr;                   // [H], zero at rest
  unsigned* counter = nullptr;            // arrivals; the last block resets it
  int H = 0, I = 0, groups = 1, max_n = 1;  // max_n: the most intermediates a block owns
  float eps = 1e-6f;
  int parts = 0;  // > 0: the ordered sum (ordered_sum): acc holds G rows of H, the last `parts` blocks add them
  unsigned long long* trace = nullptr;  // the traced instance's stamps (step_trace.h: kStMlp*)
};

__device__ __forceinline__ void red_add4(float* p, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
#endif
}
// Shared memory (floats): the phase-1 partials [2 max_n][H / 256], the SwiGLU values [max_n], the other groups'
// phase-2 sums [(groups - 1) * H], 32 floats of scratch.
__host__ __device__ inline int warps_a_group(int H) { return H >= 256 ? H / 256 : 1; }
__host__ __device__ inline size_t smem_floats(int H, int groups, int max_n) {
  return static_cast<size_t>(2 * max_n) * warps_a_group(H) + max_n + static_cast<size_t>(groups - 1) * H + 32;
}

// The sum over a group's lanes of a warp: the whole warp (H >= 256) or segments of H / 8 lanes (H <= 256).
__device__ __forceinline__ float segment_sum(float v, int seg) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < seg) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The ordered sum: block b's H sums into row b of acc; every block takes an arrival ticket; all but the last `parts` to
// arrive leave; those wait for the last arrival, then part p adds outputs [p H / parts, (p + 1) H / parts) over the G
// rows in a fixed order (thread q of Q a output: rows q, q + Q, .., then the Q sums in order), into x and the tap. The
// same bits every run. counter: the arrivals, each an acq_rel atomic by thread 0 after the block's barrier (no fence by
// every thread: the barrier orders the block's row writes before the release, as a grid barrier's arrival does). The
// last block to arrive knows every row is written (its ticket is G - 1) and sets the counter back to zero at once (a
// release store); the other parts wait (acquire loads) until it reads G or has dropped to at most their own ticket (no
// launch of the next MLP can start while one of them waits, so no other value appears). So the tail is the row writes,
// the ticket, the wait for the last arrival, one batch of row loads and the stores: x's values are loaded before the
// wait, and no bookkeeping follows the sum (docs/PERF.md, forty-sixth pass).
// red: 4 max(blockDim.x, H / 4 / parts + 1) floats of shared memory, 16-byte aligned (the phase buffers, read by now:
// every thread is past the barrier after the group sums before any writes it).
template <bool TRACE>
__device__ __forceinline__ void ordered_sum(const Args& a, const float (&s)[8], int c, int g, int b, int G,
                                            float* red) {
  const int H = a.H;
  if (g == 0) {
    float4* row = reinterpret_cast<float4*>(a.acc + static_cast<size_t>(b) * H) + 2 * c;
    __stcg(row, make_float4(s[0], s[1], s[2], s[3]));
    __stcg(row + 1, make_float4(s[4], s[5], s[6], s[7]));
  }
  __syncthreads();
  // the ticket: a release of every thread's row (the barrier orders them before it) and an acquire of the rows of the
  // blocks that arrived before
  __shared__ int ticket;
  if (threadIdx.x == 0) {
    unsigned t;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(t) : "l"(a.counter) : "memory");
    ticket = static_cast<int>(t);
  }
  __syncthreads();
  const int F = a.parts, p = ticket - (G - F);
  if constexpr (TRACE) {
    step_stamp(a.trace, kStMlpTicket);
    step_stamp_value(a.trace, kStMlpPart, p < 0 ? 0 : p + 1);
  }
  if (p < 0) {
    if constexpr (TRACE) step_stamp(a.trace, kStEnd);
    return;
  }
  // part p: outputs [o0, o0 + nout) on 4-output boundaries; thread (o4, q) adds float4 o4 of rows q, q + Q, ..
  const int H4 = H / 4;
  const int o0 = static_cast<int>(static_cast<long long>(p) * H4 / F) * 4;
  const int nout4 = static_cast<int>(static_cast<long long>(p + 1) * H4 / F) - o0 / 4;
  const int Q = max(1, static_cast<int>(blockDim.x) / max(1, nout4));
  // this thread's first output's x, on its way while the part waits (only the parts write x, each its own slice)
  const bf16 x_first = threadIdx.x < 4 * nout4 ? a.x[o0 + threadIdx.x] : bf16();
  if (threadIdx.x == 0) {
    if (ticket == G - 1) {
      // every row is written and acquired (the ticket's chain of arrivals): the reset, released with them
      asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(a.counter), "r"(0u) : "memory");
    } else {
      for (;;) {  // an acquire of the last arrival's ticket (G) or of its reset (0), and so of every row
        const unsigned v = ld_acquire(a.counter);
        if (v >= static_cast<unsigned>(G) || v <= static_cast<unsigned>(ticket)) break;
      }
    }
  }
  __syncthreads();
  if constexpr (TRACE) step_stamp(a.trace, kStMlpReleased);
  float4* red4 = reinterpret_cast<float4*>(red);
  for (int item = threadIdx.x; item < nout4 * Q; item += blockDim.x) {
    const int o4 = item % nout4, q = item / nout4;
    const float4* col = reinterpret_cast<const float4*>(a.acc + o0) + o4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r0 = q; r0 < G; r0 += 4 * Q) {  // 4 rows' loads in flight, added in row order
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int r = r0 + u * Q;
        v[u] = r < G ? __ldcg(col + static_cast<size_t>(r) * H4) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        sum.x += v[u].x;
        sum.y += v[u].y;
        sum.z += v[u].z;
        sum.w += v[u].w;
      }
    }
    red4[item] = sum;
  }
  __syncthreads();
  const float* redf = red;
  for (int o = threadIdx.x; o < 4 * nout4; o += blockDim.x) {
    float sum = 0.f;
    for (int q = 0; q < Q; ++q) sum += redf[(q * nout4 + o / 4) * 4 + o % 4];
    const bf16 v = residual_value(o == threadIdx.x ? x_first : a.x[o0 + o], sum);
    a.x[o0 + o] = v;
    if (a.tap != nullptr) a.tap[o0 + o] = v;
  }
  if constexpr (TRACE) step_stamp(a.trace, kStEnd);
}

// SEG: H < 256, several groups a warp; its loops run to group 0's row counts (the most) in every thread, so that a
// warp's lanes stay converged for the segment sums. Else a warp lies in one group and its loops stop at its own.
// ORDERED: the ordered sum (a.parts > 0), its own instance so the arrival-order kernel keeps its registers.
// TRACE: the diagnostic stamps (Args::trace, step_trace.h), compiled only into the traced (ordered) instances.
template <bool SEG, bool ORDERED, bool TRACE = false>
__global__ void __launch_bounds__(kMaxThreads, 1) mlp_kernel(Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // vector reductions need sm_90; the host never launches it there (gemv_mlp_takes)
#else
  extern __shared__ __align__(16) float smem[];
  const int H = a.H, I = a.I, nvec = H / 8, wpg = SEG ? 1 : nvec / 32, groups = a.groups, seg = SEG ? nvec : 32;
  const int c = threadIdx.x % nvec, g = threadIdx.x / nvec, lane = threadIdx.x & 31, wg = (threadIdx.x % nvec) >> 5;
  const int G = gridDim.x, b = blockIdx.x;
  const int i0 = static_cast<int>(static_cast<long long>(b) * I / G);
  const int n = static_cast<int>(static_cast<long long>(b + 1) * I / G) - i0;
  float* part = smem;                                  // [2 n][wpg]
  float* actv = part + static_cast<size_t>(2 * a.max_n) * wpg;  // [n]
  float* grp = actv + a.max_n;                         // [groups - 1][nvec][8]
  float* scratch = grp + static_cast<size_t>(groups - 1) * H;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  if constexpr (TRACE) {
    step_stamp(a.trace, kStStart);
    step_stamp_sm(a.trace);
  }

  // this thread's rows: list index g + k * groups, k < n1 (phase 1), k < n2 (phase 2); the loops run to k1, k2
  const int n1 = (2 * n - g + groups - 1) / groups, n2 = (n - g + groups - 1) / groups;
  const int k1 = SEG ? (2 * n + groups - 1) / groups : n1, k2 = SEG ? (n + groups - 1) / groups : n2;
  auto gu_row = [&](int k) {
    const int r = g + k * groups;
    return a.Wgu + (static_cast<int64_t>(r < n ? i0 + r : I + i0 + r - n)) * H + static_cast<int64_t>(c) * 8;
  };
  auto d_row = [&](int k) {
    return a.WdT + static_cast<int64_t>(i0 + g + k * groups) * H + static_cast<int64_t>(c) * 8;
  };
  uint4 cur[kBatch], nxt[kBatch];
  auto load1 = [&](uint4(&w)[kBatch], int k0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) w[j] = k0 + j < n1 ? ld_stream(gu_row(k0 + j)) : zero;
  };
  auto load2 = [&](uint4(&w)[kBatch], int k0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) w[j] = k0 + j < n2 ? ld_stream(d_row(k0 + j)) : zero;
  };
  load1(cur, 0);
  if constexpr (TRACE) step_stamp(a.trace, kStIssued);
  pdl_wait();
  if constexpr (TRACE) step_stamp(a.trace, kStWaited);
  const uint4 xc = __ldg(reinterpret_cast<const uint4*>(a.x) + c);
  const float xf[8] = {lo_f(xc.x), hi_f(xc.x), lo_f(xc.y), hi_f(xc.y), lo_f(xc.z), hi_f(xc.z), lo_f(xc.w), hi_f(xc.w)};
  const float rf = rsqrtf(block_sum(g == 0 ? sumsq8(xc, 0.f) : 0.f, scratch) / static_cast<float>(H) + a.eps);

  // phase 1: gate and up rows
  for (int k0 = 0; k0 < k1; k0 += kBatch) {
    if (k0 + kBatch < k1)
      load1(nxt, k0 + kBatch);
    else
      load2(nxt, 0);  // phase 2's first batch, before the barrier
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (k0 + j >= k1) break;
      if constexpr (SEG) {
        const float p = segment_sum(dot8(cur[j], xf, 0.f), seg);
        if (lane % seg == 0 && k0 + j < n1) part[static_cast<size_t>(g + (k0 + j) * groups) * wpg + wg] = p;
      } else {
        const float p = warp_sum(dot8(cur[j], xf, 0.f));
        if (lane == 0) part[static_cast<size_t>(g + (k0 + j) * groups) * wpg + wg] = p;
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) cur[j] = nxt[j];
  }
  __syncthreads();
  if constexpr (TRACE) step_stamp(a.trace, kStMlpPhase1);
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float gate = 0.f, up = 0.f;
    for (int w = 0; w < wpg; ++w) {
      gate += part[static_cast<size_t>(j) * wpg + w];
      up += part[static_cast<size_t>(n + j) * wpg + w];
    }
    actv[j] = to_f(swiglu_value(gate * rf, up * rf));
  }
  __syncthreads();
  if constexpr (TRACE) step_stamp(a.trace, kStMlpSwiglu);

  // phase 2: this thread's 8 outputs over its rows of W_dT
  float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int k0 = 0; k0 < k2; k0 += kBatch) {
    if (k0 + kBatch < k2) load2(nxt, k0 + kBatch);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (k0 + j >= k2) break;
      const float av = !SEG || k0 + j < n2 ? actv[g + (k0 + j) * groups] : 0.f;  // SEG: past n2 the row is zeros
      const uint4 w = cur[j];
      s[0] = fmaf(lo_f(w.x), av, s[0]);
      s[1] = fmaf(hi_f(w.x), av, s[1]);
      s[2] = fmaf(lo_f(w.y), av, s[2]);
      s[3] = fmaf(hi_f(w.y), av, s[3]);
      s[4] = fmaf(lo_f(w.z), av, s[4]);
      s[5] = fmaf(hi_f(w.z), av, s[5]);
      s[6] = fmaf(lo_f(w.w), av, s[6]);
      s[7] = fmaf(hi_f(w.w), av, s[7]);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) cur[j] = nxt[j];
  }
  // every weight of this block is read: the next kernel may launch
  if constexpr (TRACE) step_stamp(a.trace, kStMlpPhase2);
  pdl_trigger();
  if (groups > 1) {
    if (g > 0)
#pragma unroll
      for (int e = 0; e < 8; ++e) grp[(static_cast<size_t>(g - 1) * nvec + c) * 8 + e] = s[e];
    __syncthreads();
    if (g == 0)
      for (int h = 1; h < groups; ++h)
#pragma unroll
        for (int e = 0; e < 8; ++e) s[e] += grp[(static_cast<size_t>(h - 1) * nvec + c) * 8 + e];
  }
  if constexpr (ORDERED) {
    // its partial sums over the phase buffers (read before its first barrier)
    ordered_sum<TRACE>(a, s, c, g, b, G, smem);
    return;
  }
  if (g == 0 && n > 0) {
    float* f = a.acc + static_cast<size_t>(c) * 8;
    red_add4(f, s[0], s[1], s[2], s[3]);
    red_add4(f + 4, s[4], s[5], s[6], s[7]);
  }
  // the arrival; the last block adds the accumulator into x and zeroes it and the counter
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(a.counter, 1u) == static_cast<unsigned>(G - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (g == 0) {
    float4* accv = reinterpret_cast<float4*>(a.acc) + 2 * c;
    const float4 lo = __ldcg(accv), hi = __ldcg(accv + 1);
    __stcg(accv, make_float4(0.f, 0.f, 0.f, 0.f));
    __stcg(accv + 1, make_float4(0.f, 0.f, 0.f, 0.f));
    const float sum[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const uint32_t xd[4] = {xc.x, xc.y, xc.z, xc.w};  // x's chunk (xf is not kept live through phase 2)
    float out[8];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      out[2 * e] = to_f(residual_value(to_b(lo_f(xd[e])), sum[2 * e]));
      out[2 * e + 1] = to_f(residual_value(to_b(hi_f(xd[e])), sum[2 * e + 1]));
    }
    store8(a.x + static_cast<size_t>(c) * 8, out);
    if (a.tap != nullptr) store8(a.tap + static_cast<size_t>(c) * 8, out);
  }
  if (threadIdx.x == 0) *a.counter = 0u;  // every block has arrived: the next launch, of any grid, counts from zero
#endif
}

struct Layout {
  int blocks = 0, threads = 0, groups = 0, max_n = 0, parts = 0;
  size_t smem = 0;
};

// 0 (the default): as many parts as let each thread's rows be one batch of 4 float4 loads (layout_of)
int parts_from_env() {
  static const int parts = env_int("SPECPRESS_GEMV_MLP_PARTS", 0, 1024, 0, "0 (one batch a thread) to 1024");
  return parts;
}

// The launch's shape for H and I, and whether the device takes it (false: a shape it refuses; e: a failed query).
cudaError_t layout_of(int H, int I, bool ordered, Layout& l, bool& ok) {
  ok = false;
  const int nvec = H / 8;
  if (H < 8 || H % 8 != 0 || !(32 % nvec == 0 || nvec % 32 == 0) || nvec > kMaxThreads || I < 1) return cudaSuccess;
  int sms = 0, dev = 0, cc_major = 0, smem_max = 0;
  cudaError_t e = sm_count(sms);
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return e;
  l.groups = kMaxThreads / nvec;
  l.threads = l.groups * nvec;
  l.blocks = std::min(sms, I);
  l.max_n = (I + l.blocks - 1) / l.blocks;
  if (ordered) {
    // a part's thread (o4, q) adds rows q, q + Q, ..: one batch of 4 loads where Q >= G / 4, so a part takes at
    // most threads / ceil(G / 4) outputs of 4 (34 parts at Qwen3-4B, 69 at -8B)
    const int per_part = std::max(1, l.threads / ((l.blocks + 3) / 4));
    const int one_batch = (H / 4 + per_part - 1) / per_part;
    l.parts = std::clamp(parts_from_env() > 0 ? parts_from_env() : one_batch, 1, l.blocks);
  }
  // the ordered sum's partials reuse the phase buffers: 4 max(threads, outputs of a part / 4 + 1) floats
  const size_t red =
      l.parts > 0 ? 4 * static_cast<size_t>(std::max(l.threads, (H / 4 + l.parts - 1) / l.parts + 1)) : 0;
  l.smem = std::max(smem_floats(H, l.groups, l.max_n), red) * sizeof(float);
  ok = cc_major >= 9 && l.smem <= static_cast<size_t>(smem_max);
  return cudaSuccess;
}

}  // namespace

size_t gemv_mlp_acc_floats(int H, int I, bool ordered) {
  Layout l;
  bool ok = false;
  if (layout_of(H, I, ordered, l, ok) != cudaSuccess || !ok) return 0;
  return static_cast<size_t>(l.parts > 0 ? l.blocks : 1) * H;
}

int gemv_mlp_ordered_parts(int H, int I) {
  Layout l;
  bool ok = false;
  if (layout_of(H, I, true, l, ok) != cudaSuccess || !ok) return 0;
  return l.parts;
}

bool gemv_mlp_takes(int H, int I) {
  Layout l;
  bool ok = false;
  return layout_of(H, I, false, l, ok) == cudaSuccess && ok;
}

cudaError_t gemv_mlp(__nv_bfloat16* x, const __nv_bfloat16* Wgu, const __nv_bfloat16* WdT, __nv_bfloat16* tap,
                     float* acc, unsigned* counter, int H, int I, float eps, cudaStream_t stream, bool ordered,
                     unsigned long long* trace) {
  Layout l;
  bool ok = false;
  if (cudaError_t e = layout_of(H, I, ordered, l, ok); e != cudaSuccess) return e;
  if (!ok || acc == nullptr || counter == nullptr) return cudaErrorInvalidValue;
  const bool traced = ordered && trace != nullptr;  // the arrival-order form has no traced instance
  const int instance = (H < 256 ? 1 : 0) + (ordered ? 2 : 0) + (traced ? 2 : 0);
  void (*const kernels[6])(Args) = {mlp_kernel<false, false>,      mlp_kernel<true, false>,
                                    mlp_kernel<false, true>,       mlp_kernel<true, true>,
                                    mlp_kernel<false, true, true>, mlp_kernel<true, true, true>};
  auto* kernel = kernels[instance];
  static size_t smem_set[6] = {0, 0, 0, 0, 0, 0};  // the dynamic shared memory each instance's attribute allows
  if (l.smem > smem_set[instance]) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem));
    if (e != cudaSuccess) return e;
    smem_set[instance] = l.smem;
  }
  Args a;
  a.x = x;
  a.Wgu = Wgu;
  a.WdT = WdT;
  a.tap = tap;
  a.acc = acc;
  a.counter = counter;
  a.H = H;
  a.I = I;
  a.groups = l.groups;
  a.max_n = l.max_n;
  a.eps = eps;
  a.parts = l.parts;
  a.trace = traced ? trace : nullptr;
  return launch_kernel(kernel, l.blocks, l.threads, l.smem, stream, a);
}

}  // namespace specpress::kernels
