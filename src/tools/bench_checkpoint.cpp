// bench_checkpoint.cpp — see bench_checkpoint.h.
#include "tools/bench_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fnv1a.h"
#include "model/config_json.h"

namespace specpress::tools {
namespace {

constexpr const char* kFormat = "specpress bench checkpoint";
constexpr int64_t kVersion = 1;

using Json = nlohmann::ordered_json;
using model::ConfigReader;

// The fields of a generation the report reads (no per-step records or logprobs: bench asks for neither). A
// generation's output ids may be left out where another's equal them (`with_ids` false).
Json result_json(const decode::GenerationResult& r, bool with_ids) {
  Json j;
  if (with_ids) j["output_ids"] = r.output_ids;
  j["acceptance_lengths"] = r.acceptance_lengths;
  j["block_size"] = r.block_size;
  j["prompt_tokens"] = r.prompt_tokens;
  j["prefill_ms"] = r.prefill_ms;
  j["first_draft_ms"] = r.first_draft_ms;
  j["decode_ms"] = r.decode_ms;
  j["draft_ms"] = r.draft_ms;
  j["verify_ms"] = r.verify_ms;
  j["stopped"] = r.stopped;
  return j;
}

// JSON has no NaN or infinity: nlohmann writes them as null, and a checkpoint reads null back as NaN (a value that was
// not finite), so that one such value does not make the whole file unreadable.
double number_or_nan(const nlohmann::json& j, const ConfigReader& r, const std::string& key) {
  return j.contains(key) && j[key].is_null() ? std::numeric_limits<double>::quiet_NaN() : r.number(key);
}
// A count that may be absent (null): a peak device memory measured only on CUDA.
Json optional_json(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }
std::optional<int64_t> optional_integer(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key)) fail("{}: no field '{}' (a count, or null)", where, key);
  if (j[key].is_null()) return std::nullopt;
  return ConfigReader{j, where}.integer(key);
}
std::vector<double> numbers_or_nan(const nlohmann::json& j, const std::string& key, const std::string& where) {
  std::vector<double> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) fail("{}: field '{}' must be an array of numbers, found {}", where, key, j[key].dump());
  for (const auto& x : j[key]) {
    if (!x.is_number() && !x.is_null()) fail("{}: field '{}' must hold numbers, found {}", where, key, x.dump());
    out.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
  }
  return out;
}

const nlohmann::json& object_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_object()) fail("{}: field '{}' must be an object", where, key);
  return j[key];
}

// `ids`: the output ids to use where the record left them out (nullptr: they must be there).
decode::GenerationResult result_from_json(const nlohmann::json& j, const std::string& where,
                                          const std::vector<int64_t>* ids) {
  const ConfigReader r{j, where};
  decode::GenerationResult g;
  if (r.has("output_ids")) g.output_ids = r.integer_list("output_ids");
  else if (ids != nullptr) g.output_ids = *ids;
  else fail("{}: missing field 'output_ids' (expected an array of token ids)", where);
  g.acceptance_lengths = r.integer_list("acceptance_lengths");
  g.block_size = r.integer("block_size");
  g.prompt_tokens = r.integer("prompt_tokens");
  g.prefill_ms = number_or_nan(j, r, "prefill_ms");
  g.first_draft_ms = number_or_nan(j, r, "first_draft_ms");
  g.decode_ms = number_or_nan(j, r, "decode_ms");
  g.draft_ms = number_or_nan(j, r, "draft_ms");
  g.verify_ms = number_or_nan(j, r, "verify_ms");
  g.stopped = r.boolean("stopped");
  for (int64_t a : g.acceptance_lengths)
    if (a < 1 || a > g.block_size)
      fail("{}: field 'acceptance_lengths' holds {}, outside 1..block_size ({})", where, a, g.block_size);
  return g;
}

Json stats_json(const compress::CompressionStats& s) {
  return {{"events", s.events},
          {"tokens_compressed", s.tokens_compressed},
          {"slots_freed", s.slots_freed},
          {"peak_slots", s.peak_slots},
          {"overhead_ms", s.overhead_ms},
          {"event_positions", s.event_positions},
          {"feature_buffer_bytes", s.feature_buffer_bytes},
          {"positions", s.positions},
          {"slots", s.slots},
          {"cache_capacity", s.cache_capacity},
          {"cache_bytes", s.cache_bytes},
          {"cache_positions", s.cache_positions},
          {"kv_bytes_per_slot", s.kv_bytes_per_slot}};
}

compress::CompressionStats stats_from_json(const nlohmann::json& j, const std::string& where) {
  const ConfigReader r{j, where};
  compress::CompressionStats s;
  s.events = r.integer("events");
  s.tokens_compressed = r.integer("tokens_compressed");
  s.slots_freed = r.integer("slots_freed");
  s.peak_slots = r.integer("peak_slots");
  s.overhead_ms = number_or_nan(j, r, "overhead_ms");
  s.event_positions = r.integer_list("event_positions");
  s.feature_buffer_bytes = r.integer("feature_buffer_bytes");
  s.positions = r.integer("positions");
  s.slots = r.integer("slots");
  s.cache_capacity = r.integer("cache_capacity");
  s.cache_bytes = r.integer("cache_bytes");
  s.cache_positions = r.integer("cache_positions");
  s.kv_bytes_per_slot = r.integer("kv_bytes_per_slot");
  return s;
}

