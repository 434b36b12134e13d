// compressor_trainer.h — `specpress train-compressor`: trains the beacon compressor (compress/beacon.h)
// for a frozen Qwen3 target by context distillation (compression-design.md §7.6): each step runs
// teacher-forced trajectories of the target's own generations in the parallel masked layout
// (beacon_layout.h, every compression event of a trajectory in one forward) and minimises
// KL(p_uncompressed || p_compressed) on the token rows after the first event, optionally plus a
// next-token cross-entropy. The span features start as the uncompressed target's taps and are refined
// towards what the online engine taps (beacon_layout.h, refine_features). Trajectories come from the target itself (greedy; with --draft, DFlash
// runs whose verify spans become the compression units) or from token/text data with sampled spans.
// Held-out evaluation replays trajectories through the real compressed engine (compress::
// evaluate_fidelity) and reports the mean KL; the training-free controls and the untrained beacon are
// measured once up front on the same trajectories, as the bar to beat. All of it also goes to
// OUT/eval.json (baselines and every evaluation, kept across a resume).
#pragma once
#include <string>
#include <vector>

#include "compress/policy.h"
#include "train/data.h"
#include "train/loop.h"

namespace specpress::train {

struct CompressorOptions : CommonOptions {
  std::string target_dir;
  std::string draft_dir;                   // optional: DFlash generations, spans = verify steps
  std::vector<std::string> on_policy_prompts;
  int64_t gen_tokens = 256;                // new tokens per generated trajectory
  compress::Policy policy;                 // window, sinks, merge (the method is the beacon)
  std::vector<int64_t> feature_layers;     // empty: the draft's taps, else DFlash's default for one layer
  int64_t width = 256;
  int64_t max_span = 64;
  double ce_weight = 0;
  int64_t span_max = 16;                   // without a draft: span lengths uniform in 1..span_max
  int64_t feature_passes = 1;              // refinements of the teacher taps towards the online features
  std::vector<std::string> eval_prompts;   // held-out prompts (default: the last trajectories)
  int64_t eval_samples = 4;
  int64_t eval_every = 0;                  // 0 = only at the end
  CompressorOptions() { save_dtype = "f32"; }  // a small module the engine runs in float32
};

TrainSummary train_compressor(const CompressorOptions& options, const TextCodec& codec);

}  // namespace specpress::train
