// unicode_test.cpp — the building blocks: lossy UTF-8 (maximal subparts, checked against Python's
// errors="replace" results), validation offsets, the NFC quick check against utf8proc's data, and
// the Oniguruma-to-PCRE2 regex translation.
#include <cstdlib>
#include <vector>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <gtest/gtest.h>
#include <pcre2.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace specpress::tok {
namespace {

std::string lossy(std::string_view bytes) {
  std::string out;
  utf8::append_lossy(out, bytes);
  return out;
}

constexpr std::string_view R = "\xEF\xBF\xBD";

TEST(Utf8, LossyReplacesMaximalSubparts) {
  // Unicode 15 §3.9 table 3-8 example, and cases where Python's bytes.decode("utf-8", "replace")
  // (same best practice as Rust's from_utf8_lossy) was used to get the expected text.
  EXPECT_EQ(lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            std::string("a") + std::string(R) + std::string(R) + std::string(R) + "b" +
                std::string(R) + "c" + std::string(R) + std::string(R) + "d");
  EXPECT_EQ(lossy("\xE4\xBD"), R);
  EXPECT_EQ(lossy("\xE4"), R);
  EXPECT_EQ(lossy("\xC0\xAF"), std::string(R) + std::string(R));          // overlong
  EXPECT_EQ(lossy("\xED\xA0\x80"), std::string(R) + std::string(R) + std::string(R));  // surrogate
  EXPECT_EQ(lossy("\xF0\x9F\x98"), R);                                      // truncated emoji
  EXPECT_EQ(lossy("\xF0\x9F\x98\x80"), "😀");
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), std::string(R) + std::string(R) + std::string(R) + std::string(R));
  EXPECT_EQ(lossy("ok\xFFok"), std::string("ok") + std::string(R) + "ok");
  EXPECT_EQ(lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8, HoldsOnlyCompletablePrefixes) {
  std::string out;
  EXPECT_EQ(utf8::append_lossy(out, "ab\xE4\xBD", true), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_lossy(out, "\xE4\x41", true), 2u);  // broken, not held
  EXPECT_EQ(out, std::string(R) + "A");
  out.clear();
  EXPECT_EQ(utf8::append_lossy(out, "\xC0", true), 1u);  // can never start a sequence
  EXPECT_EQ(out, R);
}

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(utf8::find_invalid("plain ascii text that is long enough for the word loop"), utf8::npos);
  EXPECT_EQ(utf8::find_invalid("€😀中"), utf8::npos);
  EXPECT_EQ(utf8::find_invalid("0123456789abcdef\x80"), 16u);
  EXPECT_EQ(utf8::find_invalid("\xE2\x82"), 0u);
  EXPECT_EQ(utf8::find_invalid("ab\xF8\x88\x80\x80\x80"), 2u);
}

// Every code point the NFC quick check calls stable must have combining class 0, be unchanged by
// NFC, and never be a non-initial element of a canonical decomposition (so it cannot compose with
// a preceding character).
TEST(Normalizer, QuickCheckRangesAreNfcStable) {
  std::vector<bool> second(0x110000, false);
  for (utf8proc_int32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    utf8proc_int32_t buffer[8];
    int last_class = 0;
    const auto n = utf8proc_decompose_char(cp, buffer, 8, UTF8PROC_DECOMPOSE, &last_class);
    for (utf8proc_ssize_t i = 1; i < n; ++i) second[buffer[i]] = true;
  }
  size_t checked = 0;
  for (utf8proc_int32_t cp = 1; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    std::string s;
    utf8::append_codepoint(s, static_cast<char32_t>(cp));
    if (!nfc_quick_stable(s)) continue;
    ++checked;
    ASSERT_EQ(utf8proc_get_property(cp)->combining_class, 0) << std::hex << cp;
    ASSERT_FALSE(second[cp]) << std::hex << cp;
    utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
    const std::string normalized(reinterpret_cast<char*>(out));
    std::free(out);
    ASSERT_EQ(normalized, s) << std::hex << cp;
  }
  EXPECT_GT(checked, 20000u);
  // Hangul L + V composes: jamo must not pass the quick check.
  EXPECT_FALSE(nfc_quick_stable("\xE1\x84\x80\xE1\x85\xA1"));
}

TEST(Normalizer, NfcComposes) {
  const Normalizer nfc(Normalizer::Kind::kNfc);
  std::string scratch;
  EXPECT_EQ(nfc.apply("cafe\xCC\x81", scratch), "caf\xC3\xA9");
  EXPECT_EQ(nfc.apply("\xE1\x84\x80\xE1\x85\xA1", scratch), "\xEA\xB0\x80");  // 가
  EXPECT_EQ(nfc.apply(std::string_view("a\0\xCC\x81", 4), scratch), std::string_view("a\0\xCC\x81", 4));
  EXPECT_EQ(nfc.apply("\xE2\x84\xAB", scratch), "\xC3\x85");  // Angstrom sign -> Å
}

