// test_server_messages.cpp — the Anthropic Messages API's parts on their own (the server's route is tested over
// HTTP in test_server.cpp): requests parsed into the server's CompletionRequest with every refusal naming its
// field, and the replies: the whole message, a stream's events in Anthropic's order, errors in Anthropic's form.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/messages_json.h"
#include "server/messages_request.h"
#include "sse_events.h"

using namespace specpress;
using json = nlohmann::ordered_json;

namespace {

server::CompletionRequest parse(const std::string& body, const server::RequestDefaults& defaults = {},
                                server::MessagesRoute route = server::MessagesRoute::kGenerate) {
  return server::parse_messages_request(nlohmann::json::parse(body), route, defaults);
}

std::string parse_error(const std::string& body, server::MessagesRoute route = server::MessagesRoute::kGenerate) {
  try {
    parse(body, {}, route);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ServerMessagesRequest, FieldsAndDefaults) {
  server::RequestDefaults d;
  d.max_tokens = 77;
  d.sampling.temperature = 0.5;
  d.random_seed = true;
  // max_tokens is required, as Anthropic's API and vLLM's require it (count_tokens takes none)
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user", "content": "hi"}]})")
                .find("field 'max_tokens' is missing (the Messages API requires it)"),
            std::string::npos);
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "hi"}]})", server::MessagesRoute::kCountTokens),
            "(accepted)");
  auto r = parse(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 78})", d);
  EXPECT_EQ(r.api, server::Api::kMessages);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.max_tokens, 78);  // the request's, not the server's default
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_TRUE(r.random_seed);
  EXPECT_FALSE(r.enable_thinking);
  EXPECT_FALSE(r.assistant_prefill.has_value());
  EXPECT_EQ(r.reasoning_format, server::ReasoningFormat::kDeepseek);  // thinking blocks

  r = parse(R"({"model": "claude-x", "max_tokens": 2000, "stream": true, "stop_sequences": ["\n\n", "END"],
               "temperature": 0, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3, "metadata": {"user_id": "u"},
               "system": [{"type": "text", "text": "Be ", "cache_control": {"type": "ephemeral"}},
                          {"type": "text", "text": "brief."}],
               "thinking": {"type": "enabled", "budget_tokens": 1024}, "tools": [], "tool_choice": {"type": "none"},
               "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                                              {"type": "text", "text": "c"}]},
                            {"role": "user", "content": "d"}]})", d);
  EXPECT_EQ(r.model, "claude-x");
  EXPECT_EQ(r.max_tokens, 2000);
  EXPECT_TRUE(r.max_tokens_given && r.stream);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.sampling.temperature, 0);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.min_p, 0.05);
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_FALSE(r.random_seed);
  EXPECT_TRUE(r.enable_thinking);
  // the system turn first, the assistant's thinking dropped
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "c");
  EXPECT_EQ(r.messages[3].content, "d");
  EXPECT_FALSE(r.assistant_prefill.has_value());
  // the last assistant turn is a prefill (leading newlines off, as the template drops them)
  r = parse(R"({"max_tokens": 64, "messages": [{"role": "user", "content": "x"},
                                             {"role": "assistant", "content": "\n\nThe answer is"}]})");
  ASSERT_TRUE(r.assistant_prefill.has_value());
  EXPECT_EQ(*r.assistant_prefill, "The answer is");
  EXPECT_EQ(r.messages.size(), 1u);
  // an empty last assistant turn is still a prefill (the reply starts after the closed think block)
  r = parse(R"({"max_tokens": 64,
               "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]})");
  ASSERT_TRUE(r.assistant_prefill.has_value());
  EXPECT_EQ(*r.assistant_prefill, "");
  EXPECT_EQ(r.messages.size(), 1u);
  // thinking disabled overrides the server's default; --reasoning-format none leaves the thinking in the text
  d.enable_thinking = true;
  d.reasoning_format = server::ReasoningFormat::kNone;
  r = parse(R"({"max_tokens": 64, "messages": [{"role": "user", "content": "x"}],
               "thinking": {"type": "disabled"}})", d);
  EXPECT_FALSE(r.enable_thinking);
  EXPECT_EQ(r.reasoning_format, server::ReasoningFormat::kNone);
  d.reasoning_format = server::ReasoningFormat::kDeepseekLegacy;
  EXPECT_EQ(parse(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})", d).reasoning_format,
            server::ReasoningFormat::kDeepseek);
  EXPECT_TRUE(parse(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})", d).enable_thinking);
  // count_tokens takes the prompt's fields only
  r = parse(R"({"model": "m", "system": "s", "messages": [{"role": "user", "content": "x"}],
               "thinking": {"type": "enabled", "budget_tokens": 2048}})", {}, server::MessagesRoute::kCountTokens);
  EXPECT_EQ(r.messages.size(), 2u);
  EXPECT_TRUE(r.enable_thinking);
}

