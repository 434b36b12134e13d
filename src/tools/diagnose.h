// diagnose.h — `specpress diagnose`: how a DFlash draft relates to its target, measured along the
// target's own greedy trajectory (teacher-forced, so every block start sees only target tokens):
//  * per draft block position k: draft top-1 agreement with the target token, rank of the target token
//    under the draft, KL(target || draft), and the acceptance the speculative loop would get (all of
//    positions 1..k matching);
//  * calibration: draft confidence (max probability) in bins vs how often its top-1 is the target token;
//  * by target entropy: the draft positions binned by the entropy of the target's distribution there (nats; edges
//    kEntropyEdges), with the draft's top-1 agreement and KL in each: how agreement falls as the target grows unsure;
//  * logit lens: every target layer's residual through the final norm and LM head, top-1 agreement
//    with the final layer;
//  * "draft-guided decoding": whether mixing the draft's (or an intermediate layer's) log-probabilities
//    into the target's, with weight lambda, would change any greedy token;
//  * with --temps: the acceptance a speculative step would get when sampling at each temperature T, in expectation
//    and exactly (no sampling noise): at each block start whose block lies in the trajectory the target verifies the
//    draft's whole block in one forward, as the DFlash loop does, and drafted token k is accepted with probability
//    prod_{j<=k} p_T(d_j | context, d_<j) (sample-and-match with greedy drafts, dflash-spec.md §3.5). T = 0 reproduces
//    the greedy acceptance over those starts.
// Every number is a sum over samples divided at the end (DiagnoseSums), so that --checkpoint keeps each finished
// sample's sums and a resumed run reports what the uninterrupted one would.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/dflash_draft.h"
#include "model/qwen3.h"
#include "tokenizer/tokenizer.h"
#include "tools/datasets.h"
#include "tools/jsonl_checkpoint.h"

