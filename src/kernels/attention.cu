// attention.cu — see attention.h. Two kernels:
//
// Small T (decode T = 1, verify / draft T <= 16): the "decode" kernel, on tensor cores. Block (kv head, row
// group, key split) of W warps: 8 by default, or 4 (AttentionArgs::block_warps; launch_decode). The rows of a kv
// head's group are (query t, head of the group), R = T * nq / nkv of them, cut into groups of 16 (the M of an
// m16n8k16 MMA; decode's 4 rows at Qwen3 shapes leave 12 zero rows), so every K/V tile a block streams
// serves all of its rows. The split's keys stream through shared memory 64 at a time in two cp.async stages
// (16-byte copies, the next tile in flight while this one is computed). The query rows are staged in shared
// memory (copied from q, or, fused, transformed there by the q/k-norm + RoPE of qk_norm_rope.h from the qkv
// projection; the fused kernel also transforms the step's new keys into its tiles and writes them to the
// cache) and loaded as MMA A fragments (once with 4 warps, at each tile with 8). Warp w takes keys
// (64 / W) w .. (64 / W)(w + 1) - 1 of each tile and runs its own online softmax over them: S = Q·K^T with K
// by ldmatrix, masking and exp on the score fragments, then O += P·V with P re-packed to bf16 as the A
// operand (m16n8k16 over 16 keys, m16n8k8 over 8) and V by transposed ldmatrix; fp32 accumulators
// throughout. The warps merge their (m, l, O) through shared memory at the end. With 8 warps a warp's
// serial part, its rows' and new keys' q/k-norm + RoPE and its keys of each tile, is half as long. The
// number of active splits follows the live length S read from device memory (at least 128 keys per split:
// the fastest in fast_perf --attention at 512-2048 keys, for 4 rows a block as for 16); blocks of
// inactive splits exit at once, so a graph captured with a fixed grid does only the work of the current
// length. The grid is capped at one wave of resident blocks (3 per SM of 4 warps, 2 of 8, at head_dim 128).
// With one active split a block writes its rows directly; otherwise it leaves (m, l, unnormalised o) in the
// workspace, and the last block of its (kv head, row group) to finish combines only the active splits: a
// thread per 8 dims of an output row loads 8 splits' (m, l) and partial rows at once (one L2 round trip for up
// to 8 splits) and merges them with a running max. The warps' partial outputs meet in shared memory rows
// padded against bank conflicts.
//
// Large T (prefill): the tiled kernel. Block (kv head, key split, query tile): the tile holds R <= 64 rows
// (query t, head of the group), keys stream through shared memory 64 at a time with an online softmax in
// fp32. Thread (ty, tx) of 16 x 16 owns rows ty*4..ty*4+3: scores for keys tx + 16j, output dims
// tx*D..tx*D+D-1 (D = head_dim / 16). With several splits each block leaves (m, l, unnormalised o) in the
// workspace; the last block of a (kv head, query tile) to finish combines them (threadfence reduction)
// and re-zeroes its counter.
#include <algorithm>
#include <cfloat>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/norm_rope_row.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kThreads = 256, kRows = 64, kKeys = 64;

constexpr size_t align16(size_t x) { return (x + 15) / 16 * 16; }
template <int HD> struct Smem {
  static constexpr int QS = HD + 2, KS = HD + 2, SS = kKeys + 1;
  static constexpr size_t q_off = 0;
  static constexpr size_t k_off = align16(q_off + sizeof(float) * kRows * QS);
  static constexpr size_t v_off = align16(k_off + sizeof(bf16) * kKeys * KS);
  static constexpr size_t s_off = align16(v_off + sizeof(bf16) * kKeys * HD);
  static constexpr size_t stat_off = align16(s_off + sizeof(float) * kRows * SS);
  static constexpr size_t bytes = stat_off + sizeof(float) * 3 * kRows;
};

template <int N> __device__ __forceinline__ void load_n(const bf16* p, float* v) {
  if constexpr (N == 8) {
    load8(p, v);
  } else {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p + i));
      v[i] = f.x;
      v[i + 1] = f.y;
    }
  }
}

