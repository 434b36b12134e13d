// regex_splitter.h — the tokenizer.json "Split" pre-tokenizer (behavior Isolated) on PCRE2.
// HF compiles these patterns with Oniguruma; we translate the constructs whose meaning differs
// (\s, \p{L} and \p{N}; see unicode.h) and run the result with PCRE2_UTF | PCRE2_UCP, JIT-compiled
// when available.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specpress::tok {

class RegexSplitter {
 public:
  // `pattern` is the Oniguruma pattern from tokenizer.json; `source` names it in error messages.
  RegexSplitter(std::string_view pattern, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` (valid UTF-8) in order: every match and every gap between matches,
  // empty pieces dropped, exactly as HF's Split with SplitDelimiterBehavior::Isolated.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  bool jit() const;
  // The PCRE2 pattern used for text holding Unicode 15-16 letters/numbers (see unicode.h).
  const std::string& pcre2_pattern() const;

  // Rewrites \s/\S into explicit White_Space classes and, with `letter_number_additions`, adds
  // the Unicode 15-16 letters/numbers to \p{L}/\p{N} (outside and inside [...]). Throws
  // specpress::Error for \S, \P{L} or \P{N} inside a character class, which PCRE2 cannot express.
  static std::string translate_pattern(std::string_view pattern, const std::string& source,
                                       bool letter_number_additions = true);

 private:
  struct Compiled;
  // Big classes are slower in PCRE2's JIT, so text without any of the added code points (nearly
  // all text) runs a pattern without them; both give the same pieces on such text.
  std::unique_ptr<Compiled> full_;
  std::unique_ptr<Compiled> fast_;  // null when the pattern has no \p{L}/\p{N}
};

}  // namespace specpress::tok
