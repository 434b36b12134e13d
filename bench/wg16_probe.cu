// wg16_probe.cu — is the wgmma 16-row product (src/kernels/gemm_wg16.h) faster than cuBLAS at the Qwen3-4B / -8B
// verify shapes, alone and behind a latency-bound kernel as in the verify step? A standalone probe (CUDA runtime,
// cuBLAS; no torch), run by hand on the GPU machine:
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -Isrc bench/wg16_probe.cu src/kernels/gemm_wg16.cu \
//     -lcublas -o /tmp/wg16_probe && /tmp/wg16_probe [--rounds N]
//
// For each projection: cuBLAS (cublasGemmEx, the engine's at::mm_out) and every plan of the wgmma kernel (K splits,
// ring stages, chunks a stage), as CUDA-graph replays over enough copies of W that they do not stay in the L2 (best
// of N rounds); each result checked against cuBLAS's within 2e-2 of max |Y| (exit 3 if not). Then the best plans
// again: chained under PDL (the next product's ring fills while this one ends), and behind a stand-in for the verify
// attention (a 32-block kernel that spins 8 µs and lets the next kernel in at its start, as attention.cu does):
// spin + cuBLAS against spin + wgmma under PDL, µs a pair. Last, the residual form (Y = R + X W^T, Y == R) and a
// 15-row X are checked at each shape's best plan.
// Result on the H200 (docs/PERF.md, twenty-fifth pass; docs/results/wg16_probe_h200_2026-12-01_pass25_call8.log):
// every plan correct; the best plan 7.3% faster than cuBLAS on the 4B gate/up shape and 2.7% on the 8B o, 1-6%
// slower on the other six; behind the spin it adds 0.5 (8B gate/up) to 4.8 us (4B gate/up) less than cuBLAS.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/gemm_wg16.h"
#include "probe_cublas.cuh"

