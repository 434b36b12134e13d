// byte_level.h — the GPT-2 byte-to-unicode alphabet used by byte-level BPE vocabularies.
// tokenizer.json stores tokens in this alphabet (e.g. 'Ġ' = byte 0x20); we convert the vocabulary
// to raw bytes once at load time so encode and decode work on bytes directly.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace specpress::tok::byte_level {

// The code point that stands for each byte.
const std::array<char32_t, 256>& byte_to_char();

// Inverse of byte_to_char(): the byte a code point stands for, if it is in the alphabet.
std::optional<unsigned char> char_to_byte(char32_t cp);

// Converts a token string to raw bytes as HF's ByteLevel decoder does: each character maps back to
// its byte if ALL characters of the token are in the alphabet; otherwise the token's own UTF-8
// bytes are used unchanged (HF's fallback for added tokens written in plain text).
std::string token_to_bytes(std::string_view token_utf8);

// Returns the token string (in the alphabet) of a raw byte string.
std::string bytes_to_token(std::string_view bytes);

}  // namespace specpress::tok::byte_level
