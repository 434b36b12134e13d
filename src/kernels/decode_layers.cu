// decode_layers.cu — see decode_layers.h. One block an SM: kC consumer warps and one producer warp. The op list
// (36 layers x qkv, attention, o, gate/up, down for Qwen3-4B) is walked by both warp roles in the same order: a
// projection's rows in groups of kC (SwiGLU: kC / 2 gate rows, then their up rows), each group's K in segments of at
// most kMaxKc columns; a tile is a group's rows x one segment, one cp.async.bulk a row into a ring stage. Groups are
// dealt to blocks round-robin, starting each projection where the last one stopped, so every block streams nearly
// the same bytes over the step. The grid-wide order is one counter: each block adds 1 after each op (release), and
// waits for op k's input until it reads k * blocks (acquire); the last arrival of the step resets it to 0. Every
// consumer warp takes a share of every tile (consume_gemv: MMA k-step pairs), so all of them walk the ring in order
// and none can wait on a stage a round ahead of another, which a parity wait could not tell apart.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <mutex>
#include <vector>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/decode_layers.h"
#include "kernels/gemv_math.cuh"
#include "kernels/mma.cuh"
#include "kernels/norm_rope_row.cuh"
#include "kernels/tma.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;

constexpr int kC = 8;                    // consumer warps a block = rows a tile
constexpr int kThreads = 32 * (kC + 1);  // + the producer warp
constexpr int kMaxKc = 1280;             // columns a tile at most (2.5 KB row copies; 1.25 KB ones measured slower)
constexpr int kPitch = kMaxKc + 8;       // a stage row's elements: 16 bytes of padding, so ldmatrix rows miss no bank
constexpr size_t kStageBytes = sizeof(bf16) * kC * kPitch;
static_assert(kMaxKc % 32 == 0, "a tile row is whole k-step pairs, so an x4 load never leaves its row");
constexpr int kPairsPerWarp = (kMaxKc / 32 + kC - 1) / kC;  // k-step pairs of a tile a consumer warp takes at most
constexpr int kPartGroups = 4;           // row groups whose partial sums wait in shared memory for their epilogues
static_assert(kPartGroups <= kC, "a batch's epilogues take one warp a group");
constexpr int kMaxStages = 16;
constexpr int kMinChunkKeys = 16;  // fewest keys an attention item takes
constexpr int kMergeBatch = 16;    // chunks of a head whose partial results the merge loads at once
template <int G> constexpr int kKeyBatch = G >= 4 ? 4 : 8;  // keys a warp loads before it reduces them
enum Epi { kPlain = 0, kSwiglu = 1, kResidual = 2 };
enum Proj { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3 };
// SPECPRESS_DECODE_PERSISTENT_ABLATE (a diagnostic: the step's results are then wrong): bits that leave out the
// attention op, the GEMV arithmetic (tiles are still waited for and released), or the grid-wide waits.
enum Ablate { kAblateAttention = 1, kAblateMath = 2, kAblateWaits = 4 };

// One projection, as both warp roles walk it.
struct Gemv {
  const bf16* W = nullptr;
  int N = 0, K = 0, epi = kPlain;  // N outputs (kSwiglu: I, and W has 2I rows)
  int out = kC;                    // outputs a group
  int groups = 0, segs = 0, kc = 0;  // row groups; K in segs segments of kc columns (the last may be narrower)
};

// K in segs segments of kc columns, kc a multiple of 16 (an MMA k-step), the last one narrower.
__host__ __device__ inline void segment(int K, int& segs, int& kc) {
  segs = (K + kMaxKc - 1) / kMaxKc;
  kc = ((K + segs - 1) / segs + 15) / 16 * 16;
}

__device__ __forceinline__ Gemv gemv_of(const DecodeLayersArgs& a, const DecodeLayer& L, int p) {
  Gemv g;
  if (p == kQkv) {
    g.W = L.qkv, g.N = (a.nq + 2 * a.nkv) * a.hd, g.K = a.H, g.epi = kPlain;
  } else if (p == kO) {
    g.W = L.o, g.N = a.H, g.K = a.nq * a.hd, g.epi = kResidual;
  } else if (p == kGateUp) {
    g.W = L.gate_up, g.N = a.I, g.K = a.H, g.epi = kSwiglu;
  } else {
    g.W = L.down, g.N = a.H, g.K = a.I, g.epi = kResidual;
  }
  g.out = g.epi == kSwiglu ? kC / 2 : kC;
  g.groups = (g.N + g.out - 1) / g.out;
  segment(g.K, g.segs, g.kc);
  return g;
}

// Tile row r of group grp: its output (>= N: no row) and its row of W.
__device__ __forceinline__ int output_of(const Gemv& g, int grp, int r) {
  return grp * g.out + (g.epi == kSwiglu ? r % g.out : r);
}
__device__ __forceinline__ const bf16* w_row(const Gemv& g, int grp, int r) {
  return g.W + (static_cast<int64_t>(output_of(g, grp, r)) + (g.epi == kSwiglu && r >= g.out ? g.N : 0)) * g.K;
}
// This block's first group of a projection dealt from `rot` on.
__device__ __forceinline__ int first_group(int rot) {
  return (static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - rot) % static_cast<int>(gridDim.x);
}

