// lt_test_settings.h — for GPU tests that change the matmul mode or the cuBLASLt tuning switch: restores
// both and forgets the test's plans when it goes out of scope, however the test ends.
#pragma once
#include "kernels/aten_ops.h"
#include "kernels/lt_linear.h"

namespace specpress {

struct LtTestSettings {
  kernels::LtTuning tuning = kernels::lt_tuning();
  kernels::GemmMode mode = kernels::gemm_mode();
  ~LtTestSettings() {
    kernels::set_lt_tuning(tuning);
    kernels::set_gemm_mode(mode);
    kernels::clear_lt_plans();
  }
};

}  // namespace specpress
