// tokenizer_load.cpp — reads tokenizer.json (and the model directory's tokenizer_config.json,
// chat_template.jinja, generation_config.json) into a Tokenizer::Impl. Only configurations we can
// reproduce exactly are accepted; anything else fails with the file, the field and what we expected.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace specpress::tok {
namespace {

using json = nlohmann::json;

// The GPT-2 pattern ByteLevel applies when its use_regex option is on.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string read_file(const std::string& path) { return io::read_text_file(path); }

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(depth_checked(text, source));
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
}

std::string type_of(const json& node) {
  if (!node.is_object()) return node.is_null() ? "null" : std::string(node.type_name());
  const auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : "(no type)";
}

bool bool_field(const json& obj, const char* key, bool fallback, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}: field '{}' must be true or false", where, key);
  return it->get<bool>();
}

std::string string_field(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) fail("{}: field '{}' must be a string", where, key);
  return it->get<std::string>();
}

Normalizer parse_normalizer(const json& node, const std::string& src) {
  if (node.is_null()) return Normalizer(Normalizer::Kind::kNone);
  const std::string type = type_of(node);
  if (type == "NFC") return Normalizer(Normalizer::Kind::kNfc);
  if (type == "Sequence" && node.contains("normalizers") && node["normalizers"].is_array()) {
    const json& list = node["normalizers"];
    if (list.empty()) return Normalizer(Normalizer::Kind::kNone);
    if (list.size() == 1 && type_of(list[0]) == "NFC") return Normalizer(Normalizer::Kind::kNfc);
  }
  fail("{}: normalizer '{}' is not supported (supported: NFC, or none)", src, type);
}

void check_byte_level(const json& node, const std::string& where) {
  if (bool_field(node, "add_prefix_space", false, where)) {
    fail("{}: ByteLevel add_prefix_space=true is not supported (expected false)", where);
  }
}

std::string split_pattern(const json& node, const std::string& where) {
  if (bool_field(node, "invert", false, where)) fail("{}: Split with invert=true is not supported", where);
  const auto behavior = node.find("behavior");
  if (behavior == node.end() || *behavior != "Isolated") {
    fail("{}: Split behavior '{}' is not supported (expected \"Isolated\")", where,
         behavior == node.end() ? "(missing)" : behavior->dump());
  }
  const auto pattern = node.find("pattern");
  if (pattern != node.end() && pattern->is_object()) {
    if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) return (*pattern)["Regex"];
    if (pattern->contains("String") && (*pattern)["String"].is_string()) {
      std::string escaped;  // a literal: escape every ASCII punctuation character
      for (char c : (*pattern)["String"].get<std::string>()) {
        if (std::ispunct(static_cast<unsigned char>(c))) escaped.push_back('\\');
        escaped.push_back(c);
      }
      return escaped;
    }
  }
  fail("{}: Split needs pattern {{\"Regex\": ...}} or {{\"String\": ...}}", where);
}

// Returns the split regex (empty: no split) for the supported byte-level pre-tokenizers:
// ByteLevel alone, or Sequence[Split(..., Isolated), ByteLevel(use_regex=false)].
std::string parse_pre_tokenizer(const json& node, const std::string& src) {
  const std::string where = src + ": pre_tokenizer";
  const std::string type = type_of(node);
  if (type == "ByteLevel") {
    check_byte_level(node, where);
    return bool_field(node, "use_regex", true, where) ? std::string(kGpt2Pattern) : std::string();
  }
  if (type == "Sequence" && node.contains("pretokenizers") && node["pretokenizers"].is_array()) {
    const json& list = node["pretokenizers"];
    if (list.size() == 1 && type_of(list[0]) == "ByteLevel") return parse_pre_tokenizer(list[0], src);
    if (list.size() == 2 && type_of(list[0]) == "Split" && type_of(list[1]) == "ByteLevel") {
      check_byte_level(list[1], where + ".pretokenizers[1]");
      if (bool_field(list[1], "use_regex", true, where)) {
        fail("{}.pretokenizers[1]: ByteLevel after Split must have use_regex=false", where);
      }
      return split_pattern(list[0], where + ".pretokenizers[0]");
    }
  }
  fail("{}: '{}' is not supported (expected ByteLevel, or Sequence[Split, ByteLevel])", where,
       type);
}

void check_model(const json& model, const std::string& src) {
  const std::string where = src + ": model";
  if (type_of(model) != "BPE") fail("{}: type '{}' is not supported (expected BPE)", where, type_of(model));
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    fail("{}: dropout must be null (BPE dropout makes encoding random)", where);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      fail("{}: {} must be empty for byte-level BPE", where, key);
    }
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("{}: field 'vocab' must be an object", where);
  if (!model.contains("merges") || !model["merges"].is_array()) fail("{}: field 'merges' must be an array", where);
}

