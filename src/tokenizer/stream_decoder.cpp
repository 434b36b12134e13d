// stream_decoder.cpp — appends token bytes to a small pending buffer and releases every byte that
// can no longer change meaning; only a trailing, still-completable UTF-8 prefix stays pending.
#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace specpress::tok {

std::string StreamDecoder::drain() {
  std::string text;
  const size_t consumed = utf8::append_lossy(text, pending_, /*hold_incomplete_tail=*/true);
  pending_.erase(0, consumed);
  return text;
}

std::string StreamDecoder::push(int32_t id) {
  const size_t before = pending_.size();
  try {
    tokenizer_.append_token_bytes(id, pending_, skip_special_);
  } catch (...) {
    pending_.resize(before);
    throw;
  }
  return drain();
}

std::string StreamDecoder::push(std::span<const int32_t> ids) {
  const size_t before = pending_.size();
  try {
    for (int32_t id : ids) tokenizer_.append_token_bytes(id, pending_, skip_special_);
  } catch (...) {
    pending_.resize(before);
    throw;
  }
  return drain();
}

std::string StreamDecoder::flush() {
  std::string text;
  utf8::append_lossy(text, pending_);
  pending_.clear();
  return text;
}

}  // namespace specpress::tok
