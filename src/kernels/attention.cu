// attention.cu — see attention.h. Block (kv head, key split, query tile): the tile holds R <= 64 rows
// (query t, head of the group), keys stream through shared memory 64 at a time with an online softmax
// in fp32. Thread (ty, tx) of 16 x 16 owns rows ty*4..ty*4+3: scores for keys tx + 16j, output dims
// tx*D..tx*D+D-1 (D = head_dim / 16). With several splits each block leaves (m, l, unnormalised o) in
// the workspace; the last block of a (kv head, query tile) to finish combines them (threadfence
// reduction) and re-zeroes its counter.
#include <cfloat>

#include "kernels/attention.h"
#include "kernels/common.cuh"

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

template <int HD>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
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
        const float s0 = Ss[r * L::SS + lane], s1 = Ss[r * L::SS + lane + 32];
        const float m_old = row_m[r];
        const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
        const float p0 = __expf(s0 - m_new), p1 = __expf(s1 - m_new);  // exp(-inf) = 0 for masked keys
        const float ps = warp_sum(p0 + p1);
        Ss[r * L::SS + lane] = p0;
        Ss[r * L::SS + lane + 32] = p1;
        if (lane == 0) {
          const float alpha = __expf(m_old - m_new);
          row_m[r] = m_new;
          row_l[r] = row_l[r] * alpha + ps;
          row_alpha[r] = alpha;
        }
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
  attention_kernel<HD><<<grid, kThreads, bytes, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

size_t attention_workspace_bytes(int T, int nq, int head_dim, int splits) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(splits) * T * nq;
  return rows * head_dim * sizeof(float) + rows * sizeof(float2);
}

size_t attention_counter_count(int T, int nq, int nkv) {
  const int G = nq / nkv, QT = kRows / (G > 0 ? G : 1);
  return static_cast<size_t>(nkv) * ((T + QT - 1) / QT);
}

int attention_default_splits(int64_t capacity, int T) {
  if (T > 16) return 1;
  const int64_t s = capacity / 256;
  return static_cast<int>(s < 1 ? 1 : (s > 16 ? 16 : s));
}

cudaError_t attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (a.nkv <= 0 || a.nq % a.nkv != 0 || a.nq / a.nkv > kRows || a.splits < 1 || a.splits > kKeys || a.q == nullptr ||
      a.k_cache == nullptr || a.v_cache == nullptr || a.out == nullptr || a.kv_len_base == nullptr ||
      (a.splits > 1 && (a.workspace == nullptr || a.counters == nullptr)))
    return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 32: return launch<32>(a, stream);
    case 64: return launch<64>(a, stream);
    case 128: return launch<128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace specpress::kernels
