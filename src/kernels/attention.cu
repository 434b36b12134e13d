// attention.cu — see attention.h. Two kernels:
//
// Small T (decode T = 1, verify / draft T <= 16): the "decode" kernel. Block (kv head, row group, key
// split): the rows of a kv head's group are (query t, head of the group), R = T * nq / nkv of them, cut
// into groups of at most 16, so decode (R = 4 at Qwen3 shapes) is one group and every K/V tile a block
// streams serves all of its rows. The split's keys stream through shared memory 64 at a time in two
// cp.async stages (16-byte copies, the next tile in flight while this one is computed). All 256 threads
// work in every phase: scores as thread = (key, rows r, r+4, ..), online softmax one warp per row, P.V as
// thread = (4 output dims, rows). The number of active splits follows the live length S read from device
// memory: the key splits are the blocks of thread-block clusters of C <= 8 blocks (one cluster per
// (kv head, row group) up to 8 * 128 keys, more clusters beyond); blocks of clusters the live length does
// not need exit at once, so a graph captured with a fixed grid does only the work of the current length.
// The grid is capped at one wave of resident clusters. Each block leaves its (m, l, unnormalised o) in
// shared memory and the cluster merges them through distributed shared memory (block b of the cluster
// merges the output dims b * HD / C ..), so a short context needs no global workspace, fence or atomic.
// With several active clusters each leaves its merged (m, l, o) in the workspace, and the last block of
// the (kv head, row group) to finish combines only the active clusters: one warp per row for the
// weights, then every thread sums a 4-wide slice of an output row over the clusters with 8 independent
// 16-byte L2 loads in flight.
//
// Large T (prefill): the tiled kernel. Block (kv head, key split, query tile): the tile holds R <= 64 rows
// (query t, head of the group), keys stream through shared memory 64 at a time with an online softmax in
// fp32. Thread (ty, tx) of 16 x 16 owns rows ty*4..ty*4+3: scores for keys tx + 16j, output dims
// tx*D..tx*D+D-1 (D = head_dim / 16). With several splits each block leaves (m, l, unnormalised o) in the
// workspace; the last block of a (kv head, query tile) to finish combines them (threadfence reduction)
// and re-zeroes its counter.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>

#include "kernels/attention.h"
#include "kernels/common.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;
namespace cg = cooperative_groups;
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
// Shared by both kernels; every lane of the warp must call it (warp reductions).
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
  return launch_kernel(attention_kernel<HD>, grid, kThreads, bytes, stream, a);
}


// ---- small-T ("decode") kernel
constexpr int kDecThreads = 256, kDecRows = 16, kDecKeys = 64, kMaxSplits = 64;
constexpr int kDecMaxT = 16;  // T above this goes to the tiled kernel
// The most blocks a cluster has (16 is a non-portable cluster size, which Hopper allows).
constexpr int kDecMaxCluster = 16;

template <int HD> struct DecSmem {
  static constexpr int KS = HD + 8;   // K tile row stride (bf16): 16-byte rows, conflict-free 16-byte reads
  static constexpr int SS = kDecKeys + 1;
  static constexpr size_t k_bytes = sizeof(bf16) * kDecKeys * KS;
  static constexpr size_t v_bytes = sizeof(bf16) * kDecKeys * HD;
  static constexpr size_t stage_bytes = k_bytes + v_bytes;  // one of the two cp.async stages
  static constexpr size_t q_off = 2 * stage_bytes;
  static constexpr size_t s_off = align16(q_off + sizeof(float) * kDecRows * HD);
  static constexpr size_t stat_off = align16(s_off + sizeof(float) * kDecRows * SS);
  static constexpr size_t w_off = align16(stat_off + sizeof(float) * 3 * kDecRows);
  static constexpr size_t bytes = w_off + sizeof(float) * kMaxSplits * kDecRows;
};

// 16-byte global -> shared copy; with ok == false nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool ok) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// Active clusters and keys per block for S keys, identical in every block of a launch: enough clusters
// that a block has at most block_keys keys, at most the grid's; then the keys split evenly over the
// active blocks, in whole 64-key tiles once a block has more than one tile.
__device__ __forceinline__ void active_clusters(int S, int grid_clusters, int C, int block_keys, int& n_act,
                                                int& chunk) {
  n_act = min(grid_clusters, max(1, (S + C * block_keys - 1) / (C * block_keys)));
  chunk = max(1, (S + n_act * C - 1) / (n_act * C));
  if (chunk > kDecKeys) chunk = (chunk + kDecKeys - 1) / kDecKeys * kDecKeys;  // no 2-key tail tile
}

