// datasets.cpp — dataset readers, DFlash prompt formats and sample selection (see datasets.h).
#include "tools/datasets.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"

namespace specpress::tools {
namespace {

using json = nlohmann::json;
const char* kMathSuffix = "\nPlease reason step by step, and put your final answer within \\boxed{}.";

std::string str_field(const json& r, const std::string& key, const std::string& where) {
  if (!r.contains(key) || !r[key].is_string()) fail("{}: missing string field '{}'", where, key);
  return r[key].get<std::string>();
}

// The original record: the ../shared/data copies keep it under "source".
const json& original(const json& r) { return r.contains("source") && r["source"].is_object() ? r["source"] : r; }

std::vector<std::string> turns_of(const std::string& name, const json& rec, const std::string& where) {
  const json& r = original(rec);
  if (name == "gsm8k") return {str_field(r, "question", where) + kMathSuffix};
  if (name == "math500") return {str_field(r, "problem", where) + kMathSuffix};
  if (name == "humaneval")
    return {"Write a solution to the following problem and make sure that it passes the tests:\n```python\n" +
            str_field(r, "prompt", where) + "\n```"};
  if (name == "mbpp") return {str_field(r, "prompt", where)};
  if (name == "alpaca") {
    std::string instruction = str_field(r, "instruction", where);
    std::string input = r.contains("input") && r["input"].is_string() ? r["input"].get<std::string>() : "";
    return {input.empty() ? instruction : instruction + "\n\nInput:\n" + input};
  }
  if (name == "mt-bench") {
    if (!r.contains("turns") || !r["turns"].is_array() || r["turns"].empty())
      fail("{}: missing array field 'turns'", where);
    std::vector<std::string> turns;
    for (const auto& t : r["turns"]) {
      if (!t.is_string()) fail("{}: 'turns' must hold strings", where);
      turns.push_back(t.get<std::string>());
    }
    return turns;
  }
  fail("internal: dataset '{}' has no prompt format", name);
}

std::optional<std::string> answer_of(const std::string& name, const json& rec) {
  const json& r = original(rec);
  if (name == "gsm8k" && r.contains("answer") && r["answer"].is_string()) {
    std::string a = r["answer"].get<std::string>();
    size_t pos = a.rfind("####");
    if (pos == std::string::npos) return a;
    a = a.substr(pos + 4);
    a.erase(0, a.find_first_not_of(" \t\n"));
    a.erase(a.find_last_not_of(" \t\n") + 1);
    return a;
  }
  if (name == "math500" && r.contains("answer") && r["answer"].is_string()) return r["answer"].get<std::string>();
  return std::nullopt;
}

std::string id_of(const std::string& name, const json& rec, int64_t row) {
  if (rec.contains("id") && rec["id"].is_string()) return rec["id"].get<std::string>();
  const json& r = original(rec);
  for (const char* key : {"task_id", "question_id", "unique_id"})
    if (r.contains(key)) return r[key].is_string() ? r[key].get<std::string>() : r[key].dump();
  return name + "-" + std::to_string(row);
}

}  // namespace

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {"gsm8k", "math500", "humaneval", "mbpp", "mt-bench", "alpaca"};
  return names;
}

void check_dataset_name(const std::string& name) {
  const auto& names = dataset_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    fail("--dataset: unknown dataset '{}' (expected one of {})", name, fmt::join(names, ", "));
}

std::vector<std::string> parse_dataset_list(const std::string& value) {
  if (value == "all") return dataset_names();
  std::vector<std::string> names;
  size_t at = 0;
  for (;;) {
    const size_t comma = value.find(',', at);
    const std::string name = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (name.empty()) fail("--dataset: an empty name in '{}' (expected names separated by commas, or all)", value);
    check_dataset_name(name);
    if (std::find(names.begin(), names.end(), name) != names.end())
      fail("--dataset: '{}' is named twice in '{}'", name, value);
    names.push_back(name);
    if (comma == std::string::npos) return names;
    at = comma + 1;
  }
}

const std::string& shared_data_file(const std::string& name) {
  static const std::map<std::string, std::string> files = {
      {"gsm8k", "gsm8k_test.jsonl"},     {"math500", "math500.jsonl"},     {"humaneval", "humaneval.jsonl"},
      {"mbpp", "mbpp_sanitized_test.jsonl"}, {"mt-bench", "mt_bench.jsonl"}, {"alpaca", "alpaca_first335.jsonl"}};
  check_dataset_name(name);
  return files.at(name);
}

std::vector<std::string> format_turns(const std::string& name, const std::string& record_json, const std::string& where) {
  return turns_of(name, json::parse(depth_checked(record_json, where)), where);
}

