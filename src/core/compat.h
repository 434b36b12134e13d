// compat.h — the only place that knows two LibTorch versions exist: Debian's 1.13 (CPU, CI) and the
// GPU machine's pip torch 2.x (CUDA). Everything else includes ATen and calls these shims.
#pragma once
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

// torch 2.4 replaced the CUDA-only autocast setters by per-device-type ones (the old ones are deprecated).
#define SPECPRESS_DEVICE_TYPE_AUTOCAST (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace specpress::compat {

constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;
// Float16 matrix products on the CPU: LibTorch 1.13's addmm has no Half kernel (only some stride patterns reach a
// BLAS call that has one), so the models cannot run in f16 there.
constexpr bool kCpuHalfMatmul = kTorch2;

// Number of bytes of one element of `t`'s dtype.
inline int64_t element_size(const at::Tensor& t) { return static_cast<int64_t>(t.element_size()); }

// Mixed-precision autocast on CUDA (matmuls in `dtype`, reductions in fp32) for the guard's lifetime,
// as `with torch.autocast("cuda", dtype)` does; a no-op when disabled or on CPU. Training only.
class CudaAutocast {
 public:
  CudaAutocast(bool enabled, at::ScalarType dtype) : active_(enabled) {
    if (!active_) return;
#if SPECPRESS_DEVICE_TYPE_AUTOCAST
    prev_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    prev_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    prev_enabled_ = at::autocast::is_enabled();
    prev_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
    at::autocast::increment_nesting();
  }
  ~CudaAutocast() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if SPECPRESS_DEVICE_TYPE_AUTOCAST
    at::autocast::set_autocast_enabled(at::kCUDA, prev_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, prev_dtype_);
#else
    at::autocast::set_enabled(prev_enabled_);
    at::autocast::set_autocast_gpu_dtype(prev_dtype_);
#endif
  }
  CudaAutocast(const CudaAutocast&) = delete;
  CudaAutocast& operator=(const CudaAutocast&) = delete;

 private:
  bool active_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

}  // namespace specpress::compat
