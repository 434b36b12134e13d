// compat.h — the only place that knows two LibTorch versions exist: Debian's 1.13 (CPU, CI) and the
// GPU machine's pip torch 2.x (CUDA). Everything else includes ATen and calls these shims.
#pragma once
#include <ATen/ATen.h>
#include <torch/version.h>

namespace specpress::compat {

constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// Number of bytes of one element of `t`'s dtype.
inline int64_t element_size(const at::Tensor& t) { return static_cast<int64_t>(t.element_size()); }

}  // namespace specpress::compat
