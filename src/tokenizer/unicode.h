// unicode.h — the Unicode character data where our libraries and HF's disagree, so that the
// tokenizer matches HF exactly:
//  * White_Space: what Oniguruma's and Rust regex's \s match. PCRE2's \s also matches U+180E.
//  * Letters and numbers: HF's Oniguruma has Unicode 16.0 data, PCRE2 10.42 has 14.0. The code
//    points that became \p{L} or \p{N} in 15.0-16.0 are listed so the regex can include them.
//  * Rust regex's \w, which HF uses for single_word added tokens.
#pragma once
#include <string_view>

namespace specpress::tok::unicode {

// Unicode White_Space: U+0009..000D, 0020, 0085, 00A0, 1680, 2000..200A, 2028, 2029, 202F, 205F, 3000.
bool is_white_space(char32_t cp);

// The same set as the body of a PCRE2 character class (no brackets), for pattern translation.
std::string_view white_space_class_body();

// Class bodies (no brackets) of the code points that are \p{L} / \p{N} in Unicode 16.0 but not in
// Unicode 14.0. Measured against HF tokenizers 0.23.2 over every code point (9392 differ) and
// split into letters and numbers with Node's ICU data.
std::string_view letter_additions_class_body();
std::string_view number_additions_class_body();
// True when valid UTF-8 `text` contains one of those code points.
bool has_letter_number_additions(std::string_view text);

// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
// Alphabetic is taken as L*, Nl and the Other_Alphabetic symbols (circled/squared letters); the other
// Other_Alphabetic characters are marks and already covered.
bool is_word_char(char32_t cp);

}  // namespace specpress::tok::unicode
