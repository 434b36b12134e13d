// lt_test_settings.h — for GPU tests that change the matmul mode, the cuBLASLt tuning switch or the wgmma
// products' switches (SPECPRESS_WG16 and SPECPRESS_WG16_SWIGLU, which take multi-row products from cuBLASLt):
// restores all four and forgets the test's plans when it goes out of scope, however the test ends.
#pragma once
#include "kernels/aten_ops.h"
#include "kernels/lt_linear.h"

namespace specpress {

struct LtTestSettings {
  kernels::LtTuning tuning = kernels::lt_tuning();
  kernels::GemmMode mode = kernels::gemm_mode();
  bool wg16 = kernels::wg16_switch().on();
  bool wg16_swiglu = kernels::wg16_swiglu_switch().on();
  ~LtTestSettings() {
    kernels::wg16_switch().set(wg16);
    kernels::wg16_swiglu_switch().set(wg16_swiglu);
    kernels::set_lt_tuning(tuning);
    kernels::set_gemm_mode(mode);
    kernels::clear_lt_plans();
  }
};

}  // namespace specpress
