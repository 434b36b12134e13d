// normalizer.h — the tokenizer.json "normalizer" step. Qwen3 uses NFC; we support NFC and none, and
// reject anything else at load time rather than silently tokenizing differently from HF.
#pragma once
#include <string>
#include <string_view>

namespace specpress::tok {

class Normalizer {
 public:
  enum class Kind { kNone, kNfc };

  Normalizer() = default;
  explicit Normalizer(Kind kind) : kind_(kind) {}
  Kind kind() const { return kind_; }

  // Returns the normalized text: either `text` itself (when nothing changes, the common case) or a
  // view of `scratch`, which then holds the normalized copy. `text` must be valid UTF-8.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  Kind kind_ = Kind::kNone;
};

// True when `text` is certainly unchanged by NFC: every code point has canonical combining class 0,
// is its own NFC form and never composes with a preceding character. Checked with a conservative
// list of ranges (ASCII..U+02FF, kana, CJK ideographs, Hangul syllables, emoji); the tests verify the
// list against utf8proc's data. A false answer only means "run the full algorithm".
bool nfc_quick_stable(std::string_view text);

// True for the characters HF's NFC treats as unassigned although utf8proc knows their
// normalization properties (added after Unicode 9.0; see normalizer.cpp).
bool nfc_inert_for_hf(char32_t cp);

}  // namespace specpress::tok