struct Ring {
  bf16* stages = nullptr;
  uint64_t* full = nullptr;
  uint64_t* empty = nullptr;
  int count = 0;
};

// The diagnostic timeline (DecodeLayersArgs::trace, stamped with common.cuh's globaltimer): a block's row of op `op`,
// or null when off.
__device__ __forceinline__ unsigned long long* trace_row(const DecodeLayersArgs& a, int op) {
  if (a.trace == nullptr) return nullptr;
  return a.trace + (static_cast<size_t>(blockIdx.x) * (5 * a.n_layers + 1) + op) * kDecodeTraceFields;
}
enum TraceField { kTrBegin = 0, kTrReady, kTrPrologue, kTrEnd, kTrStarve, kTrFirstCopy, kTrBlocked, kTrLastCopy };
// The op index of projection p of layer l (the attention is op 1 of a layer).
__device__ __forceinline__ int op_index(int l, int p) { return 5 * l + (p == kQkv ? 0 : p + 1); }

// The producer warp: every tile of this block, in the consumers' order, as soon as a stage is free.
__device__ void produce(const DecodeLayersArgs& a, const Ring& ring) {
  const int lane = threadIdx.x & 31, nb = static_cast<int>(gridDim.x);
  int t = 0, rot = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const DecodeLayer L = a.layers[l];
    for (int p = kQkv; p <= kDown; ++p) {
      const Gemv g = gemv_of(a, L, p);
      unsigned long long* tr = lane == 0 ? trace_row(a, op_index(l, p)) : nullptr;
      long long blocked = 0;
      bool first = true;
      for (int grp = first_group(rot); grp < g.groups; grp += nb) {
        const bool mine = lane < kC && output_of(g, grp, lane) < g.N;
        const unsigned rows = __popc(__ballot_sync(0xffffffffu, mine));
        for (int s = 0; s < g.segs; ++s, ++t) {
          const int slot = t % ring.count, round = t / ring.count;
          if (round > 0) {
            const long long c0 = tr != nullptr ? clock64() : 0;
            mbar_wait(&ring.empty[slot], (round - 1) & 1);
            if (tr != nullptr) blocked += clock64() - c0;
          }
          if (tr != nullptr && first) tr[kTrFirstCopy] = globaltimer();
          first = false;
          const int col = s * g.kc, width = min(g.kc, g.K - col);
          if (lane == 0) mbar_expect_tx(&ring.full[slot], rows * static_cast<unsigned>(width * sizeof(bf16)));
          __syncwarp();
          if (mine)
            bulk_copy(ring.stages + (static_cast<size_t>(slot) * kC + lane) * kPitch, w_row(g, grp, lane) + col,
                      static_cast<unsigned>(width * sizeof(bf16)), &ring.full[slot]);
        }
      }
      if (tr != nullptr) {
        tr[kTrBlocked] = static_cast<unsigned long long>(blocked);
        tr[kTrLastCopy] = first ? 0ull : globaltimer();  // 0: no tile of the op in this block
        if (first) tr[kTrFirstCopy] = 0ull;
      }
      rot = (rot + g.groups) % nb;
    }
  }
}

// Op k may read what ops 0 .. k-1 wrote once the counter reads k * blocks.
__device__ __forceinline__ void grid_wait(const unsigned* counter, unsigned target) {
  if (threadIdx.x == 0)
    while (ld_acquire(counter) < target) {
    }
  consumers_sync<kC>();
}
// This block's writes of the op are done. `total`: the step's last arrival resets the counter for the next launch
// (every block has passed its last wait by then).
__device__ __forceinline__ void grid_arrive(unsigned* counter, unsigned total) {
  consumers_sync<kC>();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned old = atomicAdd(counter, 1u);
    if (old + 1 == total) atomicExch(counter, 0u);
  }
}

