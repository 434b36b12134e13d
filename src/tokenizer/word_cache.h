// word_cache.h — bounded cache of BPE results for frequent pre-tokenized words.
// Keys and ids live in two flat arenas behind an open-addressing index; when the cache fills up it
// is cleared wholesale (cheap, and it adapts to the text being encoded). Not synchronised: the
// tokenizer keeps one per thread (see tokenizer.cpp), which makes encode() safe to call
// concurrently on one Tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specpress::tok {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached

  explicit WordCache(size_t max_words = size_t{1} << 15);

  static uint64_t hash(std::string_view word);

  // Appends the cached ids of `word` to `out` and returns true, or returns false.
  bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count);
  void clear();
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t key_offset;
    uint32_t key_length;  // 0 marks an empty slot (empty words are never cached)
    uint32_t ids_offset;
    uint32_t ids_count;
  };

  std::vector<Slot> slots_;
  size_t mask_;
  size_t max_words_;
  size_t count_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace specpress::tok
