// golden_test.cpp — exactness against Hugging Face: every record of golden_encode.jsonl (chat records
// rendered from their messages first) must give identical ids, token strings and decoded text, and
// every golden_decode.jsonl check must hold.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace specpress::tok {
namespace {

using testing::qwen3;
using testing::qwen3_dir;
using testing::read_jsonl;

std::vector<ChatMessage> messages_of(const nlohmann::json& record) {
  std::vector<ChatMessage> messages;
  for (const auto& m : record["messages"]) {
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>(), std::nullopt});
  }
  return messages;
}

TEST(Golden, EncodeAll243Records) {
  SKIP_WITHOUT_QWEN3();
  const auto records = read_jsonl(qwen3_dir() + "/golden_encode.jsonl");
  ASSERT_EQ(records.size(), 243u);
  size_t chat_records = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    SCOPED_TRACE("record " + std::to_string(i) + " (" + r["category"].get<std::string>() + ")");
    std::string text = r["text"].get<std::string>();
    if (r.contains("messages")) {
      ++chat_records;
      const bool thinking = !r.contains("enable_thinking") || r["enable_thinking"].get<bool>();
      const std::string rendered =
          render_qwen3_chat(messages_of(r), r["add_generation_prompt"].get<bool>(), thinking);
      ASSERT_EQ(rendered, text);
      text = rendered;
    }
    const auto expected = r["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = qwen3().encode(text);
    ASSERT_EQ(ids, expected);
    const auto tokens = r["tokens"].get<std::vector<std::string>>();
    ASSERT_EQ(tokens.size(), ids.size());
    for (size_t t = 0; t < ids.size(); ++t) ASSERT_EQ(qwen3().id_to_token(ids[t]), tokens[t]);
    EXPECT_EQ(qwen3().decode(ids), r["decoded"].get<std::string>());
    EXPECT_EQ(qwen3().decode(ids) == text, r["decode_roundtrip"].get<bool>());
  }
  EXPECT_EQ(chat_records, 20u);
}

TEST(Golden, EncodeIsStableWithWarmCache) {
  SKIP_WITHOUT_QWEN3();
  // Second pass over all records: results must not depend on what the word cache holds.
  const auto records = read_jsonl(qwen3_dir() + "/golden_encode.jsonl");
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& r : records) {
      if (r.contains("messages")) continue;
      ASSERT_EQ(qwen3().encode(r["text"].get<std::string>()), r["ids"].get<std::vector<int32_t>>());
    }
  }
}

TEST(Golden, DecodeChecks) {
  SKIP_WITHOUT_QWEN3();
  const auto records = read_jsonl(qwen3_dir() + "/golden_decode.jsonl");
  ASSERT_EQ(records.size(), 12u);
  for (const auto& r : records) {
    SCOPED_TRACE(r["note"].get<std::string>());
    const bool skip = r["skip_special_tokens"].get<bool>();
    EXPECT_EQ(qwen3().decode(r["ids"].get<std::vector<int32_t>>(), skip), r["text"].get<std::string>());
  }
}

}  // namespace
}  // namespace specpress::tok
