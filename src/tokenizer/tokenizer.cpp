// tokenizer.cpp — encode (added tokens → NFC → regex split → cached BPE) and decode (token bytes →
// lossy UTF-8) on the tables tokenizer_load.cpp builds.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace specpress::tok {
namespace {

// Per-thread working memory of encode, including the BPE word cache of the tokenizer this thread
// used last (a thread that alternates between tokenizers just refills it).
struct EncodeScratch {
  uint64_t owner = 0;
  WordCache cache;
  std::vector<TextPiece> raw_pieces;
  std::vector<TextPiece> normalized_pieces;
  std::vector<std::string_view> words;
  std::string normalized;
};

EncodeScratch& scratch_for(uint64_t serial) {
  thread_local EncodeScratch scratch;
  if (scratch.owner != serial) {
    scratch.cache.clear();
    scratch.owner = serial;
  }
  return scratch;
}

// Pre-tokenizes one normalized text piece and appends the BPE ids of its words.
void encode_plain(const Tokenizer::Impl& impl, std::string_view text, EncodeScratch& s,
                  std::vector<int32_t>& out) {
  s.words.clear();
  if (impl.splitter) {
    impl.splitter->split(text, s.words);
  } else if (!text.empty()) {
    s.words.push_back(text);
  }
  for (std::string_view word : s.words) {
    if (word.size() == 1 || word.size() > WordCache::kMaxWordBytes) {
      impl.bpe.encode_word(word, out);
      continue;
    }
    const uint64_t hash = WordCache::hash(word);
    if (s.cache.find(word, hash, out)) continue;
    const size_t before = out.size();
    impl.bpe.encode_word(word, out);
    s.cache.insert(word, hash, out.data() + before, out.size() - before);
  }
}

}  // namespace

void Tokenizer::Impl::fail_bad_id(int32_t id) const {
  const auto size = static_cast<int64_t>(id_flags.size());
  if (id < 0 || id >= size) {
    fail("decode: token id {} is out of range: the vocabulary has {} tokens (ids 0..{}) in {}", id,
         size, size - 1, source);
  }
  fail("decode: token id {} names no token in {}", id, source);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(text, ids, parse_special);
  return ids;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out,
                              bool parse_special) const {
  const Impl& impl = *impl_;
  if (const size_t bad = utf8::find_invalid(text); bad != utf8::npos) {
    fail("encode: the text is not valid UTF-8: byte 0x{:02X} at byte offset {} does not start or "
         "continue a well-formed sequence", static_cast<unsigned char>(text[bad]), bad);
  }
  EncodeScratch& s = scratch_for(impl.serial);
  s.raw_pieces.clear();
  if (impl.raw_matcher.empty()) {
    s.raw_pieces.push_back({text, -1});
  } else {
    impl.raw_matcher.split(text, !parse_special, s.raw_pieces);
  }
  for (const TextPiece& piece : s.raw_pieces) {
    if (piece.token_id >= 0) {
      out.push_back(piece.token_id);
      continue;
    }
    const std::string_view normalized = impl.normalizer.apply(piece.text, s.normalized);
    if (impl.normalized_matcher.empty()) {
      encode_plain(impl, normalized, s, out);
      continue;
    }
    s.normalized_pieces.clear();
    impl.normalized_matcher.split(normalized, !parse_special, s.normalized_pieces);
    for (const TextPiece& sub : s.normalized_pieces) {
      if (sub.token_id >= 0) {
        out.push_back(sub.token_id);
      } else {
        encode_plain(impl, sub.text, s, out);
      }
    }
  }
}

void Tokenizer::append_token_bytes(int32_t id, std::string& out, bool skip_special) const {
  const Impl& impl = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= impl.id_flags.size() || !impl.id_flags[id]) {
    impl.fail_bad_id(id);
  }
  if (skip_special && (impl.id_flags[id] & Impl::kSpecial)) return;
  out.append(impl.id_bytes[id]);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return decode(std::span<const int32_t>(ids), skip_special);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) append_token_bytes(id, bytes, skip_special);
  if (utf8::find_invalid(bytes) == utf8::npos) return bytes;
  std::string text;
  text.reserve(bytes.size() + 8);
  utf8::append_lossy(text, bytes);
  return text;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_flags.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  const Impl& impl = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= impl.id_flags.size() || !impl.id_flags[id]) {
    impl.fail_bad_id(id);
  }
  return impl.id_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  const Impl& impl = *impl_;
  return id >= 0 && static_cast<size_t>(id) < impl.id_flags.size() &&
         (impl.id_flags[id] & Impl::kSpecial);
}

bool Tokenizer::is_added(int32_t id) const {
  const Impl& impl = *impl_;
  return id >= 0 && static_cast<size_t>(id) < impl.id_flags.size() &&
         (impl.id_flags[id] & Impl::kAdded);
}

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos_ids; }
const std::string& Tokenizer::source() const { return impl_->source; }
bool Tokenizer::regex_jit() const { return impl_->splitter && impl_->splitter->jit(); }

}  // namespace specpress::tok
