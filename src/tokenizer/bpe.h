// bpe.h — byte-level BPE on raw bytes: vocabulary, merge table by rank, and the merge loop.
// Symbols start as the 256 single-byte tokens; the lowest-rank adjacent pair is merged first, the
// leftmost one on ties (the order HF's BinaryHeap of (rank, position) produces).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace specpress::tok {

// Open-addressing map (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t count);
  // Later insertions of the same pair replace earlier ones (HF collects merges into a HashMap).
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = make_key(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t make_key(int32_t l, int32_t r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  void grow();

  std::vector<Entry> entries_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

class BpeModel {
 public:
  static constexpr size_t kSmallWord = 48;      // words up to this many bytes use the array loop
  static constexpr size_t kMaxSmallWord = 256;  // hard limit of the array loop (stack buffers)

  // `vocab` maps token strings as tokenizer.json writes them (byte-level alphabet) to ids;
  // `merges` lists (left, right) token strings by rank. `source` names the file in error messages.
  // Every byte's alphabet character must be in the vocabulary.
  BpeModel(const std::unordered_map<std::string, int32_t>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::string& source);
  BpeModel() = default;

  // Appends the ids of one pre-tokenized word (raw bytes, non-empty). No caching here.
  void encode_word(std::string_view word, std::vector<int32_t>& out,
                   size_t small_limit = kSmallWord) const;

  // Id of the vocabulary token whose raw bytes are `raw_bytes` (tokens in the byte alphabet only).
  std::optional<int32_t> lookup(std::string_view raw_bytes) const;
  size_t merge_count() const { return merges_.size(); }

 private:
  void merge_small(std::string_view word, std::vector<int32_t>& out) const;
  void merge_large(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> raw_vocab_;  // raw bytes -> id
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_ = false;
};

}  // namespace specpress::tok
