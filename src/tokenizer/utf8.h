// utf8.h — UTF-8 validation, code point helpers and lossy decoding for the tokenizer.
// Encode rejects invalid input with the byte offset; decode turns arbitrary token bytes into text the
// way Hugging Face does (Rust String::from_utf8_lossy: one U+FFFD per maximal ill-formed subpart).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specpress::tok::utf8 {

inline constexpr size_t npos = std::string_view::npos;
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Offset of the first byte that does not start or continue a well-formed sequence (Unicode table 3-7),
// or npos when the whole text is valid. Truncated sequences at the end are invalid.
size_t find_invalid(std::string_view text);

// Appends `bytes` to `out` as valid UTF-8: every maximal ill-formed subpart becomes one U+FFFD.
// With hold_incomplete_tail, a trailing sequence that is a valid but unfinished prefix is not
// consumed; the return value is the number of bytes consumed (bytes.size() unless held back).
size_t append_lossy(std::string& out, std::string_view bytes, bool hold_incomplete_tail = false);

// Appends the UTF-8 encoding of a code point (must be a Unicode scalar value).
void append_codepoint(std::string& out, char32_t cp);

// Decodes the code point starting at text[pos] of VALID UTF-8 and advances pos past it.
char32_t next_codepoint(std::string_view text, size_t& pos);

// Length in bytes of the sequence whose lead byte is `lead`, for valid UTF-8.
inline size_t sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// True when every byte is < 0x80.
bool is_ascii(std::string_view text);

}  // namespace specpress::tok::utf8
