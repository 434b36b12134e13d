// bpe.cpp — merge table and the two merge loops: a flat array for short words (a linear scan for
// the best pair beats a heap there) and a linked list with a lazy min-heap for long ones.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace specpress::tok {

void MergeTable::reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity *= 2;
  if (capacity <= entries_.size()) return;
  std::vector<Entry> old = std::move(entries_);
  entries_.assign(capacity, Entry{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  size_ = 0;
  for (const Entry& e : old) {
    if (e.key != kEmpty) insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key), e.rank, e.id);
  }
}

void MergeTable::insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > entries_.size()) reserve(size_ + 1);
  const uint64_t key = make_key(left, right);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    Entry& e = entries_[i];
    if (e.key == key) {
      e.rank = rank;
      e.id = merged;
      return;
    }
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged};
      ++size_;
      return;
    }
  }
}

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, const std::string& source)
    : ignore_merges_(ignore_merges) {
  // Only tokens written entirely in the byte alphabet can come out of byte-level BPE.
  for (const auto& [token, id] : vocab) {
    const std::string raw = byte_level::token_to_bytes(token);
    if (byte_level::bytes_to_token(raw) == token) raw_vocab_.emplace(raw, id);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string token = byte_level::bytes_to_token(std::string(1, static_cast<char>(b)));
    const auto it = vocab.find(token);
    if (it == vocab.end()) {
      fail("{}: model.vocab lacks the byte-level token \"{}\" for byte 0x{:02X}; byte-level BPE "
           "needs all 256", source, token, b);
    }
    byte_ids_[b] = it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab.find(left);
    const auto r = vocab.find(right);
    const auto m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      const std::string missing = l == vocab.end() ? left : r == vocab.end() ? right : left + right;
      fail("{}: model.merges[{}] (\"{}\" \"{}\") needs \"{}\", which is not in model.vocab",
           source, rank, left, right, missing);
    }
    merges_.insert(l->second, r->second, static_cast<uint32_t>(rank), m->second);
  }
}

std::optional<int32_t> BpeModel::lookup(std::string_view raw_bytes) const {
  const auto it = raw_vocab_.find(std::string(raw_bytes));
  if (it == raw_vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out,
                           size_t small_limit) const {
  if (word.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto id = lookup(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() <= std::min(small_limit, kMaxSmallWord)) {
    merge_small(word, out);
  } else {
    merge_large(word, out);
  }
}

void BpeModel::merge_small(std::string_view word, std::vector<int32_t>& out) const {
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  int32_t sym[kMaxSmallWord];
  uint32_t rank[kMaxSmallWord];   // rank[i]: rank of the pair (sym[i], sym[i+1]); kNone: no merge
  int32_t merged[kMaxSmallWord];  // merged[i]: the id that pair becomes
  size_t n = word.size();
  for (size_t i = 0; i < n; ++i) sym[i] = byte_ids_[static_cast<unsigned char>(word[i])];
  auto score = [&](size_t i) {
    const MergeTable::Entry* e = merges_.find(sym[i], sym[i + 1]);
    rank[i] = e ? e->rank : kNone;
    merged[i] = e ? e->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) score(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kNone) break;
    sym[best] = merged[best];
    // Drop symbol best+1 and pair best+1; pairs best-1 and best changed.
    std::memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof(int32_t));
    if (best + 2 < n) {
      std::memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof(uint32_t));
      std::memmove(merged + best + 1, merged + best + 2, (n - best - 3) * sizeof(int32_t));
    }
    --n;
    if (best > 0) score(best - 1);
    if (best + 1 < n) score(best);
  }
  out.insert(out.end(), sym, sym + n);
}

void BpeModel::merge_large(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  std::vector<int32_t> sym(n), next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<unsigned char>(word[i])];
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  // Min-heap of (rank << 32 | position); stale entries are skipped when popped.
  std::vector<uint64_t> heap;
  auto push_pair = [&](int32_t pos) {
    const MergeTable::Entry* e = merges_.find(sym[pos], sym[next[pos]]);
    if (e) {
      heap.push_back((uint64_t{e->rank} << 32) | static_cast<uint32_t>(pos));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    const auto rank = static_cast<uint32_t>(top >> 32);
    if (sym[pos] < 0 || next[pos] < 0) continue;
    const int32_t right = next[pos];
    const MergeTable::Entry* e = merges_.find(sym[pos], sym[right]);
    if (!e || e->rank != rank) continue;  // the pair changed since this entry was pushed
    sym[pos] = e->id;
    sym[right] = -1;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    if (prev[pos] >= 0) push_pair(prev[pos]);
    if (next[pos] >= 0) push_pair(pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace specpress::tok