// One projection by the consumer warps. x goes into shared memory in MMA fragment order (k-step j, lane c: x[16j + 2c,
// +1] and x[16j + 2c + 8, +9]), with the folded norm's sum of squares reduced over the block on the way. Every warp
// then reduces its share of each tile on the tensor cores, as all warps walk the tiles in order (so none runs a ring
// round ahead of another): warp w takes the tile's k-step pairs w, w + kC, .. (ldmatrix.x4 of two k-steps), computing
// D = A B with every row of A = x (each lane passes its row-0 fragment words for rows g and g + 8 alike; only D's row 0
// is read) and B = the tile's 8 rows. At a group's last tile a warp leaves its 8 row sums (lanes 0-3: rows 2c,
// 2c + 1) in `part`; after every kPartGroups groups the block syncs and warp w finishes group w of the batch (lane r:
// row r of the group).
__device__ void consume_gemv(const Gemv& g, const bf16* x, bf16* y, bool folded, float eps, const Ring& ring, int& t,
                             int rot, uint32_t* xs, float* part, bool math, unsigned long long* tr) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nb = static_cast<int>(gridDim.x), nvec = g.K / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  float* red = part;  // the sum of squares' warp totals, read before the first group's sums are written
  float ss = 0.f;
  for (int q = static_cast<int>(threadIdx.x); q < nvec; q += 32 * kC) {
    const uint4 v = __ldcg(xv + q);
    if (folded) ss = sumsq8(v, ss);
    // chunk q holds x[8q .. 8q + 7]: k-step q / 2, columns 0-7 (even q) or 8-15 (odd q) of it; its word c is the
    // pair (2c, 2c + 1) of those, fragment word (c, q % 2) of lane c
    uint32_t* dst = xs + (q / 2) * 8 + (q % 2);
    dst[0] = v.x, dst[2] = v.y, dst[4] = v.z, dst[6] = v.w;
  }
  if (folded) {
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
  }
  const int fg = first_group(rot);
  const int mine = fg < g.groups ? (g.groups - fg + nb - 1) / nb : 0;  // this block's groups of the projection
  // the residual's old value of row `lane` of this warp's group in the first batch (written by an earlier op): its
  // load overlaps the tiles
  auto old_of = [&](int i) {
    if (g.epi != kResidual || !math || warp >= kPartGroups || lane >= kC || i >= mine) return 0.f;
    const int n = output_of(g, fg + i * nb, lane);
    return n < g.N ? to_f(__ldcg(y + n)) : 0.f;
  };
  float old = old_of(warp);
  consumers_sync<kC>();
  float row_factor = 1.f;
  if (folded) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kC; ++w) total += red[w];
    row_factor = rsqrtf(total / static_cast<float>(g.K) + eps);
  }
  consumers_sync<kC>();  // red is read: part may be written
  if (tr != nullptr && threadIdx.x == 0) tr[kTrPrologue] = globaltimer();
  const bool timed = tr != nullptr && threadIdx.x == 0;
  long long starve = 0;
  const uint2* xf = reinterpret_cast<const uint2*>(xs) + (lane & 3);
  // ldmatrix.x4 of a k-step pair: lane l gives row l % 8 of 8-column block l / 8
  const int ld_off = (lane & 7) * kPitch + (lane >> 3) * 8;
  int slot = t % ring.count, phase = (t / ring.count) & 1;
  for (int i = 0; i < mine; ++i) {
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};  // even and odd k-steps
    for (int s = 0; s < g.segs; ++s) {
      const long long w0 = timed ? clock64() : 0;
      mbar_wait(&ring.full[slot], phase);
      if (timed) starve += clock64() - w0;
      if (math) {
        const int j0 = s * g.kc / 16, steps = min(g.kc, g.K - s * g.kc) / 16;
        const bf16* stage = ring.stages + static_cast<size_t>(slot) * kC * kPitch + ld_off;
#pragma unroll
        for (int u = 0; u < kPairsPerWarp; ++u) {
          const int j = 2 * (warp + kC * u);  // this pair's first k-step in the segment
          if (j >= steps) break;
          uint32_t b[4];
          // a segment's odd last k-step is a pair's first alone: the load's second half, the next 16 columns of the
          // same row (j <= 78, so columns <= kMaxKc - 1: stale weights), is not used
          ldmatrix_x4(b, stage + j * 16);
          const uint2 xa = xf[(j0 + j) * 4];
          mma_bf16(acc[0], xa.x, xa.x, xa.y, xa.y, b[0], b[1]);
          if (j + 1 < steps) {
            const uint2 xb = xf[(j0 + j + 1) * 4];
            mma_bf16(acc[1], xb.x, xb.x, xb.y, xb.y, b[2], b[3]);
          }
        }
      }
      // the warp's ldmatrix reads are done (mma.sync consumed them): its arrival on the stage
      __syncwarp();
      if (lane == 0) mbar_arrive(&ring.empty[slot]);
      if (++slot == ring.count) slot = 0, phase ^= 1;
    }
    if (!math) continue;
    const int b = i % kPartGroups;
    if (lane < 4) {  // D row 0: rows 2c, 2c + 1 of the group
      float* dst = part + (b * kC + warp) * kC + 2 * lane;
      dst[0] = acc[0][0] + acc[1][0];
      dst[1] = acc[0][1] + acc[1][1];
    }
    if (b != kPartGroups - 1 && i != mine - 1) continue;
    // the batch's epilogues: warp w finishes group (i - b) + w, lane r its row r
    consumers_sync<kC>();
    const int gi = i - b + warp;
    if (warp <= b && lane < kC) {
      const int grp = fg + gi * nb;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kC; ++w) sum += part[(warp * kC + w) * kC + lane];
      sum *= row_factor;
      const int n = output_of(g, grp, lane);
      if (g.epi == kSwiglu) {  // gate rows 0-3 (lanes 0-3), up rows 4-7: rounded as gemv + silu_mul
        const float up = __shfl_down_sync(0xffu, sum, 4);
        if (lane < kC / 2 && n < g.N) {
          const float gate = round_b(sum), u = round_b(up);
          y[n] = to_b(round_b(gate / (1.f + expf(-gate))) * u);
        }
      } else if (n < g.N) {
        // residual: as gemv + ATen's bf16 add (the product rounded, then the sum); plain: the sum rounded
        y[n] = g.epi == kResidual ? to_b(old + round_b(sum)) : to_b(sum);
      }
    }
    old = old_of(i + 1 + warp);  // the next batch's
    consumers_sync<kC>();       // part is read: the next batch may write it
  }
  t += mine * g.segs;
  if (timed) tr[kTrStarve] = static_cast<unsigned long long>(starve);
}

