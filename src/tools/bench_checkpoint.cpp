// bench_checkpoint.cpp — see bench_checkpoint.h.
#include "tools/bench_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/mapped_file.h"
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
  g.prefill_ms = r.number("prefill_ms");
  g.first_draft_ms = r.number("first_draft_ms");
  g.decode_ms = r.number("decode_ms");
  g.draft_ms = r.number("draft_ms");
  g.verify_ms = r.number("verify_ms");
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
          {"slots", s.slots}};
}

compress::CompressionStats stats_from_json(const nlohmann::json& j, const std::string& where) {
  const ConfigReader r{j, where};
  compress::CompressionStats s;
  s.events = r.integer("events");
  s.tokens_compressed = r.integer("tokens_compressed");
  s.slots_freed = r.integer("slots_freed");
  s.peak_slots = r.integer("peak_slots");
  s.overhead_ms = r.number("overhead_ms");
  s.event_positions = r.integer_list("event_positions");
  s.feature_buffer_bytes = r.integer("feature_buffer_bytes");
  s.positions = r.integer("positions");
  s.slots = r.integer("slots");
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
  f.top1 = r.number_list("top1");
  f.kl = r.number_list("kl");
  f.tv = r.number_list("tv");
  if (f.top1.size() != f.count.size() || f.kl.size() != f.count.size() || f.tv.size() != f.count.size())
    fail("{}: fields 'count', 'top1', 'kl' and 'tv' must have one entry an offset each (found {}, {}, {}, {})", where,
         f.count.size(), f.top1.size(), f.kl.size(), f.tv.size());
  f.nll_uncompressed = r.number("nll_uncompressed");
  f.nll_compressed = r.number("nll_compressed");
  f.scored_tokens = r.integer("scored_tokens");
  f.stats = stats_from_json(object_field(j, "stats", where), where + ", stats");
  return f;
}

}  // namespace

std::string prompt_fingerprint(const std::vector<int64_t>& prompt) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t id : prompt)
    for (int byte = 0; byte < 8; ++byte) {
      h ^= static_cast<uint64_t>(id) >> (8 * byte) & 0xff;
      h *= 1099511628211ull;
    }
  return fmt::format("{:016x}:{}", h, prompt.size());
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
  if (rec.has_answers)
    j["answers"] = {{"plain", rec.plain_answer}, {"dflash", rec.dflash_answer}, {"reference", rec.reference_answer}};
  if (rec.has_compression)
    j["compression"] = {{"compressed", result_json(rec.compressed, rec.compressed.output_ids != rec.dflash.output_ids)},
                        {"stats", stats_json(rec.compression)},
                        {"fidelity", fidelity_json(rec.fidelity)},
                        {"first_divergence", rec.first_divergence}};
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
  }
  return rec;
}

void BenchCheckpoint::check_path(const std::string& path, bool resume) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !resume)
    fail("--checkpoint: {} already exists; pass --resume to continue the bench it holds, or remove it to start over",
         path);
  if (!exists && resume) fail("--resume: {} does not exist (no bench to continue; drop --resume to start one)", path);
}

BenchCheckpoint::BenchCheckpoint(std::string path, Json settings, bool resume)
    : path_(std::move(path)), settings_(std::move(settings)) {
  check_path(path_, resume);
  if (!resume) {  // the settings line now, so that a path that cannot be written fails before any sample is run
    const Json header = {{"format", kFormat}, {"version", kVersion}, {"settings", settings_}};
    io::write_file_atomic(path_, header.dump() + "\n");
    return;
  }
  const std::string text = io::read_text_file(path_);
  size_t at = 0, line_number = 0;
  size_t good = 0;  // bytes up to the end of the last whole line
  while (at < text.size()) {
    const size_t newline = text.find('\n', at);
    ++line_number;
    if (newline == std::string::npos) {  // a line the run was writing when it stopped
      if (line_number == 1) break;         // nothing whole: reported below as not a checkpoint
      std::fprintf(stderr, "--resume: %s: dropping its torn last line (%zu bytes, written when the run stopped)\n",
                   path_.c_str(), text.size() - at);
      io::truncate_file(path_, good);
      break;
    }
    const std::string where = fmt::format("{}: line {}", path_, line_number);
    nlohmann::json j = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(at),
                                             text.begin() + static_cast<std::ptrdiff_t>(newline), nullptr, false);
    at = good = newline + 1;
    if (line_number == 1) {
      if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != kFormat)
        fail("--resume: {} is not a bench checkpoint (its first line must be a JSON object with \"format\": \"{}\")",
             path_, kFormat);
      check_settings(j, where);
      continue;
    }
    if (j.is_discarded()) fail("{}: invalid JSON (a line holds one record)", where);
    if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.dump());
    const ConfigReader r{j, where};
    keep({r.string("dataset"), r.string("draft"), r.integer("block_size"),
          checkpoint_record_from_json(object_field(j, "record", where), where)});
  }
  if (line_number == 0 || (line_number == 1 && good == 0))
    fail("--resume: {} is not a bench checkpoint (no settings line; expected a JSON object with \"format\": \"{}\")",
         path_, kFormat);
}

void BenchCheckpoint::check_settings(const nlohmann::json& header, const std::string& where) const {
  const ConfigReader top{header, where};
  if (top.integer("version") != kVersion)
    fail("{}: field 'version' is {}; this specpress reads version {}", where, top.integer("version"), kVersion);
  const nlohmann::json& saved = object_field(header, "settings", where);
  const nlohmann::json now = nlohmann::json::parse(settings_.dump());
  for (const auto& [key, value] : now.items()) {
    const nlohmann::json old = saved.contains(key) ? saved[key] : nlohmann::json();
    if (old != value)
      fail("--resume: {} holds records made with {} = {}, but this run has {} = {}; resume with the original flags, or "
           "give another --checkpoint",
           path_, key, old.dump(), key, value.dump());
  }
  for (const auto& [key, value] : saved.items())
    if (!now.contains(key))
      fail("--resume: {} holds records made with setting '{}' = {}, which this specpress does not know", path_, key,
           value.dump());
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
  const Json line = {
      {"dataset", dataset}, {"draft", draft}, {"block_size", block_size}, {"record", checkpoint_record_json(record)}};
  io::append_line_synced(path_, line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  keep({dataset, draft, block_size, record});
}

}  // namespace specpress::tools
