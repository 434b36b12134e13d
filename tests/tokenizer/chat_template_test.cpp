// chat_template_test.cpp — the hand-written Qwen3 chat template against renderings by Python jinja2
// (data/chat_cases.jsonl, see gen_chat_cases.py; golden_test.cpp covers the golden chat records),
// tool use included, plus the errors for unsupported shapes and bad message JSON, and python_json
// (the template's tojson) against json.dumps's text.
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/python_json.h"

namespace specpress::tok {
namespace {

using testing::error_of;

TEST(ChatTemplate, MatchesJinjaRenderings) {
  // read in order: the tools' and the arguments' keys enter the prompt as written
  std::ifstream in(SPECPRESS_TEST_DATA_DIR "/chat_cases.jsonl", std::ios::binary);
  std::string line;
  int cases = 0, with_tools = 0;
  while (std::getline(in, line)) {
    const auto c = nlohmann::ordered_json::parse(line);
    ++cases;
    const std::vector<ChatMessage> messages =
        parse_messages_json(c["messages"].dump(), c["name"].get<std::string>());
    const bool thinking = c["enable_thinking"].is_null() || c["enable_thinking"].get<bool>();
    std::vector<std::string> tools;
    if (c.contains("tools")) {
      ++with_tools;
      for (const auto& tool : c["tools"]) tools.push_back(python_json(tool));
    }
    SCOPED_TRACE(c["name"].get<std::string>() + " agp=" + c["add_generation_prompt"].dump() +
                 " thinking=" + c["enable_thinking"].dump());
    EXPECT_EQ(render_qwen3_chat(messages, c["add_generation_prompt"].get<bool>(), thinking, tools),
              c["text"].get<std::string>());
  }
  EXPECT_GE(cases, 180);
  EXPECT_GE(with_tools, 50);
}

TEST(ChatTemplate, PythonJsonWritesWhatJsonDumpsWrites) {
  // each expected text is Python 3's json.dumps(json.loads(input), ensure_ascii=False)
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"b":1,"a":[true,false,null],"c":{}})", R"({"b": 1, "a": [true, false, null], "c": {}})"},
      {R"([1.0,100.0,1e15,1e16,1.5e16,0.0001,0.00001,2.5e-7,-0.5,0.1,123456.789,-0.0,0,[]])",
       R"([1.0, 100.0, 1000000000000000.0, 1e+16, 1.5e+16, 0.0001, 1e-05, 2.5e-07, -0.5, 0.1, 123456.789, -0.0, )"
       R"(0, []])"},
      {R"({"s":"tab\there \"q\" back\\slash nl\n cr\r bell\u0007 del\u007f ü 😀 \/"})",
       R"({"s": "tab\there \"q\" back\\slash nl\n cr\r bell\u0007 del)" "\x7f" R"( ü 😀 /"})"},
      {R"([1e300,-1.7976931348623157e308,5e-324,12345678901234567890])",
       "[1e+300, -1.7976931348623157e+308, 5e-324, 12345678901234567890]"},
  };
  for (const auto& [input, expected] : cases)
    EXPECT_EQ(python_json(nlohmann::ordered_json::parse(input)), expected) << input;
}

TEST(ChatTemplate, DflashSingleTurnShape) {
  const std::string text = render_qwen3_chat({{"user", "Hi", std::nullopt}}, true, false);
  EXPECT_EQ(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, UnsupportedShapesAreErrors) {
  EXPECT_NE(error_of([] {
              render_qwen3_chat({{"user", "x", std::nullopt, {{"f", "{}"}}}}, true, false);
            }).find("tool_calls"), std::string::npos);
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
      "tool_calls":[{"function":{"name":"f"}}]}])");
  EXPECT_NE(e.find("msgs.json"), std::string::npos) << e;
  EXPECT_NE(e.find("messages[1].tool_calls[0].function"), std::string::npos) << e;
  EXPECT_NE(e.find("arguments"), std::string::npos) << e;
  e = parse_error(R"([{"role":"assistant","content":null,"tool_calls":[{"type":"custom","name":"f"}]}])");
  EXPECT_NE(e.find("messages[0].tool_calls[0]: field 'type'"), std::string::npos) << e;
  e = parse_error(R"([{"role":"assistant","tool_calls":[{"function":{"name":"","arguments":"{}"}}]}])");
  EXPECT_NE(e.find("'name'"), std::string::npos) << e;
  e = parse_error(R"([{"role":"assistant","content":null}])");
  EXPECT_NE(e.find("'content' is null"), std::string::npos) << e;
  e = parse_error(R"([{"role":"user","content":"x","tool_call_id":"c"}])");
  EXPECT_NE(e.find("tool_call_id"), std::string::npos) << e;
  e = parse_error(R"([{"role":"user","content":[{"type":"image"}]}])");
  EXPECT_NE(e.find("content"), std::string::npos) << e;
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
