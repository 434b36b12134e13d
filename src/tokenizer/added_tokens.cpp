// added_tokens.cpp — byte trie over the patterns and the HF find_matches rules (see header).
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace specpress::tok {
namespace {

// Decodes the last code point of valid UTF-8 `text` (non-empty).
char32_t last_codepoint(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::next_codepoint(text, start);
}

bool ends_with_word(std::string_view text) {
  return !text.empty() && unicode::is_word_char(last_codepoint(text));
}

bool starts_with_word(std::string_view text) {
  size_t pos = 0;
  return !text.empty() && unicode::is_word_char(utf8::next_codepoint(text, pos));
}

// Start of the run of White_Space at the end of `text`.
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!unicode::is_white_space(utf8::next_codepoint(text, pos))) break;
    end = start;
  }
  return end;
}

// Length of the run of White_Space at the start of `text`.
size_t leading_space_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!unicode::is_white_space(utf8::next_codepoint(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (unsigned char b : pattern) {
      int32_t child = -1;
      for (const auto& [byte, index] : nodes_[node].children) {
        if (byte == b) child = index;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(b, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    // Two tokens with the same pattern: the first one wins, as in an Aho-Corasick automaton.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t* length) const {
  int32_t node = 0;
  int32_t found = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == b) {
        child = index;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[node].token >= 0) {
      found = nodes_[node].token;
      *length = i + 1 - pos;
    }
  }
  return found;
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special,
                              std::vector<TextPiece>& out) const {
  size_t emitted = 0;  // text[0..emitted) is already covered by pieces
  size_t pos = 0;      // where the search for the next match resumes
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t t = longest_at(text, pos, &length);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;  // a rejected match is consumed too, as HF's find_iter has moved past it
    if (skip_special && token.special) continue;
    if (token.single_word) {
      const bool start_ok = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_ok = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!start_ok || !stop_ok) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    // Unlike HF we resume after the stripped spaces, so pieces never overlap (HF can emit
    // overlapping pieces when a token that starts with a space follows an rstrip token).
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (emitted < start) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, stop - start), token.id});
    emitted = stop;
    pos = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace specpress::tok