template <int HD>
__global__ void __launch_bounds__(kDecThreads, 2) decode_attention_kernel(AttentionArgs a) {
  pdl_begin();
  using L = DecSmem<HD>;
  constexpr int DQ = HD / 4, NG = kDecThreads / DQ, RPT = (kDecRows + NG - 1) / NG;
  extern __shared__ __align__(16) unsigned char smem[];
  float* Qs = reinterpret_cast<float*>(smem + L::q_off);  // query rows; after the key loop, this block's o
  float* Ss = reinterpret_cast<float*>(smem + L::s_off);
  float* row_m = reinterpret_cast<float*>(smem + L::stat_off);
  float* row_l = row_m + kDecRows;
  float* row_alpha = row_l + kDecRows;
  float* wts = reinterpret_cast<float*>(smem + L::w_off);  // global combine: [cluster][row] weights
  __shared__ int is_last;

  // Split is the slowest grid dimension: the clusters of active splits are dispatched first, and those of
  // inactive ones, which only read S and exit, take SM slots behind them.
  cg::cluster_group cluster = cg::this_cluster();
  const int C = static_cast<int>(cluster.dim_blocks().z), rank = static_cast<int>(cluster.block_rank());
  const int kvh = blockIdx.x, z = blockIdx.y, cz = blockIdx.z / C;
  const int G = a.nq / a.nkv, T = a.T, R = T * G;
  const int r0 = z * kDecRows, rb = min(kDecRows, R - r0);
  const int S = *a.kv_len_base + a.kv_len_add;
  int n_act, chunk;
  active_clusters(S, gridDim.z / C, C, a.block_keys, n_act, chunk);
  if (cz >= n_act) return;  // a whole cluster beyond the live length: no work, not counted by the combine
  const int beg = min(S, (cz * C + rank) * chunk), end = min(S, beg + chunk);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const float scale = a.scale > 0.f ? a.scale : rsqrtf(static_cast<float>(HD));
  const int64_t cap = a.cache_capacity;
  const bf16* kc = a.k_cache + static_cast<int64_t>(kvh) * cap * HD;
  const bf16* vc = a.v_cache + static_cast<int64_t>(kvh) * cap * HD;

  const int n_tiles = (end - beg + kDecKeys - 1) / kDecKeys;
  auto issue = [&](int tile) {
    unsigned char* st = smem + (tile & 1) * L::stage_bytes;
    bf16* Ks = reinterpret_cast<bf16*>(st);
    bf16* Vs = reinterpret_cast<bf16*>(st + L::k_bytes);
    const int k0 = beg + tile * kDecKeys;
#pragma unroll
    for (int i = 0; i < kDecKeys * (HD / 8) / kDecThreads; ++i) {
      const int idx = tid + i * kDecThreads, kr = idx / (HD / 8), c = (idx % (HD / 8)) * 8;
      const bool ok = k0 + kr < end;
      const int64_t src = (ok ? static_cast<int64_t>(k0 + kr) : 0) * HD + c;  // stays inside the cache
      cp_async16(Ks + kr * L::KS + c, kc + src, ok);
      cp_async16(Vs + kr * HD + c, vc + src, ok);
    }
  };
  if (n_tiles > 0) issue(0);
  cp_async_commit();

  // Query rows of this group (fp32) while the first tile is in flight.
  for (int idx = tid; idx < kDecRows * (HD / 8); idx += kDecThreads) {
    const int r = idx / (HD / 8), c = (idx % (HD / 8)) * 8;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (r < rb) {
      const int rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
      load8(a.q + (static_cast<int64_t>(t) * a.nq + h) * HD + c, v);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) Qs[r * HD + c + e] = v[e];
  }
  if (tid < kDecRows) {
    row_m[tid] = -FLT_MAX;  // finite "minus infinity": exp(m_old - m_new) stays 0, never NaN
    row_l[tid] = 0.f;
    row_alpha[tid] = 1.f;
  }

  // Scores: thread = key kk of the tile, rows rs, rs + 4, rs + 8, rs + 12 (rs is uniform in a warp).
  const int kk = tid & (kDecKeys - 1), rs = tid >> 6;
  // Causal: row r (query t) sees keys <= S - T + t.
  int row_limit[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = rs + 4 * i;
    row_limit[i] = a.causal ? S - T + (r0 + min(r, rb - 1)) / G : S - 1;
  }
  // P.V: thread = output dims dq*4 .. dq*4+3 of rows rg, rg + NG, ...
  const int dq = tid % DQ, rg = tid / DQ;
  float o[RPT][4];
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) o[i][j] = 0.f;

  for (int it = 0; it < n_tiles; ++it) {
    if (it + 1 < n_tiles) issue(it + 1);
    cp_async_commit();
    cp_async_wait_1();  // everything but the newest group has landed: tile `it` is in shared memory
    __syncthreads();
    const unsigned char* st = smem + (it & 1) * L::stage_bytes;
    const bf16* Ks = reinterpret_cast<const bf16*>(st);
    const bf16* Vs = reinterpret_cast<const bf16*>(st + L::k_bytes);
    const int k0 = beg + it * kDecKeys, nk = min(kDecKeys, end - k0);

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
    for (int d = 0; d < (kk < nk ? HD : 0); d += 8) {  // keys past the tile's end are masked below
      float kf[8];
      load8(Ks + kk * L::KS + d, kf);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = rs + 4 * i;
        if (r < rb) {
          const float4 qa = *reinterpret_cast<const float4*>(Qs + r * HD + d);
          const float4 qb = *reinterpret_cast<const float4*>(Qs + r * HD + d + 4);
          acc[i] = fmaf(qa.x, kf[0], acc[i]);
          acc[i] = fmaf(qa.y, kf[1], acc[i]);
          acc[i] = fmaf(qa.z, kf[2], acc[i]);
          acc[i] = fmaf(qa.w, kf[3], acc[i]);
          acc[i] = fmaf(qb.x, kf[4], acc[i]);
          acc[i] = fmaf(qb.y, kf[5], acc[i]);
          acc[i] = fmaf(qb.z, kf[6], acc[i]);
          acc[i] = fmaf(qb.w, kf[7], acc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = rs + 4 * i;
      const bool ok = r < rb && kk < nk && k0 + kk <= row_limit[i];
      Ss[r * L::SS + kk] = ok ? acc[i] * scale : -INFINITY;
    }
    __syncthreads();

    // Online softmax: warp w owns rows w, w + 8; lane owns keys lane, lane + 32.
#pragma unroll
    for (int rr = 0; rr < kDecRows / (kDecThreads / 32); ++rr) {
      const int r = warp + rr * (kDecThreads / 32);
      if (r >= rb) continue;  // warp-uniform
      softmax_row_update(Ss + r * L::SS, row_m + r, row_l + r, row_alpha + r, lane);
    }
    __syncthreads();

#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int r = rg + NG * i;
      if (r < rb) {
        const float al = row_alpha[r];
#pragma unroll
        for (int j = 0; j < 4; ++j) o[i][j] *= al;
      }
    }
#pragma unroll 4
    for (int k = 0; k < nk; ++k) {
      const uint2 vv = *reinterpret_cast<const uint2*>(Vs + k * HD + dq * 4);
      const float2 v01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vv.x));
      const float2 v23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vv.y));
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const int r = rg + NG * i;
        if (r < rb) {
          const float p = Ss[r * L::SS + k];
          o[i][0] = fmaf(p, v01.x, o[i][0]);
          o[i][1] = fmaf(p, v01.y, o[i][1]);
          o[i][2] = fmaf(p, v23.x, o[i][2]);
          o[i][3] = fmaf(p, v23.y, o[i][3]);
        }
      }
    }
    __syncthreads();  // the stage and the score tile are rewritten next
  }
  __syncthreads();  // Qs free; row statistics visible even when this block had no tile

  // This block's unnormalised o into Qs, for the cluster combine.
  float* Os = Qs;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = rg + NG * i;
    if (r < rb) *reinterpret_cast<float4*>(Os + r * HD + dq * 4) = make_float4(o[i][0], o[i][1], o[i][2], o[i][3]);
  }
  // Cluster combine through distributed shared memory: block `rank` merges the C blocks' (m, l, o) for
  // output dims [rank * HD / C, (rank + 1) * HD / C) of every row, blocks in rank order.
  cluster.sync();
  const size_t split_rows = static_cast<size_t>(a.nkv) * R;  // workspace rows per cluster = T * nq
  float* ws_o = static_cast<float*>(a.workspace);
  float2* ws_ml = reinterpret_cast<float2*>(ws_o + static_cast<size_t>(a.splits) * split_rows * HD);  // as allocated
  const int slice = HD / C, items = rb * (slice / 4);
  for (int item = tid; item < items; item += kDecThreads) {
    const int r = item / (slice / 4), d = rank * slice + (item % (slice / 4)) * 4;
    float M = -FLT_MAX;
    for (int b = 0; b < C; ++b) M = fmaxf(M, *cluster.map_shared_rank(row_m + r, b));
    float l_sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int b = 0; b < C; ++b) {
      const float w = __expf(*cluster.map_shared_rank(row_m + r, b) - M);
      l_sum = fmaf(*cluster.map_shared_rank(row_l + r, b), w, l_sum);
      const float4 ob = *reinterpret_cast<const float4*>(cluster.map_shared_rank(Os + r * HD + d, b));
      acc.x = fmaf(w, ob.x, acc.x);
      acc.y = fmaf(w, ob.y, acc.y);
      acc.z = fmaf(w, ob.z, acc.z);
      acc.w = fmaf(w, ob.w, acc.w);
    }
    const int rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
    if (n_act == 1) {
      const float inv = l_sum > 0.f ? 1.f / l_sum : 0.f;
      uint2 u;
      *reinterpret_cast<__nv_bfloat162*>(&u.x) = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
      *reinterpret_cast<__nv_bfloat162*>(&u.y) = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
      *reinterpret_cast<uint2*>(a.out + (static_cast<int64_t>(t) * a.nq + h) * HD + d) = u;
    } else {
      const size_t row = static_cast<size_t>(cz) * split_rows + static_cast<size_t>(kvh) * R + rr;
      *reinterpret_cast<float4*>(ws_o + row * HD + d) = acc;
      if (d == 0) ws_ml[row] = make_float2(M, l_sum);
    }
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
  if (n_act == 1) return;

  // Several active clusters: the last block of this (kv head, row group) to finish merges the clusters'
  // (m, l, o) from the workspace.
  __threadfence();
  __syncthreads();
  unsigned int* counter = a.counters + kvh * gridDim.y + z;
  if (tid == 0) is_last = atomicAdd(counter, 1u) == static_cast<unsigned int>(n_act * C - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // Cluster weights exp(m_c - M) / sum_c l_c exp(m_c - M): one warp per row, lanes over the active clusters.
  for (int r = warp; r < rb; r += kDecThreads / 32) {
    const size_t row = static_cast<size_t>(kvh) * R + r0 + r;
    float m[2], l[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int s = lane + 32 * j;
      m[j] = -FLT_MAX;
      l[j] = 0.f;
      if (s < n_act) {
        const float2 ml = __ldcg(&ws_ml[static_cast<size_t>(s) * split_rows + row]);
        m[j] = ml.x;
        l[j] = ml.y;
      }
    }
    const float M = warp_max(fmaxf(m[0], m[1]));
    const float w0 = __expf(m[0] - M), w1 = __expf(m[1] - M);
    const float l_sum = warp_sum(l[0] * w0 + l[1] * w1);
    const float inv = l_sum > 0.f ? 1.f / l_sum : 0.f;
    if (lane < n_act) wts[lane * kDecRows + r] = w0 * inv;
    if (lane + 32 < n_act) wts[(lane + 32) * kDecRows + r] = w1 * inv;
  }
  __syncthreads();
  // Weighted sum over the active clusters: item = (row, 4 dims); 8 independent loads in flight per step.
  const size_t split_stride = split_rows * HD;
  for (int item = tid; item < rb * DQ; item += kDecThreads) {
    const int r = item / DQ, q4 = item % DQ;
    const int rr = r0 + r, t = rr / G, h = kvh * G + rr % G;
    const float* src = ws_o + (static_cast<size_t>(kvh) * R + rr) * HD + q4 * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < n_act; s0 += 8) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        v[u] = s0 + u < n_act ? __ldcg(reinterpret_cast<const float4*>(src + static_cast<size_t>(s0 + u) * split_stride))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float w = s0 + u < n_act ? wts[(s0 + u) * kDecRows + r] : 0.f;
        acc.x = fmaf(w, v[u].x, acc.x);
        acc.y = fmaf(w, v[u].y, acc.y);
        acc.z = fmaf(w, v[u].z, acc.z);
        acc.w = fmaf(w, v[u].w, acc.w);
      }
    }
    uint2 u;
    *reinterpret_cast<__nv_bfloat162*>(&u.x) = __floats2bfloat162_rn(acc.x, acc.y);
    *reinterpret_cast<__nv_bfloat162*>(&u.y) = __floats2bfloat162_rn(acc.z, acc.w);
    *reinterpret_cast<uint2*>(a.out + (static_cast<int64_t>(t) * a.nq + h) * HD + q4 * 4) = u;
  }
  if (tid == 0) *counter = 0u;
}