// DPL of a lane's head dimensions, loaded raw (issued before any is used) and converted.
template <int DPL>
using RawDims = std::conditional_t<DPL == 4, uint2, std::conditional_t<DPL == 2, unsigned, unsigned short>>;
template <int DPL> __device__ __forceinline__ RawDims<DPL> load_dims(const bf16* p) {
  return __ldcg(reinterpret_cast<const RawDims<DPL>*>(p));
}
template <int DPL> __device__ __forceinline__ void to_floats(const RawDims<DPL>& r, float (&f)[DPL]) {
  if constexpr (DPL == 4) {
    f[0] = lo_f(r.x), f[1] = hi_f(r.x), f[2] = lo_f(r.y), f[3] = hi_f(r.y);
  } else if constexpr (DPL == 2) {
    f[0] = lo_f(r), f[1] = hi_f(r);
  } else {
    f[0] = __uint_as_float(static_cast<uint32_t>(r) << 16);
  }
}

// The attention op's items: nch chunks of `chunk` keys for each KV head (keys = pos + 1).
struct AttentionPlan {
  int keys = 0, nch_max = 1, nch = 1, chunk = 1;
};
__device__ __forceinline__ AttentionPlan attention_plan(int pos, int nkv) {
  AttentionPlan p;
  p.keys = pos + 1;
  p.nch_max = max(1, static_cast<int>(gridDim.x) / nkv);
  const int nch = min((p.keys + kMinChunkKeys - 1) / kMinChunkKeys, p.nch_max);
  p.chunk = (p.keys + nch - 1) / nch;
  p.nch = (p.keys + p.chunk - 1) / p.chunk;
  return p;
}

// A warp's first batch of keys of this block's first item, loaded before the grid-wide wait: the cache rows before
// the new key do not change during the step (the new key, at pos, is loaded after the block writes it).
template <int DPL, int G> struct AttentionPrefetch {
  RawDims<DPL> kr[kKeyBatch<G>], vr[kKeyBatch<G>];
};
template <int DPL, int G>
__device__ __forceinline__ void attention_prefetch(const DecodeLayersArgs& a, const DecodeLayer& L, int pos,
                                                   AttentionPrefetch<DPL, G>& pre) {
  constexpr int HD = 32 * DPL;
  const AttentionPlan plan = attention_plan(pos, a.nkv);
  const int item = static_cast<int>(blockIdx.x);
  if (item >= a.nkv * plan.nch) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = item / plan.nch, j = item % plan.nch;
  const int k0 = j * plan.chunk, k1 = min(plan.keys, k0 + plan.chunk);
  const bf16* kc = L.k_cache + static_cast<int64_t>(h) * a.cache_capacity * HD;
  const bf16* vc = L.v_cache + static_cast<int64_t>(h) * a.cache_capacity * HD;
#pragma unroll
  for (int b = 0; b < kKeyBatch<G>; ++b) {
    const int key = k0 + warp + b * kC;
    if (key < k1 && key < pos) {
      pre.kr[b] = load_dims<DPL>(kc + static_cast<int64_t>(key) * HD + lane * DPL);
      pre.vr[b] = load_dims<DPL>(vc + static_cast<int64_t>(key) * HD + lane * DPL);
    }
  }
}

