// added_tokens.h — added/special tokens (tokenizer.json "added_tokens") and how encode finds them
// in text before any normalization or splitting, with HF's AddedVocabulary semantics: leftmost-
// longest matching (as HF's Aho-Corasick with MatchKind::LeftmostLongest), then the single_word,
// lstrip and rstrip rules; tokens with normalized:true are matched in the NFC'd text instead.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specpress::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// One piece of text after added-token extraction: either plain text (token_id < 0) or a token.
struct TextPiece {
  std::string_view text;
  int32_t token_id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what to look for (the content, or its normalized form) for `tokens[i]`.
  AddedTokenMatcher(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns);

  bool empty() const { return tokens_.empty(); }

  // Splits `text` into pieces covering it in order. With skip_special, tokens marked special are
  // not matched (HF's encode_special_tokens / split_special_tokens).
  void split(std::string_view text, bool skip_special, std::vector<TextPiece>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  // Longest pattern starting at text[pos]: returns the token index and sets *length, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t* length) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;                // nodes_[0] is the root
  std::array<bool, 256> first_byte_{};     // bytes that can start a pattern
};

}  // namespace specpress::tok
