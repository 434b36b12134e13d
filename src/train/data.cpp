// data.cpp — see data.h.
#include "train/data.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"

namespace specpress::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// How a data file is read, by its extension (any case): JSON lines, one JSON array of records, or plain text.
enum class DataFormat { kJsonLines, kJsonArray, kText };

DataFormat data_format(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".jsonl" || ext == ".ndjson") return DataFormat::kJsonLines;
  return ext == ".json" ? DataFormat::kJsonArray : DataFormat::kText;
}

// A plain-text file that starts like JSON is most likely records under another extension: say how it is read.
void note_if_json_like(const std::string& path, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '['))
    std::fprintf(stderr,
                 "note: %s is read as plain text (its extension is not .jsonl, .ndjson or .json), though it starts "
                 "like JSON; rename it to read its records\n",
                 path.c_str());
}

std::string read_data_file(const std::string& path) {
  if (!fs::exists(path)) fail("{}: data file not found", path);
  if (fs::is_directory(path)) fail("{}: is a directory (expected a data file)", path);
  return io::read_text_file(path);
}

// `text` encoded by the tokenizer; its errors (text that is not UTF-8, say) name `where` the text came from.
std::vector<int64_t> encode_at(const TextCodec& codec, const std::string& text, const std::string& where) {
  try {
    return codec.encode(text);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}

// Calls fn(where, record) for each record of a JSON-lines file (each non-blank line) or a .json file (each element of
// its top-level array), `where` naming the file and the line or the element.
template <typename Fn>
void for_each_record(const std::string& path, const std::string& text, DataFormat format, Fn fn) {
  if (format == DataFormat::kJsonArray) {
    json records;
    try {
      records = json::parse(depth_checked(text, path));
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", path, e.what());
    }
    if (!records.is_array())
      fail("{}: expected a JSON array of records in a .json file (or one record a line in a .jsonl file)", path);
    for (size_t i = 0; i < records.size(); ++i) {
      const std::string where = fmt::format("{} element {}", path, i);
      if (!records[i].is_object()) fail("{}: expected a JSON object", where);
      fn(where, records[i]);
    }
    return;
  }
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", path, line_no);
    json record;
    try {
      record = json::parse(depth_checked(line, where));
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", where, e.what());
    }
    if (!record.is_object()) fail("{}: expected a JSON object", where);
    fn(where, record);
  }
}

struct RecordReader {
  const std::string& location;  // the file and its line or element
  const json& record;
  const TextCodec& codec;
  int64_t vocab;

  const std::string& where() const { return location; }
  std::string string_field(const std::string& key) const {
    if (!record[key].is_string()) fail("{}: field '{}' must be a string", where(), key);
    return record[key].get<std::string>();
  }
  std::vector<int64_t> encode(const std::string& text) const {
    if (!codec.encode) fail("{}: text data needs a tokenizer: {}", where(), codec.missing);
    return encode_at(codec, text, where());
  }
  std::string chat(const TextCodec::Messages& messages, bool add_generation_prompt) const {
    if (!codec.chat) fail("{}: chat data needs a tokenizer with a chat template: {}", where(), codec.missing);
    try {
      return codec.chat(messages, add_generation_prompt);
    } catch (const Error& e) {  // the template's own error (a bad role, say) with the record it came from
      fail("{}: {}", where(), e.what());
    }
  }
  std::vector<int64_t> ids() const {
    const json& v = record["ids"];
    if (!v.is_array()) fail("{}: field 'ids' must be an array of token ids", where());
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer()) fail("{}: ids[{}] is not an integer: {}", where(), i, v[i].dump());
      if (v[i].is_number_unsigned() && v[i].get<uint64_t>() > static_cast<uint64_t>(vocab))  // not wrapped negative
        fail("{}: token id {} at index {} is outside the vocabulary 0..{}", where(), v[i].dump(), i, vocab - 1);
      out.push_back(v[i].get<int64_t>());
    }
    return out;
  }
  TextCodec::Messages messages() const {
    const json& v = record["messages"];
    if (!v.is_array() || v.empty()) fail("{}: field 'messages' must be a non-empty array", where());
    TextCodec::Messages out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_object() || !v[i].contains("role") || !v[i]["role"].is_string() || !v[i].contains("content") ||
          !v[i]["content"].is_string())
        fail("{}: messages[{}] must be an object with string fields 'role' and 'content'", where(), i);
      out.emplace_back(v[i]["role"].get<std::string>(), v[i]["content"].get<std::string>());
    }
    return out;
  }
};

void check_ids(const std::vector<int64_t>& ids, int64_t vocab, const std::string& where) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail("{}: token id {} at index {} is outside the vocabulary 0..{}", where, ids[i], i, vocab - 1);
}

