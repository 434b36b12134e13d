// normalizer.cpp — NFC through utf8proc (UTF8PROC_STABLE | UTF8PROC_COMPOSE, i.e. utf8proc_NFC
// without the NUL terminator rule, so embedded NUL bytes survive), skipped when a quick scan
// proves the text is already NFC.
//
// HF's NFC (the unicode-normalization-alignments crate) carries Unicode 9.0 data, utf8proc newer
// data. Characters that gained normalization properties later (a nonzero combining class, or a
// part in a canonical composition) are unassigned for HF, i.e. inert starters that nothing reorders
// or composes across. We reproduce that by normalizing the text between such characters
// separately and copying them unchanged. The list was measured against HF tokenizers 0.23.2 over
// every character that Python's unicodedata (Unicode 14.0) or utf8proc 2.8 (Unicode 15.0) gives a
// nonzero combining class, a canonical decomposition or a composition: 110 characters behaved as
// unassigned. Normalization stability guarantees the data of all older characters agree.
#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace specpress::tok {
namespace {

bool stable_code_point(char32_t cp) {
  return cp < 0x300 ||                       // Basic Latin .. Spacing Modifier Letters
         (cp >= 0x3041 && cp <= 0x3096) ||   // Hiragana (U+3099/309A are combining marks)
         (cp >= 0x30A1 && cp <= 0x30FA) ||   // Katakana
         (cp >= 0x4E00 && cp <= 0x9FFF) ||   // CJK Unified Ideographs
         (cp >= 0xAC00 && cp <= 0xD7A3) ||   // Hangul syllables (jamo are not listed)
         (cp >= 0x1F300 && cp <= 0x1FAFF);   // pictographs and emoji
}

// Characters with normalization properties newer than Unicode 9.0 (see the file comment).
constexpr char32_t kInertRanges[][2] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08D3}, {0x09FE, 0x09FE}, {0x0C3C, 0x0C3C},
    {0x0D3B, 0x0D3C}, {0x0EBA, 0x0EBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA},
    {0xA82C, 0xA82C}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF},
    {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E},
    {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x11938, 0x11938}, {0x1193D, 0x1193E},
    {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
    {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};

// Appends NFC(text) to out.
void append_nfc(std::string_view text, std::string& out) {
  if (text.empty()) return;
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalization failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

}  // namespace

bool nfc_inert_for_hf(char32_t cp) {
  if (cp < kInertRanges[0][0]) return false;
  for (const auto& range : kInertRanges) {
    if (cp < range[0]) return false;
    if (cp <= range[1]) return true;
  }
  return false;
}

bool nfc_quick_stable(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (!stable_code_point(utf8::next_codepoint(text, pos))) return false;
  }
  return true;
}

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  if (kind_ == Kind::kNone || nfc_quick_stable(text)) return text;
  scratch.clear();
  size_t segment = 0;  // start of the text not yet normalized
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t start = pos;
    if (nfc_inert_for_hf(utf8::next_codepoint(text, pos))) {
      append_nfc(text.substr(segment, start - segment), scratch);
      scratch.append(text.substr(start, pos - start));
      segment = pos;
    }
  }
  append_nfc(text.substr(segment), scratch);
  return scratch;
}

}  // namespace specpress::tok