// HF's NFC has Unicode 9.0 data: later combining marks are inert for it.
TEST(Normalizer, NewerMarksAreInertLikeHf) {
  const Normalizer nfc(Normalizer::Kind::kNfc);
  std::string scratch;
  // U+0D3B (ccc 9, Unicode 10) would be reordered before U+0300 (ccc 230) with current data.
  EXPECT_EQ(nfc.apply("\xCC\x80\xE0\xB4\xBB", scratch), "\xCC\x80\xE0\xB4\xBB");
  EXPECT_EQ(nfc.apply("a\xCC\x80\xCC\x80\xE0\xB4\xBB", scratch), "\xC3\xA0\xCC\x80\xE0\xB4\xBB");
  // U+11935 U+11930 compose to U+11938 since Unicode 13; not for HF.
  EXPECT_EQ(nfc.apply("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", scratch), "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
  // Older marks still reorder and compose: U+0301 (230) after U+0316 (220).
  EXPECT_EQ(nfc.apply("e\xCC\x81\xCC\x96", scratch), "\xC3\xA9\xCC\x96");
  EXPECT_EQ(nfc.apply("\xCC\x81\xCC\x96", scratch), "\xCC\x96\xCC\x81");
  EXPECT_TRUE(nfc_inert_for_hf(0x0D3B));
  EXPECT_FALSE(nfc_inert_for_hf(0x0300));
}

TEST(Unicode, WhiteSpaceIsUnicodeWhiteSpaceNotPcre2Space) {
  for (char32_t cp : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A,
                      0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(unicode::is_white_space(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  for (char32_t cp : {0x180E, 0x200B, 0xFEFF, 0x1C, 0x08, 0x41}) {
    EXPECT_FALSE(unicode::is_white_space(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(RegexSplitter, TranslatesWhitespaceClasses) {
  const std::string ws(unicode::white_space_class_body());
  EXPECT_EQ(RegexSplitter::translate_pattern(R"(\s+(?!\S))", "test"), "[" + ws + "]+(?![^" + ws + "])");
  const std::string letters = "\\p{L}" + std::string(unicode::letter_additions_class_body());
  const std::string numbers = "\\p{N}" + std::string(unicode::number_additions_class_body());
  EXPECT_EQ(RegexSplitter::translate_pattern(R"([^\s\p{L}]|[\]\s]|\\s)", "test"),
            "[^" + ws + letters + "]|[\\]" + ws + "]|\\\\s");
  EXPECT_EQ(RegexSplitter::translate_pattern(R"(\pN\P{L}\p{Lu}\p{N}+)", "test"),
            "[" + numbers + "][^" + letters + "]\\p{Lu}[" + numbers + "]+");
  EXPECT_THROW(RegexSplitter::translate_pattern(R"([\P{N}])", "test"), Error);
  EXPECT_THROW(RegexSplitter::translate_pattern(R"([\S])", "test"), Error);
  // U+180E is not whitespace for Oniguruma; with PCRE2's own \s it would be.
  RegexSplitter splitter(R"(\s+|\S+)", "test");
  std::vector<std::string_view> pieces;
  splitter.split("a\xE1\xA0\x8E" "b  c", pieces);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], "a\xE1\xA0\x8E" "b");
}

// HF's Oniguruma has Unicode 16.0 letters and numbers; PCRE2 10.42 only 14.0.
TEST(RegexSplitter, KnowsUnicode16LettersAndNumbers) {
  RegexSplitter splitter(R"(\p{L}+|\p{N}|[^\p{L}\p{N}]+)", "test");
  std::vector<std::string_view> pieces;
  // U+31350 (CJK Extension H, 15.0) and U+10D4A (Garay, 16.0) are letters; U+1D2C0 (Kaktovik
  // numeral, 15.0) is a number; U+323B0 (CJK Extension J, 17.0) is unknown to HF.
  splitter.split("a\U00031350\U00010D4Ab\U0001D2C0\U0001D2C0\U000323B0", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"a\U00031350\U00010D4Ab", "\U0001D2C0",
                                                   "\U0001D2C0", "\U000323B0"}));
}

// The tables above and in normalizer.cpp were measured for PCRE2 with Unicode 14 data and
// utf8proc with Unicode 15. Newer libraries know characters HF does not (or no longer need the
// additions); re-measure against HF before accepting a newer library.
TEST(Unicode, LibraryDataVersionsAreTheMeasuredOnes) {
  char version[32] = {};
  ASSERT_GT(pcre2_config_8(PCRE2_CONFIG_UNICODE_VERSION, version), 0);
  const int pcre2_major = std::atoi(version);
  EXPECT_GE(pcre2_major, 14) << "PCRE2 Unicode " << version;
  EXPECT_LE(pcre2_major, 16) << "PCRE2 Unicode " << version
                             << ": knows Unicode 17 letters that HF treats as unassigned";
  const int utf8proc_major = std::atoi(utf8proc_unicode_version());
  EXPECT_LE(utf8proc_major, 15) << "utf8proc Unicode " << utf8proc_unicode_version()
                                << ": extend the NFC inert table in normalizer.cpp";
}

TEST(RegexSplitter, IsolatedKeepsGapsAndSkipsEmptyMatches) {
  RegexSplitter splitter("x*", "test");
  std::vector<std::string_view> pieces;
  splitter.split("abxxc", pieces);
  // Oniguruma-style iteration: empty matches at a and b, "xx", empty at c; gaps a, b, c kept.
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"a", "b", "xx", "c"}));
}

}  // namespace
}  // namespace specpress::tok