std::vector<std::pair<std::string, std::string>> parse_merges(const json& merges, const std::string& src) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space != std::string::npos && s.find(' ', space + 1) == std::string::npos) {
        out.emplace_back(s.substr(0, space), s.substr(space + 1));
        continue;
      }
    }
    fail("{}: model.merges[{}] must be [\"left\", \"right\"] or \"left right\", got {}", src, i,
         m.dump());
  }
  return out;
}

std::vector<AddedToken> parse_added_tokens(const json& root, const std::string& src) {
  std::vector<AddedToken> tokens;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return tokens;
  if (!it->is_array()) fail("{}: field 'added_tokens' must be an array", src);
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = fmt::format("{}: added_tokens[{}]", src, i);
    if (!t.is_object()) fail("{} must be an object", where);
    AddedToken token;
    if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() > INT32_MAX) {
      fail("{}: field 'id' must be a token id in 0..{}, found {}", where, INT32_MAX,
           t.contains("id") ? t["id"].dump() : "none");
    }
    token.id = t["id"].get<int32_t>();
    token.content = string_field(t, "content", where);
    if (token.content.empty()) fail("{}: field 'content' must not be empty", where);
    token.single_word = bool_field(t, "single_word", false, where);
    token.lstrip = bool_field(t, "lstrip", false, where);
    token.rstrip = bool_field(t, "rstrip", false, where);
    token.special = bool_field(t, "special", false, where);
    token.normalized = bool_field(t, "normalized", !token.special, where);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// Builds the two matchers: HF lists special tokens before the others, each group in file order.
void build_matchers(Tokenizer::Impl& impl, const std::vector<AddedToken>& added) {
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (bool special : {true, false}) {
    for (const AddedToken& t : added) {
      if (t.special != special) continue;
      if (t.normalized) {
        std::string scratch;
        normalized_patterns.emplace_back(impl.normalizer.apply(t.content, scratch));
        normalized.push_back(t);
      } else {
        raw_patterns.push_back(t.content);
        raw.push_back(t);
      }
    }
  }
  impl.raw_matcher = AddedTokenMatcher(std::move(raw), raw_patterns);
  impl.normalized_matcher = AddedTokenMatcher(std::move(normalized), normalized_patterns);
}

void set_token(Tokenizer::Impl& impl, int32_t id, const std::string& token, uint8_t flags,
               const std::string& src) {
  if ((impl.id_flags[id] & Tokenizer::Impl::kAssigned) && !(flags & Tokenizer::Impl::kAdded)) {
    fail("{}: id {} is used by both \"{}\" and \"{}\"", src, id, impl.id_token[id], token);
  }
  impl.id_token[id] = token;
  impl.id_bytes[id] = byte_level::token_to_bytes(token);
  impl.id_flags[id] = flags;
}

std::shared_ptr<Tokenizer::Impl> build(const json& root, const std::string& src) {
  static std::atomic<uint64_t> next_serial{1};
  if (!root.is_object()) fail("{}: expected a JSON object at the top level", src);
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = src;
  impl->serial = next_serial++;

  const json null_node;
  auto node = [&](const char* key) -> const json& {
    const auto it = root.find(key);
    return it == root.end() ? null_node : *it;
  };
  if (!node("model").is_object())  // e.g. a config.json given for the tokenizer
    fail("{}: not a tokenizer.json (no 'model' object; expected Hugging Face tokenizers' file)", src);
  impl->normalizer = parse_normalizer(node("normalizer"), src);
  const std::string pattern = parse_pre_tokenizer(node("pre_tokenizer"), src);
  if (!pattern.empty()) impl->splitter.emplace(pattern, src + ": pre_tokenizer regex");
  if (type_of(node("decoder")) != "ByteLevel") {
    fail("{}: decoder '{}' is not supported (expected ByteLevel)", src, type_of(node("decoder")));
  }
  const std::string post = type_of(node("post_processor"));
  if (post != "null" && post != "ByteLevel") {
    fail("{}: post_processor '{}' is not supported (expected ByteLevel or null; we add no tokens)",
         src, post);
  }
  const json& model = node("model");
  check_model(model, src);

  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(model["vocab"].size());
  int64_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      fail("{}: model.vocab[\"{}\"] must be a token id in 0..{}, found {}", src, token, INT32_MAX, id.dump());
    }
    vocab.emplace(token, id.get<int32_t>());
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  const std::vector<AddedToken> added = parse_added_tokens(root, src);
  for (const AddedToken& t : added) max_id = std::max<int64_t>(max_id, t.id);
  constexpr int64_t kMaxId = 1 << 24;  // ids index dense tables; real vocabularies are far smaller
  if (max_id >= kMaxId) fail("{}: token id {} is implausibly large (limit {})", src, max_id, kMaxId - 1);

  impl->bpe = BpeModel(vocab, parse_merges(model["merges"], src),
                       bool_field(model, "ignore_merges", false, src + ": model"), src);

  const auto size = static_cast<size_t>(max_id + 1);
  impl->id_token.resize(size);
  impl->id_bytes.resize(size);
  impl->id_flags.assign(size, 0);
  for (const auto& [token, id] : vocab) set_token(*impl, id, token, Tokenizer::Impl::kAssigned, src);
  impl->token_ids = std::move(vocab);
  for (const AddedToken& t : added) {
    const uint8_t flags = Tokenizer::Impl::kAssigned | Tokenizer::Impl::kAdded |
                          (t.special ? Tokenizer::Impl::kSpecial : 0);
    // Like HF (0.20+), a normalized added token decodes as its normalized form.
    std::string scratch;
    const std::string shown(t.normalized ? impl->normalizer.apply(t.content, scratch) : t.content);
    set_token(*impl, t.id, shown, flags, src);
    impl->token_ids[t.content] = t.id;
  }
  build_matchers(*impl, added);
  return impl;
}

