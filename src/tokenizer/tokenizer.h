// tokenizer.h — the Qwen3 (byte-level BPE) tokenizer, loaded from a Hugging Face tokenizer.json.
// Encode and decode follow HF `tokenizers` exactly: added tokens are found first, then NFC, the
// Split pre-tokenizer regex, the byte alphabet and BPE by merge rank; decode reverses the byte
// alphabet and turns ill-formed UTF-8 into U+FFFD. No Python, no third-party tokenizer code.
//
// Differences from HF, all deliberate:
//  * encode() rejects invalid UTF-8 with a specpress::Error naming the byte offset (HF only ever
//    receives valid strings from Python/JS);
//  * decode() rejects ids that name no token with an Error naming the id and the vocabulary size
//    (HF silently drops them).
// A Tokenizer is immutable after loading; copies share the tables. All const methods may be called
// from several threads at once (the BPE word cache and PCRE2 match state are per thread).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specpress::tok {

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws specpress::Error naming the file and field on anything it cannot
  // reproduce exactly (another model type, normalizer or pre-tokenizer).
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // Loads DIR/tokenizer.json plus, when present, DIR/tokenizer_config.json (eos token, chat
  // template), DIR/chat_template.jinja (preferred chat template) and DIR/generation_config.json
  // (eos ids). Throws an Error naming DIR when tokenizer.json is missing.
  static Tokenizer from_dir(const std::string& dir);
  // Loads from the JSON text itself; `source_name` is used in error messages.
  static Tokenizer from_json_text(const std::string& json_text, const std::string& source_name);

  // Text (UTF-8) to ids. parse_special=true recognises every added token in the text.
  // parse_special=false is HF's split_special_tokens=True: tokens marked special (e.g.
  // <|im_start|>) are encoded as plain text, while non-special added tokens (e.g. <think>) are
  // still recognised, as HF does. No BOS/EOS is added.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Appends the ids of `text` to `out`.
  void encode_append(std::string_view text, std::vector<int32_t>& out,
                     bool parse_special = true) const;

  // Ids to text. skip_special drops tokens marked special:true (e.g. <|im_end|>) but keeps other
  // added tokens such as <think>, as HF's skip_special_tokens does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Appends the raw bytes of one token (possibly a partial UTF-8 sequence) to `out`; nothing when
  // skip_special and the token is special. Throws like decode() for ids that name no token.
  void append_token_bytes(int32_t id, std::string& out, bool skip_special = false) const;

  // Largest id + 1, counting added tokens (151669 for Qwen3).
  int32_t vocab_size() const;
  // Id of a token written as in tokenizer.json (byte alphabet, e.g. "Ġthe") or an added token's
  // content (e.g. "<|im_end|>").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token as tokenizer.json writes it; throws for ids that name no token.
  const std::string& id_to_token(int32_t id) const;
  // True for added tokens marked special:true; false for everything else, including bad ids.
  bool is_special(int32_t id) const;
  // True for any added token (special or not).
  bool is_added(int32_t id) const;

  // The Jinja chat template from the model directory ("" when there is none).
  const std::string& chat_template() const;
  // End-of-sequence ids: generation_config.json's eos_token_id list, then tokenizer_config.json's
  // eos_token if not already listed. Empty when neither file names one.
  std::vector<int32_t> eos_ids() const;
  // Where this tokenizer was loaded from.
  const std::string& source() const;
  // Whether the pre-tokenizer regex runs JIT-compiled.
  bool regex_jit() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace specpress::tok