// One online-softmax step for one row of a 64-key score tile, by a whole warp (lane owns keys lane and
// lane + 32): the new running max, the scores replaced by p = exp(s - m_new) (exp(-inf) = 0 for masked
// keys), and, from lane 0, the running max, sum and the factor alpha that rescales the row's output.
// Used by the tiled (prefill) kernel; every lane of the warp must call it (warp reductions).
__device__ __forceinline__ void softmax_row_update(float* s, float* m, float* l, float* alpha_out, int lane) {
  const float s0 = s[lane], s1 = s[lane + 32];
  const float m_old = *m;
  const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
  const float p0 = __expf(s0 - m_new), p1 = __expf(s1 - m_new);  // exp(-inf) = 0 for masked keys
  const float ps = warp_sum(p0 + p1);
  s[lane] = p0;
  s[lane + 32] = p1;
  if (lane == 0) {
    const float alpha = __expf(m_old - m_new);
    *m = m_new;
    *l = *l * alpha + ps;
    *alpha_out = alpha;
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
  pdl_begin();
  using L = Smem<HD>;
  constexpr int D = HD / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  float* Qs = reinterpret_cast<float*>(smem + L::q_off);
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::k_off);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::v_off);
  float* Ss = reinterpret_cast<float*>(smem + L::s_off);
  float* row_m = reinterpret_cast<float*>(smem + L::stat_off);
  float* row_l = row_m + kRows;
  float* row_alpha = row_l + kRows;
  __shared__ int is_last;

  const int kvh = blockIdx.x, split = blockIdx.y, qtile = blockIdx.z;
  const int G = a.nq / a.nkv, QT = kRows / G, R = QT * G;
  const int t0 = qtile * QT;
  const int T = a.T;
  const int S = *a.kv_len_base + a.kv_len_add;
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const float scale = a.scale > 0.f ? a.scale : rsqrtf(static_cast<float>(HD));
  const int64_t cap = a.cache_capacity;
  const bf16* kc = a.k_cache + static_cast<int64_t>(kvh) * cap * HD;
  const bf16* vc = a.v_cache + static_cast<int64_t>(kvh) * cap * HD;

  for (int idx = tid; idx < kRows * (HD / 2); idx += kThreads) {
    const int r = idx / (HD / 2), d = (idx % (HD / 2)) * 2;
    const int t = t0 + r / G, h = kvh * G + r % G;
    float2 v = make_float2(0.f, 0.f);
    if (r < R && t < T)
      v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(a.q + (static_cast<int64_t>(t) * a.nq + h) * HD + d));
    Qs[r * L::QS + d] = v.x;
    Qs[r * L::QS + d + 1] = v.y;
  }
  if (tid < kRows) {
    row_m[tid] = -FLT_MAX;  // finite "minus infinity": exp(m_old - m_new) stays 0, never NaN
    row_l[tid] = 0.f;
    row_alpha[tid] = 1.f;
  }

  // Keys this tile can see: all S, or (causal) up to the last query row's diagonal.
  const int t_last = min(t0 + QT, T) - 1;
  const int limit = a.causal ? min(S, S - T + t_last + 1) : S;
  int chunk = (limit + a.splits - 1) / a.splits;
  chunk = (chunk + kKeys - 1) / kKeys * kKeys;
  const int beg = split * chunk, end = min(limit, beg + chunk);

  float o[4][D];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < D; ++j) o[i][j] = 0.f;
  const bool active = ty * 4 < R;
  __syncthreads();

  for (int k0 = beg; k0 < end; k0 += kKeys) {
    const int nk = min(kKeys, end - k0);
    for (int idx = tid; idx < kKeys * (HD / 8); idx += kThreads) {
      const int kr = idx / (HD / 8), c = (idx % (HD / 8)) * 8;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (kr < nk) {
        kv = *reinterpret_cast<const uint4*>(kc + static_cast<int64_t>(k0 + kr) * HD + c);
        vv = *reinterpret_cast<const uint4*>(vc + static_cast<int64_t>(k0 + kr) * HD + c);
      }
      uint32_t* kd = reinterpret_cast<uint32_t*>(Ks + kr * L::KS + c);
      kd[0] = kv.x;
      kd[1] = kv.y;
      kd[2] = kv.z;
      kd[3] = kv.w;
      *reinterpret_cast<uint4*>(Vs + kr * HD + c) = vv;
    }
    __syncthreads();

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
    if (active) {
#pragma unroll 4
      for (int d = 0; d < HD; d += 2) {
        float2 qv[4], kv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) qv[i] = *reinterpret_cast<const float2*>(Qs + (ty * 4 + i) * L::QS + d);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          kv[j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Ks + (tx + 16 * j) * L::KS + d));
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(qv[i].x, kv[j].x, fmaf(qv[i].y, kv[j].y, acc[i][j]));
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i, t = t0 + r / G;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kk = tx + 16 * j;
        const bool ok = r < R && t < T && kk < nk && (!a.causal || k0 + kk <= S - T + t);
        Ss[r * L::SS + kk] = ok ? acc[i][j] * scale : -INFINITY;
      }
    }
    __syncthreads();

    {  // online softmax: warp w owns rows 8w .. 8w+7; lane owns keys lane, lane + 32
      const int warp = tid >> 5, lane = tid & 31;
#pragma unroll
      for (int rr = 0; rr < kRows / (kThreads / 32); ++rr) {
        const int r = warp * (kRows / (kThreads / 32)) + rr;
        softmax_row_update(Ss + r * L::SS, row_m + r, row_l + r, row_alpha + r, lane);
      }
    }
    __syncthreads();

    if (active) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float al = row_alpha[ty * 4 + i];
