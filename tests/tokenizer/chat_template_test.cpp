// chat_template_test.cpp — the hand-written Qwen3 chat template against renderings by Python jinja2
// (data/chat_cases.jsonl, see gen_chat_cases.py; golden_test.cpp covers the golden chat records),
// plus the errors for unsupported shapes and bad message JSON.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace specpress::tok {
namespace {

using testing::error_of;

TEST(ChatTemplate, MatchesJinjaRenderings) {
  const auto cases = testing::read_jsonl(SPECPRESS_TEST_DATA_DIR "/chat_cases.jsonl");
  ASSERT_GE(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::vector<ChatMessage> messages =
        parse_messages_json(c["messages"].dump(), c["name"].get<std::string>());
    const bool thinking = c["enable_thinking"].is_null() || c["enable_thinking"].get<bool>();
    SCOPED_TRACE(c["name"].get<std::string>() + " agp=" + c["add_generation_prompt"].dump() +
                 " thinking=" + c["enable_thinking"].dump());
    EXPECT_EQ(render_qwen3_chat(messages, c["add_generation_prompt"].get<bool>(), thinking),
              c["text"].get<std::string>());
  }
}

TEST(ChatTemplate, DflashSingleTurnShape) {
  const std::string text = render_qwen3_chat({{"user", "Hi", std::nullopt}}, true, false);
  EXPECT_EQ(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, UnsupportedShapesAreErrors) {
  EXPECT_NE(error_of([] { render_qwen3_chat({{"tool", "42", std::nullopt}}, true, false); }).find("tool"),
            std::string::npos);
  EXPECT_NE(error_of([] { render_qwen3_chat({{"narrator", "x", std::nullopt}}, true, false); })
                .find("narrator"), std::string::npos);
  EXPECT_NE(error_of([] { render_qwen3_chat({}, true, false); }).find("no messages"), std::string::npos);
  EXPECT_NE(error_of([] { render_qwen3_chat({{"user", "x", "why"}}, true, false); })
                .find("reasoning_content"), std::string::npos);
}

TEST(ChatTemplate, MessageJsonErrorsNameSourceIndexAndField) {
  auto parse_error = [](const std::string& json) {
    return error_of([&] { parse_messages_json(json, "msgs.json"); });
  };
  std::string e = parse_error(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b",
      "tool_calls":[{"function":{"name":"f","arguments":{}}}]}])");
  EXPECT_NE(e.find("msgs.json"), std::string::npos) << e;
  EXPECT_NE(e.find("messages[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("tool"), std::string::npos) << e;
  e = parse_error(R"([{"role":"user","content":[{"type":"image"}]}])");
  EXPECT_NE(e.find("content"), std::string::npos) << e;
  e = parse_error(R"([{"role":"tool","content":"42"}])");
  EXPECT_NE(e.find("tool"), std::string::npos) << e;
  e = parse_error(R"({"messages":[]})");
  EXPECT_NE(e.find("array"), std::string::npos) << e;
  e = parse_error(R"([{"role":"user"}])");
  EXPECT_NE(e.find("content"), std::string::npos) << e;
  e = parse_error(R"([{"role":"user","content":"x","name":"bob"}])");
  EXPECT_NE(e.find("name"), std::string::npos) << e;
  e = parse_error("[{\"role\":");
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  e = parse_error("[]");
  EXPECT_NE(e.find("no messages"), std::string::npos) << e;
}

TEST(ChatTemplate, RecognisesTheQwen3Template) {
  SKIP_WITHOUT_QWEN3();
  const std::string jinja = testing::read_text(testing::qwen3_dir() + "/chat_template.jinja");
  EXPECT_TRUE(is_qwen3_chat_template(jinja));
  EXPECT_FALSE(is_qwen3_chat_template(jinja + "\n"));
  EXPECT_FALSE(is_qwen3_chat_template("{{ messages }}"));
}

}  // namespace
}  // namespace specpress::tok
