// optim.cpp — see optim.h.
#include "train/optim.h"

#include <c10/core/GradMode.h>
#include <cmath>
#include <map>

#include <fmt/ranges.h>

#include "core/error.h"

namespace specpress::train {

double learning_rate(const OptimConfig& c, int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(decay_steps));
  const double min_lr = c.lr * c.min_lr_ratio;
  return min_lr + 0.5 * (c.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(NamedTensors params, OptimConfig config) : params_(std::move(params)), config_(config) {
  for (const auto& [name, p] : params_) {
    exp_avg_.push_back(at::zeros_like(p).detach());
    exp_avg_sq_.push_back(at::zeros_like(p).detach());
  }
}

double AdamW::step(int64_t step) {
  c10::NoGradGuard no_grad;
  at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(params_.front().second.device()));
  for (const auto& [name, p] : params_)
    if (p.grad().defined()) total = total + p.grad().to(at::kFloat).pow(2).sum();
  const double grad_norm = std::sqrt(total.item<double>());
  if (!std::isfinite(grad_norm)) fail("training diverged: gradient norm is {} at step {}", grad_norm, step + 1);
  const double clip = config_.grad_clip > 0 && grad_norm > config_.grad_clip ? config_.grad_clip / (grad_norm + 1e-6) : 1.0;

  ++updates_;
  const double lr = learning_rate(config_, step);
  const double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(updates_));
  const double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(updates_));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i].second;
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    if (clip < 1.0) g = g * clip;
    exp_avg_[i].mul_(config_.beta1).add_(g, 1.0 - config_.beta1);
    exp_avg_sq_[i].mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
    if (config_.weight_decay > 0 && p.dim() >= 2) p.mul_(1.0 - lr * config_.weight_decay);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bc2)).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
    p.mutable_grad().reset();
  }
  return grad_norm;
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state(const NamedTensors& state, int64_t updates, const std::string& source) {
  std::map<std::string, at::Tensor> map(state.begin(), state.end());
  auto take = [&](const std::string& name, const at::Tensor& like) {
    auto it = map.find(name);
    if (it == map.end()) fail("{}: optimizer tensor '{}' missing", source, name);
    if (it->second.sizes() != like.sizes())
      fail("{}: optimizer tensor '{}' has shape [{}], expected [{}]", source, name, fmt::join(it->second.sizes().vec(), ", "),
           fmt::join(like.sizes().vec(), ", "));
    return it->second.to(like.device(), like.scalar_type());
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i] = take("exp_avg." + params_[i].first, exp_avg_[i]);
    exp_avg_sq_[i] = take("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  if (map.size() != 2 * params_.size())
    fail("{}: holds {} optimizer tensors, expected {}", source, map.size(), 2 * params_.size());
  updates_ = updates;
}

}  // namespace specpress::train