// The attention op: items (KV head h, chunk j of the keys 0 .. pos) dealt to the blocks; warp w of an item takes
// the chunk's keys w, w + kC, ..; the block merges its warps, and with more than one chunk a head the last chunk
// to finish (a counter a head) merges the chunks' partial results from the workspace.
template <int DPL, int G>
__device__ void consume_attention(const DecodeLayersArgs& a, const DecodeLayer& L, int pos, float* sm, int* flag,
                                  const AttentionPrefetch<DPL, G>& pre, unsigned long long* tr) {
  constexpr int HD = 32 * DPL;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ctid = static_cast<int>(threadIdx.x);
  const int nb = static_cast<int>(gridDim.x);
  const AttentionPlan plan = attention_plan(pos, a.nkv);
  const int keys = plan.keys, nch_max = plan.nch_max, nch = plan.nch, chunk = plan.chunk;
  float* qf = sm;
  float* red_m = qf + G * HD;
  float* red_l = red_m + kC * G;
  float* red_o = red_l + kC * G;
  bf16* rows = reinterpret_cast<bf16*>(red_o + kC * G * HD);
  const float scale = rsqrtf(static_cast<float>(HD));
  const float* cs = a.rope_cos + static_cast<int64_t>(pos) * HD;
  const float* sn = a.rope_sin + static_cast<int64_t>(pos) * HD;
  for (int item = static_cast<int>(blockIdx.x); item < a.nkv * nch; item += nb) {
    const int h = item / nch, j = item % nch;
    const int k0 = j * chunk, k1 = min(keys, k0 + chunk);
    const bool has_new = k1 == keys;
    bf16* kc = L.k_cache + static_cast<int64_t>(h) * a.cache_capacity * HD;
    bf16* vc = L.v_cache + static_cast<int64_t>(h) * a.cache_capacity * HD;
    // the group's q rows (and the new k, v) into shared memory: written by other blocks in the qkv op
    const int nrows = G + (has_new ? 2 : 0);
    for (int i = ctid; i < nrows * HD / 8; i += 32 * kC) {
      const int r = i / (HD / 8), c = i % (HD / 8);
      const int src = r < G ? h * G + r : r == G ? a.nq + h : a.nq + a.nkv + h;
      const uint4* row = reinterpret_cast<const uint4*>(a.qkv_out + static_cast<int64_t>(src) * HD);
      reinterpret_cast<uint4*>(rows)[i] = __ldcg(row + c);
    }
    consumers_sync<kC>();
    // q/k-norm + RoPE (norm_rope_row.cuh: bitwise the values of the q/k kernels); the new K/V into the cache
    for (int r = warp; r < G + (has_new ? 1 : 0); r += kC) {
      if (r < G) {
        norm_rope_finish(norm_rope_load(rows + r * HD, cs, sn, HD, lane), norm_rope_weight(L.q_norm, HD, lane), HD,
                         a.eps, lane, [&](int jj, bf16 lo, bf16 hi) {
                           qf[r * HD + lane + 32 * jj] = to_f(lo);
                           qf[r * HD + lane + 32 * jj + HD / 2] = to_f(hi);
                         });
      } else {
        norm_rope_row(rows + G * HD, L.k_norm, cs, sn, HD, a.eps, lane, kc + static_cast<int64_t>(pos) * HD);
        for (int d = lane; d < HD; d += 32) vc[static_cast<int64_t>(pos) * HD + d] = rows[(G + 1) * HD + d];
      }
    }
    __threadfence_block();
    consumers_sync<kC>();
    if (tr != nullptr && ctid == 0 && item == static_cast<int>(blockIdx.x)) tr[kTrPrologue] = globaltimer();
    float q[G][DPL], m[G], l[G], o[G][DPL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        q[g][i] = qf[g * HD + lane * DPL + i];
        o[g][i] = 0.f;
      }
    }
    for (int kb = k0 + warp; kb < k1; kb += kC * kKeyBatch<G>) {
      RawDims<DPL> kr[kKeyBatch<G>], vr[kKeyBatch<G>];
      const bool prefetched = item == static_cast<int>(blockIdx.x) && kb == k0 + warp;  // attention_prefetch's batch
#pragma unroll
      for (int b = 0; b < kKeyBatch<G>; ++b) {
        const int key = kb + b * kC;
        if (prefetched && key < pos) {
          kr[b] = pre.kr[b];
          vr[b] = pre.vr[b];
        } else if (key < k1) {
          kr[b] = load_dims<DPL>(kc + static_cast<int64_t>(key) * HD + lane * DPL);
          vr[b] = load_dims<DPL>(vc + static_cast<int64_t>(key) * HD + lane * DPL);
        }
      }
      float s[kKeyBatch<G>][G];
#pragma unroll
      for (int b = 0; b < kKeyBatch<G>; ++b) {
        float kf[DPL];
        to_floats<DPL>(kr[b], kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float dot = 0.f;
#pragma unroll
          for (int i = 0; i < DPL; ++i) dot = fmaf(q[g][i], kf[i], dot);
          s[b][g] = dot;
        }
      }
#pragma unroll
      for (int b = 0; b < kKeyBatch<G>; ++b)
#pragma unroll
        for (int g = 0; g < G; ++g) s[b][g] = kb + b * kC < k1 ? warp_sum(s[b][g]) * scale : -INFINITY;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float bm = m[g];
#pragma unroll
        for (int b = 0; b < kKeyBatch<G>; ++b) bm = fmaxf(bm, s[b][g]);
        const float alpha = __expf(m[g] - bm);  // the first batch: exp(-inf) = 0
        l[g] *= alpha;
#pragma unroll
        for (int i = 0; i < DPL; ++i) o[g][i] *= alpha;
        m[g] = bm;
      }
#pragma unroll
      for (int b = 0; b < kKeyBatch<G>; ++b) {
        if (kb + b * kC >= k1) break;
        float vf[DPL];
        to_floats<DPL>(vr[b], vf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float p = __expf(s[b][g] - m[g]);
          l[g] += p;
#pragma unroll
          for (int i = 0; i < DPL; ++i) o[g][i] = fmaf(p, vf[i], o[g][i]);
        }
      }
    }
    // the block's warps merged (warps past the chunk's keys have none)
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (lane == 0) {
        red_m[warp * G + g] = m[g];
        red_l[warp * G + g] = l[g];
      }