// The thinking budget each API carries into CompletionRequest::thinking_budget: Messages' thinking.budget_tokens, a
// chat's thinking_token_budget (vLLM's), the server's --reasoning-budget N as the default of both.
TEST(ServerMessagesRequest, ThinkingBudgetsOfEachApi) {
  server::RequestDefaults d;
  const std::string user = R"("max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(parse("{" + user + "}", d).thinking_budget, -1);
  EXPECT_EQ(parse("{" + user + R"(, "thinking": {"type": "enabled", "budget_tokens": 2048}})", d)
                .thinking_budget, 2048);
  d.thinking_budget = 9;
  d.enable_thinking = true;
  EXPECT_EQ(parse("{" + user + "}", d).thinking_budget, 9) << "the server's default";
  EXPECT_EQ(parse("{" + user + R"(, "thinking": {"type": "disabled"}})", d).thinking_budget, -1);
  auto chat = [&](const std::string& extra) {
    return server::parse_completion_request(nlohmann::json::parse("{" + user + extra + "}"),
                                            server::Api::kChatCompletions, d);
  };
  EXPECT_EQ(chat("").thinking_budget, 9);
  EXPECT_EQ(chat(R"(, "thinking_token_budget": 300)").thinking_budget, 300);
  EXPECT_EQ(chat(R"(, "thinking_token_budget": null)").thinking_budget, 9) << "null: as if absent";
  EXPECT_EQ(server::parse_completion_request(nlohmann::json::parse(R"({"prompt": "x"})"), server::Api::kCompletions, d)
                .thinking_budget, -1) << "no template, no think block";
  for (const std::string bad : {R"(, "thinking_token_budget": 0)", R"(, "thinking_token_budget": "5")"}) {
    try {
      chat(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("thinking_token_budget"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(server::parse_completion_request(nlohmann::json::parse(R"({"prompt": "x", "thinking_token_budget": 5})"),
                                                server::Api::kCompletions, d), Error) << "a chat field";
}

TEST(ServerMessagesRequest, ToolsAndToolTurnsBecomeTheTemplates) {
  // tools as OpenAI's function tools (llama-server's and vLLM's conversion), written as the template's tojson writes
  // them; tool_use blocks an assistant's tool_calls; tool_result blocks role "tool" turns before the user's text
  const std::string body = R"({"max_tokens": 64,
      "tools": [{"description": "Weather", "name": "get_weather", "input_schema": {"type": "object",
                 "properties": {"z": {"type": "string"}, "a": {"type": "number"}}}, "cache_control": {"type": "x"}}],
      "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
      "messages": [{"role": "user", "content": "Weather?"},
                   {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                       {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"z": "Oslo", "a": 1.0}},
                       {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3 C"},
                       {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                        "content": [{"type": "text", "text": "no "}, {"type": "text", "text": "city"}]},
                       {"type": "text", "text": "And tomorrow?"}]},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "get_weather",
                                                      "input": {"z": "Oslo"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3"}]}]})";
  server::CompletionRequest r = server::parse_messages_request(
      nlohmann::json::parse(body), server::MessagesRoute::kGenerate, {}, server::parse_ordered_fields(body));
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0], R"({"type": "function", "function": {"name": "get_weather", "description": "Weather", )"
                        R"("parameters": {"type": "object", "properties": {"z": {"type": "string"}, )"
                        R"("a": {"type": "number"}}}}})");
  EXPECT_TRUE(r.tool_calls);
  ASSERT_EQ(r.messages.size(), 7u);
  EXPECT_EQ(r.messages[1].content, "Checking.");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"z": "Oslo", "a": 1.0})");
  EXPECT_EQ(r.messages[1].tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].content, "-3 C");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].content, "no city");
  EXPECT_EQ(r.messages[4].role, "user");
  EXPECT_EQ(r.messages[4].content, "And tomorrow?");
  EXPECT_EQ(r.messages[5].content, "");
  EXPECT_EQ(r.messages[5].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[6].role, "tool");  // results alone: no empty user turn after them
  EXPECT_EQ(r.messages[6].content, "");
  EXPECT_FALSE(r.assistant_prefill.has_value());
  // none: the tools stay in the prompt, the reply stays text; count_tokens takes both
  r = parse(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {}}],
               "tool_choice": {"type": "none"}})", {}, server::MessagesRoute::kCountTokens);
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_FALSE(r.tool_calls);
}