Sequence document_from(const RecordReader& r) {
  Sequence s;
  if (r.record.contains("ids")) {
    s.ids = r.ids();
    if (r.record.contains("loss_start")) {
      if (!r.record["loss_start"].is_number_integer()) fail("{}: field 'loss_start' must be an integer", r.where());
      s.loss_start = r.record["loss_start"].get<int64_t>();
      if (s.loss_start < 0 || s.loss_start > static_cast<int64_t>(s.ids.size()))
        fail("{}: loss_start {} outside 0..{}", r.where(), s.loss_start, s.ids.size());
    }
  } else if (r.record.contains("messages")) {
    TextCodec::Messages messages = r.messages();
    s.ids = r.encode(r.chat(messages, false));
    // the last assistant answer is the completion, as prompt+completion's: the loss (train-draft's anchors,
    // train-compressor's continuation) starts where a generation prompt of the turns before it ends, where that
    // rendering is a prefix of the whole one (train-lm trains on every token either way)
    if (messages.size() >= 2 && messages.back().first == "assistant") {
      messages.pop_back();
      const std::vector<int64_t> prompt = r.encode(r.chat(messages, true));
      if (prompt.size() < s.ids.size() && std::equal(prompt.begin(), prompt.end(), s.ids.begin()))
        s.loss_start = static_cast<int64_t>(prompt.size());
    }
  } else if (r.record.contains("prompt") && (r.record.contains("completion") || r.record.contains("response"))) {
    s.ids = r.encode(r.string_field("prompt"));
    s.loss_start = static_cast<int64_t>(s.ids.size());
    std::vector<int64_t> rest = r.encode(r.string_field(r.record.contains("completion") ? "completion" : "response"));
    s.ids.insert(s.ids.end(), rest.begin(), rest.end());
  } else if (r.record.contains("text")) {
    s.ids = r.encode(r.string_field("text"));
  } else {
    fail("{}: no training field (expected 'ids', 'messages', 'prompt' with 'completion', or 'text')", r.where());
  }
  check_ids(s.ids, r.vocab, r.where());
  return s;
}

std::vector<int64_t> prompt_from(const RecordReader& r) {
  std::vector<int64_t> ids;
  if (r.record.contains("ids")) {
    ids = r.ids();
  } else if (r.record.contains("turns")) {
    const json& turns = r.record["turns"];
    if (!turns.is_array() || turns.empty() || !turns[0].is_string())
      fail("{}: field 'turns' must be a non-empty array of strings", r.where());
    ids = r.encode(r.chat({{"user", turns[0].get<std::string>()}}, true));
  } else if (r.record.contains("messages")) {
    TextCodec::Messages messages = r.messages();
    // a last assistant turn is the answer (as in --data), not context: the prompt is the turns before it
    if (messages.size() >= 2 && messages.back().first == "assistant") messages.pop_back();
    ids = r.encode(r.chat(messages, true));
  } else if (r.record.contains("prompt")) {
    ids = r.encode(r.string_field("prompt"));
  } else if (r.record.contains("text")) {
    ids = r.encode(r.string_field("text"));
  } else {
    fail("{}: no prompt field (expected 'ids', 'turns', 'messages', 'prompt' or 'text')", r.where());
  }
  check_ids(ids, r.vocab, r.where());
  return ids;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<Sequence> read_documents(const std::vector<std::string>& files, const TextCodec& codec, int64_t vocab) {
  if (files.empty()) fail("--data: no data files given");
  std::vector<Sequence> out;
  for (const std::string& path : files) {
    const std::string text = read_data_file(path);
    const size_t before = out.size();
    const DataFormat format = data_format(path);
    if (format != DataFormat::kText) {
      for_each_record(path, text, format, [&](const std::string& where, const json& record) {
        Sequence s = document_from(RecordReader{where, record, codec, vocab});
        if (!s.ids.empty()) out.push_back(std::move(s));
      });
    } else if (text.find_first_not_of(" \t\r\n") != std::string::npos) {
      note_if_json_like(path, text);
      if (!codec.encode) fail("{}: text data needs a tokenizer: {}", path, codec.missing);
      Sequence s{encode_at(codec, text, path), 0};
      check_ids(s.ids, vocab, path);
      out.push_back(std::move(s));
    }
    if (out.size() == before) fail("{}: no training data in this file (empty)", path);
  }
  return out;
}

void check_generation_fits(const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens, int64_t block,
                           int64_t max_positions, const std::string& flag) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  if (!prompts.empty() && static_cast<int64_t>(longest) + new_tokens + block > max_positions)
    fail("{} {}: the longest prompt ({} tokens) + {} + block {} exceeds the target's max_position_embeddings {}", flag,
         new_tokens, longest, new_tokens, block, max_positions);
}

