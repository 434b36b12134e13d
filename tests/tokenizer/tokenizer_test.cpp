// tokenizer_test.cpp — Tokenizer behaviour beyond the golden files: metadata, error messages for bad
// input, parse_special, round trips of random and very long text, thread safety, added-token flags
// (checked against HF on a small tokenizer) and the two BPE merge loops agreeing.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <utf8proc.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/utf8.h"

namespace specpress::tok {
namespace {

using testing::qwen3;
using testing::qwen3_dir;

using testing::error_of;

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  std::string result(reinterpret_cast<char*>(out));
  std::free(out);
  return result;
}

TEST(Tokenizer, Metadata) {
  SKIP_WITHOUT_QWEN3();
  const Tokenizer& t = qwen3();
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(t.token_to_id("<think>"), 151667);
  EXPECT_EQ(t.token_to_id("Ġthe"), 279);
  EXPECT_EQ(t.token_to_id("no such token here"), std::nullopt);
  EXPECT_EQ(t.id_to_token(279), "Ġthe");
  EXPECT_TRUE(t.is_special(151643));
  EXPECT_TRUE(t.is_special(151645));
  EXPECT_FALSE(t.is_special(151667));  // <think> is special:false
  EXPECT_TRUE(t.is_added(151667));
  EXPECT_FALSE(t.is_special(279));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_FALSE(t.is_special(1 << 30));
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{151645, 151643}));
  EXPECT_TRUE(is_qwen3_chat_template(t.chat_template()));
  EXPECT_TRUE(t.regex_jit()) << "PCRE2 JIT unavailable: encode works but slower";
}

TEST(Tokenizer, FromFileHasNoConfigExtras) {
  SKIP_WITHOUT_QWEN3();
  const Tokenizer t = Tokenizer::from_file(qwen3_dir() + "/tokenizer.json");
  EXPECT_TRUE(t.chat_template().empty());
  EXPECT_TRUE(t.eos_ids().empty());
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
}

TEST(Tokenizer, InvalidUtf8IsAnErrorNamingTheOffset) {
  SKIP_WITHOUT_QWEN3();
  const struct {
    std::string text;
    size_t offset;
  } cases[] = {
      {"ab\xFF" "cd", 2},               // never valid
      {"hello \xE4\xBD", 6},            // truncated at the end
      {"x\xC0\xAF", 1},                 // overlong '/'
      {"\xED\xA0\x80", 0},              // UTF-16 surrogate
      {"ok\xF4\x90\x80\x80", 2},        // above U+10FFFF
      {"\x80", 0},                      // lone continuation byte
      {"<|im_start|>\xC3(", 12},        // after an added token
  };
  for (const auto& c : cases) {
    const std::string message = error_of([&] { qwen3().encode(c.text); });
    EXPECT_NE(message.find("byte offset " + std::to_string(c.offset)), std::string::npos) << message;
    EXPECT_NE(message.find("UTF-8"), std::string::npos) << message;
  }
}

