// device_draw.h — the fast path's TemperatureDraw (decode/sampler.h): kernels::temperature_draw and
// temperature_row_sums with their buffers allocated once (uniforms, partials, picks, sums, and pinned host copies),
// so that a sampled step at a plain temperature adds two launches, two small copies and one stream synchronisation
// instead of the ATen transform's dozen launches, and top-p without top-k gets its normaliser in two launches.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "decode/sampler.h"
#include "kernels/temperature_draw.h"

namespace specpress::decode {

// SPECPRESS_DEVICE_DRAW (default 1): the fast loops sample plain-temperature rows with DeviceTemperatureDraw; 0 keeps
// the sampler's ATen transform there (its twin), for A/B runs and checks of the same tokens.
bool device_temperature_draw();

class DeviceTemperatureDraw final : public TemperatureDraw {
 public:
  // Up to `max_rows` rows a call, on `device` (a CUDA device).
  DeviceTemperatureDraw(int64_t max_rows, at::Device device);
  // Runs on the current CUDA stream and waits for it.
  std::vector<int64_t> draw(const at::Tensor& scores, double temperature, const std::vector<double>& u) override;
  // Queued on the current CUDA stream; a view of the draw's own buffer.
  at::Tensor row_sums(const at::Tensor& scores, double temperature) override;

 private:
  int64_t max_rows_;
  at::Tensor uniforms_host_, uniforms_;  // fp64 [max_rows], pinned / device
  at::Tensor partials_;                  // fp64 [max_rows, kTemperatureDrawMaxSplits, 2]
  at::Tensor picks_, picks_host_;        // int64 [max_rows], device / pinned
  at::Tensor sums_;                      // fp64 [max_rows]

  // Fails naming what was expected unless `scores` is contiguous fp32 [rows <= max_rows, V] on the draw's device.
  void check_scores(const at::Tensor& scores) const;
  kernels::TemperatureDrawArgs args_of(const at::Tensor& scores, double temperature) const;
};

// The fast loops' set-up: a draw of up to `rows` rows on `device`, handed to `sampler`, when the switch is on and the
// sampler's steps are sampled; null otherwise (greedy steps never draw). The sampler keeps the pointer: the caller
// holds the returned draw for as long as it samples.
std::unique_ptr<DeviceTemperatureDraw> attach_temperature_draw(Sampler& sampler, int64_t rows, at::Device device);

}  // namespace specpress::decode
