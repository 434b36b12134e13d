// logprobs_json.cpp — see logprobs_json.h.
#include "server/logprobs_json.h"

#include <fmt/format.h>

namespace specpress::server {
using json = nlohmann::ordered_json;

namespace {
// characters of UTF-8 bytes: those that are not continuation bytes (10xxxxxx)
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

std::string LogprobsJson::bytes(int64_t id, bool skip_special) const {
  if (!tokenizer_) return fmt::format("{} ", id);
  std::string out;
  if (id >= 0 && id < tokenizer_->vocab_size())
    tokenizer_->append_token_bytes(static_cast<int32_t>(id), out, skip_special);
  return out;  // ids past the tokenizer's vocabulary (embedding padding rows) have no text
}

std::string LogprobsJson::text(int64_t id) const {
  if (tokens_as_ids_) return fmt::format("token_id:{}", id);
  if (!tokenizer_) return fmt::format("{} ", id);
  if (id < 0 || id >= tokenizer_->vocab_size()) return {};
  return tokenizer_->decode(std::vector<int32_t>{static_cast<int32_t>(id)});
}

json LogprobsJson::token_entry(int64_t id, float logprob, bool with_id) const {
  const std::string b = bytes(id);
  json entry = json::object();
  if (with_id) entry["id"] = id;
  entry["token"] = text(id);
  entry["logprob"] = logprob;
  std::vector<int> values;
  for (unsigned char c : b) values.push_back(c);
  entry["bytes"] = values;
  return entry;
}

json LogprobsJson::entries(const std::vector<LoggedToken>& tokens, bool with_id) const {
  json out = json::array();
  for (const LoggedToken& t : tokens) {
    json entry = token_entry(t.id, t.logprob.logprob, with_id);
    json top = json::array();
    for (const auto& [id, lp] : t.logprob.top) top.push_back(token_entry(id, lp, with_id));
    entry["top_logprobs"] = top;
    out.push_back(entry);
  }
  return out;
}

json LogprobsJson::chat(const std::vector<LoggedToken>& tokens) const { return {{"content", entries(tokens, false)}}; }

json LogprobsJson::completion(const std::vector<LoggedToken>& tokens, int64_t& text_offset) const {
  json texts = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  for (const LoggedToken& t : tokens) {
    const std::string s = text(t.id);
    texts.push_back(s);
    offsets.push_back(text_offset);
    // the text the server returns skips the output's special tokens (an echoed prompt has them); a character split
    // over two tokens counts once
    text_offset += code_points(bytes(t.id, /*skip_special=*/!t.echoed));
    if (!t.scored) {  // the echoed prompt's first token
      logprobs.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    logprobs.push_back(t.logprob.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.logprob.top) {
      const std::string key = text(id);
      if (!top.contains(key)) top[key] = lp;  // two tokens with one text (U+FFFD): the likelier (tokens_as_ids: none)
    }
    if (!top.contains(s)) top[s] = t.logprob.logprob;
    tops.push_back(top);
  }
  return {{"tokens", texts}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json LogprobsJson::native(const std::vector<LoggedToken>& tokens) const { return entries(tokens, true); }

}  // namespace specpress::server