TEST(Tokenizer, BadIdIsAnErrorNamingIdAndVocabSize) {
  SKIP_WITHOUT_QWEN3();
  for (int32_t bad : {151669, 1 << 30, -1}) {
    const std::string message = error_of([&] { qwen3().decode({9707, bad}); });
    EXPECT_NE(message.find("token id " + std::to_string(bad)), std::string::npos) << message;
    EXPECT_NE(message.find("151669 tokens"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { qwen3().id_to_token(200000); }).find("200000"), std::string::npos);
}

TEST(Tokenizer, ParseSpecialFalseEncodesSpecialTokensAsText) {
  SKIP_WITHOUT_QWEN3();
  const std::string text = "<|im_start|>user\n<think>hi</think><|endoftext|>";
  const auto parsed = qwen3().encode(text, true);
  EXPECT_EQ(parsed.front(), 151644);
  const auto plain = qwen3().encode(text, false);
  for (int32_t id : plain) EXPECT_FALSE(qwen3().is_special(id)) << id;
  // As in HF (split_special_tokens=True), non-special added tokens are still recognised.
  EXPECT_NE(std::find(plain.begin(), plain.end(), 151667), plain.end());
  EXPECT_EQ(qwen3().decode(plain), text);
  EXPECT_GT(qwen3().encode("<|im_end|>", false).size(), 1u);
}

TEST(Tokenizer, EmptyAndTinyInputs) {
  SKIP_WITHOUT_QWEN3();
  EXPECT_TRUE(qwen3().encode("").empty());
  EXPECT_EQ(qwen3().decode(std::vector<int32_t>{}), "");
  EXPECT_EQ(qwen3().encode(std::string_view("\0", 1)), (std::vector<int32_t>{188}));
  EXPECT_EQ(qwen3().decode({188}), std::string("\0", 1));
}

TEST(Tokenizer, RandomTextRoundTrips) {
  SKIP_WITHOUT_QWEN3();
  const std::vector<std::string> pool = {
      "a", "Z", "q", " ", "  ", "\n", "\r\n", "\t", "0", "7", "'s", "'LL", "ſ", ".", "!", "?", "(",
      "\"", "é", "e\xCC\x81", "ß", "中", "文", "한", "ㄱ", "\xE1\x85\xA1", "😀", "👍🏽", "🇫🇷",
      "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "\xC2\x85", "\xEF\xBB\xBF", "<|im_end|>",
      "<think>", "<|", "|>", "\\", "$", "ـ", "ا", "α", "Ω", "\xE1\xA0\x8E"};
  std::mt19937 rng(1234);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += pool[rng() % pool.size()];
    const auto ids = qwen3().encode(text);
    ASSERT_EQ(qwen3().decode(ids), nfc(text)) << "text: " << text;
  }
}

TEST(Tokenizer, VeryLongInputs) {
  SKIP_WITHOUT_QWEN3();
  const std::vector<std::string> texts = {
      std::string(300000, ' '), std::string(300000, 'a'), std::string(100000, '7'),
      std::string(200000, '\n'), [] {
        std::string s;
        for (int i = 0; i < 50000; ++i) s += "😀";
        return s;
      }(),
      [] {
        std::string s;
        for (int i = 0; i < 20000; ++i) s += "  x\t\n";
        return s;
      }()};
  for (const std::string& text : texts) {
    const auto ids = qwen3().encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(qwen3().decode(ids), text);
  }
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  SKIP_WITHOUT_QWEN3();
  const auto records = testing::read_jsonl(qwen3_dir() + "/golden_encode.jsonl");
  std::vector<std::string> texts;
  for (const auto& r : records) texts.push_back(r["text"].get<std::string>());
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(qwen3().encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 7 + t * 13) % texts.size();
          if (qwen3().encode(texts[k]) != expected[k]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Tokenizer, DirectoryErrorsNameThePath) {
  const std::string missing = "/nonexistent/specpress-model-dir";
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(missing); }).find(missing), std::string::npos);
  const auto empty = std::filesystem::temp_directory_path() / "specpress_tok_empty_dir";
  std::filesystem::create_directories(empty);
  const std::string message = error_of([&] { Tokenizer::from_dir(empty.string()); });
  EXPECT_NE(message.find(empty.string()), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  std::filesystem::remove(empty);
}

TEST(Tokenizer, RejectsConfigurationsItCannotReproduce) {
  const std::string mini = testing::read_text(SPECPRESS_TEST_DATA_DIR "/mini_tokenizer.json");
  auto mutate = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(mini);
    edit(j);
    return error_of([&] { Tokenizer::from_json_text(j.dump(), "mini.json"); });
  };
  EXPECT_NE(mutate([](auto& j) { j["model"]["type"] = "WordPiece"; }).find("WordPiece"), std::string::npos);
  EXPECT_NE(mutate([](auto& j) { j["normalizer"] = {{"type", "Lowercase"}}; }).find("Lowercase"), std::string::npos);
  EXPECT_NE(mutate([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }).find("decoder"), std::string::npos);
  EXPECT_NE(mutate([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; })
                .find("Isolated"), std::string::npos);
  EXPECT_NE(mutate([](auto& j) { j["model"]["merges"].push_back({"h", "zz"}); }).find("zz"), std::string::npos);
  EXPECT_NE(mutate([](auto& j) { j["model"]["vocab"].erase("a"); }).find("byte 0x61"), std::string::npos);
  // ids past int32 are named with their value, not called negative
  EXPECT_NE(mutate([](auto& j) { j["added_tokens"][0]["id"] = int64_t{1} << 40; })
                .find("added_tokens[0]: field 'id' must be a token id in 0..2147483647, found 1099511627776"),
            std::string::npos);
  EXPECT_NE(mutate([](auto& j) { j["model"]["vocab"]["a"] = -3; })
                .find("model.vocab[\"a\"] must be a token id in 0..2147483647, found -3"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_json_text("{not json", "broken.json"); }).find("broken.json"),
            std::string::npos);
}