TEST(ServerMessagesRequest, BadFieldsAreNamed) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](const std::string& fields) { return "{" + user + ", " + fields + "}"; };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "field 'messages' is missing"},
      {R"({"messages": []})", "field 'messages': expected a non-empty array"},
      {R"({"messages": [{"role": "system", "content": "x"}]})", "messages[0].role: expected \"user\" or \"assistant\""},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content is missing"},
      {R"({"messages": [{"role": "user", "content": "x", "name": "me"}]})", "messages[0]: unknown field 'name'"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content: expected a string or an array"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
       "messages[0].content[0]: content blocks of type 'image' are not supported"},
      {R"({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}]})",
       "content[0]: content blocks of type 'thinking'"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "tool_use"}]}]})",
       "messages[1].content[0]: a tool_use block needs 'id', a non-empty 'name' and 'input'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]})",
       "messages[0].content[0]: a tool_use block belongs to an assistant turn"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "r"}]}]})",
       "messages[0].content[0]: a tool_result block without 'tool_use_id'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
           "content": [{"type": "image"}]}]}]})", "messages[0].content[0].content[0]: content blocks of type 'image'"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "tool_use",
           "id": "t", "name": "f", "input": []}]}]})", "content[0].input: expected an object"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "tool_use",
           "id": "t", "name": "f", "input": {}}]}]})", "the last assistant message has tool_use blocks"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "a text block without 'text'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})", "content[0].text"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]})", "unknown field 'x'"},
      {R"({"messages": [{"role": "user", "content": ["a"]}]})", "content[0]: expected a content block"},
      {R"({"messages": [{"role": "assistant", "content": "x"}]})", "a lone assistant message"},
      {with(R"("system": 5)"), "field 'system': expected a string or an array"},
      {with(R"("system": [{"type": "image"}])"), "field 'system'[0]: content blocks of type 'image'"},
      {with(R"("max_tokens": 0)"), "field 'max_tokens': must be at least 1"},
      {with(R"("stop_sequences": "x")"), "field 'stop_sequences': expected an array of non-empty strings"},
      {with(R"("stop_sequences": [""])"), "field 'stop_sequences'"},
      {with(R"("temperature": -1)"), "field 'temperature'"},
      {with(R"("top_k": -1)"), "field 'top_k'"},
      {with(R"("stream": 1)"), "field 'stream'"},
      {with(R"("metadata": "u")"), "field 'metadata': expected an object"},
      {with(R"("metadata": {"user_id": 5})"), "field 'metadata.user_id': expected a string"},
      {with(R"("service_tier": 1)"), "field 'service_tier': expected a string"},
      {with(R"("thinking": true)"), "field 'thinking': expected {\"type\": \"enabled\""},
      {with(R"("thinking": {"type": "on"})"), "field 'thinking.type'"},
      {with(R"("thinking": {"type": "enabled"})"), "'thinking.budget_tokens' is missing"},
      {with(R"("thinking": {"type": "enabled", "budget_tokens": 100})"), "must be at least 1024"},
      {with(R"("thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 2048)"),
       "2048 must be less than max_tokens (2048)"},
      {with(R"("thinking": {"type": "disabled", "budget_tokens": 2048})"), "unknown field 'budget_tokens'"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "max_tokens": 2048,
           "thinking": {"type": "enabled", "budget_tokens": 1024}})",
       "a last assistant message (a prefill) cannot be continued with thinking enabled"},
      {with(R"("tools": [{"type": "web_search_20250305", "name": "web_search"}])"),
       "field 'tools': tools[0]: tools of type \"web_search_20250305\" (Anthropic's server tools) are not supported"},
      {with(R"("tools": [{"name": "f"}])"), "tools[0].input_schema is missing"},
      {with(R"("tools": [{"name": "", "input_schema": {}}])"), "tools[0].name: expected a non-empty string"},
      {with(R"("tools": [{"name": "f", "input_schema": {}, "strict": true}])"), "tools[0]: unknown field 'strict'"},
      {with(R"("tool_choice": {"type": "any"})"), "field 'tool_choice': {\"type\":\"any\"} forces a tool call"},
      {with(R"("tool_choice": {"type": "tool", "name": "f"})"), "constrained decoding"},
      {with(R"("tool_choice": "auto")"), "field 'tool_choice': expected {\"type\": \"auto\"}"},
      {with(R"("logprobs": true)"), "unknown field 'logprobs' for /v1/messages"},
      {with(R"("stop": ["x"])"), "unknown field 'stop' for /v1/messages"},
      {with(R"("model": 5)"), "field 'model': expected a string"},
  };
  for (const auto& [body, expected] : cases)
    EXPECT_NE(parse_error(body).find(expected), std::string::npos) << body << ": " << parse_error(body);
  EXPECT_NE(parse_error(with(R"("max_tokens": 5)"), server::MessagesRoute::kCountTokens)
                .find("unknown field 'max_tokens' for /v1/messages/count_tokens"),
            std::string::npos);
  EXPECT_EQ(parse_error(with(R"("max_tokens": 5, "temperature": null)")), "(accepted)");  // null: absent
}

