// observed_forward.cpp — the target forward of a decoding loop with a CommitObserver attached (see
// generation.h): extra tap layers for the observer's span features, fused latent rows, after_forward.
#include "decode/generation.h"

namespace specpress::decode {

model::ForwardOutput observed_forward(const model::Qwen3Model& target, const at::Tensor& ids, int64_t start,
                                      model::KVCache& cache, const model::ForwardOptions& options,
                                      CommitObserver* observer, at::Tensor* features) {
  if (observer == nullptr) return target.forward(ids, start, cache, options);  // the plain engine, unchanged
  const std::vector<int64_t>& extra = observer->feature_layers();
  const model::LatentRows* latents = observer->pending_latents();
  if (extra.empty() && latents == nullptr) return target.forward(ids, start, cache, options);
  model::ForwardOptions with_observer = options;
  const int64_t loop_taps = static_cast<int64_t>(options.tap_layers.size());
  with_observer.tap_layers.insert(with_observer.tap_layers.end(), extra.begin(), extra.end());
  with_observer.latents = latents;
  model::ForwardOutput out = target.forward(ids, start, cache, with_observer);
  if (latents != nullptr) observer->after_forward(cache);
  if (!extra.empty()) {
    const int64_t H = target.config().hidden_size;
    if (features != nullptr) *features = out.taps.narrow(1, loop_taps * H, static_cast<int64_t>(extra.size()) * H);
    out.taps = loop_taps > 0 ? out.taps.narrow(1, 0, loop_taps * H) : at::Tensor();
  }
  return out;
}

}  // namespace specpress::decode