Json fidelity_json(const compress::FidelityResult& f) {
  return {{"max_offset", f.max_offset},         {"count", f.count},
          {"top1", f.top1},                     {"kl", f.kl},
          {"tv", f.tv},                         {"nll_uncompressed", f.nll_uncompressed},
          {"nll_compressed", f.nll_compressed}, {"scored_tokens", f.scored_tokens},
          {"stats", stats_json(f.stats)}};
}

compress::FidelityResult fidelity_from_json(const nlohmann::json& j, const std::string& where) {
  const ConfigReader r{j, where};
  compress::FidelityResult f;
  f.max_offset = r.integer("max_offset");
  f.count = r.integer_list("count");
  f.top1 = numbers_or_nan(j, "top1", where);
  f.kl = numbers_or_nan(j, "kl", where);
  f.tv = numbers_or_nan(j, "tv", where);
  if (f.top1.size() != f.count.size() || f.kl.size() != f.count.size() || f.tv.size() != f.count.size())
    fail("{}: fields 'count', 'top1', 'kl' and 'tv' must have one entry an offset each (found {}, {}, {}, {})", where,
         f.count.size(), f.top1.size(), f.kl.size(), f.tv.size());
  f.nll_uncompressed = number_or_nan(j, r, "nll_uncompressed");
  f.nll_compressed = number_or_nan(j, r, "nll_compressed");
  f.scored_tokens = r.integer("scored_tokens");
  f.stats = stats_from_json(object_field(j, "stats", where), where + ", stats");
  return f;
}

}  // namespace

namespace {
// Not FNV-1a's offset basis (a digit short of it), but the one every bench checkpoint so far was written with: kept,
// so that their fingerprints still match.
constexpr uint64_t kBenchFnvOffset = 1469598103934665603ull;
}  // namespace

std::string prompt_fingerprint(const std::vector<int64_t>& prompt) {
  uint64_t h = kBenchFnvOffset;
  for (int64_t id : prompt)
    for (int byte = 0; byte < 8; ++byte)
      h = fnv1a_byte(h, static_cast<unsigned char>(static_cast<uint64_t>(id) >> (8 * byte)));
  return fmt::format("{:016x}:{}", h, prompt.size());
}

std::string model_files_fingerprint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> entries;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const auto time = fs::last_write_time(e.path(), ec).time_since_epoch().count();
    entries.push_back(fmt::format("{}:{}:{}", e.path().filename().string(), e.file_size(ec), time));
  }
  std::sort(entries.begin(), entries.end());
  uint64_t h = kBenchFnvOffset;
  for (const std::string& e : entries) h = fnv1a(e + "\n", h);
  return fmt::format("{:016x}:{}", h, entries.size());
}

Json checkpoint_record_json(const BenchRecord& rec) {
  Json j;
  j["id"] = rec.id;
  j["turn"] = rec.turn;
  j["prompt_tokens"] = rec.prompt_tokens;
  j["prompt_fingerprint"] = rec.prompt_fingerprint;
  j["outputs_equal"] = rec.outputs_equal;
  if (rec.plain_reused) j["plain_reused"] = true;
  j["dflash"] = result_json(rec.dflash, true);
  j["plain"] = result_json(rec.plain, !rec.outputs_equal);  // the DFlash ids where they are the same
  if (rec.has_answers) {
    j["answers"] = {{"plain", rec.plain_answer}, {"dflash", rec.dflash_answer}, {"reference", rec.reference_answer}};
    if (rec.has_compression) j["answers"]["compressed"] = rec.compressed_answer;
  }
  if (rec.has_compression)
    j["compression"] = {{"compressed", result_json(rec.compressed, rec.compressed.output_ids != rec.dflash.output_ids)},
                        {"stats", stats_json(rec.compression)},
                        {"fidelity", fidelity_json(rec.fidelity)},
                        {"first_divergence", rec.first_divergence},
                        {"peak_device_bytes", {{"uncompressed", optional_json(rec.dflash_peak_bytes)},
                                               {"compressed", optional_json(rec.compressed_peak_bytes)}}}};
  return j;
}