#pragma unroll
        for (int j = 0; j < D; ++j) o[i][j] *= al;
      }
      for (int kk = 0; kk < nk; ++kk) {
        float v[D];
        load_n<D>(Vs + kk * HD + tx * D, v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float p = Ss[(ty * 4 + i) * L::SS + kk];
#pragma unroll
          for (int j = 0; j < D; ++j) o[i][j] = fmaf(p, v[j], o[i][j]);
        }
      }
    }
    __syncthreads();
  }

  float* ws_o = static_cast<float*>(a.workspace);
  float2* ws_ml = reinterpret_cast<float2*>(ws_o + static_cast<size_t>(a.splits) * T * a.nq * HD);
  if (active) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i, t = t0 + r / G, h = kvh * G + r % G;
      if (r >= R || t >= T) continue;
      if (a.splits == 1) {
        const float l = row_l[r], inv = l > 0.f ? 1.f / l : 0.f;
        bf16* dst = a.out + (static_cast<int64_t>(t) * a.nq + h) * HD + tx * D;
#pragma unroll
        for (int j = 0; j < D; ++j) dst[j] = to_b(o[i][j] * inv);
      } else {
        const size_t base = (static_cast<size_t>(split) * T + t) * a.nq + h;
        float* dst = ws_o + base * HD + tx * D;
#pragma unroll
        for (int j = 0; j < D; ++j) dst[j] = o[i][j];
        if (tx == 0) ws_ml[base] = make_float2(row_m[r], row_l[r]);
      }
    }
  }
  if (a.splits == 1) return;

  __threadfence();
  __syncthreads();
  unsigned int* counter = a.counters + kvh * gridDim.z + qtile;
  if (tid == 0) is_last = atomicAdd(counter, 1u) == static_cast<unsigned int>(a.splits - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // Per-row split weights exp(m_s - M) / L into the (now free) score tile, then the weighted sum.
  for (int r = tid; r < R; r += kThreads) {
    const int t = t0 + r / G, h = kvh * G + r % G;
    if (t >= T) continue;
    float M = -FLT_MAX;
    for (int s = 0; s < a.splits; ++s) M = fmaxf(M, __ldcg(&ws_ml[(static_cast<size_t>(s) * T + t) * a.nq + h]).x);
    float l_sum = 0.f;
    for (int s = 0; s < a.splits; ++s) {
      const float2 ml = __ldcg(&ws_ml[(static_cast<size_t>(s) * T + t) * a.nq + h]);
      const float w = __expf(ml.x - M);
      Ss[r * L::SS + s] = w;
      l_sum += ml.y * w;
    }
    const float inv = l_sum > 0.f ? 1.f / l_sum : 0.f;
    for (int s = 0; s < a.splits; ++s) Ss[r * L::SS + s] *= inv;
  }
  __syncthreads();
  for (int idx = tid; idx < R * HD; idx += kThreads) {
    const int r = idx / HD, d = idx % HD, t = t0 + r / G, h = kvh * G + r % G;
    if (t >= T) continue;
    float acc = 0.f;
    for (int s = 0; s < a.splits; ++s)
      acc += __ldcg(&ws_o[((static_cast<size_t>(s) * T + t) * a.nq + h) * HD + d]) * Ss[r * L::SS + s];
    a.out[(static_cast<int64_t>(t) * a.nq + h) * HD + d] = to_b(acc);
  }
  if (tid == 0) *counter = 0u;
}

template <int HD> cudaError_t launch(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t bytes = Smem<HD>::bytes;
  static bool configured = false;  // the attribute is per kernel, set before the first launch
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(attention_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const int G = a.nq / a.nkv, QT = kRows / G;
  dim3 grid(a.nkv, a.splits, (a.T + QT - 1) / QT);
  const LcSkipScope lc(kLcAttention);
  return launch_kernel(attention_kernel<HD>, grid, kThreads, bytes, stream, a);
}


// ---- small-T ("decode") kernel
constexpr int kDecRows = 16, kDecKeys = 64, kMaxSplits = 64;
constexpr int kDecMaxT = kAttentionSmallT;  // T above this goes to the tiled kernel

template <int HD, int WARPS> struct DecSmem {
  static constexpr int KS = HD + 8;  // K and V tile row stride (bf16): 16-byte rows, conflict-free ldmatrix
  static constexpr size_t tile_bytes = sizeof(bf16) * kDecKeys * KS;
  static constexpr size_t stage_bytes = 2 * tile_bytes;  // K then V: one of the two cp.async stages
  // After the key loop the stages hold the warps' partial outputs, [warp][row][OS] fp32. The row stride is
  // padded by 8 floats: a warp's float2 stores of its fragments (rows g, 8 groups; 4 lanes a row) then fall
  // on 32 distinct banks in each half-warp instead of 8 lanes on each bank (an 8-way conflict). With 8 warps
  // this is exactly the two stages' size.
  static constexpr int OS = HD + 8;
  static constexpr size_t o_bytes = sizeof(float) * WARPS * kDecRows * OS;
  static constexpr size_t loop_bytes = 2 * stage_bytes > o_bytes ? 2 * stage_bytes : o_bytes;
  static constexpr size_t stat_off = align16(loop_bytes);                        // [warp][row] m, then l
  // The query rows (bf16 [row][KS]), staged for ldmatrix.
  static constexpr size_t w_off = align16(stat_off + sizeof(float) * 2 * WARPS * kDecRows);
  static constexpr size_t q_bytes = sizeof(bf16) * kDecRows * KS;
  static constexpr size_t bytes = w_off + q_bytes;
};

// 16-byte global -> shared copy; with ok == false nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool ok) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// Two bf16 in one word (lo in the low half) and back.
__device__ __forceinline__ uint32_t pack2(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}
__device__ __forceinline__ bf16 lo_of(uint32_t w) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(w & 0xffffu));
}
__device__ __forceinline__ bf16 hi_of(uint32_t w) { return __ushort_as_bfloat16(static_cast<unsigned short>(w >> 16)); }

// Active splits and keys per split for S keys, identical in every block of a launch.
__device__ __forceinline__ void active_splits(int S, int grid_splits, int min_split_keys, int& n_act, int& chunk) {
  const int min_chunk = min_split_keys > 0 ? min_split_keys : 128;
  n_act = min(grid_splits, max(1, (S + min_chunk - 1) / min_chunk));
  chunk = max(1, (S + n_act - 1) / n_act);
  if (chunk > kDecKeys) chunk = (chunk + kDecKeys - 1) / kDecKeys * kDecKeys;  // whole tiles, no 2-key tail tile
  n_act = max(1, (S + chunk - 1) / chunk);
}

