// rmsnorm.cpp — see rmsnorm.h.
#include "ops/rmsnorm.h"

namespace specpress::ops {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  xf = xf * at::rsqrt(variance + eps);
  return weight * xf.to(x.scalar_type());
}

}  // namespace specpress::ops