std::optional<std::string> eos_token_content(const json& config, const std::string& src) {
  const auto it = config.find("eos_token");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  fail("{}: field 'eos_token' must be a string or {{\"content\": ...}}", src);
}

std::string chat_template_of(const json& config, const std::string& src) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const json& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  fail("{}: field 'chat_template' must be a string or a list holding a \"default\" template", src);
}

std::vector<int32_t> generation_eos_ids(const json& config, const std::string& src) {
  std::vector<int32_t> ids;
  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return ids;
  auto add = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      fail("{}: field 'eos_token_id' must be a non-negative integer or a list of them", src);
    }
    ids.push_back(v.get<int32_t>());
  };
  if (it->is_array()) {
    for (const json& v : *it) add(v);
  } else {
    add(*it);
  }
  return ids;
}

// Runs `fn`, turning nlohmann type errors (a field of an unexpected type that the explicit checks
// did not catch) into a specpress::Error naming the file.
template <typename Fn>
auto json_checked(const std::string& source, Fn&& fn) {
  try {
    return fn();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected JSON structure: {}", source, e.what());
  }
}

}  // namespace

Tokenizer Tokenizer::from_json_text(const std::string& json_text, const std::string& source_name) {
  return Tokenizer(json_checked(source_name, [&] {
    return build(parse_json(json_text, source_name), source_name);
  }));
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  return from_json_text(read_file(tokenizer_json_path), tokenizer_json_path);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory (expected a model or tokenizer directory)", dir);
  const fs::path base(dir);
  const std::string tokenizer_json = (base / "tokenizer.json").string();
  if (!fs::exists(tokenizer_json, ec)) {
    fail("{}: no tokenizer.json in this directory (expected a Hugging Face model directory or a "
         "folder with its tokenizer files)", dir);
  }
  std::shared_ptr<Impl> impl = json_checked(tokenizer_json, [&] {
    return build(parse_json(read_file(tokenizer_json), tokenizer_json), tokenizer_json);
  });

  std::optional<std::string> eos_content;
  const std::string config_path = (base / "tokenizer_config.json").string();
  if (fs::exists(config_path, ec)) {
    const json config = parse_json(read_file(config_path), config_path);
    if (!config.is_object()) fail("{}: expected a JSON object at the top level", config_path);
    json_checked(config_path, [&] {
      impl->chat_template = chat_template_of(config, config_path);
      eos_content = eos_token_content(config, config_path);
      return 0;
    });
  }
  const std::string jinja_path = (base / "chat_template.jinja").string();
  if (fs::exists(jinja_path, ec)) impl->chat_template = read_file(jinja_path);

  const std::string generation_path = (base / "generation_config.json").string();
  if (fs::exists(generation_path, ec)) {
    const json config = parse_json(read_file(generation_path), generation_path);
    if (!config.is_object()) fail("{}: expected a JSON object at the top level", generation_path);
    impl->eos_ids = generation_eos_ids(config, generation_path);
    for (int32_t id : impl->eos_ids) {
      if (id >= static_cast<int32_t>(impl->id_flags.size()) || !impl->id_flags[id]) {
        fail("{}: eos_token_id {} is not a token of {}", generation_path, id, tokenizer_json);
      }
    }
  }
  if (eos_content) {
    const auto it = impl->token_ids.find(*eos_content);
    if (it == impl->token_ids.end()) {
      fail("{}: eos_token \"{}\" is not a token of {}", config_path, *eos_content, tokenizer_json);
    }
    if (std::find(impl->eos_ids.begin(), impl->eos_ids.end(), it->second) == impl->eos_ids.end()) {
      impl->eos_ids.push_back(it->second);
    }
  }
  return Tokenizer(std::move(impl));
}

}  // namespace specpress::tok