#pragma unroll
      for (int i = 0; i < DPL; ++i) red_o[(warp * G + g) * HD + lane * DPL + i] = o[g][i];
    }
    consumers_sync<kC>();
    const int warps_with_keys = min(kC, k1 - k0);
    float* part_base = a.workspace + static_cast<size_t>(h) * nch_max * G * (HD + 2);
    for (int e = ctid; e < G * HD; e += 32 * kC) {
      const int g = e / HD, d = e % HD;
      float M = -INFINITY;
      for (int w = 0; w < warps_with_keys; ++w) M = fmaxf(M, red_m[w * G + g]);
      float sum = 0.f, acc = 0.f;
      for (int w = 0; w < warps_with_keys; ++w) {
        const float f = __expf(red_m[w * G + g] - M);
        sum += red_l[w * G + g] * f;
        acc += red_o[(w * G + g) * HD + d] * f;
      }
      if (nch == 1) {
        a.attn_out[static_cast<int64_t>(h * G + g) * HD + d] = to_b(acc / sum);
      } else {
        float* part = part_base + (static_cast<size_t>(j) * G + g) * (HD + 2);
        if (d == 0) {
          part[0] = M;
          part[1] = sum;
        }
        part[2 + d] = acc;
      }
    }
    if (nch > 1) {
      __threadfence();
      consumers_sync<kC>();
      if (ctid == 0) *flag = atomicAdd(&a.counters[1 + h], 1u) + 1 == static_cast<unsigned>(nch);
      consumers_sync<kC>();
      if (*flag) {  // the head's last chunk: merge them all
        __threadfence();
        // kMergeBatch chunks' (m, l, o[d]) loaded together, then folded in with a running maximum: one L2 round trip
        // a batch (nch <= 16 at the Qwen3 shapes on 132 SMs: one)
        for (int e = ctid; e < G * HD; e += 32 * kC) {
          const int g = e / HD, d = e % HD;
          float M = -INFINITY, sum = 0.f, acc = 0.f;
          for (int c0 = 0; c0 < nch; c0 += kMergeBatch) {
            float pm[kMergeBatch], pl[kMergeBatch], po[kMergeBatch];
#pragma unroll
            for (int u = 0; u < kMergeBatch; ++u) {
              const float* part = part_base + (static_cast<size_t>(c0 + u) * G + g) * (HD + 2);
              const bool ok = c0 + u < nch;  // a chunk's maximum is finite: it has at least one key
              pm[u] = ok ? __ldcg(part) : -INFINITY;
              pl[u] = ok ? __ldcg(part + 1) : 0.f;
              po[u] = ok ? __ldcg(part + 2 + d) : 0.f;
            }
            float mb = M;
#pragma unroll
            for (int u = 0; u < kMergeBatch; ++u) mb = fmaxf(mb, pm[u]);
            const float rescale = __expf(M - mb);  // the first batch: exp(-inf) = 0
            sum *= rescale;
            acc *= rescale;
#pragma unroll
            for (int u = 0; u < kMergeBatch; ++u) {
              const float f = __expf(pm[u] - mb);
              sum = fmaf(pl[u], f, sum);
              acc = fmaf(po[u], f, acc);
            }
            M = mb;
          }
          a.attn_out[static_cast<int64_t>(h * G + g) * HD + d] = to_b(acc / sum);
        }
        if (ctid == 0) a.counters[1 + h] = 0;  // every chunk has arrived: ready for the next layer
      }
    }
    consumers_sync<kC>();  // the shared memory is the next item's
  }
}

// Shared memory: the ring [stages][kC][kPitch] bf16, a region (x for a projection, or the attention's), a flag (128
// bytes), the row groups' partial sums [kPartGroups][kC][kC] floats, then 2 * stages mbarriers.
constexpr size_t kMiscBytes = 128 + sizeof(float) * kPartGroups * kC * kC;

