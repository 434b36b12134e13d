// stream_decoder_test.cpp — streaming detokenization: never a broken UTF-8 sequence in any chunk,
// and the chunks always concatenate to exactly what decode() returns for all ids at once.
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"

namespace specpress::tok {
namespace {

using testing::qwen3;

// Feeds ids one by one (or in blocks of `block`), checking each chunk; returns the concatenation.
std::string stream(const std::vector<int32_t>& ids, bool skip_special, size_t block = 1) {
  StreamDecoder decoder(qwen3(), skip_special);
  std::string all;
  for (size_t i = 0; i < ids.size(); i += block) {
    const size_t n = std::min(block, ids.size() - i);
    const std::string chunk =
        n == 1 ? decoder.push(ids[i]) : decoder.push(std::span<const int32_t>(ids.data() + i, n));
    EXPECT_EQ(utf8::find_invalid(chunk), utf8::npos) << "broken UTF-8 in a chunk";
    EXPECT_LE(decoder.pending_bytes(), 3u);
    all += chunk;
  }
  all += decoder.flush();
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  return all;
}

TEST(StreamDecoder, MultiByteCharactersSplitAcrossTokens) {
  SKIP_WITHOUT_QWEN3();
  const std::string text =
      "Emoji 😀👍🏽🇫🇷🧑‍🤝‍🧑, CJK 多轮对话测试：你好世界, 한국어, ﷽, 𠀋𡈽 and accents éèê.";
  const auto ids = qwen3().encode(text);
  // At least one token must hold an incomplete character, or this test would prove nothing.
  bool split_found = false;
  for (int32_t id : ids) {
    std::string bytes;
    qwen3().append_token_bytes(id, bytes);
    if (utf8::find_invalid(bytes) != utf8::npos) split_found = true;
  }
  ASSERT_TRUE(split_found);
  for (size_t block : {1, 2, 3, 7}) EXPECT_EQ(stream(ids, false, block), text);
}

TEST(StreamDecoder, HoldsIncompleteBytesUntilComplete) {
  SKIP_WITHOUT_QWEN3();
  // "你" is E4 BD A0: ids 160 (E4), 121 (BD) and the byte token for A0.
  const int32_t a0 = qwen3().token_to_id("ł").value();  // byte 0xA0 in the byte alphabet
  StreamDecoder decoder(qwen3());
  EXPECT_EQ(decoder.push(160), "");
  EXPECT_EQ(decoder.pending_bytes(), 1u);
  EXPECT_EQ(decoder.push(121), "");
  EXPECT_EQ(decoder.pending_bytes(), 2u);
  EXPECT_EQ(decoder.push(a0), "你");
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  // A broken sequence becomes U+FFFD as soon as it cannot complete, exactly like decode().
  EXPECT_EQ(decoder.push(160), "");
  EXPECT_EQ(decoder.push(9707), "\xEF\xBF\xBDHello");
  // Incomplete bytes at the end become U+FFFD on flush.
  EXPECT_EQ(decoder.push(160), "");
  EXPECT_EQ(decoder.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(qwen3().decode({160}), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, RandomIdSequencesMatchDecode) {
  SKIP_WITHOUT_QWEN3();
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::vector<int32_t> ids;
    const int len = static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) {
      // Mostly single-byte tokens (ids 0..255 are the byte alphabet), some words and specials.
      const uint32_t kind = rng() % 10;
      ids.push_back(kind < 7 ? static_cast<int32_t>(rng() % 256)
                    : kind < 9 ? static_cast<int32_t>(rng() % 151643)
                               : static_cast<int32_t>(151643 + rng() % 26));
    }
    const bool skip = rng() % 2 == 0;
    ASSERT_EQ(stream(ids, skip, 1 + rng() % 3), qwen3().decode(ids, skip));
  }
}

TEST(StreamDecoder, SkipsSpecialTokens) {
  SKIP_WITHOUT_QWEN3();
  const auto ids = qwen3().encode("<|im_start|>assistant\n<think>\n\n</think>\n\nHi 😀<|im_end|>");
  EXPECT_EQ(stream(ids, true), "assistant\n<think>\n\n</think>\n\nHi 😀");
  EXPECT_EQ(stream(ids, false), qwen3().decode(ids));
}

TEST(StreamDecoder, BadIdThrowsAndKeepsState) {
  SKIP_WITHOUT_QWEN3();
  StreamDecoder decoder(qwen3());
  EXPECT_EQ(decoder.push(160), "");
  EXPECT_THROW(decoder.push(999999), Error);
  EXPECT_THROW(decoder.push(std::vector<int32_t>{121, -5}), Error);
  EXPECT_EQ(decoder.pending_bytes(), 1u);
  EXPECT_EQ(decoder.push(121), "");
  EXPECT_EQ(decoder.push(qwen3().token_to_id("ł").value()), "你");
}

}  // namespace
}  // namespace specpress::tok
