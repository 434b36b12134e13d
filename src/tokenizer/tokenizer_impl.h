// tokenizer_impl.h — the immutable state behind a Tokenizer, shared by tokenizer_load.cpp (which
// builds it from JSON) and tokenizer.cpp (encode/decode). Internal to the tokenizer library.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/tokenizer.h"

namespace specpress::tok {

struct Tokenizer::Impl {
  enum Flag : uint8_t { kAssigned = 1, kAdded = 2, kSpecial = 4 };

  std::string source;
  uint64_t serial = 0;  // unique per loaded tokenizer; keys the per-thread word caches

  Normalizer normalizer;
  std::optional<RegexSplitter> splitter;  // none: each text piece is a single word
  BpeModel bpe;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized:false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized:true (NFC'd patterns)

  std::vector<std::string> id_token;  // token string as in tokenizer.json, per id
  std::vector<std::string> id_bytes;  // raw bytes decode emits, per id
  std::vector<uint8_t> id_flags;      // Flag bits, per id
  std::unordered_map<std::string, int32_t> token_ids;  // token string / added content -> id

  std::string chat_template;
  std::vector<int32_t> eos_ids;

  // Throws the decode error for an id outside the table or without a token.
  [[noreturn]] void fail_bad_id(int32_t id) const;
};

}  // namespace specpress::tok
