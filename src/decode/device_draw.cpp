// device_draw.cpp — see device_draw.h.
#include "decode/device_draw.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <limits>

#include "core/env_switch.h"
#include "core/error.h"
#include "kernels/aten_ops.h"

namespace specpress::decode {

bool device_temperature_draw() {
  static EnvSwitch s("SPECPRESS_DEVICE_DRAW", true);
  return s.on();
}

bool device_top_candidates() {
  static EnvSwitch s("SPECPRESS_DEVICE_CANDIDATES", true);
  return s.on();
}

std::unique_ptr<DeviceTemperatureDraw> attach_temperature_draw(Sampler& sampler, int64_t rows, at::Device device) {
  if (!device_temperature_draw() || sampler.params().greedy()) return nullptr;
  auto draw = std::make_unique<DeviceTemperatureDraw>(rows, device);
  sampler.set_temperature_draw(draw.get());
  return draw;
}

DeviceTemperatureDraw::DeviceTemperatureDraw(int64_t max_rows, at::Device device) : max_rows_(max_rows) {
  if (!device.is_cuda() || max_rows < 1)
    fail("DeviceTemperatureDraw: needs a CUDA device and at least one row, got {} and {}", device.str(), max_rows);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  uniforms_host_ = at::empty({max_rows}, f64.pinned_memory(true));
  picks_host_ = at::empty({max_rows}, i64.pinned_memory(true));
  uniforms_ = at::empty({max_rows}, f64.device(device));
  picks_ = at::empty({max_rows}, i64.device(device));
  partials_ = at::empty({max_rows, kernels::kTemperatureDrawMaxSplits, 2}, f64.device(device));
  sums_ = at::empty({max_rows}, f64.device(device));
  // the kernels clear the histogram and counters after each call
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  candidate_bins_ = at::zeros({max_rows * (kernels::kTopCandidatesBins + 2)}, i32.device(device));
  candidate_keys_ = at::empty({max_rows, kernels::kTopCandidatesKeys}, i64.device(device));
  candidates_ = at::empty({max_rows * 2 * kernels::kTopCandidatesMaxCount}, f64.device(device));
}

void DeviceTemperatureDraw::check_scores(const at::Tensor& scores) const {
  const bool ok = scores.dim() == 2 && scores.is_cuda() && scores.scalar_type() == at::kFloat &&
                  scores.is_contiguous() && scores.device() == partials_.device() && scores.size(0) <= max_rows_ &&
                  scores.size(1) >= 1 && scores.size(1) <= std::numeric_limits<int>::max();
  if (!ok)
    fail("DeviceTemperatureDraw: expected contiguous fp32 scores [rows <= {}, V] on {}, got {} {} on {}", max_rows_,
         partials_.device().str(), c10::str(scores.sizes()), c10::toString(scores.scalar_type()),
         scores.device().str());
}

kernels::TemperatureDrawArgs DeviceTemperatureDraw::args_of(const at::Tensor& scores, double temperature) const {
  if (!(temperature > 0.0)) fail("DeviceTemperatureDraw: the temperature must be > 0, got {}", temperature);
  kernels::TemperatureDrawArgs a;
  a.logits = scores.data_ptr<float>();
  a.row_stride = scores.size(1);
  a.rows = static_cast<int>(scores.size(0));
  a.vocab = static_cast<int>(scores.size(1));
  a.temperature = temperature;
  a.partials = partials_.data_ptr<double>();
  return a;
}

std::vector<int64_t> DeviceTemperatureDraw::draw(const at::Tensor& scores, double temperature,
                                                 const std::vector<double>& u) {
  check_scores(scores);
  const int64_t rows = scores.size(0);
  if (static_cast<int64_t>(u.size()) != rows)
    fail("DeviceTemperatureDraw: {} uniforms for {} rows; expected one a row", u.size(), rows);
  std::vector<int64_t> out(static_cast<size_t>(rows));
  if (rows == 0) return out;
  const c10::cuda::CUDAGuard guard(scores.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  std::copy(u.begin(), u.end(), uniforms_host_.data_ptr<double>());
  kernels::check_cuda(cudaMemcpyAsync(uniforms_.data_ptr<double>(), uniforms_host_.data_ptr<double>(),
                                      static_cast<size_t>(rows) * sizeof(double), cudaMemcpyHostToDevice, stream),
                      "temperature draw: uniforms");
  kernels::TemperatureDrawArgs a = args_of(scores, temperature);
  a.uniforms = uniforms_.data_ptr<double>();
  a.picks = reinterpret_cast<long long*>(picks_.data_ptr<int64_t>());
  kernels::check_cuda(kernels::temperature_draw(a, stream), "temperature draw");
  kernels::check_cuda(cudaMemcpyAsync(picks_host_.data_ptr<int64_t>(), picks_.data_ptr<int64_t>(),
                                      static_cast<size_t>(rows) * sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
                      "temperature draw: picks");
  kernels::check_cuda(cudaStreamSynchronize(stream), "temperature draw: sync");
  const int64_t* h = picks_host_.data_ptr<int64_t>();
  std::copy(h, h + rows, out.begin());
  return out;
}

at::Tensor DeviceTemperatureDraw::row_sums(const at::Tensor& scores, double temperature) {
  check_scores(scores);
  const c10::cuda::CUDAGuard guard(scores.device());
  kernels::check_cuda(kernels::temperature_row_sums(args_of(scores, temperature), sums_.data_ptr<double>(),
                                                    at::cuda::getCurrentCUDAStream().stream()),
                      "temperature row sums");
  return sums_.narrow(0, 0, scores.size(0));
}

at::Tensor DeviceTemperatureDraw::top_candidates(const at::Tensor& scores, int64_t count) {
  check_scores(scores);
  const int64_t rows = scores.size(0), V = scores.size(1);
  if (!device_top_candidates() || count < 1 || count > kernels::kTopCandidatesMaxCount || count > V) return {};
  const c10::cuda::CUDAGuard guard(scores.device());
  kernels::TopCandidatesArgs a;
  a.scores = scores.data_ptr<float>();
  a.row_stride = V;
  a.rows = static_cast<int>(rows);
  a.vocab = static_cast<int>(V);
  a.count = static_cast<int>(count);
  unsigned* bins = reinterpret_cast<unsigned*>(candidate_bins_.data_ptr<int32_t>());
  a.histogram = bins;  // rows' histograms, then their counters
  a.counters = bins + max_rows_ * kernels::kTopCandidatesBins;
  a.keys = reinterpret_cast<unsigned long long*>(candidate_keys_.data_ptr<int64_t>());
  a.out = candidates_.data_ptr<double>();
  kernels::check_cuda(kernels::top_candidates(a, at::cuda::getCurrentCUDAStream().stream()), "top candidates");
  return candidates_.narrow(0, 0, rows * 2 * count).view({rows, 2 * count});
}

}  // namespace specpress::decode
