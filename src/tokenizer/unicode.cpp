// unicode.cpp — White_Space and \w tests (utf8proc general categories) and the tables of letters and
// numbers that Unicode 15.0-16.0 added, with the PCRE2 class bodies generated from them.
#include "tokenizer/unicode.h"

#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace specpress::tok::unicode {

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string_view white_space_class_body() {
  return "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
         "\\x{202F}\\x{205F}\\x{3000}";
}

namespace {

struct Range {
  char32_t first, last;
};

// \p{L} and \p{N} in Unicode 16.0 but not in 14.0 (see unicode.h), in ascending order.
constexpr Range kLetterAdditions[] = {
    {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD}, {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3}, {0x10D4A, 0x10D65},
    {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240}, {0x11380, 0x11389},
    {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7},
    {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0}, {0x11F02, 0x11F02},
    {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F}, {0x13441, 0x13446},
    {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF},
    {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D},
    {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x2B739, 0x2B739},
    {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF},
};
constexpr Range kNumberAdditions[] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59},
    {0x16130, 0x16139}, {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA},
};

template <size_t N>
std::string class_body(const Range (&ranges)[N]) {
  std::string body;
  for (const Range& r : ranges) {
    body += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
    if (r.last != r.first) body += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
  }
  return body;
}

template <size_t N>
bool in_ranges(char32_t cp, const Range (&ranges)[N]) {
  for (const Range& r : ranges) {
    if (cp < r.first) return false;
    if (cp <= r.last) return true;
  }
  return false;
}

}  // namespace

std::string_view letter_additions_class_body() {
  static const std::string body = class_body(kLetterAdditions);
  return body;
}

std::string_view number_additions_class_body() {
  static const std::string body = class_body(kNumberAdditions);
  return body;
}

bool has_letter_number_additions(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    if (p[i] < 0xE1) {  // ASCII, 2-byte sequences and U+0000..U+0FFF: nothing below U+1C89
      i += p[i] < 0x80 ? 1 : p[i] < 0xE0 ? 2 : 3;
      continue;
    }
    const char32_t cp = utf8::next_codepoint(text, i);
    if (cp >= 0x1C89 && (in_ranges(cp, kLetterAdditions) || in_ranges(cp, kNumberAdditions))) {
      return true;
    }
  }
  return false;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace specpress::tok::unicode