BenchRecord checkpoint_record_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.dump());
  const ConfigReader r{j, where};
  BenchRecord rec;
  rec.id = r.string("id");
  rec.turn = r.integer("turn");
  rec.prompt_tokens = r.integer("prompt_tokens");
  rec.prompt_fingerprint = r.string("prompt_fingerprint");
  rec.outputs_equal = r.boolean("outputs_equal");
  rec.plain_reused = r.boolean_or("plain_reused", false);
  rec.dflash = result_from_json(object_field(j, "dflash", where), where + ", dflash", nullptr);
  rec.plain = result_from_json(object_field(j, "plain", where), where + ", plain",
                               rec.outputs_equal ? &rec.dflash.output_ids : nullptr);
  if (rec.outputs_equal != (rec.plain.output_ids == rec.dflash.output_ids))
    fail("{}: field 'outputs_equal' is {} but the plain and DFlash outputs {}", where, rec.outputs_equal,
         rec.outputs_equal ? "differ" : "are the same");
  if (r.has("answers")) {
    const ConfigReader a{object_field(j, "answers", where), where + ", answers"};
    rec.has_answers = true;
    rec.plain_answer = a.string("plain");
    rec.dflash_answer = a.string("dflash");
    rec.reference_answer = a.string("reference");
  }
  if (r.has("compression")) {
    const nlohmann::json& c = object_field(j, "compression", where);
    const std::string cw = where + ", compression";
    rec.has_compression = true;
    rec.compressed = result_from_json(object_field(c, "compressed", cw), cw + ", compressed", &rec.dflash.output_ids);
    rec.compression = stats_from_json(object_field(c, "stats", cw), cw + ", stats");
    rec.fidelity = fidelity_from_json(object_field(c, "fidelity", cw), cw + ", fidelity");
    rec.first_divergence = ConfigReader{c, cw}.integer("first_divergence");
    const nlohmann::json& peak = object_field(c, "peak_device_bytes", cw);
    rec.dflash_peak_bytes = optional_integer(peak, "uncompressed", cw + ", peak_device_bytes");
    rec.compressed_peak_bytes = optional_integer(peak, "compressed", cw + ", peak_device_bytes");
    if (rec.has_answers) {  // the compressed output's answer, recorded since 2026-12-07
      const nlohmann::json& a = object_field(j, "answers", where);
      if (!a.contains("compressed"))
        fail("{}, answers: no field 'compressed' (a record made before compressed outputs' answers were checked, "
             "2026-12-07): give another --checkpoint, or remove this one", where);
      rec.compressed_answer = ConfigReader{a, where + ", answers"}.string("compressed");
    }
  }
  return rec;
}

namespace {

CheckpointFormat bench_format() {
  CheckpointFormat f;
  f.format = kFormat;
  f.version = kVersion;
  f.tool = "bench";
  f.other_build_note = "the records it holds keep that build's timings";
  // not a flag: a format of the records (kCompressCounts), which no command line can change back
  f.on_difference = [](const std::string& path, const std::string& key, const nlohmann::json& old,
                       const nlohmann::json& now) {
    if (key == "cpu_threads" && old.is_number_integer())
      fail("--resume: {} holds records timed with {} CPU threads, but this run has {} (-t/--threads sets them, else "
           "OMP_NUM_THREADS or one a core); resume with -t {}, or give another --checkpoint", path, old.dump(),
           now.dump(), old.dump());
    if (key == "compress_counts")
      fail("--resume: {} holds compressed records of an older specpress (compress_counts {}, now \"{}\"), which "
           "counted a compression's events, slots or time, or top-attention's scores, otherwise, or did not check the "
           "compressed output's answer; they cannot be mixed with this run's: give another --checkpoint, or remove "
           "this one", path, old.is_null() ? "not recorded" : old.dump(), kCompressCounts);
  };
  return f;
}

}  // namespace

void BenchCheckpoint::check_early(const std::string& path, bool resume, const Json& settings) {
  JsonlCheckpoint::check_early(path, bench_format(), resume, settings);
}

BenchCheckpoint::BenchCheckpoint(std::string path, Json settings, bool resume)
    : file_(std::move(path), bench_format(), std::move(settings), resume) {
  for (const JsonlCheckpoint::Line& line : file_.lines()) {
    const ConfigReader r{line.value, line.where};
    keep({r.string("dataset"), r.string("draft"), r.integer("block_size"),
          checkpoint_record_from_json(object_field(line.value, "record", line.where), line.where)});
  }
}

std::vector<BenchRecord> BenchCheckpoint::records(const std::string& dataset, const std::string& draft,
                                                 int64_t block_size) const {
  std::vector<BenchRecord> out;
  for (const Entry& e : entries_)
    if (e.dataset == dataset && e.draft == draft && e.block_size == block_size) out.push_back(e.record);
  return out;
}

void BenchCheckpoint::keep(Entry entry) {
  auto same = [&](const Entry& e) {
    return e.dataset == entry.dataset && e.draft == entry.draft && e.block_size == entry.block_size &&
           e.record.id == entry.record.id && e.record.turn == entry.record.turn;
  };
  auto it = std::find_if(entries_.begin(), entries_.end(), same);
  if (it != entries_.end()) *it = std::move(entry);
  else entries_.push_back(std::move(entry));
}

void BenchCheckpoint::add(const std::string& dataset, const std::string& draft, int64_t block_size,
                          const BenchRecord& record) {
  file_.append(
      {{"dataset", dataset}, {"draft", draft}, {"block_size", block_size}, {"record", checkpoint_record_json(record)}});
  keep({dataset, draft, block_size, record});
}

}  // namespace specpress::tools