// TRACE: the diagnostic stamps (AttentionArgs::trace, step_trace.h), compiled only into the traced instances.
template <int HD, int WARPS, bool TRACE = false>
__global__ void __launch_bounds__(32 * WARPS, WARPS == 4 ? 3 : 2) decode_attention_kernel(AttentionArgs a) {
  // Fused (a.qkv set): this step's keys come from a.qkv, the previous kernel's output, and the cache rows
  // before them were written by kernels that have completed by the time this one starts (under PDL the
  // previous kernel only lets this one in after its own wait; after a launch-completion edge, graph_edges.h,
  // that kernel started only once everything before it had completed), so the first two tiles of old keys are
  // loaded before the wait. Unfused, q and the cache may both come from the previous kernel: wait first.
  const bool fused = a.qkv != nullptr;
  if constexpr (TRACE) {
    step_stamp(a.trace, kStStart);
    step_stamp_sm(a.trace);
  }
  if (!fused) pdl_begin();
  using L = DecSmem<HD, WARPS>;
  constexpr int kBlockThreads = 32 * WARPS, KW = kDecKeys / WARPS;  // KW: a warp's keys of each tile (16 or 8)
  constexpr int KSTEPS = HD / 16, NT = HD / 8;  // k-steps of Q·K^T, 8-dim output tiles of P·V
  extern __shared__ __align__(16) unsigned char smem[];
  float* red_m = reinterpret_cast<float*>(smem + L::stat_off);  // [warp][row]
  float* red_l = red_m + WARPS * kDecRows;
  __shared__ int is_last;

  // Split is the slowest grid dimension: the blocks of active splits are dispatched first, and those of
  // inactive ones, which only read S and exit, take SM slots behind them.
  const int kvh = blockIdx.x, z = blockIdx.y, split = blockIdx.z;
  const int G = a.nq / a.nkv, T = a.T, R = T * G;
  const int r0 = z * kDecRows, rb = min(kDecRows, R - r0);
  const int S = *a.kv_len_base + a.kv_len_add;
  int n_act, chunk;
  active_splits(S, gridDim.z, a.min_split_keys, n_act, chunk);
  if (split >= n_act) {  // beyond the live length: no work, not counted by the combine
    if constexpr (TRACE) step_stamp(a.trace, kStEnd);
    return;
  }
  const int beg = split * chunk, end = min(S, beg + chunk);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const float scale = a.scale > 0.f ? a.scale : rsqrtf(static_cast<float>(HD));
  const int64_t cap = a.cache_capacity;
  const bf16* kc = a.k_cache + static_cast<int64_t>(kvh) * cap * HD;
  const bf16* vc = a.v_cache + static_cast<int64_t>(kvh) * cap * HD;
  // Fused: keys new_beg .. S - 1 are this step's T rows, transformed here from a.qkv rather than read from
  // the cache.
  const int new_beg = fused ? S - T : S;

  const int n_tiles = (end - beg + kDecKeys - 1) / kDecKeys;
  auto issue = [&](int tile) {
    bf16* Ks = reinterpret_cast<bf16*>(smem + (tile & 1) * L::stage_bytes);
    bf16* Vs = Ks + kDecKeys * L::KS;
    const int k0 = beg + tile * kDecKeys;
    for (int idx = tid; idx < kDecKeys * (HD / 8); idx += kBlockThreads) {
      const int kr = idx / (HD / 8), col = (idx % (HD / 8)) * 8;
      const bool ok = k0 + kr < min(end, new_beg);
      const int64_t src = (ok ? static_cast<int64_t>(k0 + kr) : 0) * HD + col;  // stays inside the cache
      cp_async16(Ks + kr * L::KS + col, kc + src, ok);
      cp_async16(Vs + kr * L::KS + col, vc + src, ok);
    }
  };
  // Both stages in flight from the start (fused: before the wait); tile it + 2 goes into tile it's stage
  // once that is consumed. One commit group per tile, empty past the last.
  if (n_tiles > 0) issue(0);
  cp_async_commit();
  if (n_tiles > 1) issue(1);
  cp_async_commit();
  if constexpr (TRACE) step_stamp(a.trace, kStIssued);
  if (fused) pdl_begin();
  if constexpr (TRACE) step_stamp(a.trace, kStWaited);

  // The group's query rows r = (query t, head h) into shared memory: transformed from a.qkv (q/k-norm +
  // RoPE, as qk_norm_rope writes them) or copied from a.q. A row past the group's is zero (its scores are 0
  // and its output is never written). Fused, a warp transforms rows warp + 4 i and this block's new keys
  // warp + 4 i, with every row's loads issued before any row's arithmetic (one round trip, not eight);
  // the keys' K (transformed) and V stay in registers until their tile is in shared memory, and the blocks
  // of row group 0 write them to the cache now.
  // Rows per warp; a lane's elements of a row; its rotation pairs (HD = 32: lanes 0..15 hold one, the rest
  // none).
  constexpr int kPerWarp = kDecRows / WARPS, kElems = HD / 32, kPairs = HD >= 64 ? HD / 64 : 1;
  static_assert(kDecMaxT <= kPerWarp * WARPS, "a warp holds at most kPerWarp new keys");
  bf16* Qs = reinterpret_cast<bf16*>(smem + L::w_off);
  const int key_lo = max(beg, new_beg);  // this block's new keys: key_lo + warp + 4 i < end
  // the warp's new keys as bf16 pairs: word j holds elements lane + 32 j and lane + 32 j + HD / 2
  uint32_t k_new[kPerWarp][kPairs], v_new[kPerWarp][kPairs];
  auto has_pair = [&](int j) { return lane + 32 * j < HD / 2; };
  if (fused) {
    // every load of the phase (rows, their RoPE table rows, the norm weights) before any arithmetic
    const NormRopeWeight q_w = norm_rope_weight(a.q_norm, HD, lane), k_w = norm_rope_weight(a.k_norm, HD, lane);
    NormRopeIn q_in[kPerWarp], k_in[kPerWarp];
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int r = warp + WARPS * i, rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
      const int64_t pos = new_beg + t;
      if (r < rb)
        q_in[i] = norm_rope_load(a.qkv + static_cast<int64_t>(t) * a.ld_qkv + static_cast<int64_t>(h) * HD,
                                 a.rope_cos + pos * HD, a.rope_sin + pos * HD, HD, lane,
                                 a.qkv_row_scale != nullptr ? a.qkv_row_scale[t] : 1.f);
      const int key = key_lo + warp + WARPS * i;
      if (key < end) {
        const bf16* src = a.qkv + static_cast<int64_t>(key - new_beg) * a.ld_qkv;
        const int64_t kpos = key;
        const float f = a.qkv_row_scale != nullptr ? a.qkv_row_scale[key - new_beg] : 1.f;
        k_in[i] = norm_rope_load(src + static_cast<int64_t>(a.nq + kvh) * HD, a.rope_cos + kpos * HD,
                                 a.rope_sin + kpos * HD, HD, lane, f);
        const bf16* vsrc = src + static_cast<int64_t>(a.nq + a.nkv + kvh) * HD + lane;
        auto scaled = [&](bf16 v) { return a.qkv_row_scale != nullptr ? to_b(to_f(v) * f) : v; };
#pragma unroll
        for (int j = 0; j < kPairs; ++j)
          v_new[i][j] = has_pair(j) ? pack2(scaled(vsrc[32 * j]), scaled(vsrc[32 * j + HD / 2])) : 0u;
      }
    }
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int r = warp + WARPS * i;
      bf16* dst = Qs + r * L::KS;
      if (r < rb) {
        norm_rope_finish(q_in[i], q_w, HD, a.eps, lane, [&](int j, bf16 lo, bf16 hi) {
                           dst[lane + 32 * j] = lo;
                           dst[lane + 32 * j + HD / 2] = hi;
                         });
      } else {
        for (int e = 0; e < kElems; ++e) dst[lane + 32 * e] = __float2bfloat16_rn(0.f);
      }
      const int key = key_lo + warp + WARPS * i;
      if (key < end) {
        norm_rope_finish(k_in[i], k_w, HD, a.eps, lane, [&](int j, bf16 lo, bf16 hi) { k_new[i][j] = pack2(lo, hi); });
        if (z == 0) {  // each new key is in exactly one split of row group 0
          bf16* kdst = a.k_cache_out + (static_cast<int64_t>(kvh) * cap + key) * HD;
          bf16* vdst = a.v_cache_out + (static_cast<int64_t>(kvh) * cap + key) * HD;
#pragma unroll
          for (int j = 0; j < kPairs; ++j) {
            if (!has_pair(j)) continue;
            kdst[lane + 32 * j] = lo_of(k_new[i][j]);
            kdst[lane + 32 * j + HD / 2] = hi_of(k_new[i][j]);
            vdst[lane + 32 * j] = lo_of(v_new[i][j]);
            vdst[lane + 32 * j + HD / 2] = hi_of(v_new[i][j]);
          }
        }
      }
    }
  } else {
    for (int r = warp; r < kDecRows; r += WARPS) {
      const int rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
      bf16* dst = Qs + r * L::KS;
      const bf16* src = a.q + (static_cast<int64_t>(t) * a.nq + h) * HD;
      for (int i = lane; i < HD; i += 32) dst[i] = r < rb ? src[i] : __float2bfloat16_rn(0.f);
    }
  }
  __syncthreads();
  if constexpr (TRACE) step_stamp(a.trace, kStQReady);
  // Rows g and g + 8 as the A operand of Q·K^T (ldmatrix tile i: rows (i % 2) * 8 + lane % 8, dims
  // ks * 16 + (i / 2) * 8). Causal: row (t) sees keys <= S - T + t.
  const int li = lane >> 3, lr = lane & 7;
  // 4 warps hold them in registers for the whole key loop; 8 warps (twice the threads, 128 registers a
  // thread) re-load them from shared memory (untouched until the combine) at each tile.
  const bf16* q_frag = Qs + ((li & 1) * 8 + lr) * L::KS + (li >> 1) * 8;  // + ks * 16: k-step ks
  uint32_t qa[KW == 16 ? KSTEPS : 1][4];
  if constexpr (KW == 16) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) ldmatrix_x4(qa[ks], q_frag + ks * 16);
  }
  int row_limit[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + 8 * half, t = (r0 + r) / G;
    row_limit[half] = a.causal && r < rb ? S - T + t : S - 1;
  }

  // Each warp runs its own online softmax over keys 16 w .. 16 w + 15 of every tile: running max m and
  // (per lane, partial) sum l for rows g and g + 8, and the unnormalised output O[NT][4] (D fragments).
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.f, 0.f};  // finite "minus infinity": alpha stays 0, never NaN
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) o[n][j] = 0.f;

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait_1();  // everything but the newest group has landed: tile `it` is in shared memory
    __syncthreads();
    bf16* Ks = reinterpret_cast<bf16*>(smem + (it & 1) * L::stage_bytes);
    bf16* Vs = Ks + kDecKeys * L::KS;
    const int k0 = beg + it * kDecKeys, nk = min(kDecKeys, end - k0), kw = KW * warp;
    if (k0 + nk > new_beg) {  // block-uniform: the tile ends in this step's new keys (fused only)
      // the warp's new keys that fall in this tile, from registers into the zero-filled rows
#pragma unroll
      for (int i = 0; i < kPerWarp; ++i) {
        const int kr = key_lo + warp + WARPS * i - k0;
        if (kr >= 0 && kr < nk) {  // key_lo >= new_beg: always a new key
#pragma unroll
          for (int j = 0; j < kPairs; ++j) {
            if (!has_pair(j)) continue;
            Ks[kr * L::KS + lane + 32 * j] = lo_of(k_new[i][j]);
            Ks[kr * L::KS + lane + 32 * j + HD / 2] = hi_of(k_new[i][j]);
            Vs[kr * L::KS + lane + 32 * j] = lo_of(v_new[i][j]);
            Vs[kr * L::KS + lane + 32 * j + HD / 2] = hi_of(v_new[i][j]);
          }
        }
      }
      __syncthreads();
    }
    if (kw < nk) {  // warp-uniform: this warp's KW keys hold at least one live key
      // Scores S = Q · K^T for the warp's KW keys: KW / 8 tiles of 8 keys. ldmatrix tile i (lanes 8i..8i+7):
      // KW = 16: keys kw + (i / 2) * 8 + lane % 8, dims ks * 16 + (i % 2) * 8; KW = 8: keys kw + lane % 8,
      // dims (ks + i / 2) * 16 + (i % 2) * 8 (two k-steps a load).
      constexpr int J = KW / 8;
      float sc[J][4] = {};
      if constexpr (KW == 16) {
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
          uint32_t kb[4];
          ldmatrix_x4(kb, Ks + (kw + (li >> 1) * 8 + lr) * L::KS + ks * 16 + (li & 1) * 8);
          mma_bf16(sc[0], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], kb[0], kb[1]);
          mma_bf16(sc[J - 1], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], kb[2], kb[3]);
        }
      } else {
        static_assert(KW == 8 && KSTEPS % 2 == 0, "8 keys a warp: an even number of k-steps");
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ks += 2) {
          uint32_t kb[4], q0[4], q1[4];
          ldmatrix_x4(q0, q_frag + ks * 16);
          ldmatrix_x4(q1, q_frag + (ks + 1) * 16);
          ldmatrix_x4(kb, Ks + (kw + lr) * L::KS + (ks + (li >> 1)) * 16 + (li & 1) * 8);
          mma_bf16(sc[0], q0[0], q0[1], q0[2], q0[3], kb[0], kb[1]);
          mma_bf16(sc[0], q1[0], q1[1], q1[2], q1[3], kb[2], kb[3]);
        }
      }
      // Mask, running max, p = exp(s - m) (masked: exp(-inf) = 0), rescale l and O.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e >> 1, key = kw + 8 * j + 2 * c + (e & 1);
          const bool ok = key < nk && k0 + key <= row_limit[half];
          sc[j][e] = ok ? sc[j][e] * scale : -INFINITY;
          mx[half] = fmaxf(mx[half], sc[j][e]);
        }
      float alpha[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
        mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
        const float m_new = fmaxf(m[half], mx[half]);
        alpha[half] = __expf(m[half] - m_new);
        m[half] = m_new;
        l[half] *= alpha[half];
      }
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e >> 1;
          sc[j][e] = __expf(sc[j][e] - m[half]);
          l[half] += sc[j][e];
        }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }
      // O += P · V: P (16 rows x KW keys, bf16) is the A operand straight from the score fragments; V via
      // transposed ldmatrix. KW = 16 (m16n8k16), tile i (lanes 8i..8i+7): keys kw + (i % 2) * 8 + lane % 8,
      // dims (n + i / 2) * 8. KW = 8 (m16n8k8): keys kw + lane % 8, dims (n + i) * 8.
      const uint32_t pa0 = pack_bf16(sc[0][0], sc[0][1]), pa1 = pack_bf16(sc[0][2], sc[0][3]);
      if constexpr (KW == 16) {
        const uint32_t pa2 = pack_bf16(sc[J - 1][0], sc[J - 1][1]), pa3 = pack_bf16(sc[J - 1][2], sc[J - 1][3]);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, Vs + (kw + (li & 1) * 8 + lr) * L::KS + (n + (li >> 1)) * 8);
          mma_bf16(o[n], pa0, pa1, pa2, pa3, vb[0], vb[1]);
          mma_bf16(o[n + 1], pa0, pa1, pa2, pa3, vb[2], vb[3]);
        }
      } else {
        static_assert(NT % 4 == 0, "four 8-dim output tiles a V load");
#pragma unroll
        for (int n = 0; n < NT; n += 4) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, Vs + (kw + lr) * L::KS + (n + li) * 8);
