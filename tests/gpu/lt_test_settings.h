// lt_test_settings.h — for GPU tests that change the matmul mode, the cuBLASLt tuning switch or the wgmma
// products' switches (SPECPRESS_WG16 and SPECPRESS_WG16_SWIGLU, which take multi-row products from cuBLASLt) or the
// engine's choice between them at capture (SPECPRESS_WG16_AUTO): restores all five and forgets the test's plans when
// it goes out of scope, however the test ends. A wgmma switch the test sets counts as chosen (EnvSwitch::chosen,
// which turns the capture-time choice off) only until then.
#pragma once
#include "kernels/aten_ops.h"
#include "kernels/lt_linear.h"
#include "model/qwen3_fast.h"

namespace specpress {

struct LtTestSettings {
  kernels::LtTuning tuning = kernels::lt_tuning();
  kernels::GemmMode mode = kernels::gemm_mode();
  int wg16 = kernels::wg16_switch().saved();  // set()'s states, so that a switch left to its environment stays so
  int wg16_swiglu = kernels::wg16_swiglu_switch().saved();
  bool multirow_auto = model::multirow_auto();
  ~LtTestSettings() {
    kernels::wg16_switch().restore(wg16);
    kernels::wg16_swiglu_switch().restore(wg16_swiglu);
    model::set_multirow_auto(multirow_auto);
    kernels::set_lt_tuning(tuning);
    kernels::set_gemm_mode(mode);
    kernels::clear_lt_plans();
  }
};

}  // namespace specpress
