// optim.h — AdamW (decoupled weight decay on matrices only, as is usual for transformer training),
// linear warmup then cosine decay of the learning rate, and global-norm gradient clipping. The state
// (first/second moments per parameter, step count) round-trips through named tensors for checkpoints.
#pragma once
#include <cstdint>
#include <string>

#include "train/params.h"

namespace specpress::train {

struct OptimConfig {
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // the cosine ends at lr * min_lr_ratio
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;     // max global L2 norm; <= 0 = off
};

// Learning rate for 0-based `step`.
double learning_rate(const OptimConfig& config, int64_t step);

class AdamW {
 public:
  AdamW(NamedTensors params, OptimConfig config);
  // Clips the gradients, applies one update at the rate of `step` and clears the gradients. Returns the
  // gradient norm before clipping.
  double step(int64_t step);
  // exp_avg.NAME / exp_avg_sq.NAME, for checkpoints; `updates` counts applied steps.
  NamedTensors state() const;
  void load_state(const NamedTensors& state, int64_t updates, const std::string& source);
  int64_t updates() const { return updates_; }

 private:
  NamedTensors params_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  OptimConfig config_;
  int64_t updates_ = 0;
};

}  // namespace specpress::train