#pragma unroll
          for (int i = 0; i < 4; ++i) mma_bf16_k8(o[n + i], pa0, pa1, vb[i]);
        }
      }
    }
    __syncthreads();  // the stage is rewritten next
    if (it + 2 < n_tiles) issue(it + 2);
    cp_async_commit();
  }

  if constexpr (TRACE) step_stamp(a.trace, kStTiles);
  // Merge the warps: each row's max over the warps, each warp's weight exp(m_w - M), and the weighted sums of
  // l and O (O through shared memory, the stages being free now), in warp order.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
    if (c == 0) {
      red_m[warp * kDecRows + g + 8 * half] = m[half];
      red_l[warp * kDecRows + g + 8 * half] = l[half];
    }
  }
  __syncthreads();
  float* Ored = reinterpret_cast<float*>(smem);  // [warp][row][L::OS]
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + 8 * half;
    float M = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, red_m[w * kDecRows + r]);
    const float f = __expf(m[half] - M);
#pragma unroll
    for (int n = 0; n < NT; ++n)
      *reinterpret_cast<float2*>(Ored + (warp * kDecRows + r) * L::OS + n * 8 + 2 * c) =
          make_float2(o[n][2 * half] * f, o[n][2 * half + 1] * f);
  }
  __syncthreads();
  // Thread = (row, 4 output dims) items: the row's M and L, the sum of the warps' scaled O.
  const size_t split_rows = static_cast<size_t>(a.nkv) * R;  // workspace rows per split = T * nq
  float* ws_o = static_cast<float*>(a.workspace);
  float2* ws_ml = reinterpret_cast<float2*>(ws_o + static_cast<size_t>(a.splits) * split_rows * HD);  // as allocated
  for (int item = tid; item < rb * (HD / 4); item += kBlockThreads) {
    const int r = item / (HD / 4), d = (item % (HD / 4)) * 4;
    float M = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, red_m[w * kDecRows + r]);
    float Lsum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      Lsum = fmaf(red_l[w * kDecRows + r], __expf(red_m[w * kDecRows + r] - M), Lsum);
      const float4 v = *reinterpret_cast<const float4*>(Ored + (w * kDecRows + r) * L::OS + d);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const int rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
    if (n_act == 1) {
      const float inv = Lsum > 0.f ? 1.f / Lsum : 0.f;
      uint2 u;
      u.x = pack_bf16(acc.x * inv, acc.y * inv);
      u.y = pack_bf16(acc.z * inv, acc.w * inv);
      *reinterpret_cast<uint2*>(a.out + (static_cast<int64_t>(t) * a.nq + h) * HD + d) = u;
    } else {
      const size_t row = static_cast<size_t>(split) * split_rows + static_cast<size_t>(kvh) * R + rr;
      *reinterpret_cast<float4*>(ws_o + row * HD + d) = acc;
      if (d == 0) ws_ml[row] = make_float2(M, Lsum);
    }
  }
  if constexpr (TRACE) step_stamp(a.trace, kStPartial);  // thread 0's items stored (no barrier before it)
  if (n_act == 1) {
    if constexpr (TRACE) {
      step_stamp_value(a.trace, kStLast, 0);  // written every launch: a graph's replays rewrite the same rows
      step_stamp(a.trace, kStEnd);
    }
    return;
  }

  __threadfence();
  __syncthreads();
  unsigned int* counter = a.counters + kvh * gridDim.y + z;
  if (tid == 0) is_last = atomicAdd(counter, 1u) == static_cast<unsigned int>(n_act - 1);
  __syncthreads();
  if constexpr (TRACE) {
    step_stamp(a.trace, kStCounted);
    step_stamp_value(a.trace, kStLast, is_last ? 1 : 0);  // every launch: a graph's replays rewrite the same rows
  }
  if (!is_last) {
    if constexpr (TRACE) step_stamp(a.trace, kStEnd);
    return;
  }
  __threadfence();
  // The combine in one round trip (for up to kChunk splits): a thread takes (row, 8 dims) items and loads the
  // (m, l) and partial rows of kChunk splits together, then folds them in with a running max M:
  // out = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s.
  constexpr int kChunk = 8;
  const size_t split_stride = split_rows * HD;
  const float4 zero4 = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int item = tid; item < rb * (HD / 8); item += kBlockThreads) {
    const int r = item / (HD / 8), q8 = item % (HD / 8);
    const int rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
    const size_t row = static_cast<size_t>(kvh) * R + rr;
    const float* src = ws_o + row * HD + q8 * 8;
    float M = -FLT_MAX, l_sum = 0.f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
    for (int s0 = 0; s0 < n_act; s0 += kChunk) {
      float2 ml[kChunk];
      float4 lo[kChunk], hi[kChunk];
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {  // a split past n_act: m = -FLT_MAX, l = 0, o = 0 (no weight)
        const bool ok = s0 + u < n_act;
        const size_t s = static_cast<size_t>(s0 + u);
        ml[u] = ok ? __ldcg(&ws_ml[s * split_rows + row]) : make_float2(-FLT_MAX, 0.f);
        lo[u] = ok ? __ldcg(reinterpret_cast<const float4*>(src + s * split_stride)) : zero4;
        hi[u] = ok ? __ldcg(reinterpret_cast<const float4*>(src + s * split_stride + 4)) : zero4;
      }
      float m_new = M;
#pragma unroll
      for (int u = 0; u < kChunk; ++u) m_new = fmaxf(m_new, ml[u].x);
      const float scale = __expf(M - m_new);  // 0 on the first chunk (M = -FLT_MAX), unless all are -FLT_MAX
      l_sum *= scale;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= scale;
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const float w = __expf(ml[u].x - m_new);
        l_sum = fmaf(ml[u].y, w, l_sum);
        acc[0] = fmaf(w, lo[u].x, acc[0]);
        acc[1] = fmaf(w, lo[u].y, acc[1]);
        acc[2] = fmaf(w, lo[u].z, acc[2]);
        acc[3] = fmaf(w, lo[u].w, acc[3]);
        acc[4] = fmaf(w, hi[u].x, acc[4]);
        acc[5] = fmaf(w, hi[u].y, acc[5]);
        acc[6] = fmaf(w, hi[u].z, acc[6]);
        acc[7] = fmaf(w, hi[u].w, acc[7]);
      }
      M = m_new;
    }
    const float inv = l_sum > 0.f ? 1.f / l_sum : 0.f;
    uint4 u;
    u.x = pack_bf16(acc[0] * inv, acc[1] * inv);
    u.y = pack_bf16(acc[2] * inv, acc[3] * inv);
    u.z = pack_bf16(acc[4] * inv, acc[5] * inv);
    u.w = pack_bf16(acc[6] * inv, acc[7] * inv);
    *reinterpret_cast<uint4*>(a.out + (static_cast<int64_t>(t) * a.nq + h) * HD + q8 * 8) = u;
  }
  if (tid == 0) *counter = 0u;
  if constexpr (TRACE) step_stamp(a.trace, kStEnd);
}

