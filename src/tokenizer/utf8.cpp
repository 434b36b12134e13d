// utf8.cpp — well-formedness per Unicode table 3-7 and U+FFFD substitution of maximal subparts
// (Unicode 15 §3.9, "best practice"; the behaviour of Rust's from_utf8_lossy, which HF decode uses).
#include "tokenizer/utf8.h"

#include <cstring>

namespace specpress::tok::utf8 {
namespace {

// Allowed range of the second byte for a lead byte (table 3-7); later bytes are always 80..BF.
struct LeadInfo {
  uint8_t length;  // 0 = byte can never start a sequence
  uint8_t lo, hi;  // range of the second byte
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Scans one sequence at p[0..n). Returns the number of bytes that form the maximal valid prefix
// (>= 1); *complete tells whether they form a whole character; *at_end whether the scan stopped
// only because the input ended.
size_t scan(const unsigned char* p, size_t n, bool* complete, bool* at_end) {
  *at_end = false;
  const LeadInfo info = lead_info(p[0]);
  if (info.length == 1) {
    *complete = true;
    return 1;
  }
  if (info.length == 0) {
    *complete = false;
    return 1;
  }
  for (size_t i = 1; i < info.length; ++i) {
    if (i >= n) {
      *complete = false;
      *at_end = true;
      return i;
    }
    const unsigned char lo = i == 1 ? info.lo : 0x80;
    const unsigned char hi = i == 1 ? info.hi : 0xBF;
    if (p[i] < lo || p[i] > hi) {
      *complete = false;
      return i;
    }
  }
  *complete = true;
  return info.length;
}

// Number of leading ASCII bytes of p[0..n), eight at a time.
size_t ascii_prefix(const unsigned char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    if (word & 0x8080808080808080ull) break;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

}  // namespace

bool is_ascii(std::string_view text) {
  return ascii_prefix(reinterpret_cast<const unsigned char*>(text.data()), text.size()) ==
         text.size();
}

size_t find_invalid(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    i += ascii_prefix(p + i, n - i);
    if (i >= n) break;
    bool complete, at_end;
    const size_t len = scan(p + i, n - i, &complete, &at_end);
    if (!complete) return i;
    i += len;
  }
  return npos;
}

size_t append_lossy(std::string& out, std::string_view bytes, bool hold_incomplete_tail) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t done = 0;  // bytes[0..done) are already in `out`
  size_t j = 0;     // scan position; bytes[done..j) are valid and still to be copied
  while (j < n) {
    if (p[j] < 0x80) {
      j += ascii_prefix(p + j, n - j);
      continue;
    }
    bool complete, at_end;
    const size_t len = scan(p + j, n - j, &complete, &at_end);
    if (!complete) {
      out.append(bytes.data() + done, j - done);
      if (at_end && hold_incomplete_tail) return j;
      out.append(kReplacement);
      done = j + len;
    }
    j += len;
  }
  out.append(bytes.data() + done, n - done);
  return n;
}

void append_codepoint(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next_codepoint(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const size_t len = sequence_length(p[0]);
  char32_t cp;
  switch (len) {
    case 1: cp = p[0]; break;
    case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
    case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
    default:
      cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
  pos += len;
  return cp;
}

}  // namespace specpress::tok::utf8
