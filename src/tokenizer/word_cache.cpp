// word_cache.cpp — hashing (8 bytes per multiply), probing and the arenas of WordCache.
#include "tokenizer/word_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace specpress::tok {

WordCache::WordCache(size_t max_words) : max_words_(max_words) {
  const size_t capacity = std::bit_ceil(max_words * 2);
  slots_.assign(capacity, Slot{0, 0, 0, 0, 0});
  mask_ = capacity - 1;
}

uint64_t WordCache::hash(std::string_view word) {
  const char* p = word.data();
  size_t n = word.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
  }
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

bool WordCache::find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key_length == 0) return false;
    if (s.hash == hash && s.key_length == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids_.data() + s.ids_offset, ids_.data() + s.ids_offset + s.ids_count);
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
  if (word.empty() || word.size() > kMaxWordBytes) return;
  if (count_ >= max_words_) clear();
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key_length == 0) {
      s = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
               static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
      keys_.append(word);
      ids_.insert(ids_.end(), ids, ids + count);
      ++count_;
      return;
    }
    if (s.hash == hash && s.key_length == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      return;  // already present
    }
  }
}

void WordCache::clear() {
  if (count_ == 0) return;
  std::fill(slots_.begin(), slots_.end(), Slot{0, 0, 0, 0, 0});
  keys_.clear();
  ids_.clear();
  count_ = 0;
}

}  // namespace specpress::tok