// Configures decode_attention_kernel<HD, WARPS, TRACE> once (its shared memory attribute) and gives the blocks the
// untraced instance holds at once, so that the traced one runs the same grid (the split count decides the sums).
template <int HD, int WARPS, bool TRACE> cudaError_t configure_decode(int& resident_untraced) {
  constexpr size_t bytes = DecSmem<HD, WARPS>::bytes;
  static bool configured = false;  // the attribute is per kernel, set before the first launch
  static int resident = 0;         // blocks of this instance the GPU holds at once
  if (!configured) {
    constexpr auto kernel = decode_attention_kernel<HD, WARPS, TRACE>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    int sms = 0, per_sm = 0;
    if (e == cudaSuccess) e = sm_count(sms);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * WARPS, bytes);
    if (e != cudaSuccess) return e;
    resident = (per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
    configured = true;
  }
  if constexpr (TRACE) return configure_decode<HD, WARPS, false>(resident_untraced);
  resident_untraced = resident;
  return cudaSuccess;
}

template <int HD, int WARPS, bool TRACE> cudaError_t launch_decode_as(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t bytes = DecSmem<HD, WARPS>::bytes;
  int resident = 0;
  if (const cudaError_t e = configure_decode<HD, WARPS, TRACE>(resident); e != cudaSuccess) return e;
  const int R = a.T * (a.nq / a.nkv), groups = a.nkv * ((R + kDecRows - 1) / kDecRows);
  // At most one wave of blocks: a split of a second wave would start only when a first-wave block ends,
  // doubling the step; with fewer splits each block streams more keys through its cp.async pipeline.
  const int splits = std::max(1, std::min(a.splits, resident / groups));
  dim3 grid(a.nkv, (R + kDecRows - 1) / kDecRows, splits);
  const LcSkipScope lc(kLcAttention);
  return launch_kernel(decode_attention_kernel<HD, WARPS, TRACE>, grid, 32 * WARPS, bytes, stream, a);
}
// The traced instance where AttentionArgs::trace is set, on the untraced one's grid.
template <int HD, int WARPS> cudaError_t launch_decode(const AttentionArgs& a, cudaStream_t stream) {
  return a.trace != nullptr ? launch_decode_as<HD, WARPS, true>(a, stream) : launch_decode_as<HD, WARPS, false>(a, stream);
}