// The events of an Anthropic SSE body: (event name, data), every event named.
std::vector<std::pair<std::string, json>> events_of(const std::string& body) {
  std::vector<std::pair<std::string, json>> events = test::sse_frames<json>(body);
  for (const auto& [name, data] : events) EXPECT_NE(name, "") << data;
  return events;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, json>>& events) {
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.first);
  return names;
}

server::Job job_with_prompt(size_t prompt_tokens) {
  server::Job job;
  job.id = "msg_1";
  job.prompt.assign(prompt_tokens, 1);
  return job;
}

TEST(ServerMessagesJson, WholeMessageAndStopReasons) {
  server::Job job = job_with_prompt(5);
  server::Outcome out;
  out.result.prompt_tokens = 5;
  out.text = "four";
  out.reasoning = "2+2";
  out.completion_tokens = 7;
  out.stop_type = "eos";
  json m = server::messages_response(job, out, "demo", {{"tau", 2.5}});
  EXPECT_EQ(m["id"], "msg_1");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "demo");
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "thinking", "thinking": "2+2", "signature": ""},
                                          {"type": "text", "text": "four"}])"));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  EXPECT_EQ(m["usage"]["input_tokens"], 5);
  EXPECT_EQ(m["usage"]["output_tokens"], 7);
  EXPECT_EQ(m["timings"]["tau"], 2.5);
  EXPECT_FALSE(m.contains("compression"));
  out.reasoning.clear();
  out.text.clear();
  out.stop_type = "word", out.stopping_word = "END";
  m = server::messages_response(job, out, "demo", nullptr);
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": ""}])")) << "a text block, always";
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  out.stop_type = "limit";
  EXPECT_EQ(server::messages_response(job, out, "demo", nullptr)["stop_reason"], "max_tokens");
}