std::vector<std::vector<int64_t>> read_prompts(const std::vector<std::string>& files, const TextCodec& codec,
                                               int64_t vocab) {
  std::vector<std::vector<int64_t>> out;
  for (const std::string& path : files) {
    const std::string text = read_data_file(path);
    const size_t before = out.size();
    const DataFormat format = data_format(path);
    if (format != DataFormat::kText) {
      for_each_record(path, text, format, [&](const std::string& where, const json& record) {
        std::vector<int64_t> ids = prompt_from(RecordReader{where, record, codec, vocab});
        if (ids.empty()) fail("{}: empty prompt", where);
        out.push_back(std::move(ids));
      });
    } else {
      note_if_json_like(path, text);
      std::istringstream in(text);
      std::string line;
      int64_t line_no = 0;
      while (std::getline(in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        if (!codec.encode) fail("{}: text prompts need a tokenizer: {}", path, codec.missing);
        out.push_back(encode_at(codec, line, fmt::format("{} line {}", path, line_no)));
        check_ids(out.back(), vocab, path);
      }
    }
    if (out.size() == before) fail("{}: no prompts in this file (empty)", path);
  }
  return out;
}

std::string sequences_jsonl(const std::vector<Sequence>& sequences) {
  std::string out;
  for (const Sequence& s : sequences) out += json{{"ids", s.ids}, {"loss_start", s.loss_start}}.dump() + "\n";
  return out;
}

std::mt19937_64 step_rng(uint64_t seed, int64_t step) {
  return std::mt19937_64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)));
}

int64_t uniform_index(std::mt19937_64& rng, int64_t n) {
  // 64-bit draws make the modulo bias negligible for any realistic n; libstdc++-independent.
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
}

std::vector<int64_t> concat_documents(const std::vector<Sequence>& documents, int64_t eos) {
  std::vector<int64_t> stream;
  for (const Sequence& d : documents) {
    stream.insert(stream.end(), d.ids.begin(), d.ids.end());
    if (d.ids.empty() || d.ids.back() != eos) stream.push_back(eos);
  }
  return stream;
}

at::Tensor sample_lm_batch(const std::vector<int64_t>& stream, int64_t batch, int64_t seq_len, std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(stream.size());
  if (n < seq_len + 1)
    fail("--seq-len {}: the training data holds only {} tokens (need at least seq-len + 1)", seq_len, n);
  at::Tensor ids = at::empty({batch, seq_len + 1}, at::kLong);
  auto a = ids.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = uniform_index(rng, n - seq_len);
    for (int64_t t = 0; t <= seq_len; ++t) a[b][t] = stream[start + t];
  }
  return ids;
}

std::vector<Sequence> trainable_for_draft(std::vector<Sequence> sequences, int64_t seq_len) {
  std::vector<Sequence> out;
  for (Sequence& s : sequences) {
    if (static_cast<int64_t>(s.ids.size()) > seq_len) s.ids.resize(seq_len);
    const int64_t first = std::max<int64_t>(s.loss_start, 1), last = static_cast<int64_t>(s.ids.size()) - 2;
    if (first <= last) out.push_back(std::move(s));
  }
  return out;
}

DraftBatch sample_draft_batch(const std::vector<Sequence>& sequences, int64_t batch, int64_t seq_len,
                              int64_t anchors_per_seq, std::mt19937_64& rng) {
  DraftBatch out;
  int64_t T = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const Sequence& s = sequences[uniform_index(rng, static_cast<int64_t>(sequences.size()))];
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(s.ids.size()), seq_len);
    std::vector<int64_t> row(s.ids.begin(), s.ids.begin() + len);
    const int64_t first = std::max<int64_t>(s.loss_start, 1), last = len - 2;
    std::vector<int64_t> candidates;
    for (int64_t p = first; p <= last; ++p) candidates.push_back(p);
    const int64_t n = std::min<int64_t>(anchors_per_seq, static_cast<int64_t>(candidates.size()));
    for (int64_t i = 0; i < n; ++i)  // partial Fisher-Yates: n distinct anchors
      std::swap(candidates[i], candidates[i + uniform_index(rng, static_cast<int64_t>(candidates.size()) - i)]);
    std::vector<int64_t> anchors(candidates.begin(), candidates.begin() + n);
    std::sort(anchors.begin(), anchors.end());
    T = std::max(T, len);
    out.rows.push_back(std::move(row));
    out.anchors.push_back(std::move(anchors));
  }
  out.ids = at::zeros({batch, T}, at::kLong);
  auto a = out.ids.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < out.rows[b].size(); ++t) a[b][t] = out.rows[b][t];
  return out;
}

}  // namespace specpress::train
