// datasets.h — the DFlash benchmark datasets: read each set as its source distributes it (or the
// ../shared/data copies, which keep the original record under "source"), apply the z-lab/dflash
// prompt formats (dflash-spec.md §4.3), and select samples (all, deterministic shuffle, or an
// explicit index list such as ../shared/data/dflash_subsets.json).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace specpress::tools {

struct BenchSample {
  std::string id;
  std::vector<std::string> turns;   // user turns, DFlash-formatted; mt-bench has 2
  std::optional<std::string> answer;  // reference final answer where the set has one
  int64_t row = 0;                  // 0-based row in the data file
};

// Dataset names: gsm8k, math500, humaneval, mbpp, mt-bench, alpaca.
const std::vector<std::string>& dataset_names();
// Throws naming the flag and the accepted names for anything else.
void check_dataset_name(const std::string& name);
// --dataset's value: one name, a comma-separated list of distinct names, or "all" (every name, in dataset_names()
// order). Throws naming the flag.
std::vector<std::string> parse_dataset_list(const std::string& value);
// The file that holds dataset `name` in ../shared/data (what `--data DIR` looks for in DIR).
const std::string& shared_data_file(const std::string& name);

// Reads `path` (JSONL, or a JSON array as sanitized-mbpp.json / alpaca_data.json ship) for dataset
// `name`. Errors name the file and the line (or array index) and the missing field.
std::vector<BenchSample> load_dataset(const std::string& name, const std::string& path);

// The DFlash user turn for one original record of `name` (exposed for tests).
std::vector<std::string> format_turns(const std::string& name, const std::string& record_json, const std::string& where);

struct Selection {
  int64_t max_samples = 0;        // 0 = all
  uint64_t seed = 0;              // shuffle seed when max_samples < rows and no indices
  std::string indices_file;       // JSON array of row indices, or dflash_subsets.json
  std::string indices_key = "hf_shuffle_seed0";  // which list of dflash_subsets.json
};

// Applies the selection; errors on an empty result, indices out of range or duplicated.
std::vector<BenchSample> select_samples(const std::vector<BenchSample>& all, const std::string& name,
                                        const Selection& selection);

}  // namespace specpress::tools