std::vector<BenchSample> load_dataset(const std::string& name, const std::string& path) {
  check_dataset_name(name);
  std::string text = io::read_text_file(path);
  std::vector<std::pair<std::string, json>> records;  // where, record
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) fail("{}: empty data file (expected {} records)", path, name);
  if (text[first] == '[') {  // a JSON array (sanitized-mbpp.json, alpaca_data.json)
    json arr;
    try {
      arr = json::parse(depth_checked(text, path));
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", path, e.what());
    }
    for (size_t i = 0; i < arr.size(); ++i) records.push_back({fmt::format("{}: record {}", path, i), arr[i]});
  } else {
    size_t line_start = 0;
    int64_t line_no = 0;
    while (line_start < text.size()) {
      size_t end = text.find('\n', line_start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(line_start, end - line_start);
      ++line_no;
      line_start = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", path, line_no);
      try {
        records.push_back({where, json::parse(depth_checked(line, where))});
      } catch (const json::exception& e) {
        fail("{}: invalid JSON line: {}", where, e.what());
      }
    }
  }
  std::vector<BenchSample> out;
  std::map<std::string, std::string> first_with_id;  // id -> where it first appeared
  int64_t row = 0;
  for (auto& [where, rec] : records) {
    if (!rec.is_object()) fail("{}: expected a JSON object", where);
    const json& r = original(rec);
    if (name == "mbpp" && r.contains("task_id") && r["task_id"].is_number_integer() && !rec.contains("source")) {
      // The HF "sanitized" test split is task ids 11..510 of sanitized-mbpp.json.
      int64_t task = r["task_id"].get<int64_t>();
      if (task < 11 || task > 510) continue;
    }
    BenchSample s;
    s.row = row++;
    s.turns = turns_of(name, rec, where);
    s.answer = answer_of(name, rec);
    s.id = id_of(name, rec, s.row);
    // reports, checkpoints and --resume tell samples apart by their id
    if (const auto [it, fresh] = first_with_id.emplace(s.id, where); !fresh)
      fail("{}: the sample id '{}' is also the id of {}; each sample needs its own id", where, s.id, it->second);
    if (rec.contains("turns") && rec.contains("source") && rec["turns"] != json(s.turns))
      fail("{}: the record's 'turns' differ from the DFlash format applied to its 'source' (wrong --dataset?)", where);
    out.push_back(std::move(s));
  }
  if (out.empty()) fail("{}: no {} records", path, name);
  return out;
}

std::vector<BenchSample> select_samples(const std::vector<BenchSample>& all, const std::string& name,
                                        const Selection& sel) {
  if (sel.max_samples < 0) fail("--max-samples: must be >= 0 (0 = all), found {}", sel.max_samples);
  std::vector<int64_t> rows;
  if (!sel.indices_file.empty()) {
    json j;
    try {
      j = json::parse(depth_checked(io::read_text_file(sel.indices_file), sel.indices_file));
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", sel.indices_file, e.what());
    }
    const json* list = &j;
    if (j.is_object()) {  // dflash_subsets.json
      if (!j.contains("datasets") || !j["datasets"].contains(name))
        fail("{}: no entry datasets.{} (expected dflash_subsets.json or a JSON array of row indices)", sel.indices_file, name);
      const json& d = j["datasets"][name];
      if (d.contains(sel.indices_key)) {
        list = &d[sel.indices_key];
      } else if (d.contains("n") && d.contains("k") && d["n"].is_number_integer() && d["k"].is_number_integer() &&
                 d["k"].get<int64_t>() >= d["n"].get<int64_t>()) {
        for (int64_t i = 0; i < d["n"].get<int64_t>(); ++i) rows.push_back(i);  // the reference runs every row
        list = nullptr;
      } else {
        fail("{}: datasets.{} has no list '{}' (--subset)", sel.indices_file, name, sel.indices_key);
      }
    }
    if (list != nullptr) {
      if (!list->is_array()) fail("{}: expected an array of row indices", sel.indices_file);
      for (const auto& v : *list) {
        if (!v.is_number_integer()) fail("{}: row indices must be integers, found {}", sel.indices_file, v.dump());
        rows.push_back(v.get<int64_t>());
      }
    }
    std::set<int64_t> seen;
    for (int64_t r : rows) {
      if (r < 0 || r >= static_cast<int64_t>(all.size()))
        fail("{}: row index {} is outside the {} rows of the data file", sel.indices_file, r, all.size());
      if (!seen.insert(r).second) fail("{}: row index {} appears twice", sel.indices_file, r);
    }
    if (sel.max_samples > 0 && static_cast<int64_t>(rows.size()) > sel.max_samples) rows.resize(sel.max_samples);
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) rows.push_back(i);
    if (sel.max_samples > 0 && sel.max_samples < static_cast<int64_t>(rows.size())) {
      // Fisher-Yates with mt19937_64(seed): deterministic on every platform.
      std::mt19937_64 rng(sel.seed);
      for (int64_t i = static_cast<int64_t>(rows.size()) - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(rows[i], rows[j]);
      }
      rows.resize(sel.max_samples);
    }
  }
  if (rows.empty()) fail("sample selection for {} is empty (check --indices/--max-samples)", name);
  std::vector<BenchSample> out;
  for (int64_t r : rows) out.push_back(all[r]);
  return out;
}

}  // namespace specpress::tools
