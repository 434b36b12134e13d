// logprobs_json.h — the output tokens' log-probabilities (decode::TokenLogprob) as each API returns them:
// OpenAI chat's {"content": [{token, logprob, bytes, top_logprobs}]}, OpenAI completions' columns {tokens,
// token_logprobs, top_logprobs, text_offset} (top_logprobs: the top alternatives plus the chosen token, as vLLM),
// and llama.cpp's completion_probabilities [{id, token, logprob, bytes, top_logprobs}]; keys in that order, and the
// alternatives most likely first. A token's text is its own decoding (special tokens written out; U+FFFD for a part
// of a UTF-8 character, whose exact bytes `bytes` keeps); without a tokenizer it is the id and a space, as the
// server writes ids. Completions' columns may start with the echoed prompt's tokens (LoggedToken::echoed), the first
// with a null logprob and null top_logprobs, as OpenAI's echo writes it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decode/generation.h"
#include "tokenizer/tokenizer.h"

namespace specpress::server {

struct LoggedToken {
  int64_t id = 0;
  decode::TokenLogprob logprob;
  // A prompt token /v1/completions echoes: its text counts with special tokens written out, as the echoed prompt
  // has them; the first has no logprob (null, and null top_logprobs, as OpenAI writes it).
  bool echoed = false;
  bool scored = true;
};

class LogprobsJson {
 public:
  // tokens_as_ids: every token's text is "token_id:ID" (vLLM's return_tokens_as_token_ids), so that no two
  // tokens share one (the parts of a character all read U+FFFD) and clients map entries back to ids
  explicit LogprobsJson(const std::optional<tok::Tokenizer>& tokenizer, bool tokens_as_ids = false)
      : tokenizer_(tokenizer), tokens_as_ids_(tokens_as_ids) {}
  nlohmann::ordered_json chat(const std::vector<LoggedToken>& tokens) const;
  // text_offset: characters (Unicode code points) of the text before tokens[0] (output tokens' special tokens
  // skipped, as the returned text has them); advanced past them.
  nlohmann::ordered_json completion(const std::vector<LoggedToken>& tokens, int64_t& text_offset) const;
  nlohmann::ordered_json native(const std::vector<LoggedToken>& tokens) const;
  // One token's text ("token_id:ID" with tokens_as_ids) and bytes (see above); skip_special: none for a special token,
  // as the returned text has.
  std::string text(int64_t id) const;
  std::string bytes(int64_t id, bool skip_special = false) const;

 private:
  nlohmann::ordered_json token_entry(int64_t id, float logprob, bool with_id) const;
  // [{(id,) token, logprob, bytes, top_logprobs: [...]}]: chat's content list, or (with ids) llama.cpp's
  nlohmann::ordered_json entries(const std::vector<LoggedToken>& tokens, bool with_id) const;
  const std::optional<tok::Tokenizer>& tokenizer_;
  bool tokens_as_ids_;
};

}  // namespace specpress::server
