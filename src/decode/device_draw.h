// device_draw.h — the fast path's TemperatureDraw (decode/sampler.h): kernels::temperature_draw,
// temperature_row_sums and top_candidates with their buffers allocated once (uniforms, partials, picks, sums, the
// candidates' scratch, and pinned host copies), so that a sampled step at a plain temperature adds two launches, two
// small copies and one stream synchronisation instead of the ATen transform's dozen launches, top-p without top-k
// gets its normaliser in two launches, and the candidates of top-k, top-p and min-p take three launches, not topk.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "decode/sampler.h"
#include "kernels/temperature_draw.h"
#include "kernels/top_candidates.h"

namespace specpress::decode {

// SPECPRESS_DEVICE_DRAW (default 1): the fast loops sample plain-temperature rows with DeviceTemperatureDraw; 0 keeps
// the sampler's ATen transform there (its twin), for A/B runs and checks of the same tokens.
bool device_temperature_draw();

// SPECPRESS_DEVICE_CANDIDATES (default 1): the sampler's candidates by kernels::top_candidates; 0 leaves them to topk
// (the twin), for A/B runs and checks of the same tokens.
bool device_top_candidates();

class DeviceTemperatureDraw final : public TemperatureDraw {
 public:
  // Up to `max_rows` rows a call, on `device` (a CUDA device).
  DeviceTemperatureDraw(int64_t max_rows, at::Device device);
  // Runs on the current CUDA stream and waits for it.
  std::vector<int64_t> draw(const at::Tensor& scores, double temperature, const std::vector<double>& u) override;
  // Queued on the current CUDA stream; a view of the draw's own buffer.
  at::Tensor row_sums(const at::Tensor& scores, double temperature) override;
  // Up to kernels::kTopCandidatesMaxCount candidates; queued on the current CUDA stream, a view of the draw's buffer.
  at::Tensor top_candidates(const at::Tensor& scores, int64_t count) override;

 private:
  int64_t max_rows_;
  at::Tensor uniforms_host_, uniforms_;  // fp64 [max_rows], pinned / device
  at::Tensor partials_;                  // fp64 [max_rows, kTemperatureDrawMaxSplits, 2]
  at::Tensor picks_, picks_host_;        // int64 [max_rows], device / pinned
  at::Tensor sums_;                      // fp64 [max_rows]
  at::Tensor candidate_bins_;            // int32: [max_rows, kTopCandidatesBins] histograms, [max_rows, 2] counters
  at::Tensor candidate_keys_;            // int64 [max_rows, kTopCandidatesKeys]
  at::Tensor candidates_;                // fp64 [max_rows * 2 * kTopCandidatesMaxCount]

  // Fails naming what was expected unless `scores` is contiguous fp32 [rows <= max_rows, V] on the draw's device.
  void check_scores(const at::Tensor& scores) const;
  kernels::TemperatureDrawArgs args_of(const at::Tensor& scores, double temperature) const;
};

// The fast loops' set-up: a draw of up to `rows` rows on `device`, handed to `sampler`, when the switch is on and the
// sampler's steps are sampled; null otherwise (greedy steps never draw). The sampler keeps the pointer: the caller
// holds the returned draw for as long as it samples.
std::unique_ptr<DeviceTemperatureDraw> attach_temperature_draw(Sampler& sampler, int64_t rows, at::Device device);

}  // namespace specpress::decode