// Warps a block: 8 (8 keys of a tile each) unless AttentionArgs::block_warps asks for 4 (16 keys each). With 8 a
// warp's serial chain (its query rows' and new keys' q/k-norm + RoPE, then its keys of each tile) is half as
// long. Verify and draft blocks (16 rows) have used 8 since the sixth pass; decode's (4 rows at Qwen3's 4 query
// heads per kv head) since the ninth, where 8 warps made the whole decode step faster (docs/PERF.md).
template <int HD> cudaError_t launch_decode(const AttentionArgs& a, cudaStream_t stream) {
  const int warps = a.block_warps > 0 ? a.block_warps : 8;
  return warps == 4 ? launch_decode<HD, 4>(a, stream) : launch_decode<HD, 8>(a, stream);
}

}  // namespace

size_t attention_workspace_bytes(int T, int nq, int head_dim, int splits) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(splits) * T * nq;
  return rows * head_dim * sizeof(float) + rows * sizeof(float2);
}

size_t attention_counter_count(int T, int nq, int nkv) {
  const int G = nq / (nkv > 0 ? nkv : 1), QT = kRows / (G > 0 ? G : 1);
  const size_t tiled = static_cast<size_t>(nkv) * ((T + QT - 1) / QT);
  const size_t groups = static_cast<size_t>(nkv) * ((static_cast<size_t>(T) * G + kDecRows - 1) / kDecRows);
  return tiled > groups ? tiled : groups;
}