namespace specpress::tools {

// A finished sample as diagnose --checkpoint keeps it: its contribution to the report (DiagnoseSums, as JSON) and
// the prompt it was made from.
struct DiagnoseRecord {
  std::string id;                  // the sample's
  std::string prompt_fingerprint;  // tools::prompt_fingerprint of its first turn's prompt
  int64_t prompt_tokens = 0;
  nlohmann::json sums;             // diagnose_sums_json; read back against the run's sizes
  std::string where;               // where a resumed record came from ("FILE: line N"), for its errors
};

struct DiagnoseOptions {
  std::string dataset;
  int64_t max_new_tokens = 256;  // length of each greedy trajectory
  bool think = false;
  bool progress = true;
  int64_t calibration_bins = 10;
  std::vector<double> mix_weights = {0.1, 0.25, 0.5};
  std::vector<double> temperatures;  // --temps: expected acceptance when sampling at these (empty: not computed)
  std::function<bool()> keep_going;  // asked before each sample; false stops the run there (Ctrl-C)
  // --checkpoint: the records of samples a stopped run finished, whose sums are added instead of computed again (each
  // checked against the prompt rendered now), and a callback for each sample this run finishes.
  std::vector<DiagnoseRecord> resume_records;
  std::function<void(const DiagnoseRecord&)> on_record;
};

struct PositionStats {   // one per draft block position k = 1..B-1
  int64_t count = 0;
  double top1 = 0, mean_rank = 0, kl = 0, chain_acceptance = 0;
};

struct CalibrationBin {
  double lo = 0, hi = 0;
  int64_t count = 0;
  double mean_confidence = 0, accuracy = 0;
};

struct EntropyBin {
  double lo = 0, hi = 0;  // nats; the last bin's hi is infinity
  int64_t count = 0;
  double mean_entropy = 0, top1 = 0, kl = 0;
};
// The target-entropy bins' edges (nats): [0, 0.01), [0.01, 0.1), ..., [4, inf).
inline const std::vector<double> kEntropyEdges = {0.01, 0.1, 0.5, 1.0, 2.0, 4.0};

// The expected acceptance of one speculative step sampled at `temperature`, pooled over the block starts whose whole
// block lies in the greedy trajectory (the starts positions[B-2] counts; at T = 0 its acceptance is the last entry).
struct SampledAcceptance {
  double temperature = 0;
  int64_t block_starts = 0;
  double expected_length = 0;        // 1 + expected accepted drafted tokens: tau's expectation
  std::vector<double> per_position;  // index k-1: probability that drafted token k is accepted
};

struct MixResult {
  std::string source;   // "draft" or "layer N"
  double weight = 0;
  int64_t positions = 0, changed = 0;
};

// One sample's contribution to the report: sums and counts that add up over samples (the report's means divide them at
// the end), so that a checkpoint keeps each finished sample and a resumed run adds it back as it was: the report of a
// resumed run is the uninterrupted run's, bit for bit. Vectors are indexed as DiagnoseReport's.
struct DiagnoseSums {
  int64_t trajectory_tokens = 0, block_starts = 0, layer_positions = 0;
  std::vector<int64_t> acceptance_length_counts;  // B
  std::vector<int64_t> position_count;            // B-1 block positions, and their sums:
  std::vector<double> top1, rank, kl, chain;
  std::vector<int64_t> calibration_count;         // the calibration bins, and their sums:
  std::vector<double> calibration_confidence, calibration_correct;
  std::vector<int64_t> entropy_count;             // the target-entropy bins, and their sums:
  std::vector<double> entropy, entropy_top1, entropy_kl;
  std::vector<double> layer_agree;                // L+1 logit-lens layers
  std::vector<int64_t> mix_positions, mix_changed;  // DiagnoseReport::mixing's entries
  std::vector<int64_t> sampled_starts;            // one per --temps temperature, and its sums:
  std::vector<double> sampled_length;
  std::vector<std::vector<double>> sampled_per_position;  // [temperature][B-1]
  void add(const DiagnoseSums& other);
};
nlohmann::ordered_json diagnose_sums_json(const DiagnoseSums& sums);
// Reads sums back; every field must be there with the sizes of `zero` (the run's), errors start with `where`.
DiagnoseSums diagnose_sums_from_json(const nlohmann::json& j, const DiagnoseSums& zero, const std::string& where);

struct DiagnoseReport {
  DiagnoseOptions options;  // (without resume_records and on_record)
  int64_t block_size = 0, samples = 0, trajectory_tokens = 0, block_starts = 0;
  int64_t samples_planned = 0;
  int64_t resumed = 0;       // samples taken from --checkpoint
  bool interrupted = false;  // keep_going stopped it before its last sample: the numbers cover `samples`
  // Counted, not derived: index a, the block starts whose whole block lies in the trajectory (B-1 drafted positions
  // scored) and whose first a drafted tokens match the target's, the next not (acceptance length a + 1).
  std::vector<int64_t> acceptance_length_counts;
  std::vector<PositionStats> positions;
  std::vector<CalibrationBin> calibration;
  std::vector<EntropyBin> by_target_entropy;
  std::vector<double> layer_top1;   // index l: layer l's logit-lens top-1 agreement with the final layer (l = 0: embedding)
  std::vector<MixResult> mixing;
  std::vector<SampledAcceptance> sampled;  // one per options.temperatures entry
  std::vector<int64_t> tap_layers;

  // 1 + each position's chain acceptance, over every block start: the HTML report's headline (`sampled` pools only
  // the starts whose whole block lies in the trajectory)
  double expected_acceptance_length() const {
    double length = 1.0;
    for (const PositionStats& p : positions) length += p.chain_acceptance;
    return length;
  }
};

DiagnoseReport run_diagnose(const model::Qwen3Model& target, const model::DFlashDraft& draft,
                            const tok::Tokenizer& tokenizer, const std::vector<BenchSample>& samples,
                            const DiagnoseOptions& options, const std::vector<int64_t>& stop_ids);

nlohmann::ordered_json diagnose_json(const DiagnoseReport& report);

// diagnose --checkpoint's file (jsonl_checkpoint.h): the format, a record a line and back (a later record of the same
// sample replaces an earlier one).
CheckpointFormat diagnose_checkpoint_format();
nlohmann::ordered_json diagnose_record_json(const DiagnoseRecord& record);
std::vector<DiagnoseRecord> diagnose_records(const JsonlCheckpoint& checkpoint);

// A self-contained HTML page with inline SVG charts (no scripts, no external resources).
std::string diagnose_html(const DiagnoseReport& report);

}  // namespace specpress::tools
