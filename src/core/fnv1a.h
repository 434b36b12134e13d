// fnv1a.h — 64-bit FNV-1a: the fingerprints that tell whether an input changed (a bench record's prompt, a training's
// data files, the chat template). Not cryptographic: it detects edits, not tampering.
#pragma once
#include <cstdint>
#include <string_view>

namespace specpress {

constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;

constexpr uint64_t fnv1a_byte(uint64_t h, unsigned char byte) { return (h ^ byte) * 0x100000001b3ull; }

// `bytes` folded into the running hash `h` (the offset basis for a fresh one).
constexpr uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffset) {
  for (char c : bytes) h = fnv1a_byte(h, static_cast<unsigned char>(c));
  return h;
}

}  // namespace specpress
