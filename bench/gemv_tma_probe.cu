// gemv_tma_probe.cu — the one-row matmul alone, three ways, at the Qwen3-4B / -8B projection shapes: the engine's
// register GEMV and its TMA GEMV (kernels/gemv.h: kernels::gemv under GemvTma::kOff and kAlways), and cublasGemmEx.
// A standalone probe (CUDA runtime, cuBLAS; no torch), run by hand on the GPU machine:
//   nvcc -std=c++20 -O3 -arch=sm_90a -Isrc bench/gemv_tma_probe.cu src/kernels/gemv.cu -lcublas -o /tmp/tma_probe
//   /tmp/tma_probe [--rounds N]     (SPECPRESS_GEMV_TMA_WARPS / _STAGES pick the TMA GEMV's layout, gemv.h)
// Each is timed as CUDA-graph replays over enough copies of W that they do not stay in the L2 (best of N rounds),
// printed as us a product and GB/s of W read; the TMA GEMV's output is checked bitwise against the register GEMV's.
// Alone, the TMA GEMV read the large weights faster (docs/PERF.md, sixteenth pass), but inside the decode step only
// the LM head kept a gain, so gemv_tma()'s default (kAuto) takes it for the LM heads alone.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gemv.h"
#include "probe_cublas.cuh"

namespace {
using bf16 = __nv_bfloat16;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = parse_rounds(argc, argv);
  const auto [stream, handle] = open_cublas_stream();
  const std::vector<Shape> shapes = {
      {"4B qkv", 6144, 2560},      {"4B o", 2560, 4096},        {"4B gate/up", 19456, 2560}, {"4B down", 2560, 9728},
      {"4B lm_head", 151936, 2560}, {"8B qkv", 6144, 4096},      {"8B o", 4096, 4096},        {"8B gate/up", 24576, 4096},
      {"8B down", 4096, 12288},     {"8B lm_head", 151936, 4096}};
  int status = 0;
  for (const Shape& sh : shapes) {
    const size_t w_elems = static_cast<size_t>(sh.N) * sh.K, w_bytes = w_elems * sizeof(bf16);
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(400) << 20) / w_bytes + 1));
    bf16 *W = nullptr, *x = nullptr, *y = nullptr;
    CK(cudaMalloc(&W, w_bytes * copies));
    CK(cudaMalloc(&x, sizeof(bf16) * sh.K));
    CK(cudaMalloc(&y, sizeof(bf16) * sh.N));
    fill_kernel<<<1024, 256, 0, stream>>>(W, w_elems * copies, 12345u, 0.05f);
    fill_kernel<<<64, 256, 0, stream>>>(x, sh.K, 777u, 1.f);
    CK(cudaGetLastError());
    auto Wc = [&](int i) { return W + static_cast<size_t>(i % copies) * w_elems; };
    auto gbps = [&](double us) { return static_cast<double>(w_bytes) / (us * 1e-6) / 1e9; };
    std::vector<bf16> out[2];
    double us[2];
    for (int tma = 0; tma < 2; ++tma) {
      specpress::kernels::set_gemv_tma(tma == 1 ? specpress::kernels::GemvTma::kAlways : specpress::kernels::GemvTma::kOff);
      us[tma] = time_graph(stream, 4 * copies, rounds, [&](int i) { CK(specpress::kernels::gemv(x, Wc(i), y, sh.N, sh.K, stream)); });
      CK(specpress::kernels::gemv(x, Wc(0), y, sh.N, sh.K, stream));
      out[tma].resize(sh.N);
      CK(cudaMemcpyAsync(out[tma].data(), y, sizeof(bf16) * sh.N, cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
    }
    const bool same = std::memcmp(out[0].data(), out[1].data(), sizeof(bf16) * sh.N) == 0;
    if (!same) status = 3;
    const float one = 1.f, zero = 0.f;
    const double cublas_us = time_graph(stream, 4 * copies, rounds, [&](int i) {
      CB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, 1, sh.K, &one, Wc(i), CUDA_R_16BF, sh.K, x, CUDA_R_16BF,
                      sh.K, &zero, y, CUDA_R_16BF, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    std::printf("%-11s N %6d K %5d (%6.1f MB): register GEMV %7.2f us %5.0f GB/s | TMA GEMV %7.2f us %5.0f GB/s (%+.1f%%)%s"
                " | cuBLAS %7.2f us %5.0f GB/s\n",
                sh.name, sh.N, sh.K, w_bytes / 1e6, us[0], gbps(us[0]), us[1], gbps(us[1]), 100.0 * (us[1] / us[0] - 1.0),
                same ? "" : " NOT BITWISE", cublas_us, gbps(cublas_us));
    probe_free({W, x, y});
  }
  CB(cublasDestroy(handle));
  return status;
}