template <int DPL, int G>
__global__ void __launch_bounds__(kThreads, 1)
    decode_layers_kernel(DecodeLayersArgs a, int stages, size_t region, int ablate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // TMA and mbarrier transactions need sm_90; decode_layers_supported() is false there
#else
  extern __shared__ __align__(128) unsigned char smem[];
  Ring ring;
  ring.stages = reinterpret_cast<bf16*>(smem);
  ring.count = stages;
  unsigned char* region_ptr = smem + static_cast<size_t>(stages) * kStageBytes;
  int* flag = reinterpret_cast<int*>(region_ptr + region);
  float* part = reinterpret_cast<float*>(region_ptr + region + 128);  // [kPartGroups][kC warps][kC rows]
  ring.full = reinterpret_cast<uint64_t*>(region_ptr + region + kMiscBytes);
  ring.empty = ring.full + stages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&ring.full[s], 1);
      mbar_init(&ring.empty[s], kC);  // every consumer warp takes a share of every tile
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x >> 5) == kC) {  // weights never depend on an earlier kernel: no PDL wait
    produce(a, ring);
    return;
  }
  pdl_wait();
  const int pos = *a.pos;
  const unsigned nb = gridDim.x, total = static_cast<unsigned>(5 * a.n_layers) * nb;
  unsigned* counter = a.counters;
  unsigned op = 0;
  int t = 0, rot = 0;
  // the diagnostic timeline: thread 0 stamps each op (trace_row)
  const bool stamp = a.trace != nullptr && threadIdx.x == 0;
  if (stamp) {
    unsigned long long* tr = trace_row(a, 5 * a.n_layers);
    tr[0] = globaltimer();
    tr[1] = static_cast<unsigned long long>(clock64());
  }
  for (int l = 0; l < a.n_layers; ++l) {
    const DecodeLayer L = a.layers[l];
    for (int p = kQkv; p <= kDown; ++p) {
      unsigned long long* tr = trace_row(a, static_cast<int>(op));
      if (stamp) tr[kTrBegin] = globaltimer();
      if (op > 0 && !(ablate & kAblateWaits)) grid_wait(counter, op * nb);
      if (stamp) tr[kTrReady] = globaltimer();
      const Gemv g = gemv_of(a, L, p);
      const bf16* x = p == kO ? a.attn_out : p == kDown ? a.act : a.x;
      bf16* y = p == kQkv ? a.qkv_out : p == kGateUp ? a.act : a.x;
      consume_gemv(g, x, y, p == kQkv || p == kGateUp, a.eps, ring, t, rot, reinterpret_cast<uint32_t*>(region_ptr),
                   part, !(ablate & kAblateMath), tr);
      rot = (rot + g.groups) % static_cast<int>(nb);
      if (stamp) tr[kTrEnd] = globaltimer();
      grid_arrive(counter, total);
      ++op;
      if (p == kQkv) {
        unsigned long long* tra = trace_row(a, static_cast<int>(op));
        if (stamp) tra[kTrBegin] = globaltimer();
        AttentionPrefetch<DPL, G> pre;
        if (!(ablate & kAblateAttention)) attention_prefetch<DPL, G>(a, L, pos, pre);
        if (!(ablate & kAblateWaits)) grid_wait(counter, op * nb);
        if (stamp) tra[kTrReady] = tra[kTrPrologue] = globaltimer();  // the prologue stamp is the first item's, if any
        if (!(ablate & kAblateAttention))
          consume_attention<DPL, G>(a, L, pos, reinterpret_cast<float*>(region_ptr), flag, pre, tra);
        if (stamp) {
          tra[kTrEnd] = globaltimer();
          tra[kTrStarve] = tra[kTrFirstCopy] = tra[kTrBlocked] = tra[kTrLastCopy] = 0ull;
        }
        grid_arrive(counter, total);
        ++op;
      }
    }
  }
  if (stamp) {
    unsigned long long* tr = trace_row(a, 5 * a.n_layers);
    tr[2] = globaltimer();
    tr[3] = static_cast<unsigned long long>(clock64());
  }
#endif
}

// SPECPRESS_DECODE_PERSISTENT_ABLATE (Ablate bits): a diagnostic of where the kernel's time goes; the decode step's
// outputs are wrong under it, so the first launch says so on stderr.
int ablate_setting() {
  static const int bits = [] {
    const int b = env_int("SPECPRESS_DECODE_PERSISTENT_ABLATE", 0, 7, 0, "0 .. 7");
    if (b != 0)
      std::fprintf(stderr, "SPECPRESS_DECODE_PERSISTENT_ABLATE=%d: a timing diagnostic; the decode step's outputs are "
                           "wrong\n", b);
    return b;
  }();
  return bits;
}

struct Layout {
  int stages = 0;
  size_t region = 0, smem = 0;
};

// Whether K splits into segments of at most kMaxKc columns (multiples of 16, whole MMA k-steps) with a non-empty last
// one.
bool segments_ok(int K) {
  int segs = 0, kc = 0;
  segment(K, segs, kc);
  return K > 0 && K % 16 == 0 && kc <= kMaxKc && K - (segs - 1) * kc > 0;
}

template <int DPL, int G> void* kernel_of() { return reinterpret_cast<void*>(decode_layers_kernel<DPL, G>); }

// The kernel for (hd, nq / nkv), or null.
void* kernel_for(int hd, int group) {
#define SPECPRESS_DL_G(DPL)                                  \
  switch (group) {                                           \
    case 1: return kernel_of<DPL, 1>();                      \
    case 2: return kernel_of<DPL, 2>();                      \
    case 4: return kernel_of<DPL, 4>();                      \
    case 8: return kernel_of<DPL, 8>();                      \
    default: return nullptr;                                 \
  }
  if (hd == 32) SPECPRESS_DL_G(1)
  if (hd == 64) SPECPRESS_DL_G(2)
  if (hd == 128) SPECPRESS_DL_G(4)
#undef SPECPRESS_DL_G
  return nullptr;
}

// Shared memory of the attention op (floats): q [G][hd], the warps' maxima and sums [kC][G] each, their P.V
// [kC][G][hd], then the staged qkv rows (bf16 [G + 2][hd]: the group's q heads, the new k and v).
size_t attention_smem(int hd, int group) {
  return sizeof(float) * (static_cast<size_t>(group) * hd * (kC + 1) + 2 * kC * group) +
         sizeof(bf16) * (group + 2) * hd;
}

