// stats.cpp — per-generation acceptance statistics (see generation.h).
#include <numeric>

#include "decode/generation.h"

namespace specpress::decode {

double GenerationResult::mean_acceptance_length() const {
  if (acceptance_lengths.empty()) return 0.0;
  return static_cast<double>(std::accumulate(acceptance_lengths.begin(), acceptance_lengths.end(), int64_t{0})) /
         static_cast<double>(acceptance_lengths.size());
}

int64_t GenerationResult::drafted_tokens() const {
  return static_cast<int64_t>(acceptance_lengths.size()) * (block_size - 1);
}

int64_t GenerationResult::accepted_tokens() const {
  int64_t n = 0;
  for (int64_t len : acceptance_lengths) n += len - 1;
  return n;
}

std::vector<int64_t> GenerationResult::accepted_per_position() const {
  std::vector<int64_t> count(block_size > 1 ? block_size - 1 : 0, 0);
  for (int64_t len : acceptance_lengths)
    for (int64_t i = 1; i < len && i <= static_cast<int64_t>(count.size()); ++i) ++count[i - 1];
  return count;
}

std::vector<double> GenerationResult::per_position_acceptance() const {
  const std::vector<int64_t> count = accepted_per_position();
  std::vector<double> rate(count.size(), 0.0);
  if (acceptance_lengths.empty()) return rate;
  for (size_t i = 0; i < count.size(); ++i)
    rate[i] = static_cast<double>(count[i]) / static_cast<double>(acceptance_lengths.size());
  return rate;
}

}  // namespace specpress::decode