namespace {
using specpress::kernels::detail::bf16;
namespace sk = specpress::kernels;
constexpr int kTok = 16;

// The verify attention's stand-in: waits for the previous kernel, lets the next one in, spins `ns`.
__global__ void spin_kernel(unsigned ns) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
// Launches with or without PDL: the kernels' launch helper (kernels/launch.h) reads the process setting.
void launch_spin(cudaStream_t stream, bool pdl) {
  sk::set_pdl(pdl);
  CK(sk::detail::launch_kernel(spin_kernel, dim3(32), dim3(256), 0, stream, 8000u));
}
cudaError_t launch_wg16(const sk::Wg16Args& a, cudaStream_t stream, bool pdl) {
  sk::set_pdl(pdl);
  return sk::gemm_wg16(a, stream);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = parse_rounds(argc, argv);
  const auto [stream, handle] = open_cublas_stream();
  int sms = 0, smem_max = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  const double copy_gbps = probe_copy_gbps(stream, sms, rounds);
  std::printf("copy bandwidth %.0f GB/s (read + write), %d SMs\n", copy_gbps, sms);
  const std::vector<Shape> shapes = qwen3_verify_shapes();
  int status = 0;
  const float one = 1.f, zero = 0.f;
  for (const Shape& sh : shapes) {
    const size_t w_elems = static_cast<size_t>(sh.N) * sh.K, w_bytes = w_elems * sizeof(bf16);
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(400) << 20) / w_bytes + 1));
    bf16 *W = nullptr, *X = nullptr, *Y = nullptr, *Yref = nullptr, *Rres = nullptr;
    float* ws = nullptr;
    unsigned* cnt = nullptr;
    CK(cudaMalloc(&W, w_bytes * copies));
    CK(cudaMalloc(&X, sizeof(bf16) * kTok * sh.K));
    CK(cudaMalloc(&Y, sizeof(bf16) * kTok * sh.N));
    CK(cudaMalloc(&Yref, sizeof(bf16) * kTok * sh.N));
    CK(cudaMalloc(&Rres, sizeof(bf16) * kTok * sh.N));
    CK(cudaMalloc(&ws, sizeof(float) * sk::wg16_workspace_floats(sh.N, 16)));
    CK(cudaMalloc(&cnt, sizeof(unsigned) * sk::wg16_tiles(sh.N)));
    CK(cudaMemset(cnt, 0, sizeof(unsigned) * sk::wg16_tiles(sh.N)));
    fill_kernel<<<1024, 256, 0, stream>>>(W, w_elems * copies, 12345u, 0.05f);
    fill_kernel<<<64, 256, 0, stream>>>(X, static_cast<size_t>(kTok) * sh.K, 777u, 1.f);
    fill_kernel<<<64, 256, 0, stream>>>(Rres, static_cast<size_t>(kTok) * sh.N, 4242u, 1.f);
    CK(cudaGetLastError());
    const bf16* Wlast = W + static_cast<size_t>(copies - 1) * w_elems;  // the checked copy
    CB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, kTok, sh.K, &one, Wlast, CUDA_R_16BF, sh.K, X, CUDA_R_16BF,
                    sh.K, &zero, Yref, CUDA_R_16BF, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    std::vector<bf16> ref(static_cast<size_t>(kTok) * sh.N), got(ref.size()), res(ref.size());
    CK(cudaMemcpyAsync(ref.data(), Yref, sizeof(bf16) * ref.size(), cudaMemcpyDeviceToHost, stream));
    CK(cudaMemcpyAsync(res.data(), Rres, sizeof(bf16) * res.size(), cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    auto cublas = [&](int i) {
      CB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, kTok, sh.K, &one,
                      W + static_cast<size_t>(i % copies) * w_elems, CUDA_R_16BF, sh.K, X, CUDA_R_16BF, sh.K, &zero, Y,
                      CUDA_R_16BF, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    const double cublas_us = time_graph(stream, 4 * copies, rounds, cublas);
    auto pct = [&](double us) { return 100.0 * static_cast<double>(w_bytes) / (us * 1e-6) / (copy_gbps * 1e9); };
    std::printf("%-10s N %6d K %5d (%5.1f MB): cuBLAS %7.2f us %5.1f%%\n", sh.name, sh.N, sh.K, w_bytes / 1e6,
                cublas_us, pct(cublas_us));
    auto args_of = [&](const sk::Wg16Plan& p, int i) {
      sk::Wg16Args a;
      a.W = W + static_cast<size_t>(i % copies) * w_elems;
      a.ldw = sh.K;
      a.X = X;
      a.ldx = sh.K;
      a.Y = Y;
      a.ldy = sh.N;
      a.T = kTok;
      a.N = sh.N;
      a.K = sh.K;
      a.workspace = ws;
      a.counters = cnt;
      a.plan = p;
      a.x_stage_box = true;  // as the fast engine's products (kernels::wg16_x_stage_box)
      return a;
    };
    // max |got - want| / max |want| over the first `rows` rows; rows past them must hold the NaN fill (0xFFFF)
    auto check = [&](const std::vector<bf16>& want, int rows) {
      CK(cudaMemcpyAsync(got.data(), Y, sizeof(bf16) * got.size(), cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      double max_ref = 0, max_diff = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double gv = __bfloat162float(got[i]);
        if (static_cast<int>(i / sh.N) >= rows) {
          if (!std::isnan(gv)) max_diff = 1e30;
          continue;
        }
        const double rv = __bfloat162float(want[i]);
        max_ref = std::max(max_ref, std::fabs(rv));
        max_diff = std::max(max_diff, std::isfinite(gv) ? std::fabs(gv - rv) : 1e30);
      }
      return max_diff / std::max(max_ref, 1e-30);
    };
    struct Result {
      sk::Wg16Plan p;
      double us, err;
    };
    std::vector<Result> results;
    const int chunks = (sh.K + sk::kWg16Chunk - 1) / sk::kWg16Chunk, tiles = sk::wg16_tiles(sh.N);
    for (int kb : {1, 2, 4})
      for (int stages : {2, 3, 4, 6, 8})
        for (int splits : {1, 2, 3, 4, 6, 8, 12, 16}) {
          const sk::Wg16Plan p{splits, stages, kb};
          if (sk::wg16_smem_bytes(p) + 64 > static_cast<size_t>(smem_max) || chunks % kb != 0 || splits > chunks / kb)
            continue;
          if (tiles * splits > 16 * sms || tiles * splits < sms / 4) continue;
          Result r{p, 0, 0};
          r.us = time_graph(stream, 4 * copies, rounds, [&](int i) { CK(launch_wg16(args_of(p, i), stream, false)); });
          CK(cudaMemsetAsync(Y, 0xFF, sizeof(bf16) * kTok * sh.N, stream));
          CK(launch_wg16(args_of(p, copies - 1), stream, false));
          r.err = check(ref, kTok);
          if (r.err > 2e-2) {
            status = 3;
            std::printf("    wg16 splits %2d stages %d kb %d: WRONG (err %.1e)\n", splits, stages, kb, r.err);
          }
          results.push_back(r);
        }
    std::sort(results.begin(), results.end(), [](const Result& x, const Result& y) { return x.us < y.us; });
    for (size_t i = 0; i < results.size() && i < 4; ++i) {
      const Result& r = results[i];
      const double pdl_us =
          time_graph(stream, 4 * copies, rounds, [&](int j) { CK(launch_wg16(args_of(r.p, j), stream, true)); });
      std::printf(
          "    wg16 splits %2d stages %d kb %d (%4d blocks): %7.2f us %5.1f%% (%+5.1f%% vs cuBLAS), chained "
          "under PDL %7.2f us %5.1f%%; err %.1e\n",
          r.p.splits, r.p.stages, r.p.kb, tiles * r.p.splits, r.us, pct(r.us), 100.0 * (r.us / cublas_us - 1.0), pdl_us,
          pct(pdl_us), r.err);
    }
    if (results.empty()) continue;
    // behind the attention's stand-in: spin + product pairs
    const sk::Wg16Plan best = results[0].p;
    const double spin_us = time_graph(stream, 4 * copies, rounds, [&](int) { launch_spin(stream, false); });
    const double pair_cublas = time_graph(stream, 4 * copies, rounds, [&](int i) {
      launch_spin(stream, false);
      cublas(i);
    });
    const double pair_wg = time_graph(stream, 4 * copies, rounds, [&](int i) {
      launch_spin(stream, true);
      CK(launch_wg16(args_of(best, i), stream, true));
    });
    std::printf(
        "    behind an 8 us spin (alone %.2f us): + cuBLAS %7.2f us (adds %.2f), + wg16 under PDL %7.2f us (adds "
        "%.2f)\n",
        spin_us, pair_cublas, pair_cublas - spin_us, pair_wg, pair_wg - spin_us);
    // the residual form in place (Y = Y + X W^T, Y holding R) and a 15-row X, at the best plan
    {
      std::vector<bf16> want(ref.size());
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = __float2bfloat16_rn(__bfloat162float(res[i]) + __bfloat162float(ref[i]));
      CK(cudaMemcpyAsync(Y, Rres, sizeof(bf16) * kTok * sh.N, cudaMemcpyDeviceToDevice, stream));
      sk::Wg16Args a = args_of(best, copies - 1);
      a.R = Y;
      a.ldr = sh.N;
      CK(launch_wg16(a, stream, false));
      const double err_res = check(want, kTok);
      CK(cudaMemsetAsync(Y, 0xFF, sizeof(bf16) * kTok * sh.N, stream));
      a = args_of(best, copies - 1);
      a.T = 15;
      CK(launch_wg16(a, stream, false));
      const double err_15 = check(ref, 15);
      std::printf("    residual in place: err %.1e; 15 rows: err %.1e%s\n", err_res, err_15,
                  err_res > 2e-2 || err_15 > 2e-2 ? " WRONG" : "");
      if (err_res > 2e-2 || err_15 > 2e-2) status = 3;
    }
    probe_free({W, X, Y, Yref, Rres, ws, cnt});
  }
  CB(cublasDestroy(handle));
  return status;
}