int attention_default_splits(int64_t capacity, int T) {
  if (T > kDecMaxT) return 1;
  // The grid for the longest context the cache holds, at a quarter (T = 1) or half of the decode kernel's
  // default minimum split (128 keys: active_splits), so that the smaller minima AttentionArgs::min_split_keys
  // allows (fast_perf --attention) still fit; a launch only runs the splits the live length needs,
  // dispatched first, so a large grid costs little at short lengths.
  const int64_t per = T == 1 ? 32 : 64;
  const int64_t s = (capacity + per - 1) / per;
  return static_cast<int>(s < 1 ? 1 : (s > 32 ? 32 : s));
}

cudaError_t attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (a.nkv <= 0 || a.nq % a.nkv != 0 || a.nq / a.nkv > kRows || a.splits < 1 || a.splits > kMaxSplits ||
      (a.q == nullptr && a.qkv == nullptr) || a.k_cache == nullptr || a.v_cache == nullptr || a.out == nullptr ||
      a.kv_len_base == nullptr || (a.splits > 1 && (a.workspace == nullptr || a.counters == nullptr)))
    return cudaErrorInvalidValue;
  const bool small = a.T <= kDecMaxT;
  const int64_t qkv_width = static_cast<int64_t>(a.nq + 2 * a.nkv) * a.head_dim;
  if (a.qkv != nullptr && (!small || a.kv_len_add != a.T || a.ld_qkv < qkv_width || a.q_norm == nullptr ||
                           a.k_norm == nullptr || a.rope_cos == nullptr || a.rope_sin == nullptr ||
                           a.k_cache_out != a.k_cache || a.v_cache_out != a.v_cache))
    return cudaErrorInvalidValue;
  if (a.block_warps != 0 && a.block_warps != 4 && a.block_warps != 8) return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 32: return small ? launch_decode<32>(a, stream) : launch<32>(a, stream);
    case 64: return small ? launch_decode<64>(a, stream) : launch<64>(a, stream);
    case 128: return small ? launch_decode<128>(a, stream) : launch<128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace specpress::kernels
