// golden_pair.h — a GoogleTest fixture holding the golden tiny target and DFlash draft
// (../shared/golden/dflash-tiny-a) in float32 on the test device, skipped when ../shared is absent.
#pragma once
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include <memory>

#include "model/dflash_draft.h"
#include "model/qwen3.h"
#include "test_util.h"

namespace specpress::test {

class GoldenPair : public ::testing::Test {
 protected:
  void SetUp() override {
    SPECPRESS_REQUIRE_SHARED();
    const at::Device device(test_device_name());
    target_ = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(golden_dir() + "/target", at::kFloat, device));
    draft_ = std::make_unique<model::DFlashDraft>(model::DFlashDraft::load(golden_dir() + "/draft", *target_, at::kFloat, device));
  }
  c10::InferenceMode mode_;
  std::unique_ptr<model::Qwen3Model> target_;
  std::unique_ptr<model::DFlashDraft> draft_;
};

}  // namespace specpress::test
