// regex_splitter.cpp — PCRE2 compilation, JIT, per-thread match data and the Isolated split loop.
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include "tokenizer/regex_splitter.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace specpress::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Match data, match context and JIT stack, one set per thread, shared by all patterns: none of them
// depends on the pattern (one ovector pair is all we read).
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (!data || !context || !jit_stack) fail("PCRE2: out of memory creating match state");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct RegexSplitter::Compiled {
  std::string pattern;
  pcre2_code* code = nullptr;
  bool jit = false;

  Compiled(std::string translated, const std::string& source) : pattern(std::move(translated)) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (!code) {
      fail("{}: cannot compile pre-tokenizer regex at offset {}: {}", source, error_offset,
           pcre2_message(error));
    }
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Compiled() { pcre2_code_free(code); }
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;
};

std::string RegexSplitter::translate_pattern(std::string_view pattern, const std::string& source,
                                             bool letter_number_additions) {
  const std::string_view ws = unicode::white_space_class_body();
  std::string out;
  out.reserve(pattern.size() + 2048);
  bool in_class = false;
  size_t class_start = 0;  // index in `pattern` just after '[' or '[^'
  // Emits `body` (a class body) as a class of its own, or into the class we are in.
  auto emit_class = [&](std::string_view body, bool negated) {
    if (in_class) {
      out.append(body);
    } else {
      out.append(negated ? "[^" : "[").append(body).append("]");
    }
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's' || e == 'S') {
        if (e == 'S' && in_class) {
          fail("{}: pre-tokenizer regex uses \\S inside a character class, which cannot be "
               "translated to PCRE2 exactly", source);
        }
        emit_class(ws, e == 'S');
        ++i;
        continue;
      }
      if (e == 'p' || e == 'P') {
        // \pL, \p{L}, \pN, \p{N} (and \P…): add the letters/numbers PCRE2's data lacks.
        size_t end = i + 3;
        std::string_view name = pattern.substr(i + 2, 1);
        if (name == "{") {
          const size_t close = pattern.find('}', i + 3);
          end = close == std::string_view::npos ? pattern.size() : close + 1;
          name = pattern.substr(i + 3, end - i - 4);
        }
        const std::string_view extra = name == "L" ? unicode::letter_additions_class_body()
                                       : name == "N" ? unicode::number_additions_class_body()
                                                     : std::string_view();
        if (!extra.empty() && letter_number_additions) {
          if (e == 'P' && in_class) {
            fail("{}: pre-tokenizer regex uses \\P{{{}}} inside a character class, which cannot be "
                 "translated to PCRE2 exactly", source, name);
          }
          emit_class("\\p{" + std::string(name) + "}" + std::string(extra), e == 'P');
          i = end - 1;
          continue;
        }
      }
      out.push_back(c);
      out.push_back(e);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == '[') {
      fail("{}: pre-tokenizer regex uses a nested character class, which Oniguruma and PCRE2 read "
           "differently", source);
    }
    if (in_class && c == ']' && i != class_start) in_class = false;
    out.push_back(c);
  }
  if (in_class) fail("{}: pre-tokenizer regex has an unterminated character class", source);
  return out;
}

RegexSplitter::RegexSplitter(std::string_view pattern, const std::string& source)
    : full_(std::make_unique<Compiled>(translate_pattern(pattern, source, true), source)) {
  std::string plain = translate_pattern(pattern, source, false);
  if (plain != full_->pattern) fast_ = std::make_unique<Compiled>(std::move(plain), source);
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

bool RegexSplitter::jit() const { return full_->jit && (!fast_ || fast_->jit); }
const std::string& RegexSplitter::pcre2_pattern() const { return full_->pattern; }

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  ThreadMatchState& state = thread_match_state();
  const Compiled& re = fast_ && !unicode::has_letter_number_additions(text) ? *fast_ : *full_;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  size_t prev = 0;   // end of the last piece pushed
  size_t start = 0;  // where the next search starts
  while (start <= n) {
    const int rc = re.jit ? pcre2_jit_match(re.code, subject, n, start, 0, state.data, state.context)
                          : pcre2_match(re.code, subject, n, start, PCRE2_NO_UTF_CHECK, state.data,
                                        state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer regex failed at byte {}: {}", start, pcre2_message(rc));
    const size_t match_start = ovector[0];
    const size_t match_end = ovector[1];
    if (match_start > prev) pieces.emplace_back(text.substr(prev, match_start - prev));
    if (match_end > match_start) {
      pieces.emplace_back(text.substr(match_start, match_end - match_start));
      prev = match_end;
      start = match_end;
    } else {
      // Empty match: like Oniguruma's iterator, step over one character, which joins the next gap.
      prev = match_end;
      if (match_end >= n) break;
      start = match_end + utf8::sequence_length(static_cast<unsigned char>(text[match_end]));
    }
  }
  if (prev < n) pieces.emplace_back(text.substr(prev));
}

}  // namespace specpress::tok