TEST(ServerMessagesJson, ToolCallsAreToolUseBlocks) {
  server::Job job = job_with_prompt(5);
  server::Outcome out;
  out.text = "Checking.";
  out.stop_type = "eos", out.finish_reason = "tool_calls";
  out.tool_calls = {{"call_abc", "get_weather", R"({"city": "Oslo", "days": 2})"}, {"call_def", "now", "{}"}};
  json m = server::messages_response(job, out, "demo", nullptr);
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Oslo", "days": 2}},
      {"type": "tool_use", "id": "toolu_def", "name": "now", "input": {}}])"));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  out.text.clear();
  m = server::messages_response(job, out, "demo", nullptr);
  EXPECT_EQ(m["content"].size(), 2u) << "calls alone: no empty text block";
  EXPECT_EQ(m["content"][0]["type"], "tool_use");
  // streamed: each call a whole block, its input in one input_json_delta; no empty text block after calls alone
  server::MessagesStream stream(job, "demo");
  std::string body = stream.start();
  body += stream.tool_use(out.tool_calls[0]);
  body += stream.finish(out, nullptr);
  const auto events = events_of(body);
  EXPECT_EQ(names_of(events), (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                                        "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[1].second["content_block"],
            json::parse(R"({"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {}})"));
  EXPECT_EQ(events[2].second["delta"],
            json::parse(R"({"type": "input_json_delta", "partial_json": "{\"city\": \"Oslo\", \"days\": 2}"})"));
  EXPECT_EQ(events[4].second["delta"]["stop_reason"], "tool_use");
  // text, then a call: the text block closes before the tool_use block opens
  server::MessagesStream mixed(job, "demo");
  body = mixed.start();
  body += mixed.text("", "Checking.");
  body += mixed.tool_use(out.tool_calls[1]);
  body += mixed.finish(out, nullptr);
  const auto mixed_events = events_of(body);
  EXPECT_EQ(names_of(mixed_events),
            (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(mixed_events[4].second["index"], 1);
  EXPECT_EQ(mixed_events[6].second["index"], 1);
}

TEST(ServerMessagesJson, StreamEventsInAnthropicsOrder) {
  server::Job job = job_with_prompt(3);
  server::Outcome out;
  out.stop_type = "limit";
  out.completion_tokens = 4;
  {
    server::MessagesStream stream(job, "demo");
    std::string body = stream.start();  // one call a statement: the stream's state follows the calls' order
    body += stream.text("thinking ", "");
    body += server::MessagesStream::ping();
    body += stream.text("more", "");
    body += stream.text("", "Ans");
    body += stream.text("", "wer");
    body += stream.finish(out, {{"tau", 3.0}});
    const auto events = events_of(body);
    EXPECT_EQ(names_of(events), (std::vector<std::string>{
                                    "message_start", "content_block_start", "content_block_delta", "ping",
                                    "content_block_delta", "content_block_stop", "content_block_start",
                                    "content_block_delta", "content_block_delta", "content_block_stop",
                                    "message_delta", "message_stop"}));
    const json& start = events[0].second["message"];
    EXPECT_EQ(start["id"], "msg_1");
    EXPECT_TRUE(start["content"].empty());
    EXPECT_TRUE(start["stop_reason"].is_null());
    EXPECT_EQ(start["usage"]["input_tokens"], 3);
    EXPECT_EQ(start["usage"]["output_tokens"], 0);
    EXPECT_EQ(events[1].second["index"], 0);
    EXPECT_EQ(events[1].second["content_block"]["type"], "thinking");
    EXPECT_EQ(events[2].second["delta"], json::parse(R"({"type": "thinking_delta", "thinking": "thinking "})"));
    EXPECT_EQ(events[5].second["index"], 0);
    EXPECT_EQ(events[6].second["index"], 1);
    EXPECT_EQ(events[6].second["content_block"], json::parse(R"({"type": "text", "text": ""})"));
    EXPECT_EQ(events[8].second["delta"], json::parse(R"({"type": "text_delta", "text": "wer"})"));
    EXPECT_EQ(events[8].second["index"], 1);
    EXPECT_EQ(events[9].second["index"], 1);
    EXPECT_EQ(events[10].second["delta"]["stop_reason"], "max_tokens");
    EXPECT_EQ(events[10].second["usage"]["output_tokens"], 4);
    EXPECT_EQ(events[10].second["timings"]["tau"], 3.0);
  }
  {
    // no text at all: one empty text block
    server::MessagesStream stream(job, "demo");
    std::string body = stream.start();
    body += stream.finish(out, nullptr);
    EXPECT_EQ(names_of(events_of(body)),
              (std::vector<std::string>{"message_start", "content_block_start", "content_block_stop", "message_delta",
                                        "message_stop"}));
    // thinking only (cut off inside it): the thinking block, then an empty text block
    server::MessagesStream cut(job, "demo");
    body = cut.start();
    body += cut.text("hm", "");
    body += cut.finish(out, nullptr);
    const auto events = events_of(body);
    EXPECT_EQ(names_of(events), (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                                          "content_block_stop", "content_block_start",
                                                          "content_block_stop", "message_delta", "message_stop"}));
    EXPECT_EQ(events[4].second["content_block"]["type"], "text");
    EXPECT_EQ(events[4].second["index"], 1);
  }
  // an error ends the stream with an error event
  const auto error = events_of(server::MessagesStream::error(
      {{"error", {{"code", 503}, {"message", "shut down"}, {"type", "unavailable_error"}}}}));
  ASSERT_EQ(error.size(), 1u);
  EXPECT_EQ(error[0].second, json::parse(R"({"type": "error", "error": {"type": "overloaded_error",
                                                                        "message": "shut down"}})"));
}

TEST(ServerMessagesJson, ErrorTypesFollowTheStatus) {
  auto type_of = [](int status) {
    return server::anthropic_error({{"error", {{"code", status}, {"message", "m"}, {"type", "x"}}}})["error"]["type"];
  };
  EXPECT_EQ(type_of(400), "invalid_request_error");
  EXPECT_EQ(type_of(401), "authentication_error");
  EXPECT_EQ(type_of(404), "not_found_error");
  EXPECT_EQ(type_of(413), "request_too_large");
  EXPECT_EQ(type_of(500), "api_error");
  EXPECT_EQ(type_of(503), "overloaded_error");
}

}  // namespace
