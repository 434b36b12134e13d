// byte_level.cpp — builds the GPT-2 byte alphabet: printable Latin-1 bytes map to themselves, the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen…) to U+0100 onwards in byte order.
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace specpress::tok::byte_level {
namespace {

bool maps_to_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> build_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) table[b] = maps_to_itself(b) ? static_cast<char32_t>(b) : next++;
  return table;
}

}  // namespace

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = build_table();
  return table;
}

std::optional<unsigned char> char_to_byte(char32_t cp) {
  // The alphabet covers U+0021..U+0143; build the inverse once.
  static const std::array<int, 0x144> inverse = [] {
    std::array<int, 0x144> inv{};
    inv.fill(-1);
    const auto& fwd = byte_to_char();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = b;
    return inv;
  }();
  if (cp >= inverse.size() || inverse[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(inverse[cp]);
}

std::string token_to_bytes(std::string_view token_utf8) {
  std::string bytes;
  bytes.reserve(token_utf8.size());
  size_t pos = 0;
  while (pos < token_utf8.size()) {
    const auto b = char_to_byte(utf8::next_codepoint(token_utf8, pos));
    if (!b) return std::string(token_utf8);
    bytes.push_back(static_cast<char>(*b));
  }
  return bytes;
}

std::string bytes_to_token(std::string_view bytes) {
  std::string token;
  for (unsigned char b : bytes) utf8::append_codepoint(token, byte_to_char()[b]);
  return token;
}

}  // namespace specpress::tok::byte_level