// Expected ids and texts produced by Hugging Face tokenizers 0.23.2 (Node binding) on
// data/mini_tokenizer.json: single_word/lstrip/rstrip, normalized tokens, leftmost-longest.
TEST(AddedTokens, FlagsMatchHuggingFace) {
  const Tokenizer t = Tokenizer::from_file(SPECPRESS_TEST_DATA_DIR "/mini_tokenizer.json");
  const struct {
    std::string text;
    std::vector<int32_t> ids;
    std::string decoded, decoded_skip;
  } cases[] = {
      {"hi <mask> there", {256, 265, 259, 114, 101}, "hi<mask>there", "hithere"},
      {"hi<mask> there", {256, 60, 109, 97, 115, 107, 62, 260, 114, 101}, "hi<mask> there", "hi<mask> there"},
      {"x <mask>y", {120, 32, 60, 109, 97, 115, 107, 62, 121}, "x <mask>y", "x <mask>y"},
      {"a\t<mask>\t<mask>\xE2\x80\x80" "b", {97, 265, 265, 98}, "a<mask><mask>b", "ab"},
      {"<mask>", {265}, "<mask>", ""},
      {"the <raw>the", {259, 32, 266, 259}, "the <raw>the", "the <raw>the"},
      {"caf\xC3\xA9! cafe\xCC\x81! \xC3\xA9!", {99, 97, 102, 267, 32, 99, 97, 102, 267, 32, 267},
       "caf\xEF\xBF\xBD! caf\xEF\xBF\xBD! \xEF\xBF\xBD!", "caf\xEF\xBF\xBD! caf\xEF\xBF\xBD! \xEF\xBF\xBD!"},
      {"<s>x <s>y <s>", {269, 32, 268, 121, 32, 268}, "<s>x <s>y <s>", "<s>x y "},
      {"<raw><mask><raw>", {266, 265, 266}, "<raw><mask><raw>", "<raw><raw>"},
      {"abc hi the", {262, 257, 260}, "abc hi the", "abc hi the"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(t.encode(c.text), c.ids);
    EXPECT_EQ(t.decode(c.ids), c.decoded);
    EXPECT_EQ(t.decode(c.ids, true), c.decoded_skip);
  }
}

// The array loop (short words) and the heap loop (long words) must merge identically.
TEST(Bpe, MergeLoopsAgree) {
  SKIP_WITHOUT_QWEN3();
  const auto j = nlohmann::json::parse(testing::read_text(qwen3_dir() + "/tokenizer.json"));
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [k, v] : j["model"]["vocab"].items()) vocab.emplace(k, v.get<int32_t>());
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : j["model"]["merges"]) merges.emplace_back(m[0], m[1]);
  const BpeModel bpe(vocab, merges, false, "tokenizer.json");
  std::mt19937 rng(99);
  const std::string alphabet = "aeinorst ._-=0123456789THE\xE4\xB8\xAD\xE6\x96\x87";
  for (int round = 0; round < 4000; ++round) {
    std::string word;
    const size_t len = 2 + rng() % 200;
    for (size_t i = 0; i < len; ++i) word += alphabet[rng() % alphabet.size()];
    std::vector<int32_t> small, large;
    bpe.encode_word(word, small, BpeModel::kMaxSmallWord);
    bpe.encode_word(word, large, 0);
    ASSERT_EQ(small, large) << word;
  }
}

}  // namespace
}  // namespace specpress::tok