// The layout for these shapes on the current device; stages == 0: none fits (or no TMA, or no such kernel).
cudaError_t layout_of(int H, int I, int nq, int nkv, int hd, Layout& out) {
  out = Layout{};
  if (H <= 0 || I <= 0 || nq <= 0 || nkv <= 0 || nq % nkv != 0) return cudaSuccess;
  void* kernel = kernel_for(hd, nq / nkv);
  if (kernel == nullptr) return cudaSuccess;
  for (int K : {H, I, nq * hd})
    if (!segments_ok(K)) return cudaSuccess;
  int dev = 0, smem_max = 0, cc_major = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e != cudaSuccess) return e;
  if (cc_major < 9) return cudaSuccess;
  const size_t x_bytes = sizeof(bf16) * static_cast<size_t>(std::max({H, I, nq * hd}));
  const size_t region = (std::max(x_bytes, attention_smem(hd, nq / nkv)) + 127) / 128 * 128;
  const size_t fixed = region + kMiscBytes;
  if (fixed >= static_cast<size_t>(smem_max)) return cudaSuccess;
  const int stages = static_cast<int>(
      std::min<size_t>(kMaxStages, (static_cast<size_t>(smem_max) - fixed) / (kStageBytes + 2 * sizeof(uint64_t))));
  if (stages < 2) return cudaSuccess;
  Layout L{stages, region, static_cast<size_t>(stages) * kStageBytes + fixed + 2 * sizeof(uint64_t) * stages};
  // the device's whole opt-in amount, so that a later layout of the same kernel (another model's shapes) never
  // finds the attribute lowered below its own
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max);
  int blocks = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, L.smem);
  if (e != cudaSuccess) return e;
  if (blocks >= 1) out = L;
  return cudaSuccess;
}

}  // namespace

bool decode_layers_supported(int H, int I, int nq, int nkv, int hd) {
  Layout L;
  if (layout_of(H, I, nq, nkv, hd, L) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed probe (say, no kernel image for this device) is an answer, not an error
    return false;
  }
  return L.stages > 0;
}

size_t decode_layers_workspace_floats(int nq, int nkv, int hd) {
  int dev = 0, sms = 0;  // the grid: one block an SM of the current device (decode_layers)
  if (nkv <= 0 || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  const int nch_max = std::max(1, sms / nkv);
  return static_cast<size_t>(nkv) * nch_max * (nq / nkv) * (hd + 2);
}

int decode_layers_counter_count(int nkv) { return 1 + nkv; }

cudaError_t decode_layers(const DecodeLayersArgs& a, cudaStream_t stream) {
  if (a.n_layers <= 0) return cudaSuccess;
  if (a.layers == nullptr || a.x == nullptr || a.qkv_out == nullptr || a.attn_out == nullptr || a.act == nullptr ||
      a.workspace == nullptr || a.counters == nullptr || a.pos == nullptr || a.rope_cos == nullptr ||
      a.rope_sin == nullptr || a.cache_capacity <= 0)
    return cudaErrorInvalidValue;
  for (const void* p : {static_cast<const void*>(a.x), static_cast<const void*>(a.qkv_out),
                        static_cast<const void*>(a.attn_out), static_cast<const void*>(a.act)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return cudaErrorInvalidValue;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  Layout L;
  {  // the layout of the last (device, shapes), computed again when they change; committed only once computed
    static std::mutex mutex;
    static int cached_key[6] = {-1, 0, 0, 0, 0, 0};
    static Layout cached;
    const int key[6] = {dev, a.H, a.I, a.nq, a.nkv, a.hd};
    std::lock_guard<std::mutex> lock(mutex);
    if (!std::equal(key, key + 6, cached_key)) {
      Layout fresh;
      e = layout_of(a.H, a.I, a.nq, a.nkv, a.hd, fresh);
      if (e != cudaSuccess) return e;
      cached = fresh;
      std::copy(key, key + 6, cached_key);
    }
    L = cached;
  }
  if (L.stages == 0) return cudaErrorInvalidValue;  // decode_layers_supported() is false for these shapes
  int sms = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  // One block an SM (layout_of checked that one fits), launched cooperatively: the grid-wide counter needs every block
  // resident at once, and a cooperative launch fails (cudaErrorCooperativeLaunchTooLarge) where the GPU cannot hold
  // them, rather than hang. Without PDL: the kernel starts once the one before it has completed.
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(sms));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = L.smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // the instance kernel_for() picked when layout_of() found this layout (L.stages > 0: it exists)
  const void* kernel = kernel_for(a.hd, a.nq / a.nkv);
  if (std::vector<const void*>* recorder = launch_recorder()) recorder->push_back(kernel);
  DecodeLayersArgs args = a;
  int stages = L.stages, ablate = ablate_setting();
  size_t region = L.region;
  void* params[] = {&args, &stages, &region, &ablate};
  return cudaLaunchKernelExC(&cfg, kernel, params);
}

}  // namespace specpress::kernels
