// bench.h — `specpress bench`: for every selected sample (every turn of mt-bench), plain decoding
// (block 1) and DFlash decoding back to back in the same engine, with the metric definitions of
// dflash-spec.md §4.5 so numbers compare with the paper: speedup = mean(TPOT plain) / mean(TPOT DFlash)
// (TPOT excludes prefill, and for DFlash the first draft call), tau = mean of per-sample mean
// acceptance lengths, histogram pooled over all steps, plus per-position acceptance, TTFT, tokens/s.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compress/fidelity.h"
#include "decode/generation.h"
#include "tools/datasets.h"
#include "tokenizer/tokenizer.h"

namespace specpress::tools {

struct BenchOptions {
  std::string dataset;
  int64_t max_new_tokens = 2048;
  decode::SamplingParams sampling;
  int64_t block_size = 0;   // 0 = the draft's trained size
  bool think = false;       // enable_thinking (off: the DFlash drafts were trained without it)
  bool check_answers = false;
  bool progress = true;
  compress::Policy compress;  // method none: no compression runs
  bool reference_path = false;  // never the CUDA fast path
};

struct BenchRecord {
  std::string id;
  int64_t turn = 0;
  int64_t prompt_tokens = 0;
  decode::GenerationResult plain, dflash;
  bool outputs_equal = false;
  std::string plain_answer, dflash_answer, reference_answer;  // --check-answers
  bool has_answers = false;
  // --compress: DFlash with the compressed cache, and the teacher-forced fidelity replay
  bool has_compression = false;
  decode::GenerationResult compressed;
  compress::CompressionStats compression;
  compress::FidelityResult fidelity;
  int64_t first_divergence = 0;  // first output index where compressed and uncompressed DFlash differ
};

struct BenchReport {
  BenchOptions options;
  int64_t block_size = 0;
  bool fast_path = false;
  std::vector<BenchRecord> records;
  // aggregates
  double speedup = 0, tau = 0, plain_tpot_ms = 0, dflash_tpot_ms = 0, plain_ttft_ms = 0, dflash_ttft_ms = 0;
  double plain_tokens_per_s = 0, dflash_tokens_per_s = 0, identical_outputs = 0;
  std::vector<double> histogram;              // index b-1: fraction of steps with acceptance length b
  std::vector<double> per_position_acceptance;  // index i-1: fraction of steps accepting draft position i
  double answers_agree = 0, plain_accuracy = 0, dflash_accuracy = 0;
  int64_t answered = 0;
  // --compress aggregates
  double compressed_tau = 0, tau_ratio = 0, compressed_tpot_ms = 0, compressed_tokens_per_s = 0;
  double effective_ratio = 0, kv_bytes_saved = 0, mean_first_divergence = 0, identical_compressed = 0;
  double overhead_ms_per_event = 0;
  int64_t peak_slots = 0, slot_bytes = 0;
  compress::FidelityResult fidelity;
};

BenchReport run_bench(const model::Qwen3Model& target, const model::DFlashDraft& draft, const tok::Tokenizer& tokenizer,
                      const std::vector<BenchSample>& samples, const BenchOptions& options,
                      const std::vector<int64_t>& stop_ids);

// Aggregates from the records (exposed so tests can check the definitions on known records).
void aggregate(BenchReport& report);

nlohmann::ordered_json bench_json(const BenchReport& report);
std::string bench_markdown(const BenchReport& report);

// Several runs' reports side by side, as the DFlash paper tabulates them: a row per run (dataset, block size,
// samples, speedup, tau, tokens/s, identical outputs, answers) and, for each block size, the unweighted mean of its
// runs' speedup and tau ("mean": the paper's Avg.).
std::string bench_summary_markdown(const std::vector<BenchReport>& reports);
nlohmann::ordered_json bench_summary_json(const std::vector<BenchReport>& reports);

}  // namespace specpress::tools