template <int HD> cudaError_t launch_decode(AttentionArgs a, cudaStream_t stream) {
  constexpr size_t bytes = DecSmem<HD>::bytes;
  // Cluster size: a.cluster, else the largest power of two <= min(splits, 8); at most HD / 4, so that a
  // block's slice of the output dims is whole 4-dim items.
  int C = a.cluster;
  if (C <= 0) {
    C = 1;
    while (2 * C <= std::min(a.splits, 8)) C *= 2;
  }
  if (C > kDecMaxCluster || (C & (C - 1)) != 0 || C > HD / 4 || C > a.splits) return cudaErrorInvalidValue;
  if (a.block_keys <= 0) a.block_keys = kDecKeys;
  if (a.block_keys % 8 != 0) return cudaErrorInvalidValue;
  static bool configured = false;    // the attributes are per kernel, set before the first launch
  static int resident[kDecMaxCluster + 1] = {};  // clusters of each size the GPU holds at once
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(decode_attention_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(decode_attention_kernel<HD>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const int R = a.T * (a.nq / a.nkv), groups = a.nkv * ((R + kDecRows - 1) / kDecRows);
  if (resident[C] == 0) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = static_cast<unsigned>(C);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(1, 1, static_cast<unsigned>(C));
    cfg.blockDim = dim3(kDecThreads);
    cfg.dynamicSmemBytes = bytes;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, decode_attention_kernel<HD>, &cfg);
    if (e != cudaSuccess) return e;
    resident[C] = std::max(1, n);
  }
  // At most one wave of clusters: a cluster of a second wave would start only when a first-wave one ends,
  // doubling the step; with fewer clusters each block streams more keys through its cp.async pipeline.
  const int clusters = std::max(1, std::min(a.splits / C, resident[C] / groups));
  dim3 grid(a.nkv, (R + kDecRows - 1) / kDecRows, clusters * C);
  return launch_kernel_clustered(decode_attention_kernel<HD>, grid, kDecThreads, bytes, stream,
                                 static_cast<unsigned>(C), a);
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
  // The grid for the longest context the cache holds, at the decode kernel's smallest split (32 keys for
  // one query row, 64 for more); a launch only runs the splits the live length needs, dispatched first,
  // so a large grid costs little at short lengths.
  const int64_t per = T == 1 ? 32 : 64;
  const int64_t s = (capacity + per - 1) / per;
  return static_cast<int>(s < 1 ? 1 : (s > 32 ? 32 : s));
}

cudaError_t attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (a.nkv <= 0 || a.nq % a.nkv != 0 || a.nq / a.nkv > kRows || a.splits < 1 || a.splits > kMaxSplits ||
      a.q == nullptr || a.k_cache == nullptr || a.v_cache == nullptr || a.out == nullptr || a.kv_len_base == nullptr ||
      (a.splits > 1 && (a.workspace == nullptr || a.counters == nullptr)))
    return cudaErrorInvalidValue;
  const bool small = a.T <= kDecMaxT;
  switch (a.head_dim) {
    case 32: return small ? launch_decode<32>(a, stream) : launch<32>(a, stream);
    case 64: return small ? launch_decode<64>(a, stream) : launch<64>(a, stream);
    case 128: return small ? launch_decode<128>(a, stream) : launch<128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace specpress::kernels
