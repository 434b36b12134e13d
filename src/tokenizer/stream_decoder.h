// stream_decoder.h — incremental detokenization for streaming generation output.
// Feed ids as they are sampled; each call returns only text that is final. Bytes of a UTF-8
// character split across tokens are held back until the character is complete, so the output never
// contains a broken sequence, and the concatenation of everything returned (including flush())
// equals Tokenizer::decode() of all the ids.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace specpress::tok {

class StreamDecoder {
 public:
  // Holds a copy of the (cheap, shared) tokenizer handle.
  explicit StreamDecoder(Tokenizer tokenizer, bool skip_special = false)
      : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

  // Adds one id / a block of ids; returns the text completed by them (possibly empty).
  // Throws specpress::Error (like decode) for ids that name no token; the state is then unchanged.
  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);
  std::string push(const std::vector<int32_t>& ids) { return push(std::span<const int32_t>(ids)); }

  // Ends the stream: returns the held-back bytes (as U+FFFD if they never completed a character,
  // as decode() would) and resets the decoder for a new stream.
  std::string flush();
  // Drops any held-back bytes without emitting them.
  void reset() { pending_.clear(); }

  // Number of bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string drain();

  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace specpress::tok
