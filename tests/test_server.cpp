// test_server.cpp — `specpress serve`: stop strings and request parsing on their own, then the server itself
// as users run it (the binary on a free port, talked to over HTTP): greedy outputs equal the reference fixtures
// and `specpress generate`, streamed text equals the whole response, stop strings end the output before them,
// bad requests get OpenAI error objects naming the field (Anthropic's on /v1/messages), queued requests all finish,
// a client that goes away ends its generation, and SIGTERM shuts the server down mid-generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <regex>
#include <thread>
#include <tuple>

#ifdef SPECPRESS_HAVE_SERVER
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>
#endif

#include "core/error.h"
#include "server/api_request.h"
#include "server/logprobs_json.h"
#include "server/openai_json.h"
#include "server/reasoning.h"
#include "server/stop_strings.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/python_json.h"
#include "sse_events.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;
using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------- stop strings

std::string feed(server::StopStrings& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += s.push(p);
  return out + s.flush();
}

TEST(StopStrings, OutputEndsBeforeTheFirstStopStringAcrossPieces) {
  server::StopStrings s({"</answer>", "\n\n"});
  EXPECT_EQ(s.push("The answer"), "The answer");
  EXPECT_EQ(s.push(" is <"), " is ");  // "<" may begin "</answer>": held back
  EXPECT_EQ(s.push("/ans"), "");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("wer> 8 and more"), "");  // completed: nothing of it (or after it) is released
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stopping_word(), "</answer>");
  EXPECT_EQ(s.push("later"), "");
  EXPECT_EQ(s.flush(), "");
  server::StopStrings t({"</answer>"});
  EXPECT_EQ(feed(t, {"a <", "/b> c"}), "a </b> c");  // a held prefix that does not continue is released
  server::StopStrings u({"\n\n"});
  EXPECT_EQ(feed(u, {"line\n", "\nnext"}), "line");
}

TEST(StopStrings, FirstToCompleteWinsAndHeldTextIsReleasedAtTheEnd) {
  // "bc" completes before "abcd" in "xabcd": it ends the output, whatever the order or the split of the pushes
  for (auto stops : {std::vector<std::string>{"bc", "abcd"}, std::vector<std::string>{"abcd", "bc"}}) {
    for (auto pieces : {std::vector<std::string>{"xab", "cd"}, std::vector<std::string>{"xabcd"},
                        std::vector<std::string>{"x", "a", "b", "c", "d"}}) {
      server::StopStrings a(stops);
      EXPECT_EQ(feed(a, pieces), "xa");
      EXPECT_EQ(a.stopping_word(), "bc");
    }
  }
  server::StopStrings b({"cd", "bcd"});  // both complete at the same byte: the one that starts first
  EXPECT_EQ(feed(b, {"xbcd"}), "x");
  EXPECT_EQ(b.stopping_word(), "bcd");
  server::StopStrings c({"STOP"});
  EXPECT_EQ(c.push("go ST"), "go ");  // "ST" held back
  EXPECT_EQ(c.push("O"), "");
  EXPECT_EQ(c.push("P!"), "");
  EXPECT_TRUE(c.stopped());
  server::StopStrings d({"STOP"});
  EXPECT_EQ(feed(d, {"go ST", "OMP"}), "go STOMP");  // not a stop: released whole
  EXPECT_FALSE(d.stopped());
  server::StopStrings e({});
  EXPECT_EQ(e.push("anything"), "anything");
  server::StopStrings f({"é!"});  // multi-byte: held and released on character boundaries
  EXPECT_EQ(f.push("caf\xc3\xa9"), "caf");
  EXPECT_EQ(f.push("?"), "\xc3\xa9?");
}

// ---------------------------------------------------------------- reasoning split

struct Split {
  std::string reasoning, content;
};

Split split_pieces(server::ReasoningFormat format, const std::vector<std::string>& pieces) {
  server::ReasoningSplit s(format);
  Split out;
  for (const auto& p : pieces) {
    server::ReplyParts r = s.push(p);
    if (format == server::ReasoningFormat::kDeepseek)  // (legacy's content is the whole reply, tags and all)
      EXPECT_TRUE(r.reasoning.empty() || out.content.empty()) << "reasoning after content";
    out.reasoning += r.reasoning, out.content += r.content;
  }
  server::ReplyParts r = s.flush();
  out.reasoning += r.reasoning, out.content += r.content;
  return out;
}

// The same split whether the text comes whole, a byte at a time, or in pieces of 2, 3 and 5 bytes.
Split split_every_way(server::ReasoningFormat format, const std::string& text) {
  const Split whole = split_pieces(format, {text});
  for (size_t step : {1, 2, 3, 5}) {
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size(); at += step) pieces.push_back(text.substr(at, step));
    const Split parts = split_pieces(format, pieces);
    EXPECT_EQ(parts.reasoning, whole.reasoning) << "pieces of " << step << " bytes: " << text;
    EXPECT_EQ(parts.content, whole.content) << "pieces of " << step << " bytes: " << text;
  }
  return whole;
}

TEST(ReasoningSplit, ThinkBlockGoesToReasoningAndTheAnswerToContent) {
  using F = server::ReasoningFormat;
  const std::string reply = "<think>\nLet me add: 3 + 5 = 8.\n\nSo 8.\n</think>\n\nHe has 8 apples.";
  Split d = split_every_way(F::kDeepseek, reply);
  EXPECT_EQ(d.reasoning, "Let me add: 3 + 5 = 8.\n\nSo 8.");
  EXPECT_EQ(d.content, "He has 8 apples.");
  Split legacy = split_every_way(F::kDeepseekLegacy, reply);  // content untouched, reasoning as well
  EXPECT_EQ(legacy.reasoning, d.reasoning);
  EXPECT_EQ(legacy.content, reply);
  Split none = split_every_way(F::kNone, reply);
  EXPECT_EQ(none.reasoning, "");
  EXPECT_EQ(none.content, reply);
  // Qwen3 with thinking on but nothing to think: the empty block
  d = split_every_way(F::kDeepseek, "<think>\n\n</think>\n\n8");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "8");
  // whitespace before the tag is not content; a later block is content like any text
  d = split_every_way(F::kDeepseek, "\n <think>a</think>b <think>c</think>");
  EXPECT_EQ(d.reasoning, "a");
  EXPECT_EQ(d.content, "b <think>c</think>");
}

TEST(ReasoningSplit, RepliesWithoutABlockOrCutOffInsideOne) {
  using F = server::ReasoningFormat;
  Split d = split_every_way(F::kDeepseek, "  He has 8 apples.");  // no block: all content, leading spaces kept
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "  He has 8 apples.");
  d = split_every_way(F::kDeepseek, "<thin");  // ended while it might have been the tag: it was text
  EXPECT_EQ(d.content, "<thin");
  d = split_every_way(F::kDeepseek, "<b>bold</b>");
  EXPECT_EQ(d.content, "<b>bold</b>");
  d = split_every_way(F::kDeepseek, "<think>\nstill thinking </thi");  // cut off (max_tokens): all reasoning
  EXPECT_EQ(d.reasoning, "still thinking </thi");
  EXPECT_EQ(d.content, "");
  d = split_every_way(F::kDeepseek, "<think>x</think>  \n");
  EXPECT_EQ(d.reasoning, "x");
  EXPECT_EQ(d.content, "");
  d = split_every_way(F::kDeepseek, " \n");
  EXPECT_EQ(d.content, " \n");
  // streamed, nothing is held longer than it must be: reasoning text goes out as it comes, up to trailing
  // whitespace and what may begin the closing tag
  server::ReasoningSplit s(F::kDeepseek);
  EXPECT_EQ(s.push("<think>\nab").reasoning, "ab");
  EXPECT_EQ(s.push(" c\n</").reasoning, " c");
  server::ReplyParts r = s.push("think>\n\nAns");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Ans");
  EXPECT_EQ(s.push("wer").content, "wer");
}

TEST(ReasoningSplit, FormatNames) {
  EXPECT_EQ(server::parse_reasoning_format("auto", "--reasoning-format"), server::ReasoningFormat::kDeepseek);
  EXPECT_EQ(server::parse_reasoning_format("none", "x"), server::ReasoningFormat::kNone);
  EXPECT_EQ(server::parse_reasoning_format("deepseek-legacy", "x"), server::ReasoningFormat::kDeepseekLegacy);
  EXPECT_STREQ(server::reasoning_format_name(server::ReasoningFormat::kDeepseek), "deepseek");
  try {
    server::parse_reasoning_format("r1", "--reasoning-format");
    ADD_FAILURE() << "accepted r1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--reasoning-format: expected none, deepseek, deepseek-legacy or auto"),
              std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- tool calls

struct Calls {
  std::string content;
  std::vector<server::ToolCall> calls;
};

Calls calls_of_pieces(const std::vector<std::string>& pieces) {
  server::ToolCallSplit s;
  Calls out;
  auto add = [&](server::ToolCallParts&& r) {
    out.content += r.content;
    out.calls.insert(out.calls.end(), r.calls.begin(), r.calls.end());
  };
  for (const auto& p : pieces) add(s.push(p));
  add(s.flush());
  return out;
}

// The same content and calls (ids aside) whether the text comes whole, a byte at a time, or in pieces of 2, 3 and 5.
Calls calls_every_way(const std::string& text) {
  const Calls whole = calls_of_pieces({text});
  for (size_t step : {1, 2, 3, 5}) {
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size(); at += step) pieces.push_back(text.substr(at, step));
    const Calls parts = calls_of_pieces(pieces);
    EXPECT_EQ(parts.content, whole.content) << "pieces of " << step << " bytes: " << text;
    EXPECT_EQ(parts.calls.size(), whole.calls.size()) << "pieces of " << step << " bytes: " << text;
    for (size_t i = 0; i < std::min(parts.calls.size(), whole.calls.size()); ++i) {
      EXPECT_EQ(parts.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(parts.calls[i].arguments, whole.calls[i].arguments);
    }
  }
  return whole;
}

TEST(ToolCallSplit, BlocksBecomeCallsAndTheRestStaysContent) {
  Calls r = calls_every_way(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", \"city\": \"Paris\", "
      "\"n\": 2.0}}\n</tool_call>\n<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>\n");
  EXPECT_EQ(r.content, "Let me check.\n");  // what comes before the first block, as vLLM's hermes parser keeps it
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"unit": "c", "city": "Paris", "n": 2.0})");  // as the template writes it back
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  for (const auto& call : r.calls)
    EXPECT_TRUE(std::regex_match(call.id, std::regex("call_[A-Za-z0-9]{24}"))) << call.id;
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // no arguments: {}; text between or after blocks that is not whitespace stays content
  r = calls_every_way("<tool_call>{\"name\": \"a\"}</tool_call> and <tool_call>{\"name\": \"b\", \"arguments\": null}"
                      "</tool_call>\n\ndone");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.content, " and \n\ndone");
  // a reply without blocks is its content, whatever looks like the start of one
  for (const std::string text : {"a < b <tool_ x", "ends with <tool_call", "<tool_call", "", "  \n", "</tool_call>"})
    EXPECT_EQ(calls_every_way(text).content, text);
}

TEST(ToolCallSplit, BlocksThatAreNoCallStayAsWritten) {
  {
    // after a call, a block that is no call keeps the whitespace before it; a long block is searched once
    const Calls r = calls_every_way("<tool_call>{\"name\": \"f\"}</tool_call>\n \n<tool_call>oops</tool_call>\n");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.content, "\n \n<tool_call>oops</tool_call>\n");
    const std::string body = "{\"name\": \"f\", \"arguments\": {\"text\": \"" + std::string(20000, 'x') + "\"}}";
    const Calls long_call = calls_every_way("<tool_call>" + body + "</tool_call>");
    ASSERT_EQ(long_call.calls.size(), 1u);
    EXPECT_EQ(long_call.calls[0].arguments.size(), 20000u + 12);
  }
  for (const std::string bad :
       {"<tool_call>\nnot json\n</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"\"}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>", "<tool_call>[1, 2]</tool_call>"}) {
    const Calls r = calls_every_way("x" + bad + "y");
    EXPECT_TRUE(r.calls.empty()) << bad;
    EXPECT_EQ(r.content, "x" + bad + "y");
  }
  // a call, then a block the reply ends inside: the call, then the rest as written
  const Calls r = calls_every_way("<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{\"name\": \"g\", \"argu");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "f");
  EXPECT_EQ(r.content, "\n<tool_call>{\"name\": \"g\", \"argu") << "the whitespace before a non-call block stays";
}

TEST(ToolCallSplit, ChatRepliesCarryTheCallsInOpenAIsForm) {
  server::Job job;
  job.request.api = server::Api::kChatCompletions;
  job.id = "chatcmpl-1";
  server::Outcome out;
  out.finish_reason = "tool_calls";
  out.tool_calls = {{"call_abc", "get_weather", R"({"city": "Oslo"})"}, {"call_def", "now", "{}"}};
  const std::optional<tok::Tokenizer> no_tokenizer;
  const server::LogprobsJson format(no_tokenizer);
  nlohmann::ordered_json whole = server::response_json(job, out, "demo", format);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(json(whole["choices"][0]["message"]), json::parse(R"({"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
      {"id": "call_def", "type": "function", "function": {"name": "now", "arguments": "{}"}}]})"));
  out.text = "Checking.";
  whole = server::response_json(job, out, "demo", format);
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "Checking.");  // content with the calls when there is some
  out.tool_calls.clear();
  EXPECT_FALSE(server::response_json(job, out, "demo", format)["choices"][0]["message"].contains("tool_calls"));
  // streamed: one chunk a call, whole, with its index in the response
  const nlohmann::ordered_json chunk =
      server::tool_call_chunk_json(job, "demo", {"call_def", "now", "{}"}, 1);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(json(chunk["choices"][0]["delta"]), json::parse(R"({"tool_calls": [{"index": 1, "id": "call_def",
      "type": "function", "function": {"name": "now", "arguments": "{}"}}]})"));
}

// ---------------------------------------------------------------- request parsing

server::CompletionRequest parse(const std::string& body, server::Api api = server::Api::kCompletions) {
  return server::parse_completion_request(json::parse(body), api, {});
}

std::string parse_error(const std::string& body, server::Api api = server::Api::kCompletions) {
  try {
    parse(body, api);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ServerRequest, FieldsAndDefaults) {
  server::RequestDefaults d;
  d.max_tokens = 77;
  d.sampling.temperature = 0.5;
  d.enable_thinking = true;
  auto r = server::parse_completion_request(json::parse(R"({"prompt": "hi", "top_k": 5, "seed": 9})"),
                                            server::Api::kCompletions, d);
  EXPECT_EQ(*r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens, 77);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_FALSE(r.sampling.penalized());
  // llama-server's penalties, on each route
  for (const auto& [api, body] : std::vector<std::pair<server::Api, std::string>>{
           {server::Api::kCompletions, R"("prompt": "x")"},
           {server::Api::kNativeCompletion, R"("prompt": "x")"},
           {server::Api::kChatCompletions, R"("messages": [{"role": "user", "content": "x"}])"}}) {
    r = parse("{" + body + R"(, "repeat_penalty": 1.1, "repeat_last_n": -1, "presence_penalty": 1.5,
                               "frequency_penalty": -0.5})", api);
    EXPECT_EQ(r.sampling.repeat_penalty, 1.1);
    EXPECT_EQ(r.sampling.repeat_last_n, -1);
    EXPECT_EQ(r.sampling.presence_penalty, 1.5);
    EXPECT_EQ(r.sampling.frequency_penalty, -0.5);
    EXPECT_TRUE(r.sampling.penalized());
  }
  // logit_bias: OpenAI's object of ids, llama-server's text keys and [[token, bias]] pairs; false bans
  const double never = -std::numeric_limits<double>::infinity();
  r = parse(R"({"prompt": "x", "logit_bias": {"15": 1.5, "7": false, "hi": -2}})");
  EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int64_t, double>>{{15, 1.5}, {7, never}}));
  EXPECT_EQ(r.logit_bias_texts, (std::vector<std::pair<std::string, double>>{{"hi", -2.0}}));
  d.sampling.logit_bias = {{1, 1.0}};
  r = server::parse_completion_request(json::parse(R"({"prompt": "x", "logit_bias": [[3, -1], ["a b", false]]})"),
                                       server::Api::kNativeCompletion, d);
  EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int64_t, double>>{{3, -1.0}})) << "replaces the default";
  EXPECT_EQ(r.logit_bias_texts, (std::vector<std::pair<std::string, double>>{{"a b", never}}));
  EXPECT_EQ(server::parse_completion_request(json::parse(R"({"prompt": "x"})"), server::Api::kCompletions, d)
                .sampling.logit_bias.size(), 1u) << "the default without the field";
  d.sampling.logit_bias.clear();
  r = parse(R"({"prompt": [[1, 2, 3]], "max_tokens": 4, "stop": "x", "stream": true,
               "stream_options": {"include_usage": true}, "n": 1, "logprobs": null, "user": "u"})");
  EXPECT_EQ(r.prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.max_tokens, 4);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x"}));
  EXPECT_TRUE(r.stream && r.include_usage);
  r = parse(R"({"messages": [{"role": "developer", "content": "be brief"},
                             {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                              "name": "me"}],
               "max_completion_tokens": 3, "chat_template_kwargs": {"enable_thinking": true}, "seed": -1})",
            server::Api::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_TRUE(r.enable_thinking);
  EXPECT_TRUE(r.random_seed);
  EXPECT_EQ(r.reasoning_format, server::ReasoningFormat::kDeepseek);  // chat: the server's default
  EXPECT_EQ(parse(R"({"prompt": "x"})").reasoning_format, server::ReasoningFormat::kNone);  // completions: raw text
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_format": "none"})",
                  server::Api::kChatCompletions).reasoning_format, server::ReasoningFormat::kNone);
  r = parse(R"({"prompt": "x", "n_predict": -1, "ignore_eos": true})", server::Api::kNativeCompletion);
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_TRUE(r.ignore_eos);
  // OpenAI's newer max_completion_tokens wins over max_tokens, whatever the order
  r = parse(R"({"max_tokens": 5, "max_completion_tokens": 9, "messages": [{"role": "user", "content": "x"}]})",
            server::Api::kChatCompletions);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.max_tokens_given);
  // the server's default seed policy applies unless the request names a seed
  d.random_seed = true;
  EXPECT_TRUE(server::parse_completion_request(json::parse(R"({"prompt": "x"})"), server::Api::kCompletions, d).random_seed);
  EXPECT_FALSE(server::parse_completion_request(json::parse(R"({"prompt": "x", "seed": 4})"), server::Api::kCompletions, d)
                   .random_seed);
}

// logprobs in each API's own fields: chat's logprobs and top_logprobs, completions' logprobs, llama.cpp's n_probs.
TEST(ServerRequest, LogprobsFieldsOfEachApi) {
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  auto chat = [&](const std::string& fields) { return "{" + messages + fields + "}"; };
  const auto kChat = server::Api::kChatCompletions, kNative = server::Api::kNativeCompletion;
  EXPECT_EQ(parse(chat(""), kChat).logprobs, -1);
  EXPECT_EQ(parse(chat(R"(, "logprobs": false)"), kChat).logprobs, -1);
  EXPECT_EQ(parse(chat(R"(, "logprobs": true)"), kChat).logprobs, 0);
  EXPECT_EQ(parse(chat(R"(, "top_logprobs": 20, "logprobs": true)"), kChat).logprobs, 20);
  EXPECT_EQ(parse(chat(R"(, "logprobs": true, "top_logprobs": null)"), kChat).logprobs, 0);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": 0})").logprobs, 0);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": 5})").logprobs, 5);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": null})").logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "n_probs": 0})", kNative).logprobs, -1);  // llama.cpp: 0 = none
  EXPECT_EQ(parse(R"({"prompt": "x", "n_probs": 3})", kNative).logprobs, 3);
  // off in another API's fields, as clients that send every field write them: accepted, none
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": false, "top_logprobs": 0, "n_probs": 0})").logprobs, -1);
  EXPECT_EQ(parse(chat(R"(, "n_probs": 0)"), kChat).logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": "x", "logprobs": false, "top_logprobs": 0})", kNative).logprobs, -1);
  const std::vector<std::tuple<std::string, server::Api, std::string>> bad = {
      {chat(R"(, "top_logprobs": 2)"), kChat, "field 'top_logprobs': only allowed with \"logprobs\": true"},
      {chat(R"(, "logprobs": false, "top_logprobs": 2)"), kChat, "only allowed with \"logprobs\": true"},
      {chat(R"(, "logprobs": 1)"), kChat, "field 'logprobs': expected true or false"},
      {chat(R"(, "logprobs": true, "top_logprobs": 21)"), kChat, "field 'top_logprobs': must be 0..20, got 21"},
      {chat(R"(, "logprobs": true, "top_logprobs": -1)"), kChat, "field 'top_logprobs': must be 0..20"},
      {R"({"prompt": "x", "logprobs": 2})", kNative, "field 'logprobs': /completion takes 'n_probs'"},
      {chat(R"(, "n_probs": 2)"), kChat, "field 'n_probs': /v1/chat/completions takes 'logprobs': true"},
      {R"({"prompt": "x", "n_probs": 99})", kNative, "field 'n_probs': must be 0..20"},
      {R"({"prompt": "x", "n_probs": 1.5})", kNative, "field 'n_probs': expected an integer"},
  };
  for (const auto& [body, api, expected] : bad)
    EXPECT_NE(parse_error(body, api).find(expected), std::string::npos) << body << ": " << parse_error(body, api);
}

// The completions columns with the real Qwen3 tokenizer: text_offset counts the returned text, which leaves special
// tokens out, and characters split over two tokens once; top_logprobs keeps the likeliest first and adds the chosen
// token; a token that is part of a character reads U+FFFD, its bytes exact.
TEST(ServerLogprobsJson, CompletionColumnsAndEntries) {
  const std::string dir = shared_dir() + "/data/qwen3-tokenizer";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << dir << " missing";
  const std::optional<tok::Tokenizer> tokenizer = tok::Tokenizer::from_dir(dir);
  const server::LogprobsJson format(tokenizer);
  const std::vector<int32_t> hello = tokenizer->encode("Hello");
  const int64_t im_end = *tokenizer->token_to_id("<|im_end|>");
  const int64_t byte_c3 = *tokenizer->token_to_id("\xC3\x83");  // the byte alphabet's 0xC3: a lead byte alone
  ASSERT_EQ(hello.size(), 1u);
  auto logged = [](int64_t id, float lp, std::vector<std::pair<int64_t, float>> top) {
    return server::LoggedToken{id, decode::TokenLogprob{lp, std::move(top)}};
  };
  const std::vector<server::LoggedToken> tokens = {
      logged(hello[0], -0.5f, {{im_end, -0.1f}, {hello[0], -0.5f}}), logged(im_end, -1.0f, {{im_end, -1.0f}}),
      logged(byte_c3, -2.0f, {{hello[0], -0.3f}}), logged(hello[0], -0.25f, {})};
  int64_t offset = 3;
  const nlohmann::ordered_json c = format.completion(tokens, offset);
  EXPECT_EQ(c["tokens"], (nlohmann::ordered_json{"Hello", "<|im_end|>", "\xEF\xBF\xBD", "Hello"}));
  EXPECT_EQ(c["text_offset"], (nlohmann::ordered_json{3, 8, 8, 9})) << "after <|im_end|>: the returned text skips it";
  EXPECT_EQ(offset, 14);
  EXPECT_EQ(c["top_logprobs"][0].dump(), R"({"<|im_end|>":-0.10000000149011612,"Hello":-0.5})");
  EXPECT_EQ(c["top_logprobs"][2].dump(), R"({"Hello":-0.30000001192092896,"�":-2.0})") << "the chosen token added";
  EXPECT_EQ(c["token_logprobs"][3], -0.25);
  const nlohmann::ordered_json entry = format.native(tokens)[2];
  EXPECT_EQ(entry.dump(), R"({"id":)" + std::to_string(byte_c3) +
                              R"(,"token":"�","logprob":-2.0,"bytes":[195],"top_logprobs":[{"id":)" +
                              std::to_string(hello[0]) + R"(,"token":"Hello","logprob":-0.30000001192092896,)" +
                              R"("bytes":[72,101,108,108,111]}]})");
  EXPECT_FALSE(format.chat(tokens)["content"][0].contains("id"));

  // an echoed prompt: its first token unscored (null, as OpenAI writes it), its special tokens counted in
  // text_offset (the echoed text has them), the output's after it skipped as before
  std::vector<server::LoggedToken> echoed = {logged(im_end, 0.0f, {}), logged(hello[0], -0.5f, {{im_end, -0.1f}}),
                                             logged(im_end, -1.0f, {}), logged(im_end, -1.5f, {})};
  echoed[0].scored = false;
  for (int i = 0; i < 3; ++i) echoed[i].echoed = true;
  int64_t echo_offset = 0;
  const nlohmann::ordered_json e = format.completion(echoed, echo_offset);
  EXPECT_EQ(e["tokens"], (nlohmann::ordered_json{"<|im_end|>", "Hello", "<|im_end|>", "<|im_end|>"}));
  EXPECT_EQ(e["token_logprobs"].dump(), "[null,-0.5,-1.0,-1.5]");
  EXPECT_TRUE(e["top_logprobs"][0].is_null());
  EXPECT_EQ(e["top_logprobs"][1].dump(), R"({"<|im_end|>":-0.10000000149011612,"Hello":-0.5})");
  EXPECT_EQ(e["text_offset"], (nlohmann::ordered_json{0, 10, 15, 25}));
  EXPECT_EQ(echo_offset, 25) << "the output's <|im_end|> is not in the returned text";

  // return_tokens_as_token_ids: "token_id:ID" everywhere a token is named, so two parts of characters (both U+FFFD)
  // keep their own top_logprobs keys; bytes and text_offset as before
  const int64_t byte_c4 = *tokenizer->token_to_id("\xC3\x84");  // 0xC4, another lead byte alone
  const server::LogprobsJson as_ids(tokenizer, /*tokens_as_ids=*/true);
  const std::vector<server::LoggedToken> parts = {logged(byte_c3, -1.0f, {{byte_c3, -1.0f}, {byte_c4, -1.2f}}),
                                                  logged(im_end, -0.5f, {})};
  int64_t parts_offset = 0, plain_offset = 0;
  const nlohmann::ordered_json by_id = as_ids.completion(parts, parts_offset);
  const std::string c3 = "token_id:" + std::to_string(byte_c3), c4 = "token_id:" + std::to_string(byte_c4);
  EXPECT_EQ(by_id["tokens"], (nlohmann::ordered_json{c3, "token_id:" + std::to_string(im_end)}));
  EXPECT_EQ(by_id["top_logprobs"][0].dump(), nlohmann::ordered_json({{c3, -1.0f}, {c4, -1.2f}}).dump());
  EXPECT_EQ(format.completion(parts, plain_offset)["top_logprobs"][0].size(), 1u) << "by text the two collide";
  EXPECT_EQ(by_id["text_offset"], (nlohmann::ordered_json{0, 1}));
  EXPECT_EQ(parts_offset, plain_offset);
  const nlohmann::ordered_json chat_entry = as_ids.chat(parts)["content"][0];
  EXPECT_EQ(chat_entry["token"], c3);
  EXPECT_EQ(chat_entry["bytes"], (nlohmann::ordered_json{195}));
  EXPECT_EQ(chat_entry["top_logprobs"][1]["token"], c4);
}

TEST(ServerRequest, DeepNestingIsRefusedWhileParsing) {
  const int depth = 100000;  // copied or printed recursively, this overflowed the stack
  const std::string body = R"({"prompt": "x", "n": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
  try {
    server::parse_body(body);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested more than 32 levels"), std::string::npos) << e.what();
  }
  const std::string nested_ok = R"({"prompt": "x", "stop": [")" + std::string(70, 'z') + R"("]})";
  EXPECT_EQ(parse(nested_ok).stop.size(), 1u);
  // values in messages are shortened
  const std::string message = parse_error(R"({"prompt": "x", "max_tokens": ")" + std::string(5000, 'y') + R"("})");
  EXPECT_LT(message.size(), 200u) << message;
}

TEST(ServerRequest, BadFieldsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "field 'prompt' is missing"},
      {R"({"prompt": 5})", "field 'prompt'"},
      {R"({"prompt": ["a", "b"]})", "a batch of 2 prompts"},
      {R"({"prompt": [1, "x"]})", "element 1"},
      {R"({"prompt": "x", "max_tokens": 0})", "field 'max_tokens': must be at least 1, got 0 (0 only with \"echo\""},
      {R"({"prompt": "x", "max_tokens": 0, "echo": false})", "field 'max_tokens': must be at least 1"},
      {R"({"prompt": "x", "max_tokens": -1, "echo": true})", "field 'max_tokens': must be at least 1, got -1"},
      {R"({"prompt": "x", "echo": 1})", "field 'echo': expected true or false"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "field 'max_tokens': expected an integer"},
      {R"({"prompt": "x", "temperature": -1})", "field 'temperature'"},
      {R"({"prompt": "x", "top_p": 0})", "field 'top_p'"},
      {R"({"prompt": "x", "top_k": -2})", "field 'top_k'"},
      {R"({"prompt": "x", "min_p": 2})", "field 'min_p'"},
      {R"({"prompt": "x", "min_p": 1})", "field 'min_p': must be in [0, 1)"},
      {R"({"prompt": "x", "n": "1"})", "field 'n': expected an integer"},
      {R"({"prompt": "x", "response_format": {"type": 5}})", "field 'response_format'"},
      {R"({"prompt": "x", "seed": -5})", "field 'seed'"},
      {R"({"prompt": "x", "stop": ""})", "field 'stop'"},
      {R"({"prompt": "x", "stop": [1]})", "field 'stop'"},
      {R"({"prompt": "x", "stream": "yes"})", "field 'stream'"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "only allowed with \"stream\": true"},
      {R"({"prompt": "x", "n": 0})", "field 'n': must be in 1..16, got 0"},
      {R"({"prompt": "x", "n": 17})", "field 'n': must be in 1..16"},
      {R"({"prompt": "x", "best_of": 2})", "field 'best_of': 2 is not supported: only best_of = n (1)"},
      {R"({"prompt": "x", "best_of": 3, "n": 2})", "field 'best_of': 3 is not supported"},
      {R"({"prompt": "x", "n": 2, "echo": true, "max_tokens": 0})", "field 'n': 2 choices of nothing"},
      {R"({"prompt": "x", "logprobs": 21})", "field 'logprobs': must be 0..20"},
      {R"({"prompt": "x", "logprobs": true})", "field 'logprobs': expected an integer 0..20"},
      {R"({"prompt": "x", "top_logprobs": 2})", "field 'top_logprobs': /v1/completions takes 'logprobs'"},
      {R"({"prompt": "x", "n_probs": 2})", "field 'n_probs': /v1/completions takes 'logprobs'"},
      {R"({"prompt": "x", "presence_penalty": 2.5})", "field 'presence_penalty': must be in [-2, 2]"},
      {R"({"prompt": "x", "frequency_penalty": "a"})", "field 'frequency_penalty'"},
      {R"({"prompt": "x", "repeat_penalty": 0})", "field 'repeat_penalty': must be a finite number > 0"},
      {R"({"prompt": "x", "repeat_last_n": -2})", "field 'repeat_last_n': must be >= 0 tokens"},
      {R"({"prompt": "x", "repeat_last_n": 1.5})", "field 'repeat_last_n': expected an integer"},
      {R"({"prompt": "x", "logit_bias": {"1": "5"}})", "field 'logit_bias': \"1\": the bias must be a finite number"},
      {R"({"prompt": "x", "logit_bias": {"1": true}})", "field 'logit_bias'"},
      {R"({"prompt": "x", "logit_bias": [[1]]})", "field 'logit_bias': item 0: expected [token id or text, bias]"},
      {R"({"prompt": "x", "logit_bias": [[-1, 2]]})", "field 'logit_bias': item 0: token id -1 is negative"},
      {R"({"prompt": "x", "logit_bias": [[1.5, 2]]})", "field 'logit_bias': item 0: expected a token id or a string"},
      {R"({"prompt": "x", "logit_bias": {"": 2}})", "an empty string names no token"},
      {R"({"prompt": "x", "logit_bias": {"12345678901234": 2}})", "token id 12345678901234 is outside any vocabulary"},
      {R"({"prompt": "x", "logit_bias": 3})", "field 'logit_bias': expected an object"},
      {R"({"prompt": "x", "logit_bias": [[18446744073709551615, 1]]})",
       "field 'logit_bias': item 0: token id 18446744073709551615 is outside any vocabulary"},
      {R"({"prompt": "x", "user": [1]})", "field 'user': expected a string"},
      {R"({"prompt": "x", "metadata": "m"})", "field 'metadata': expected an object"},
      {R"({"prompt": "x", "metadata": {"k": 1}})", "field 'metadata.k': expected a string"},
      {R"({"prompt": "x", "store": "no"})", "field 'store': expected true or false"},
      {R"({"prompt": "x", "temprature": 0})", "unknown field 'temprature'"},
      {R"({"prompt": "x", "messages": []})", "unknown field 'messages'"},
      {R"({"prompt": "x", "reasoning_format": "none"})", "unknown field 'reasoning_format'"},
  };
  for (const auto& [body, expected] : cases) EXPECT_NE(parse_error(body).find(expected), std::string::npos) << body << ": " << parse_error(body);
  const std::vector<std::pair<std::string, std::string>> chat = {
      {R"({"prompt": "x"})", "unknown field 'prompt'"},
      {R"({"messages": "hi"})", "field 'messages'"},
      {R"({"messages": [{"role": "user"}]})", "'content' is missing"},
      {R"({"messages": [{"role": "function", "name": "f", "content": "x"}]})", "role \"function\""},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "content[0]"},
      {R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})", "content[0]"},
      {R"({"messages": [{"role": 5, "content": "x"}]})", "'role' must be a string"},
      {R"({"messages": [{"role": "user", "content": "x", "name": 5}]})", "messages[0].name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "field 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"foo": 1}})", "\"foo\" is not"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_format": "r1"})", "field 'reasoning_format': expected"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_format": 1})", "field 'reasoning_format'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": 1})",
       "field 'parallel_tool_calls': expected true or false"},
  };
  for (const auto& [body, expected] : chat)
    EXPECT_NE(parse_error(body, server::Api::kChatCompletions).find(expected), std::string::npos)
        << body << ": " << parse_error(body, server::Api::kChatCompletions);
  // a long bad value is shortened in the message, not echoed whole
  const std::string long_value(100000, 'x');
  for (const json& body : {json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"reasoning_format", long_value}},
                           json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                {"chat_template_kwargs", {{long_value, true}}}}}) {
    const std::string error = parse_error(body.dump(), server::Api::kChatCompletions);
    EXPECT_LT(error.size(), 200u) << error.substr(0, 200);
    EXPECT_NE(error.find("..."), std::string::npos) << error.substr(0, 200);
  }
  EXPECT_NE(parse_error(R"({"prompt": "x", "n_predict": -2})", server::Api::kNativeCompletion)
                .find("field 'n_predict': must be at least 0 (or -1 for no limit), got -2"),
            std::string::npos);
  // llama-server's n_predict 0: nothing generated
  EXPECT_EQ(parse(R"({"prompt": "x", "n_predict": 0})", server::Api::kNativeCompletion).max_tokens, 0);
}

// llama-server's sampler sequence picks the order (and turns off what it leaves out); its fields for samplers and
// features this engine lacks are taken at their "off" values, as llama.cpp's web UI sends them, and refused otherwise.
TEST(ServerRequest, LlamaCppSamplerFieldsAtTheirOffValues) {
  const std::string webui = R"("temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typ_p": 1,
      "dynatemp_range": 0, "dynatemp_exponent": 1, "xtc_probability": 0, "xtc_threshold": 0.1, "repeat_last_n": 64,
      "repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0, "dry_base": 1.75,
      "dry_allowed_length": 2, "dry_penalty_last_n": -1, "samplers": ["top_k", "typ_p", "top_p", "min_p",
      "temperature"], "timings_per_token": false, "mirostat": 0, "mirostat_tau": 5, "mirostat_eta": 0.1,
      "top_n_sigma": -1, "min_keep": 0, "n_keep": 0, "id_slot": -1, "cache_prompt": true, "grammar": "")";
  for (const server::Api api : {server::Api::kChatCompletions, server::Api::kCompletions,
                                server::Api::kNativeCompletion}) {
    const std::string prompt =
        api == server::Api::kChatCompletions ? R"("messages": [{"role": "user", "content": "x"}])" : R"("prompt": "x")";
    const server::CompletionRequest r = parse("{" + prompt + ", " + webui + "}", api);
    EXPECT_TRUE(r.sampling.temperature_last);
    EXPECT_EQ(r.sampling.top_k, 40);
    EXPECT_DOUBLE_EQ(r.sampling.min_p, 0.05);
  }
  EXPECT_FALSE(parse(R"({"prompt": "x"})").sampling.temperature_last);
  // the server's sequence (--samplers) holds for requests without their own: a sampler it leaves out stays off
  // whatever value a request gives it, as in llama-server's chain; /props lists the samplers it keeps
  server::RequestDefaults d;
  d.sampling.top_k = 40;
  decode::apply_sampler_sequence({"penalties", "top_p", "temperature"}, d.sampling, "--samplers");
  EXPECT_EQ(d.sampling.top_k, 0);
  const server::CompletionRequest under =
      server::parse_completion_request(json::parse(R"({"prompt": "x", "top_k": 40, "top_p": 0.9})"),
                                       server::Api::kCompletions, d);
  EXPECT_EQ(under.sampling.top_k, 0);
  EXPECT_DOUBLE_EQ(under.sampling.top_p, 0.9);
  EXPECT_TRUE(under.sampling.temperature_last);
  EXPECT_EQ(decode::sampler_sequence(under.sampling), (std::vector<std::string>{"penalties", "top_p", "temperature"}));
  const server::CompletionRequest own = server::parse_completion_request(
      json::parse(R"({"prompt": "x", "top_k": 40, "samplers": ["temperature", "top_k"]})"), server::Api::kCompletions,
      d);
  EXPECT_EQ(own.sampling.top_k, 40);  // its own sequence names top_k
  EXPECT_FALSE(own.sampling.temperature_last);
  const server::CompletionRequest letters = parse(R"({"prompt": "x", "top_p": 0.9, "top_k": 5, "samplers": "kt"})");
  EXPECT_FALSE(letters.sampling.temperature_last);  // no top-p or min-p left for the temperature to follow
  EXPECT_DOUBLE_EQ(letters.sampling.top_p, 1.0);     // left out: off
  EXPECT_EQ(letters.sampling.top_k, 5);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "x", "typ_p": 0.9})", "field 'typ_p': typical sampling (1 = off) is not supported"},
      {R"({"prompt": "x", "mirostat": 2})", "field 'mirostat': mirostat sampling"},
      {R"({"prompt": "x", "dry_multiplier": 0.8})", "field 'dry_multiplier': DRY sampling"},
      {R"({"prompt": "x", "xtc_probability": 0.5})", "field 'xtc_probability'"},
      {R"({"prompt": "x", "id_slot": 1})", "field 'id_slot': a slot other than 0"},
      {R"({"prompt": "x", "grammar": "root ::= [a-z]"})", "field 'grammar': a grammar"},
      {R"({"prompt": "x", "timings_per_token": true})", "field 'timings_per_token'"},
      {R"({"prompt": "x", "dry_base": "x"})", "field 'dry_base': expected a number"},
      {R"({"prompt": "x", "samplers": ["top_p", "top_k", "temperature"]})", "field 'samplers': top_k, top_p and min_p"},
      {R"({"prompt": "x", "samplers": "kq"})", "field 'samplers': unknown sampler letter 'q'"},
      {R"({"prompt": "x", "samplers": [1]})", "field 'samplers[]': expected a string"},
      {R"({"prompt": "x", "samplers": []})", "field 'samplers': expected an array"},
  };
  for (const auto& [body, expected] : cases)
    EXPECT_NE(parse_error(body).find(expected), std::string::npos) << body << ": " << parse_error(body);
}

// vLLM's return_tokens_as_token_ids: on chat and /v1/completions, the server's default unless the request says.
TEST(ServerRequest, ReturnTokensAsTokenIds) {
  EXPECT_FALSE(parse(R"({"prompt": "x"})").tokens_as_ids);
  EXPECT_TRUE(parse(R"({"prompt": "x", "return_tokens_as_token_ids": true})").tokens_as_ids);
  EXPECT_TRUE(parse(R"({"messages": [{"role": "user", "content": "x"}], "return_tokens_as_token_ids": true})",
                    server::Api::kChatCompletions).tokens_as_ids);
  server::RequestDefaults defaults;
  defaults.tokens_as_ids = true;
  EXPECT_TRUE(server::parse_completion_request(json::parse(R"({"prompt": "x"})"), server::Api::kCompletions, defaults)
                  .tokens_as_ids);
  EXPECT_FALSE(server::parse_completion_request(json::parse(R"({"prompt": "x", "return_tokens_as_token_ids": false})"),
                                                server::Api::kCompletions, defaults).tokens_as_ids);
  EXPECT_NE(parse_error(R"({"prompt": "x", "return_tokens_as_token_ids": 1})")
                .find("field 'return_tokens_as_token_ids': expected true or false"), std::string::npos);
  EXPECT_FALSE(server::parse_completion_request(json::parse(R"({"prompt": "x"})"), server::Api::kNativeCompletion,
                                                defaults).tokens_as_ids);
  EXPECT_NE(parse_error(R"({"prompt": "x", "return_tokens_as_token_ids": true})", server::Api::kNativeCompletion)
                .find("unknown field 'return_tokens_as_token_ids' for /completion"), std::string::npos);
}

// /v1/completions' echo (the prompt's text and, with logprobs, its tokens' own), with max_tokens 0 to score the
// prompt alone, as lm-evaluation-harness's loglikelihood sends it; the other routes refuse it by name.
TEST(ServerRequest, ToolsAndToolChoice) {
  const auto chat = server::Api::kChatCompletions;
  auto parse_ordered = [&](const std::string& body) {
    return server::parse_completion_request(json::parse(body), chat, {}, server::parse_ordered_fields(body));
  };
  // the tools as the template writes them: the client's key order, Python's separators
  const std::string tool = R"({"type":"function","function":{"name":"f","parameters":{"type":"object",)"
                           R"("properties":{"z":{"type":"number"},"a":{"type":"string"}}},"description":"d"}})";
  server::CompletionRequest r =
      parse_ordered(R"({"messages":[{"role":"user","content":"hi"}],"tools":[)" + tool + "]}");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0], R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", )"
                        R"("properties": {"z": {"type": "number"}, "a": {"type": "string"}}}, "description": "d"}})");
  EXPECT_TRUE(r.tool_calls);
  r = parse_ordered(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"none","tools":[)" + tool + "]}");
  EXPECT_EQ(r.tools.size(), 1u) << "\"none\" keeps the tools in the prompt";
  EXPECT_FALSE(r.tool_calls);
  r = parse_ordered(R"({"messages":[{"role":"user","content":"hi"}],"tools":[],"tool_choice":"auto",)"
                    R"("parallel_tool_calls":true})");
  EXPECT_TRUE(r.tools.empty());
  EXPECT_FALSE(r.tool_calls);
  // a conversation with a call and its result; object arguments keep their order
  r = parse_ordered(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":)"
                    R"([{"id":"call_1","type":"function","function":{"name":"f","arguments":{"z":1,"a":[2]}}}]},)"
                    R"({"role":"tool","tool_call_id":"call_1","name":"f","content":[{"type":"text","text":"42"}]}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"z": 1, "a": [2]})");
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].content, "42");

  // parse_ordered_fields keeps the tools and messages alone, and refuses an object there of more than 4096 keys
  // (ordered objects look keys up linearly); a large logit_bias is skipped, not stored
  auto keys = [](int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += fmt::format("{}\"{}\": 1", i ? "," : "", i);
    return text;
  };
  const nlohmann::ordered_json ordered = server::parse_ordered_fields(
      R"({"logit_bias": {)" + keys(5000) + R"(}, "tools": [], "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(ordered, nlohmann::ordered_json::parse(R"({"tools": [], "messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_NO_THROW(server::parse_ordered_fields(R"({"tools": [{"p": {)" + keys(4096) + "}}]}"));
  try {
    server::parse_ordered_fields(R"({"tools": [{"p": {)" + keys(4097) + "}}]}");
    ADD_FAILURE() << "an object of 4097 keys was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4096 keys"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(server::parse_ordered_fields("[1").empty()) << "parse_body reports a body that is not an object";

  const std::string msgs = R"({"messages":[{"role":"user","content":"hi"}],)";
  EXPECT_NE(parse_error(msgs + R"("tool_choice":"required"})", chat).find("constrained decoding"), std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("tool_choice":{"type":"function","function":{"name":"f"}}})", chat)
                .find("field 'tool_choice'"), std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("tool_choice":"any"})", chat).find("expected \"auto\" or \"none\""),
            std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("tools":[{"type":"custom","name":"x"}]})", chat).find("tools[0]"), std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("tools":[{"type":"function","function":{"description":"d"}}]})", chat)
                .find("tools[0].function.name"), std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]})", chat)
                .find("parameters"), std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("tools":{}})", chat).find("field 'tools'"), std::string::npos);
  EXPECT_NE(parse_error(msgs + R"("functions":[{"name":"f"}]})", chat).find("functions"), std::string::npos);
  EXPECT_NE(parse_error(R"({"prompt":"x","tools":[]})").find("unknown field 'tools'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":)"
                        R"([{"function":{"name":"f"}}]}]})", chat).find("arguments"), std::string::npos);
}

TEST(ServerRequest, EchoIsCompletionsOwnAndAllowsNoOutput) {
  EXPECT_FALSE(parse(R"({"prompt": "x"})").echo);
  EXPECT_FALSE(parse(R"({"prompt": "x", "echo": false})").echo);
  EXPECT_FALSE(parse(R"({"prompt": "x", "echo": null})").echo);
  const server::CompletionRequest r = parse(R"({"prompt": [[1, 2, 3]], "max_tokens": 1, "logprobs": 1, "echo": true,
                                                "temperature": 0, "seed": 1234})");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_EQ(parse(R"({"max_tokens": 0, "prompt": "x", "echo": true})").max_tokens, 0) << "either order";
  EXPECT_EQ(parse(R"({"prompt": "x", "echo": true, "max_tokens": 0, "stream": true})").max_tokens, 0);
  EXPECT_NE(parse_error(R"({"prompt": "x", "echo": true})", server::Api::kNativeCompletion)
                .find("field 'echo': echoing the prompt on /completion (/v1/completions does) is not supported"),
            std::string::npos);
  EXPECT_EQ(parse(R"({"prompt": "x", "echo": false})", server::Api::kNativeCompletion).echo, false);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})",
                        server::Api::kChatCompletions).find("unknown field 'echo'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})",
                        server::Api::kChatCompletions).find("field 'max_tokens': must be at least 1, got 0"),
            std::string::npos);
}

// ---------------------------------------------------------------- the server process

#ifdef SPECPRESS_HAVE_SERVER

// `specpress serve --port 0 ARGS` in a child process; waits until it is ready (or has exited).
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args) : err_path_(scratch_.path / "stderr") {
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* err = std::freopen(err_path_.c_str(), "w", stderr);
      (void)err;
      ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // as run_specpress: the CPU suites' servers run on the CPU
      std::vector<std::string> all = {SPECPRESS_BINARY, "serve"};
      if (std::find(args.begin(), args.end(), "--port") == args.end()) all.insert(all.end(), {"--port", "0"});
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string log = stderr_text();
      std::smatch m;
      if (port_ == 0 && std::regex_search(log, m, listening)) port_ = std::stoi(m[1]);
      if (log.find(" ready (") != std::string::npos) return;
      if (exited()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() {
    if (!exited()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string stderr_text() const {
    std::ifstream in(err_path_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bool exited() {
    if (status_ >= 0) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_ >= 0;
  }
  // Sends `sig` and waits up to `seconds` for the exit; returns the exit status (-1: still running).
  int stop(int sig, int seconds) {
    if (exited()) return status_;
    ::kill(pid_, sig);
    for (int i = 0; i < seconds * 20 && !exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return status_;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);
    return c;
  }

 private:
  ScratchDir scratch_{"serve"};
  std::string err_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = -1;
};

json post(const ServerProcess& s, const std::string& path, const json& body, int expected_status = 200) {
  auto res = s.client().Post(path.c_str(), body.dump(), "application/json");
  if (!res) return json{{"transport_error", httplib::to_string(res.error())}};
  EXPECT_EQ(res->status, expected_status) << path << " " << body.dump() << " -> " << res->body;
  return json::parse(res->body, nullptr, /*allow_exceptions=*/false);
}

// The JSON payloads of an OpenAI-style SSE body (data lines only), in order; "[DONE]" as a string.
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> events;
  for (auto& [name, data] : sse_frames<json>(body)) {
    EXPECT_EQ(name, "") << data;
    events.push_back(std::move(data));
  }
  return events;
}

std::vector<json> post_stream(const ServerProcess& s, const std::string& path, json body) {
  body["stream"] = true;
  auto res = s.client().Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << "no response";
  if (!res) return {};
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  return sse_events(res->body);
}

double metric(const ServerProcess& s, const std::string& name) {
  auto res = s.client().Get("/metrics");
  if (!res) return -1;
  std::smatch m;
  const std::regex line("\nspecpress:" + name + " ([0-9.e+-]+)");
  return std::regex_search(res->body, m, line) ? std::stod(m[1]) : -1;
}

// The per-position acceptance counters of /metrics (position 1 first).
std::vector<double> accepted_per_position(const ServerProcess& s) {
  std::vector<double> values;
  auto res = s.client().Get("/metrics");
  if (!res) return values;
  const std::regex line("\nspecpress:draft_accepted_per_position_total\\{position=\"([0-9]+)\"\\} ([0-9.e+-]+)");
  for (auto it = std::sregex_iterator(res->body.begin(), res->body.end(), line); it != std::sregex_iterator(); ++it) {
    EXPECT_EQ(std::stoul((*it)[1]), values.size() + 1) << "positions out of order";
    values.push_back(std::stod((*it)[2]));
  }
  return values;
}

std::string id_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t t : ids) s += std::to_string(t) + " ";
  return s;
}

// A raw TCP connection to the server (so that a test can send part of a request, or read part of an answer and
// hang up); -1 where it could not connect.
int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A raw connection that has sent `POST path` with the JSON `body` over HTTP `version`; -1 on failure.
int send_raw_post(int port, const std::string& path, const json& body, const std::string& version = "HTTP/1.1") {
  const std::string text = body.dump();
  const std::string request = "POST " + path + " " + version + "\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "Content-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) +
                              "\r\n\r\n" + text;
  const int fd = connect_raw(port);
  if (fd >= 0 && ::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends on a raw connection until it closes it (empty for fd -1); closes fd.
// One HTTP response read from `fd` (its head, then Content-Length bytes of body), then closed: what arrived within
// SO_RCVTIMEO of each read.
std::string read_one_response(int fd) {
  std::string response;
  char buf[4096];
  for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) > 0;) {
    response.append(buf, static_cast<size_t>(got));
    const size_t head = response.find("\r\n\r\n");
    if (head == std::string::npos) continue;
    std::smatch m;
    const std::string headers = response.substr(0, head);
    const size_t length = std::regex_search(headers, m, std::regex("Content-Length: (\\d+)", std::regex::icase))
                              ? std::stoul(m[1]) : 0;
    if (response.size() >= head + 4 + length) break;
  }
  ::close(fd);
  return response;
}

std::string read_until_closed(int fd) {
  std::string response;
  if (fd < 0) return response;
  char buf[4096];
  for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) > 0;) response.append(buf, static_cast<size_t>(got));
  ::close(fd);
  return response;
}

// The load's warm-up (llama-server's --warmup, on by default): named with its time in the ready line, and counted
// nowhere in /metrics; --no-warmup leaves it out.
TEST(ServerHttp, WarmsUpAtLoadUnlessNoWarmup) {
  SPECPRESS_REQUIRE_SHARED();
  {
    ServerProcess s({"-m", golden_dir() + "/target", "-md", golden_dir() + "/draft"});
    ASSERT_GT(s.port(), 0) << s.stderr_text();
    EXPECT_TRUE(std::regex_search(s.stderr_text(), std::regex(R"( ready \(DFlash, block \d+, context \d+, reference )"
                                                               R"(path, warmed up in \d+ ms\)\n)")))
        << s.stderr_text();
    EXPECT_EQ(metric(s, "requests_total"), 0);
    EXPECT_EQ(metric(s, "verify_steps_total"), 0);
    EXPECT_EQ(metric(s, "tokens_predicted_total"), 0);
  }
  ServerProcess s({"-m", golden_dir() + "/target", "--no-warmup"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  EXPECT_NE(s.stderr_text().find(" ready (plain decoding, context 1024, reference path)\n"), std::string::npos)
      << s.stderr_text();
}

// The golden pair has no tokenizer: prompts are token ids and the text is the ids, as `generate` prints them.
TEST(ServerHttp, GoldenPairOutputsEqualTheReferenceFixtures) {
  SPECPRESS_REQUIRE_SHARED();
  ServerProcess s({"-m", golden_dir() + "/target", "-md", golden_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  auto health = s.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  for (const auto& run : golden_runs()) {
    json r = post(s, "/v1/completions", {{"prompt", run.prompt}, {"max_tokens", run.max_new_tokens}});
    EXPECT_EQ(r["choices"][0]["text"], id_text(run.dflash_output));
    EXPECT_EQ(r["usage"]["completion_tokens"], run.dflash_output.size());
    EXPECT_EQ(r["usage"]["prompt_tokens"], run.prompt.size());
    EXPECT_EQ(r["choices"][0]["finish_reason"], run.dflash_output.back() == 1001 ? "stop" : "length");
    int64_t accepted = 0;
    for (int64_t a : run.acceptance_lengths) accepted += a - 1;
    EXPECT_EQ(r["timings"]["draft_n_accepted"], accepted);
    EXPECT_EQ(r["timings"]["draft_n"], 7 * static_cast<int64_t>(run.acceptance_lengths.size()));
  }
  // a chat request needs the tokenizer this directory lacks
  json err = post(s, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, 400);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("no tokenizer.json"), std::string::npos) << err;
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

std::string demo_dir() { return std::string(SPECPRESS_SOURCE_DIR) + "/demo"; }

#define SPECPRESS_REQUIRE_DEMO_TOKENIZER()                                                               \
  do {                                                                                                   \
    if (!std::filesystem::exists(demo_dir() + "/target/tokenizer.json"))                                 \
      GTEST_SKIP() << demo_dir() << "/target/tokenizer.json missing (scripts/setup.sh fetches it)";      \
  } while (0)

const char* kQuestion = "Tom has 3 apples and buys 5 more. How many apples does he have?";

// The demo pair (real Qwen3 tokenizer): chat and completions, whole and streamed, against `specpress generate`.
TEST(ServerHttp, DemoPairChatEqualsGenerateWholeAndStreamed) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  const std::string pair = "-m " + demo_dir() + "/target -md " + demo_dir() + "/draft";
  CommandResult cli = run_specpress("generate " + pair + " -p \"" + kQuestion + "\" --chat -n 48");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  ASSERT_FALSE(cli.out.empty());
  const std::string expected = cli.out.substr(0, cli.out.size() - 1);  // generate ends with a newline

  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--alias", "demo"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json chat = {{"model", "whatever"}, {"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"max_tokens", 48}};
  json whole = post(s, "/v1/chat/completions", chat);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["model"], "whatever");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], expected);
  EXPECT_GT(whole["timings"]["tau"].get<double>(), 1.0);

  json with_usage = chat;
  with_usage["stream_options"] = {{"include_usage", true}};
  std::vector<json> events = post_stream(s, "/v1/chat/completions", with_usage);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json& usage = events[events.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], whole["usage"]);
  const json& last = events[events.size() - 3];
  EXPECT_EQ(last["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(last["timings"]["draft_n_accepted"], whole["timings"]["draft_n_accepted"]);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 0; i + 3 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(events[i]["id"], events[0]["id"]);
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(events[i].contains("usage") && events[i]["usage"].is_null());
    streamed += events[i]["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(streamed, expected);
  EXPECT_GT(events.size(), 5u) << "text arrives in several chunks, as blocks are committed";

  // /v1/models and /props name the served model
  json models = json::parse(s.client().Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "demo");
  EXPECT_EQ(models["data"][0]["meta"]["block_size"], 16);
  // GET /v1/models/{id} (the SDKs' models.retrieve): the same object under the served alias, 404 for another
  EXPECT_EQ(json::parse(s.client().Get("/v1/models/demo")->body), models["data"][0]);
  auto other = s.client().Get("/v1/models/Qwen/Qwen3-8B");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_NE(other->body.find("model 'Qwen/Qwen3-8B' not found: this server serves 'demo'"), std::string::npos)
      << other->body;
  // without --seed, a request's seed is drawn fresh: /props says so as llama-server does (4294967295)
  EXPECT_EQ(json::parse(s.client().Get("/props")->body)["default_generation_settings"]["params"]["seed"], 4294967295u);
  for (const char* fresh : {"-1", "4294967295"}) {  // so do both "random" values of --seed; others are kept
    ServerProcess seeded({"-m", demo_dir() + "/target", "--no-warmup", "-s", fresh});
    ASSERT_GT(seeded.port(), 0) << seeded.stderr_text();
    EXPECT_EQ(json::parse(seeded.client().Get("/props")->body)["default_generation_settings"]["params"]["seed"],
              4294967295u);
  }
  ServerProcess fixed({"-m", demo_dir() + "/target", "--no-warmup", "-s", "18446744073709551615"});
  ASSERT_GT(fixed.port(), 0) << fixed.stderr_text();
  EXPECT_EQ(json::parse(fixed.client().Get("/props")->body)["default_generation_settings"]["params"]["seed"],
            18446744073709551615u);
  EXPECT_EQ(json::parse(s.client().Get("/props")->body)["build_info"].get<std::string>().rfind("specpress ", 0), 0u);
  // /apply-template renders what chat requests are tokenized from; /tokenize and /detokenize round-trip it
  json templ = post(s, "/apply-template", {{"messages", chat["messages"]}});
  EXPECT_NE(templ["prompt"].get<std::string>().find("<|im_start|>assistant\n<think>\n\n</think>\n\n"), std::string::npos);
  json tokens = post(s, "/tokenize", {{"content", templ["prompt"]}});
  EXPECT_EQ(tokens["tokens"].size(), whole["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_EQ(post(s, "/detokenize", {{"tokens", tokens["tokens"]}})["content"], templ["prompt"]);
  // with_pieces: a piece is text where its bytes are whole UTF-8, else its bytes (llama-server's form), so that the
  // pieces of characters split across tokens still add up to the content
  const std::string split_chars = "a \xF0\x9F\xA6\x99\xF0\x9D\x84\x9E\xEA\x99\xAE";  // a, 🦙, 𝄞, ꙮ
  std::string rebuilt;
  size_t byte_pieces = 0;
  const json pieces = post(s, "/tokenize", {{"content", split_chars}, {"with_pieces", true}});
  for (const json& t : pieces["tokens"]) {
    if (t["piece"].is_string()) rebuilt += t["piece"].get<std::string>();
    for (const json& b : t["piece"].is_array() ? t["piece"] : json::array()) rebuilt += static_cast<char>(b.get<int>());
    byte_pieces += t["piece"].is_array() ? 1 : 0;
  }
  EXPECT_EQ(rebuilt, split_chars);
  EXPECT_GT(byte_pieces, 0u) << "some piece is part of a character";
  // the model's padding ids past the tokenizer's decode to nothing, as in a completion's text
  json padded = tokens["tokens"];
  padded.push_back(151700);
  EXPECT_EQ(post(s, "/detokenize", {{"tokens", padded}})["content"], templ["prompt"]);
  EXPECT_EQ(metric(s, "requests_total"), 2);
  const std::regex build_info(R"(\nspecpress:build_info\{version="[0-9.]+",commit="[^"]+",torch="[^"]+",)"
                              R"(cuda_runtime="[^"]*"\} 1\n)");
  EXPECT_TRUE(std::regex_search(s.client().Get("/metrics")->body, build_info)) << "the build as a gauge's labels";
  // the DFlash counters: verify steps and per-position acceptance add up to the responses' draft counts
  const double steps = metric(s, "verify_steps_total");
  EXPECT_EQ(steps, 2 * whole["timings"]["draft_n"].get<double>() / 15);  // two requests, 15 drafted tokens a step
  const std::vector<double> per_position = accepted_per_position(s);
  ASSERT_EQ(per_position.size(), 15u);
  double accepted = 0;
  for (size_t i = 0; i < per_position.size(); ++i) {
    accepted += per_position[i];
    EXPECT_LE(per_position[i], i == 0 ? steps : per_position[i - 1]) << "position " << i + 1;
  }
  EXPECT_EQ(accepted, metric(s, "draft_tokens_accepted_total"));
  EXPECT_EQ(accepted, 2 * whole["timings"]["draft_n_accepted"].get<double>());
  EXPECT_GT(per_position[0], 0);
  // llama-server's penalties: the request's fields do what generate's flags do (the demo target's loop is broken)
  EXPECT_EQ(json::parse(s.client().Get("/props")->body)["default_generation_settings"]["params"]["repeat_last_n"], 64);
  CommandResult penalized =
      run_specpress("generate " + pair + " -p \"" + kQuestion + "\" --chat -n 48 --repeat-penalty 1.3 "
                    "--presence-penalty 0.5 --frequency-penalty 0.1 --repeat-last-n 32");
  ASSERT_EQ(penalized.exit_code, 0) << penalized.err;
  json with_penalties = chat;
  with_penalties.update({{"repeat_penalty", 1.3}, {"presence_penalty", 0.5}, {"frequency_penalty", 0.1},
                         {"repeat_last_n", 32}});
  const std::string penalized_text =
      post(s, "/v1/chat/completions", with_penalties)["choices"][0]["message"]["content"];
  EXPECT_EQ(penalized_text, penalized.out.substr(0, penalized.out.size() - 1));
  EXPECT_NE(penalized_text, expected);
  // logit_bias by text (the server tokenizes it) does what generate's --logit-bias with its ids does
  const json banned_ids = post(s, "/tokenize", {{"content", " apples"}})["tokens"];
  ASSERT_FALSE(banned_ids.empty());
  std::string flags;
  for (const json& id : banned_ids) flags += " --logit-bias " + std::to_string(id.get<int64_t>()) + "-inf";
  CommandResult biased = run_specpress("generate " + pair + " -p \"" + kQuestion + "\" --chat -n 48" + flags);
  ASSERT_EQ(biased.exit_code, 0) << biased.err;
  json with_bias = chat;
  with_bias["logit_bias"] = {{" apples", false}};
  const std::string biased_text = post(s, "/v1/chat/completions", with_bias)["choices"][0]["message"]["content"];
  EXPECT_EQ(biased_text, biased.out.substr(0, biased.out.size() - 1));
  EXPECT_EQ(biased_text.find(" apples"), std::string::npos) << biased_text;
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// With thinking on, the demo target (trained on non-thinking turns) writes Qwen3's empty think block itself: the
// default reasoning format takes it out of the answer, "none" and "deepseek-legacy" leave it in.
TEST(ServerHttp, ThinkBlockIsSplitFromTheAnswerByTheReasoningFormat) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--think"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  json chat = {{"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"max_tokens", 32}};
  json none = chat;
  none["reasoning_format"] = "none";
  const std::string raw = post(s, "/v1/chat/completions", none)["choices"][0]["message"]["content"];
  const std::string block = "<think>\n\n</think>\n\n";
  ASSERT_EQ(raw.rfind(block, 0), 0u) << raw;
  ASSERT_GT(raw.size(), block.size());
  json whole = post(s, "/v1/chat/completions", chat);
  EXPECT_EQ(whole["choices"][0]["message"]["content"], raw.substr(block.size()));
  EXPECT_FALSE(whole["choices"][0]["message"].contains("reasoning_content")) << "empty reasoning is left out";
  EXPECT_EQ(whole["usage"]["completion_tokens"], 32);  // the block's tokens count
  std::string streamed;
  for (const json& e : post_stream(s, "/v1/chat/completions", chat)) {
    if (e == "[DONE]") continue;
    const json& delta = e["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("reasoning_content")) << e;
    streamed += delta.value("content", "");
  }
  EXPECT_EQ(streamed, raw.substr(block.size()));
  json legacy = chat;
  legacy["reasoning_format"] = "deepseek-legacy";
  EXPECT_EQ(post(s, "/v1/chat/completions", legacy)["choices"][0]["message"]["content"], raw);
  // Sampled replies with text in the block: seed 37 (16 tokens) is cut off inside it, seed 102 (48 tokens) closes it
  // and answers, on the CPU build (found by trying seeds). Over HTTP, whole and streamed, the split is ReasoningSplit's
  // over the reply as generated; deepseek-legacy keeps that reply as the content and streams no reasoning deltas.
  bool cut_off_seen = false, answer_seen = false;
  for (auto [seed, max_tokens] : {std::pair{37, 16}, std::pair{102, 48}}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    json sampled = chat;
    sampled.update({{"temperature", 1.0}, {"top_k", 40}, {"max_tokens", max_tokens}, {"seed", seed}});
    json unsplit = sampled;
    unsplit["reasoning_format"] = "none";
    const std::string sampled_raw = post(s, "/v1/chat/completions", unsplit)["choices"][0]["message"]["content"];
    server::ReasoningSplit split(server::ReasoningFormat::kDeepseek);
    server::ReplyParts parts = split.push(sampled_raw), rest = split.flush();
    parts.reasoning += rest.reasoning, parts.content += rest.content;
    cut_off_seen |= !parts.reasoning.empty() && parts.content.empty();
    answer_seen |= !parts.reasoning.empty() && !parts.content.empty();
    json message = post(s, "/v1/chat/completions", sampled)["choices"][0]["message"];
    EXPECT_EQ(message.value("reasoning_content", ""), parts.reasoning) << sampled_raw;
    EXPECT_EQ(message["content"], parts.content) << sampled_raw;
    std::string streamed_reasoning, streamed_content;
    for (const json& e : post_stream(s, "/v1/chat/completions", sampled)) {
      if (e == "[DONE]") continue;
      const json& delta = e["choices"][0]["delta"];
      if (delta.contains("reasoning_content")) EXPECT_EQ(streamed_content, "") << "reasoning after content";
      streamed_reasoning += delta.value("reasoning_content", "");
      streamed_content += delta.value("content", "");
    }
    EXPECT_EQ(streamed_reasoning, parts.reasoning);
    EXPECT_EQ(streamed_content, parts.content);
    sampled["reasoning_format"] = "deepseek-legacy";
    message = post(s, "/v1/chat/completions", sampled)["choices"][0]["message"];
    EXPECT_EQ(message["content"], sampled_raw);
    EXPECT_EQ(message.value("reasoning_content", ""), parts.reasoning);
    streamed_content.clear();
    for (const json& e : post_stream(s, "/v1/chat/completions", sampled)) {
      if (e == "[DONE]") continue;
      EXPECT_FALSE(e["choices"][0]["delta"].contains("reasoning_content")) << e;
      streamed_content += e["choices"][0]["delta"].value("content", "");
    }
    EXPECT_EQ(streamed_content, sampled_raw);
  }
  EXPECT_TRUE(cut_off_seen && answer_seen) << "the seeds no longer give both kinds of reply on this build: pick others";

  // completions return the reply as generated
  json completion = post(s, "/v1/completions", {{"prompt", post(s, "/apply-template", chat)["prompt"]}, {"max_tokens", 32}});
  EXPECT_EQ(completion["choices"][0]["text"], raw);
  EXPECT_EQ(json::parse(s.client().Get("/props")->body)["default_generation_settings"]["params"]["reasoning_format"],
            "deepseek");
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();

  ServerProcess off({"-m", demo_dir() + "/target", "--chat-template-kwargs", "{\"enable_thinking\": true}",
                     "--reasoning-format", "none", "--seed", "7"});
  ASSERT_GT(off.port(), 0) << off.stderr_text();
  EXPECT_EQ(post(off, "/v1/chat/completions", chat)["choices"][0]["message"]["content"], raw);
  const json off_params = json::parse(off.client().Get("/props")->body)["default_generation_settings"]["params"];
  EXPECT_EQ(off_params["enable_thinking"], true);
  EXPECT_EQ(off_params["seed"], 7) << "--seed's value";
  EXPECT_EQ(off.stop(SIGTERM, 30), 0) << off.stderr_text();
  // llama-server's --reasoning-budget -1 turns thinking on as --think does
  ServerProcess budget({"-m", demo_dir() + "/target", "--reasoning-budget", "-1", "--reasoning-format", "none"});
  ASSERT_GT(budget.port(), 0) << budget.stderr_text();
  EXPECT_EQ(post(budget, "/v1/chat/completions", chat)["choices"][0]["message"]["content"], raw);
  EXPECT_EQ(budget.stop(SIGTERM, 30), 0) << budget.stderr_text();
}

// A thinking budget over HTTP (--reasoning-budget N, a chat's thinking_token_budget): the demo model closes its block
// at once, so </think> is banned by logit_bias; the reply then thinks for N tokens, "\n</think>\n\n" is forced and
// the answer follows, as `generate --reasoning-budget N` writes it, whole and streamed, split by the reasoning
// format; refused with logprobs; nothing to cap with thinking off.
TEST(ServerHttp, ThinkingBudgetCutsTheBlockAsGenerateDoes) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  const std::string pair = "-m " + demo_dir() + "/target -md " + demo_dir() + "/draft";
  auto generated = [&](int budget) {
    const CommandResult cli = run_specpress("generate " + pair + " -p \"" + kQuestion + "\" --chat -n 32 --json " +
                                            "--logit-bias 151668-inf --reasoning-budget " + std::to_string(budget));
    EXPECT_EQ(cli.exit_code, 0) << cli.err;
    return json::parse(cli.out)["text"].get<std::string>();
  };
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--reasoning-budget", "8"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  json chat = {{"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"max_tokens", 32},
               {"logit_bias", {{"151668", -100}}}, {"reasoning_format", "none"}};
  for (int budget : {8, 5}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    if (budget != 8) chat["thinking_token_budget"] = budget;  // the request's replaces the server's
    const std::string expected = generated(budget);
    ASSERT_NE(expected.find("\n</think>\n\n"), std::string::npos) << expected;
    const json whole = post(s, "/v1/chat/completions", chat);
    EXPECT_EQ(whole["choices"][0]["message"]["content"], expected);
    EXPECT_EQ(whole["usage"]["completion_tokens"], 32);
    json split = chat;
    split["reasoning_format"] = "deepseek";
    std::string reasoning, content;
    for (const json& e : post_stream(s, "/v1/chat/completions", split)) {
      if (e == "[DONE]") continue;
      reasoning += e["choices"][0]["delta"].value("reasoning_content", "");
      content += e["choices"][0]["delta"].value("content", "");
    }
    server::ReasoningSplit reference(server::ReasoningFormat::kDeepseek);
    server::ReplyParts parts = reference.push(expected), rest = reference.flush();
    EXPECT_EQ(reasoning, parts.reasoning + rest.reasoning);
    EXPECT_EQ(content, parts.content + rest.content);
    EXPECT_FALSE(reasoning.empty() || content.empty()) << "both parts of the reply";
  }
  json logprobs = chat;
  logprobs["logprobs"] = true;
  const httplib::Result refused = s.client().Post("/v1/chat/completions", logprobs.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("thinking_token_budget"), std::string::npos) << refused->body;
  logprobs.erase("thinking_token_budget");  // the server's cap: the message names its flag, not a field not sent
  const httplib::Result by_default = s.client().Post("/v1/chat/completions", logprobs.dump(), "application/json");
  ASSERT_TRUE(by_default);
  EXPECT_EQ(by_default->status, 400);
  EXPECT_NE(by_default->body.find("the server's --reasoning-budget"), std::string::npos) << by_default->body;
  // thinking off: no block to cap (the template closes it in the prompt), the reply as `generate` writes it unthinking
  json off = chat;
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  const CommandResult unthinking = run_specpress("generate " + pair + " -p \"" + kQuestion + "\" --chat -n 32 --json " +
                                                 "--logit-bias 151668-inf");
  ASSERT_EQ(unthinking.exit_code, 0) << unthinking.err;
  EXPECT_EQ(post(s, "/v1/chat/completions", off)["choices"][0]["message"]["content"],
            json::parse(unthinking.out)["text"]);
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// n choices, one after another: choice i is the reply a request with seed + i gets alone, whole and streamed (each
// chunk naming its choice; a role chunk and a finish chunk for each), usage over all; greedy choices are alike;
// /v1/completions' choices carry their own logprobs.
TEST(ServerHttp, SeveralChoicesAreTheRepliesOfSuccessiveSeeds) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  json chat = {{"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"max_tokens", 24}, {"temperature", 1.0},
               {"seed", 5}};
  std::vector<std::string> alone;
  int64_t tokens = 0, prompt_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    json one = chat;
    one["seed"] = 5 + i;
    const json reply = post(s, "/v1/chat/completions", one);
    alone.push_back(reply["choices"][0]["message"]["content"]);
    tokens += reply["usage"]["completion_tokens"].get<int64_t>();
    prompt_tokens = reply["usage"]["prompt_tokens"];
  }
  ASSERT_TRUE(alone[0] != alone[1] && alone[1] != alone[2] && alone[0] != alone[2])
      << "the seeds should give three different replies";
  chat["n"] = 3;
  const json whole = post(s, "/v1/chat/completions", chat);
  ASSERT_EQ(whole["choices"].size(), 3u) << whole;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(whole["choices"][i]["index"], i);
    EXPECT_EQ(whole["choices"][i]["message"]["content"], alone[static_cast<size_t>(i)]) << "choice " << i;
    EXPECT_TRUE(whole["choices"][i]["finish_reason"].is_string());
  }
  EXPECT_EQ(whole["usage"]["completion_tokens"], tokens);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], prompt_tokens) << "the prompt once";
  EXPECT_EQ(whole["timings"]["prompt_n"], 3 * prompt_tokens) << "timings: the work, a prefill a choice";
  EXPECT_EQ(whole["timings"]["predicted_n"], tokens);
  json streamed_request = chat;
  streamed_request["stream_options"] = {{"include_usage", true}};
  std::vector<std::string> streamed(3);
  std::vector<int> roles(3, 0), finishes(3, 0);
  int64_t last_index = 0;
  const std::vector<json> events = post_stream(s, "/v1/chat/completions", streamed_request);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[events.size() - 2]["usage"]["completion_tokens"], tokens);
  EXPECT_EQ(events[events.size() - 2]["usage"]["prompt_tokens"], prompt_tokens);
  for (const json& e : events) {
    if (e == "[DONE]") continue;
    ASSERT_TRUE(e.contains("choices")) << e;
    if (e["choices"].empty()) continue;
    const int64_t i = e["choices"][0]["index"];
    ASSERT_TRUE(i >= 0 && i < 3) << e;
    EXPECT_GE(i, last_index) << "choices one after another";
    last_index = i;
    const json& delta = e["choices"][0]["delta"];
    roles[static_cast<size_t>(i)] += delta.contains("role");
    finishes[static_cast<size_t>(i)] += !e["choices"][0]["finish_reason"].is_null();
    streamed[static_cast<size_t>(i)] += delta.value("content", "");
  }
  EXPECT_EQ(streamed, alone);
  EXPECT_EQ(roles, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(finishes, (std::vector<int>{1, 1, 1}));
  // greedy: alike
  json greedy = chat;
  greedy["temperature"] = 0;
  greedy["n"] = 2;
  const json pair = post(s, "/v1/chat/completions", greedy);
  ASSERT_EQ(pair["choices"].size(), 2u);
  EXPECT_EQ(pair["choices"][0]["message"], pair["choices"][1]["message"]);
  // completions: each choice its own text and logprobs, as seeds 9 and 10 give them alone
  const json sampled = {{"prompt", kQuestion}, {"max_tokens", 8}, {"temperature", 1.0}, {"logprobs", 1}};
  json two = sampled;
  two.update({{"n", 2}, {"seed", 9}});
  const json completion = post(s, "/v1/completions", two);
  ASSERT_EQ(completion["choices"].size(), 2u) << completion;
  for (int i = 0; i < 2; ++i) {
    const json& choice = completion["choices"][i];
    EXPECT_EQ(choice["index"], i);
    json one = sampled;
    one["seed"] = 9 + i;
    const json single = post(s, "/v1/completions", one)["choices"][0];
    EXPECT_EQ(choice["text"], single["text"]) << "choice " << i;
    EXPECT_EQ(choice["logprobs"], single["logprobs"]) << "choice " << i;
  }
  EXPECT_NE(completion["choices"][0]["text"], completion["choices"][1]["text"]);
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

TEST(ServerHttp, ChatToolsEnterThePromptAndToolCallBlocksLeaveTheReply) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json tool = {{"type", "function"},
                     {"function",
                      {{"name", "get_weather"},
                       {"description", "Weather, \"now\""},
                       {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}};
  json chat = {{"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"tools", {tool}}, {"max_tokens", 48}};
  // the prompt: the template's tools block with the tool as its tojson writes it (the body's key order)
  const std::string prompt = post(s, "/apply-template", chat)["prompt"];
  EXPECT_EQ(prompt, tok::render_qwen3_chat({{"user", kQuestion}}, true, false,
                                           {tok::python_json(nlohmann::ordered_json(tool))}));
  EXPECT_NE(prompt.find("<tools>\n" R"({"function": {"description": "Weather, \"now\"", "name": "get_weather", )"),
            std::string::npos) << prompt;
  // a conversation with a call and its result renders as the library renders it
  json turns = chat;
  turns["messages"].push_back({{"role", "assistant"},
                               {"content", nullptr},
                               {"tool_calls", {{{"id", "call_1"},
                                                {"type", "function"},
                                                {"function", {{"name", "get_weather"},
                                                              {"arguments", "{\"city\": \"Oslo\"}"}}}}}}});
  turns["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "-3 C"}});
  tok::ChatMessage call{"assistant", ""};
  call.tool_calls = {{"get_weather", "{\"city\": \"Oslo\"}"}};
  EXPECT_EQ(post(s, "/apply-template", turns)["prompt"],
            tok::render_qwen3_chat({{"user", kQuestion}, call, {"tool", "-3 C"}}, true, false,
                                   {tok::python_json(nlohmann::ordered_json(tool))}));
  EXPECT_EQ(post(s, "/v1/chat/completions", turns)["usage"]["prompt_tokens"],
            post(s, "/tokenize", {{"content", post(s, "/apply-template", turns)["prompt"]}})["tokens"].size());

  // Replies with the tool-call tags in them (sampled, the tags' logits raised): whole and streamed, the reply's text
  // split as ToolCallSplit splits the reply as generated (tool_choice "none": the same prompt, nothing taken out)
  bool tags_seen = false;
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    json sampled = chat;
    sampled.update({{"temperature", 1.0}, {"seed", seed}, {"logit_bias", {{"<tool_call>", 12}, {"</tool_call>", 12}}}});
    json unsplit = sampled;
    unsplit["tool_choice"] = "none";
    const json raw_message = post(s, "/v1/chat/completions", unsplit)["choices"][0]["message"];
    EXPECT_FALSE(raw_message.contains("tool_calls"));
    const std::string raw = raw_message["content"];
    tags_seen |= raw.find("<tool_call>") != std::string::npos && raw.find("</tool_call>") != std::string::npos;
    const Calls parts = calls_of_pieces({raw});
    const json whole = post(s, "/v1/chat/completions", sampled);
    const json& message = whole["choices"][0]["message"];
    EXPECT_EQ(message.contains("tool_calls"), !parts.calls.empty()) << raw;
    EXPECT_EQ(message["content"], parts.calls.empty() || !parts.content.empty() ? json(parts.content) : json(nullptr));
    EXPECT_EQ(whole["choices"][0]["finish_reason"], parts.calls.empty() ? "length" : "tool_calls");
    std::string streamed;
    size_t streamed_calls = 0;
    for (const json& e : post_stream(s, "/v1/chat/completions", sampled)) {
      if (e == "[DONE]") continue;
      const json& delta = e["choices"][0]["delta"];
      streamed += delta.value("content", "");
      if (delta.contains("tool_calls")) ++streamed_calls;
    }
    EXPECT_EQ(streamed, parts.content);
    EXPECT_EQ(streamed_calls, parts.calls.size());
  }
  EXPECT_TRUE(tags_seen) << "no reply had both tags: raise their bias or pick other seeds";
  // forced calls need constrained decoding
  json forced = chat;
  forced["tool_choice"] = "required";
  EXPECT_NE(post(s, "/v1/chat/completions", forced, 400)["error"]["message"].get<std::string>().find("tool_choice"),
            std::string::npos);
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// The bytes of a token entry ("bytes": [...]) as a string.
std::string entry_bytes(const json& entry) {
  std::string b;
  for (const json& v : entry["bytes"]) b += static_cast<char>(v.get<int>());
  return b;
}

// Logprobs over HTTP, whole and streamed, in each API's form, against `specpress generate --json --logprobs` (the same
// engine and greedy output) and against plain decoding (DFlash reports the target's own distribution).
TEST(ServerHttp, LogprobsInEveryApiWholeAndStreamedEqualGenerates) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  const std::string pair = "-m " + demo_dir() + "/target -md " + demo_dir() + "/draft";
  const std::string args = std::string(" -p \"") + kQuestion + "\" --chat -n 24 --json --logprobs 3";
  CommandResult cli = run_specpress("generate " + pair + args);
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const json expected = json::parse(cli.out)["logprobs"];
  CommandResult plain_cli = run_specpress("generate -m " + demo_dir() + "/target" + args);
  ASSERT_EQ(plain_cli.exit_code, 0) << plain_cli.err;
  const json plain = json::parse(plain_cli.out)["logprobs"];
  ASSERT_EQ(expected.size(), 24u);
  ASSERT_EQ(plain.size(), 24u);
  for (size_t i = 0; i < expected.size(); ++i) {  // DFlash's logprobs are plain decoding's
    EXPECT_EQ(expected[i]["id"], plain[i]["id"]) << i;
    EXPECT_NEAR(expected[i]["logprob"].get<double>(), plain[i]["logprob"].get<double>(), 1e-4) << i;
    ASSERT_EQ(expected[i]["top_logprobs"].size(), 3u) << i;
    for (size_t k = 0; k < 3; ++k)
      EXPECT_NEAR(expected[i]["top_logprobs"][k]["logprob"].get<double>(),
                  plain[i]["top_logprobs"][k]["logprob"].get<double>(), 1e-4) << i << " " << k;
  }
  CommandResult refused = run_specpress("generate " + pair + " -p hi --logprobs 2");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("--logprobs: needs --json"), std::string::npos) << refused.err;

  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json chat = {{"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"max_tokens", 24},
                     {"logprobs", true}, {"top_logprobs", 3}};
  // chat, whole: OpenAI's content list, one entry a returned token
  json whole = post(s, "/v1/chat/completions", chat);
  const json content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), whole["usage"]["completion_tokens"].get<size_t>());
  ASSERT_EQ(content.size(), expected.size());
  std::string token_text;
  for (size_t i = 0; i < content.size(); ++i) {
    EXPECT_EQ(content[i]["token"], expected[i]["token"]) << i;
    EXPECT_EQ(content[i]["bytes"], expected[i]["bytes"]) << i;
    EXPECT_NEAR(content[i]["logprob"].get<double>(), expected[i]["logprob"].get<double>(), 1e-6) << i;
    ASSERT_EQ(content[i]["top_logprobs"].size(), 3u) << i;
    EXPECT_EQ(content[i]["top_logprobs"][0]["token"], content[i]["token"]) << i << ": greedy takes the likeliest";
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(content[i]["top_logprobs"][k]["token"], expected[i]["top_logprobs"][k]["token"]) << i << " " << k;
      EXPECT_FALSE(content[i]["top_logprobs"][k].contains("id")) << "OpenAI's entries have no id";
    }
    token_text += entry_bytes(content[i]);
  }
  ASSERT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(token_text, whole["choices"][0]["message"]["content"].get<std::string>());
  // chat, streamed: the chunks' entries add up to the whole's, and never trail the text they came with
  json streamed_content = json::array();
  std::string streamed_text, streamed_tokens;
  for (const json& e : post_stream(s, "/v1/chat/completions", chat)) {
    if (e == "[DONE]" || e["choices"].empty()) continue;
    const json& choice = e["choices"][0];
    streamed_text += choice["delta"].value("content", "");
    if (choice["logprobs"].is_null()) continue;
    for (const json& entry : choice["logprobs"]["content"]) {
      streamed_content.push_back(entry);
      streamed_tokens += entry_bytes(entry);
    }
    EXPECT_EQ(streamed_tokens.rfind(streamed_text, 0), 0u) << "text '" << streamed_text << "' ahead of its tokens";
  }
  EXPECT_EQ(streamed_content, content);
  EXPECT_EQ(streamed_text, token_text);
  // without logprobs: null, as before
  json no_logprobs = chat;
  no_logprobs.erase("logprobs");
  no_logprobs.erase("top_logprobs");
  EXPECT_TRUE(post(s, "/v1/chat/completions", no_logprobs)["choices"][0]["logprobs"].is_null());

  // completions on the same prompt: the legacy columns; top_logprobs maps the top 2 and the chosen token
  const json prompt = post(s, "/apply-template", {{"messages", chat["messages"]}})["prompt"];
  const json completion_request = {{"prompt", prompt}, {"max_tokens", 24}, {"logprobs", 2}};
  json completion = post(s, "/v1/completions", completion_request);
  const json columns = completion["choices"][0]["logprobs"];
  ASSERT_EQ(columns["tokens"].size(), 24u);
  int64_t offset = 0;
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_EQ(columns["tokens"][i], content[i]["token"]) << i;
    EXPECT_NEAR(columns["token_logprobs"][i].get<double>(), content[i]["logprob"].get<double>(), 1e-6) << i;
    const json& top = columns["top_logprobs"][i];
    EXPECT_EQ(top.size(), 2u) << i << ": greedy's token is the likeliest, so no third entry";
    EXPECT_TRUE(top.contains(content[i]["token"].get<std::string>())) << i;
    EXPECT_EQ(columns["text_offset"][i], offset) << i;
    offset += static_cast<int64_t>(content[i]["token"].get<std::string>().size());  // ASCII text
  }
  json tokens = json::array();
  for (const json& e : post_stream(s, "/v1/completions", completion_request)) {
    if (e == "[DONE]" || e["choices"][0]["logprobs"].is_null()) continue;
    const json& chunk = e["choices"][0]["logprobs"];
    EXPECT_EQ(chunk["text_offset"][0], columns["text_offset"][tokens.size()]) << "offsets run on across chunks";
    for (const json& t : chunk["tokens"]) tokens.push_back(t);
  }
  EXPECT_EQ(tokens, columns["tokens"]);
  // a stop string ends the entries with the token that completes it, as the usage counts
  const std::string text = completion["choices"][0]["text"];
  json stopped_request = completion_request;
  stopped_request["stop"] = text.substr(text.size() / 2, 3);
  json stopped = post(s, "/v1/completions", stopped_request);
  EXPECT_LT(stopped["usage"]["completion_tokens"].get<int>(), 24);
  EXPECT_EQ(stopped["choices"][0]["logprobs"]["tokens"].size(), stopped["usage"]["completion_tokens"].get<size_t>());

  // llama.cpp's /completion with n_probs: generate's entries, ids included
  json native = post(s, "/completion", {{"prompt", prompt}, {"n_predict", 24}, {"n_probs", 3}});
  const json probabilities = native["completion_probabilities"];
  ASSERT_EQ(probabilities.size(), 24u);
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_EQ(probabilities[i]["id"], expected[i]["id"]) << i;
    EXPECT_EQ(probabilities[i]["top_logprobs"].size(), 3u) << i;
    EXPECT_EQ(probabilities[i]["top_logprobs"][1]["id"], expected[i]["top_logprobs"][1]["id"]) << i;
  }
  json native_streamed = json::array();
  for (const json& e : post_stream(s, "/completion", {{"prompt", prompt}, {"n_predict", 24}, {"n_probs", 3}}))
    if (e != "[DONE]")
      for (const json& entry : e.value("completion_probabilities", json::array())) native_streamed.push_back(entry);
  EXPECT_EQ(native_streamed, probabilities);
  EXPECT_FALSE(post(s, "/completion", {{"prompt", prompt}, {"n_predict", 4}}).contains("completion_probabilities"));
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// Unicode code points of UTF-8 text.
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// /v1/completions' echo: the prompt's text before the reply, and with logprobs the prompt tokens' own entries (the
// first null) before the reply's, unchanged. Scoring a generation's prompt + output ids with max_tokens 0 gives back
// the logprobs the generation reported, the greedy tokens each its row's likeliest, as lm-evaluation-harness's
// loglikelihood requests (its exact payload) read them.
TEST(ServerHttp, EchoReturnsThePromptAndScoresItAsGenerationReportedIt) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const std::string prompt = post(s, "/apply-template", {{"messages", {{{"role", "user"}, {"content", kQuestion}}}}})["prompt"];
  const json request = {{"prompt", prompt}, {"max_tokens", 16}, {"logprobs", 3}};
  const json reply = post(s, "/v1/completions", request);
  const std::string reply_text = reply["choices"][0]["text"];
  const json reply_columns = reply["choices"][0]["logprobs"];
  ASSERT_EQ(reply_columns["tokens"].size(), 16u);

  json echo_request = request;
  echo_request["echo"] = true;
  const json echoed = post(s, "/v1/completions", echo_request);
  const int64_t n = echoed["usage"]["prompt_tokens"];
  EXPECT_EQ(echoed["usage"], reply["usage"]);
  EXPECT_EQ(echoed["choices"][0]["text"], prompt + reply_text);
  const json columns = echoed["choices"][0]["logprobs"];
  ASSERT_EQ(columns["tokens"].size(), static_cast<size_t>(n + 16));
  EXPECT_TRUE(columns["token_logprobs"][0].is_null());
  EXPECT_TRUE(columns["top_logprobs"][0].is_null());
  std::string prompt_tokens_text;
  for (int64_t i = 0; i < n; ++i) prompt_tokens_text += columns["tokens"][i].get<std::string>();
  EXPECT_EQ(prompt_tokens_text, prompt) << "the template's special tokens written out";
  for (int64_t i = 1; i < n; ++i) {
    EXPECT_LE(columns["token_logprobs"][i].get<double>(), 0.0) << i;
    EXPECT_GE(columns["top_logprobs"][i].size(), 3u) << i;
    EXPECT_LE(columns["top_logprobs"][i].size(), 4u) << i << ": the top 3 and the prompt's token";
  }
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(columns["text_offset"][i], offset) << i;
    offset += code_points(columns["tokens"][i].get<std::string>());
  }
  for (size_t i = 0; i < 16; ++i) {  // the reply's entries as without echo, their offsets after the prompt's text
    EXPECT_EQ(columns["tokens"][n + i], reply_columns["tokens"][i]) << i;
    EXPECT_EQ(columns["token_logprobs"][n + i], reply_columns["token_logprobs"][i]) << i;
    EXPECT_EQ(columns["top_logprobs"][n + i], reply_columns["top_logprobs"][i]) << i;
    EXPECT_EQ(columns["text_offset"][n + i].get<int64_t>(), code_points(prompt) + reply_columns["text_offset"][i].get<int64_t>()) << i;
  }
  // streamed: the prompt's text and entries first, then the reply's, adding up to the whole response's
  std::string streamed_text;
  json streamed = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"text_offset", json::array()}};
  bool first = true;
  for (const json& e : post_stream(s, "/v1/completions", echo_request)) {
    if (e == "[DONE]") continue;
    const json& choice = e["choices"][0];
    if (first) EXPECT_EQ(choice["text"].get<std::string>().rfind(prompt, 0), 0u) << "the first chunk starts with the prompt";
    first = false;
    streamed_text += choice["text"].get<std::string>();
    if (choice["logprobs"].is_null()) continue;
    for (const char* k : {"tokens", "token_logprobs", "text_offset"})
      for (const json& v : choice["logprobs"][k]) streamed[k].push_back(v);
  }
  EXPECT_EQ(streamed_text, prompt + reply_text);
  for (const char* k : {"tokens", "token_logprobs", "text_offset"}) EXPECT_EQ(streamed[k], columns[k]) << k;
  // without logprobs: the text alone
  json echo_only = echo_request;
  echo_only.erase("logprobs");
  const json plain_echo = post(s, "/v1/completions", echo_only);
  EXPECT_EQ(plain_echo["choices"][0]["text"], prompt + reply_text);
  EXPECT_TRUE(plain_echo["choices"][0]["logprobs"].is_null());

  // score the prompt + output ids (llama.cpp's /completion names the output's): no output, and the output's entries
  // are the generation's
  const json native = post(s, "/completion", {{"prompt", prompt}, {"n_predict", 16}, {"n_probs", 3}});
  json ids = post(s, "/tokenize", {{"content", prompt}})["tokens"];
  ASSERT_EQ(static_cast<int64_t>(ids.size()), n);
  for (const json& entry : native["completion_probabilities"]) ids.push_back(entry["id"]);
  const json scored = post(s, "/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 3}});
  EXPECT_EQ(scored["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  EXPECT_EQ(scored["usage"]["prompt_tokens"], n + 16);
  EXPECT_EQ(scored["timings"]["predicted_n"], 0);
  // nothing to compute (no logprobs, no output): the text alone, and no prompt tokens processed in /metrics
  const double processed = metric(s, "prompt_tokens_total");
  const json text_only = post(s, "/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}});
  EXPECT_EQ(text_only["choices"][0]["text"], prompt + reply_text);
  EXPECT_EQ(text_only["usage"]["prompt_tokens"], n + 16);
  EXPECT_EQ(metric(s, "prompt_tokens_total"), processed);
  const json scored_columns = scored["choices"][0]["logprobs"];
  ASSERT_EQ(scored_columns["tokens"].size(), static_cast<size_t>(n + 16));
  EXPECT_EQ(scored["choices"][0]["text"], prompt + reply_text) << "the ids decoded, special tokens written out";
  for (int64_t i = 0; i < n; ++i)  // the prompt's rows as the echo of the text prompt computed them
    EXPECT_NEAR(scored_columns["token_logprobs"][i].is_null() ? 1.0 : scored_columns["token_logprobs"][i].get<double>(),
                columns["token_logprobs"][i].is_null() ? 1.0 : columns["token_logprobs"][i].get<double>(), 1e-5) << i;
  for (size_t i = 0; i < 16; ++i) {
    const json& entry = native["completion_probabilities"][i];
    EXPECT_EQ(scored_columns["tokens"][n + i], entry["token"]) << i;
    EXPECT_NEAR(scored_columns["token_logprobs"][n + i].get<double>(), entry["logprob"].get<double>(), 1e-4) << i;
    for (const json& alternative : entry["top_logprobs"]) {
      const std::string key = alternative["token"];
      ASSERT_TRUE(scored_columns["top_logprobs"][n + i].contains(key)) << i << " " << key;
      EXPECT_NEAR(scored_columns["top_logprobs"][n + i][key].get<double>(), alternative["logprob"].get<double>(), 1e-4)
          << i << " " << key;
    }
  }
  // vLLM's return_tokens_as_token_ids: the entries name the ids scored, the text is unchanged
  const json by_id = post(s, "/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1},
                                                 {"return_tokens_as_token_ids", true}});
  const json& id_tokens = by_id["choices"][0]["logprobs"]["tokens"];
  ASSERT_EQ(id_tokens.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(id_tokens[i], "token_id:" + ids[i].dump()) << i;
  EXPECT_EQ(by_id["choices"][0]["text"], prompt + reply_text);
  // lm-evaluation-harness's loglikelihood request (openai_completions.py) and its reading of the answer
  const json harness = post(s, "/v1/completions", {{"model", "target"}, {"prompt", json::array({ids})},
                                                   {"temperature", 0}, {"max_tokens", 1}, {"logprobs", 1},
                                                   {"seed", 1234}, {"echo", true}});
  const json h = harness["choices"][0]["logprobs"];
  ASSERT_EQ(h["token_logprobs"].size(), static_cast<size_t>(n + 17)) << "the context, the continuation, one more";
  double sum = 0, expected_sum = 0;
  for (size_t i = 0; i < 16; ++i) {
    const double lp = h["token_logprobs"][n + i].get<double>();
    sum += lp;
    expected_sum += native["completion_probabilities"][i]["logprob"].get<double>();
    double best = -1e30;
    for (const auto& [key, value] : h["top_logprobs"][n + i].items()) best = std::max(best, value.get<double>());
    EXPECT_EQ(lp, best) << i << ": the greedy continuation is its rows' likeliest (is_greedy)";
  }
  EXPECT_NEAR(sum, expected_sum, 1e-3);
  // its one token comes from the scoring forward's row after the prompt, no second forward over it: that of a
  // one-token generation, with the same logprob
  EXPECT_EQ(harness["usage"]["completion_tokens"], 1);
  EXPECT_EQ(harness["choices"][0]["finish_reason"], "length");
  const json one =
      post(s, "/v1/completions", {{"prompt", ids}, {"temperature", 0}, {"max_tokens", 1}, {"logprobs", 1}});
  const json& one_columns = one["choices"][0]["logprobs"];
  ASSERT_EQ(one_columns["tokens"].size(), 1u);
  EXPECT_EQ(h["tokens"][n + 16], one_columns["tokens"][0]);
  EXPECT_NEAR(h["token_logprobs"][n + 16].get<double>(), one_columns["token_logprobs"][0].get<double>(), 1e-4);
  EXPECT_EQ(harness["choices"][0]["text"], prompt + reply_text + one["choices"][0]["text"].get<std::string>());
  EXPECT_NE(s.stderr_text().find("the token drawn from the scoring forward"), std::string::npos) << s.stderr_text();
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// --return-tokens-as-token-ids makes "token_id:ID" every request's default; a request's false wins.
TEST(ServerHttp, ReturnTokensAsTokenIdsFlagSetsTheDefault) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--return-tokens-as-token-ids"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json body = {{"prompt", "2 + 3 ="}, {"max_tokens", 4}, {"n_probs", 1}};
  const json native = post(s, "/completion", body);  // llama.cpp's route: its own entries (ids and text)
  const json& entries = native["completion_probabilities"];
  ASSERT_EQ(entries.size(), 4u);
  json request = {{"messages", {{{"role", "user"}, {"content", "2 + 3 ="}}}}, {"max_tokens", 4}, {"logprobs", true}};
  const json content = post(s, "/v1/chat/completions", request)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const json& entry : content) EXPECT_EQ(entry["token"].get<std::string>().rfind("token_id:", 0), 0u) << entry;
  request["return_tokens_as_token_ids"] = false;
  const json texts = post(s, "/v1/chat/completions", request)["choices"][0]["logprobs"]["content"];
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(texts[i]["logprob"], content[i]["logprob"]) << i;
    EXPECT_EQ(texts[i]["token"].get<std::string>().rfind("token_id:", 0), std::string::npos) << texts[i];
  }
  const json columns = post(s, "/v1/completions", {{"prompt", "2 + 3 ="}, {"max_tokens", 4}, {"logprobs", 0}})
                           ["choices"][0]["logprobs"];
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(columns["tokens"][i], "token_id:" + entries[i]["id"].dump()) << i;
  EXPECT_FALSE(entries[0]["token"].get<std::string>().rfind("token_id:", 0) == 0) << "llama.cpp's route: text";
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// Anthropic's SSE body: (event name, data) pairs, every event named; ping events dropped.
std::vector<std::pair<std::string, json>> anthropic_events(const std::string& body) {
  std::vector<std::pair<std::string, json>> events;
  for (auto& [name, data] : sse_frames<json>(body)) {
    EXPECT_NE(name, "") << data;
    if (name != "ping") events.emplace_back(name, std::move(data));
  }
  return events;
}

// A streamed /v1/messages reply put back together: its events' names, thinking and text, and the final delta.
struct StreamedMessage {
  std::vector<std::string> names;
  std::string thinking, text;
  json start, last_delta;
};

StreamedMessage post_messages_stream(const ServerProcess& s, json body) {
  body["stream"] = true;
  StreamedMessage m;
  auto res = s.client().Post("/v1/messages", body.dump(), "application/json");
  EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
  if (!res) return m;
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  for (const auto& [name, data] : anthropic_events(res->body)) {
    m.names.push_back(name);
    if (name == "message_start") m.start = data["message"];
    if (name == "message_delta") m.last_delta = data;
    if (name == "content_block_delta") {
      m.thinking += data["delta"].value("thinking", "");
      m.text += data["delta"].value("text", "");
    }
  }
  return m;
}

// Anthropic's Messages API on the demo pair: the reply equals `specpress generate --chat` and the chat API's, whole
// and streamed; count_tokens, stop sequences, a prefilled assistant turn, thinking blocks and errors in its form.
TEST(ServerHttp, MessagesApiEqualsChatWholeAndStreamed) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  const std::string pair = "-m " + demo_dir() + "/target -md " + demo_dir() + "/draft";
  CommandResult cli = run_specpress("generate " + pair + " -p \"" + kQuestion + "\" --chat -sys \"Be brief.\" -n 48");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  ASSERT_FALSE(cli.out.empty());
  const std::string expected = cli.out.substr(0, cli.out.size() - 1);  // generate ends with a newline

  // thinking on by default (--think): the requests below turn it off, but for the sampled thinking ones
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--alias", "demo", "--think"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json off = {{"type", "disabled"}};
  const json request = {{"model", "claude-whatever"},
                        {"max_tokens", 48},
                        {"system", {{{"type", "text"}, {"text", "Be brief."}}}},
                        {"thinking", off},
                        {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", kQuestion}}}}}}}};
  json whole = post(s, "/v1/messages", request);
  EXPECT_EQ(whole["type"], "message");
  EXPECT_EQ(whole["role"], "assistant");
  EXPECT_EQ(whole["model"], "claude-whatever");
  EXPECT_EQ(whole["id"].get<std::string>().rfind("msg_", 0), 0u) << whole["id"];
  ASSERT_EQ(whole["content"].size(), 1u) << whole;
  EXPECT_EQ(whole["content"][0]["type"], "text");
  EXPECT_EQ(whole["content"][0]["text"], expected);
  EXPECT_GT(whole["timings"]["tau"].get<double>(), 1.0);
  const json chat_request = {
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", kQuestion}}}},
      {"max_tokens", 48},
      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const json chat = post(s, "/v1/chat/completions", chat_request);
  EXPECT_EQ(chat["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(whole["stop_reason"], chat["choices"][0]["finish_reason"] == "length" ? "max_tokens" : "end_turn");
  EXPECT_EQ(whole["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(whole["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
  json count = request;
  count.erase("max_tokens");
  EXPECT_EQ(post(s, "/v1/messages/count_tokens", count), json({{"input_tokens", whole["usage"]["input_tokens"]}}));

  StreamedMessage streamed = post_messages_stream(s, request);
  EXPECT_EQ(streamed.text, expected);
  EXPECT_EQ(streamed.thinking, "");
  ASSERT_GE(streamed.names.size(), 6u);
  EXPECT_EQ(streamed.names.front(), "message_start");
  EXPECT_EQ(streamed.names[1], "content_block_start");
  EXPECT_EQ(streamed.names[streamed.names.size() - 3], "content_block_stop");
  EXPECT_EQ(streamed.names[streamed.names.size() - 2], "message_delta");
  EXPECT_EQ(streamed.names.back(), "message_stop");
  EXPECT_GT(std::count(streamed.names.begin(), streamed.names.end(), "content_block_delta"), 1)
      << "text arrives in several deltas, as blocks are committed";
  EXPECT_EQ(streamed.start["usage"]["input_tokens"], whole["usage"]["input_tokens"]);
  EXPECT_EQ(streamed.last_delta["delta"]["stop_reason"], whole["stop_reason"]);
  EXPECT_EQ(streamed.last_delta["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
  EXPECT_EQ(streamed.last_delta["timings"]["draft_n_accepted"], whole["timings"]["draft_n_accepted"]);

  // a stop sequence ends the text before it, whole and streamed
  ASSERT_GT(expected.size(), 40u);
  const std::string stop = expected.substr(expected.size() / 2, 4);
  json stopped = request;
  stopped["stop_sequences"] = {"never appears \x01", stop};
  json r = post(s, "/v1/messages", stopped);
  EXPECT_EQ(r["content"][0]["text"], expected.substr(0, expected.find(stop)));
  EXPECT_EQ(r["stop_reason"], "stop_sequence");
  EXPECT_EQ(r["stop_sequence"], stop);
  streamed = post_messages_stream(s, stopped);
  EXPECT_EQ(streamed.text, r["content"][0]["text"].get<std::string>());
  EXPECT_EQ(streamed.last_delta["delta"]["stop_sequence"], stop);

  // a last assistant turn is continued: the same as completing the rendered conversation plus its text
  json prefilled = request;
  prefilled["messages"].push_back({{"role", "assistant"}, {"content", "He has"}});
  json template_request = chat_request;
  template_request.erase("max_tokens");
  const std::string rendered = post(s, "/apply-template", template_request)["prompt"];
  json completion = post(s, "/v1/completions", {{"prompt", rendered + "He has"}, {"max_tokens", 48}});
  r = post(s, "/v1/messages", prefilled);
  EXPECT_EQ(r["content"][0]["text"], completion["choices"][0]["text"]);
  EXPECT_EQ(r["usage"]["input_tokens"], completion["usage"]["prompt_tokens"]);

  // thinking (the server's --think, sampled with a seed whose reply closes its think block and answers: see
  // ThinkBlockIsSplitFromTheAnswerByTheReasoningFormat): the thinking block and the text are the chat API's split
  json sampled = {{"max_tokens", 48}, {"temperature", 1.0}, {"top_k", 40}, {"seed", 102},
                  {"messages", {{{"role", "user"}, {"content", kQuestion}}}}};
  const json chat_message = post(s, "/v1/chat/completions", sampled)["choices"][0]["message"];
  ASSERT_FALSE(chat_message.value("reasoning_content", "").empty()) << chat_message;
  r = post(s, "/v1/messages", sampled);
  ASSERT_EQ(r["content"].size(), 2u) << r;
  EXPECT_EQ(r["content"][0],
            json({{"type", "thinking"}, {"thinking", chat_message["reasoning_content"]}, {"signature", ""}}));
  EXPECT_EQ(r["content"][1]["text"], chat_message["content"]);
  streamed = post_messages_stream(s, sampled);
  EXPECT_EQ(streamed.thinking, chat_message["reasoning_content"].get<std::string>());
  EXPECT_EQ(streamed.text, chat_message["content"].get<std::string>());
  const auto thinking_start = std::find(streamed.names.begin(), streamed.names.end(), "content_block_start");
  EXPECT_EQ(std::count(streamed.names.begin(), streamed.names.end(), "content_block_start"), 2);
  EXPECT_NE(thinking_start, streamed.names.end());

  // /v1/models also in Anthropic's form (its fields beside OpenAI's)
  const json models = json::parse(s.client().Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["type"], "model");
  EXPECT_EQ(models["data"][0]["display_name"], "demo");
  EXPECT_TRUE(std::regex_match(models["data"][0]["created_at"].get<std::string>(),
                               std::regex("20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z")))
      << models;
  EXPECT_EQ(models["has_more"], false);
  EXPECT_EQ(models["first_id"], "demo");
  EXPECT_EQ(models["object"], "list");
  // a browser's preflight gets the headers it asks for (Anthropic's SDK adds its own)
  httplib::Headers asked = {{"Origin", "http://example.org"}, {"Access-Control-Request-Method", "POST"},
                            {"Access-Control-Request-Headers", "anthropic-version,x-api-key,x-stainless-os"}};
  auto preflight = s.client().Options("/v1/messages", asked);
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"), "anthropic-version,x-api-key,x-stainless-os");

  // errors in Anthropic's form, on every /v1/messages route
  for (const auto& [path, body, status] :
       {std::tuple<std::string, std::string, int>{
            "/v1/messages", R"({"messages": [{"role": "user", "content": [{"type": "image"}]}]})", 400},
        {"/v1/messages", "{nope", 400},
        {"/v1/messages", R"({"messages": [{"role": "user", "content": "x"}], "n": 2})", 400},  // no choices here
        {"/v1/messages/count_tokens", R"({"messages": [], "max_tokens": 4})", 400},
        {"/v1/messages/batches", "{}", 404}}) {
    auto res = s.client().Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, status) << path << " " << body << " -> " << res->body;
    const json error = json::parse(res->body, nullptr, false);
    EXPECT_EQ(error["type"], "error") << res->body;
    EXPECT_EQ(error["error"]["type"], status == 400 ? "invalid_request_error" : "not_found_error") << res->body;
    EXPECT_FALSE(error["error"].value("message", "").empty()) << res->body;
  }
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

// The Messages API's tools: count_tokens counts the prompt with the tools block (Anthropic's tool as OpenAI's
// function tool) and the tool turns; a reply with the tool-call tags in it is, whole and streamed, ToolCallSplit's
// split of the reply as generated.
TEST(ServerHttp, MessagesToolsEnterThePromptAndToolUseBlocksLeaveTheReply) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  // the Messages API takes no logit_bias: the server's default raises <tool_call> (151657) and </tool_call>
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--logit-bias", "151657+12",
                   "--logit-bias", "151658+12"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  json body = {{"tools", {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}}},
               {"messages",
                {{{"role", "user"}, {"content", kQuestion}},
                 {{"role", "assistant"},
                  {"content", {{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"},
                                {"input", {{"city", "Oslo"}}}}}}},
                 {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"},
                                                  {"content", "-3 C"}}}}}}},
               {"max_tokens", 48}};
  tok::ChatMessage call{"assistant", ""};
  call.tool_calls = {{"get_weather", R"({"city": "Oslo"})"}};
  const std::string prompt = tok::render_qwen3_chat(
      {{"user", kQuestion}, call, {"tool", "-3 C"}}, true, false,
      {R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})"});
  json count = body;
  count.erase("max_tokens");
  EXPECT_EQ(post(s, "/v1/messages/count_tokens", count)["input_tokens"],
            post(s, "/tokenize", {{"content", prompt}})["tokens"].size());
  bool tags_seen = false;
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    json sampled = body;
    sampled.update({{"temperature", 1.0}, {"seed", seed}});
    json unsplit = sampled;
    unsplit["tool_choice"] = {{"type", "none"}};
    const json raw_message = post(s, "/v1/messages", unsplit);
    ASSERT_EQ(raw_message["content"].size(), 1u) << raw_message;
    const std::string raw = raw_message["content"][0]["text"];
    tags_seen |= raw.find("<tool_call>") != std::string::npos && raw.find("</tool_call>") != std::string::npos;
    const Calls parts = calls_of_pieces({raw});
    const json whole = post(s, "/v1/messages", sampled);
    std::string text;
    size_t uses = 0;
    for (const json& block : whole["content"]) {
      text += block.value("text", "");
      uses += block["type"] == "tool_use";
    }
    EXPECT_EQ(text, parts.content);
    EXPECT_EQ(uses, parts.calls.size());
    EXPECT_EQ(whole["stop_reason"], parts.calls.empty() ? "max_tokens" : "tool_use");
    const StreamedMessage streamed = post_messages_stream(s, sampled);
    EXPECT_EQ(streamed.text, parts.content);
    EXPECT_EQ(streamed.last_delta["delta"]["stop_reason"], whole["stop_reason"]);
  }
  EXPECT_TRUE(tags_seen) << "no reply had both tags: raise their bias or pick other seeds";
  json forced = body;
  forced["tool_choice"] = {{"type", "any"}};
  EXPECT_EQ(post(s, "/v1/messages", forced, 400)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
}

TEST(ServerHttp, StopStringsEndTheOutputBeforeThem) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json base = {{"prompt", kQuestion}, {"max_tokens", 48}, {"ignore_eos", true}};
  const std::string full = post(s, "/v1/completions", base)["choices"][0]["text"];
  ASSERT_GT(full.size(), 40u);
  const std::string stop = full.substr(full.size() / 2, 4);
  const std::string expected = full.substr(0, full.find(stop));
  json req = base;
  req["stop"] = {"never appears \x01", stop};
  json r = post(s, "/v1/completions", req);
  EXPECT_EQ(r["choices"][0]["text"], expected);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(r["usage"]["completion_tokens"].get<int64_t>(), 48) << "the generation went on past its stop string";
  EXPECT_EQ(r["timings"]["predicted_n"], r["usage"]["completion_tokens"]);
  std::string streamed;
  for (const json& e : post_stream(s, "/v1/completions", req))
    if (e.is_object() && !e["choices"].empty()) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, expected);
  // llama.cpp's native endpoint reports which word stopped it
  json native = post(s, "/completion", {{"prompt", kQuestion}, {"n_predict", 48}, {"ignore_eos", true}, {"stop", {stop}}});
  EXPECT_EQ(native["content"], expected);
  EXPECT_EQ(native["stop_type"], "word");
  EXPECT_EQ(native["stopping_word"], stop);
  json limit = post(s, "/completion", {{"prompt", kQuestion}, {"n_predict", 5}});
  EXPECT_EQ(limit["stop_type"], "limit");
  EXPECT_EQ(limit["tokens_predicted"], 5);
  // usage counts the tokens up to the stop string, the same with and without the draft (a DFlash block commits
  // tokens past it)
  ServerProcess plain({"-m", demo_dir() + "/target"});
  ASSERT_GT(plain.port(), 0) << plain.stderr_text();
  json p = post(plain, "/v1/completions", req);
  EXPECT_EQ(p["choices"][0]["text"], expected);
  EXPECT_EQ(p["usage"], r["usage"]);
}

TEST(ServerHttp, BadRequestsGetErrorObjectsNamingTheProblem) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-c", "256", "-n", "200"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  struct Case {
    std::string path, body;
    int status;
    std::string message;
  };
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " hello";
  json ban_all = json::array();  // every id of the demo target's vocabulary banned
  for (int64_t id = 0; id < 151936; ++id) ban_all.push_back({id, false});
  const std::vector<Case> cases = {
      {"/v1/completions", "{nope", 400, "not valid JSON"},
      {"/v1/completions", json{{"prompt", "x"}, {"logit_bias", ban_all}}.dump(), 400,
       "field 'logit_bias': bans every token of the vocabulary"},
      {"/v1/completions", "[1]", 400, "expected a JSON object"},
      {"/v1/completions", R"({"prompt": "x", "temperature": 1e309})", 400, "request body: a number out of range"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -3})", 400, "'max_tokens'"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 300})", 400, "exceed the context size 256"},
      {"/v1/completions", R"({"prompt": ")" + long_prompt + R"("})", 400, "field 'prompt': the prompt"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": ")" + long_prompt + R"("}]})", 400,
       "field 'messages': the prompt"},
      {"/v1/completions", R"({"prompt": [1, 999999999]})", 400, "outside the vocabulary"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"999999999": 1}})", 400,
       "field 'logit_bias': token id 999999999 is outside the vocabulary"},
      {"/v1/completions", R"({"prompt": ""})", 400, "encodes to no tokens"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "no messages"},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", 400, "'n'"},
      {"/completion", R"({"prompt": "x", "n": 2})", 400, "'n'"},
      {"/detokenize", R"({"tokens": [-1]})", 400, "'tokens'"},
      {"/detokenize", R"({"tokens": [151936]})", 400, "field 'tokens': 151936 is not a token id (0..151935)"},
      {"/detokenize", R"({"tokens": [1], "x": 1})", 400, "unknown field 'x' for /detokenize"},
      {"/tokenize", R"({"text": "x"})", 400, "'text'"},
      {"/tokenize", R"({"content": "x", "parse_special": "x"})", 400, "'parse_special'"},
      {"/v1/completions", R"({"prompt": "x", "n": )" + std::string(100000, '[') + std::string(100000, ']') + "}", 400,
       "nested more than 32 levels"},
  };
  for (const Case& c : cases) {
    auto res = s.client().Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(res) << c.body;
    EXPECT_EQ(res->status, c.status) << c.body << " -> " << res->body;
    json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << res->body;
    EXPECT_EQ(j["error"]["code"], c.status);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.message), std::string::npos) << c.body << " -> " << res->body;
  }
  // curl -d sends application/x-www-form-urlencoded, which cpp-httplib caps at 8 KiB: the error says what to send
  auto form = s.client().Post("/v1/completions", json{{"prompt", std::string(9000, 'x')}}.dump(),
                              "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(form->body.find("Content-Type: application/json"), std::string::npos) << form->body;
  // the server's -n 200 default is shortened to what the context leaves (256 - 100 - 1), a given max_tokens is not
  std::vector<int64_t> hundred(100, 9707);
  EXPECT_EQ(post(s, "/v1/completions", {{"prompt", hundred}, {"ignore_eos", true}})["usage"]["completion_tokens"], 155);
  post(s, "/v1/completions", {{"prompt", hundred}, {"max_tokens", 200}}, 400);
  // CORS: a browser's preflight and the header on every answer
  auto preflight = s.client().Options("/v1/chat/completions");
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  EXPECT_EQ(s.client().Get("/health")->get_header_value("Access-Control-Allow-Origin"), "*");
  auto missing = s.client().Get("/v2/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["type"], "not_found_error");
  // the server still answers after all of that
  EXPECT_EQ(post(s, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})["usage"]["completion_tokens"], 2);
}

TEST(ServerHttp, ApiKeyGuardsEveryRouteButHealth) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--api-key", "sesame"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  EXPECT_EQ(s.client().Get("/health")->status, 200);
  auto denied = s.client().Get("/v1/models");
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(json::parse(denied->body)["error"]["type"], "authentication_error");
  httplib::Headers auth = {{"Authorization", "Bearer sesame"}};
  EXPECT_EQ(s.client().Get("/v1/models", auth)->status, 200);
  // the scheme's name in any case (RFC 7235), the key exactly
  EXPECT_EQ(s.client().Get("/v1/models", {{"Authorization", "bearer sesame"}})->status, 200);
  for (const char* wrong : {"Bearer Sesame", "Bearer sesam", "Bearer ", "Bearersesame", "Basic sesame"})
    EXPECT_EQ(s.client().Get("/v1/models", {{"Authorization", wrong}})->status, 401) << wrong;
  // Anthropic's clients send x-api-key and get its error form
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}]})";
  denied = s.client().Post("/v1/messages/count_tokens", body, "application/json");
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(json::parse(denied->body), json::parse(R"({"type": "error", "error": {"type": "authentication_error",
                                                                                  "message": "Invalid API Key"}})"));
  auto counted = s.client().Post("/v1/messages/count_tokens", httplib::Headers{{"x-api-key", "sesame"}}, body,
                                 "application/json");
  EXPECT_EQ(counted->status, 200) << counted->body;
}

// GET /slots, as llama-server's: the idle slot with the defaults, then the running generation with its own parameters
// and its progress; ?fail_on_no_slot=1 is a 503 while it runs; slot actions (prompt-cache files) are a 501 naming the
// action, and --no-slots turns the route off. A POST that gives no body length is a 411 at once, not a hang.
TEST(ServerHttp, SlotsShowWhatTheSlotRuns) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--ignore-eos", "--repeat-penalty", "1.1"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  auto get_slots = [&](const std::string& query = "") {
    auto res = s.client().Get("/slots" + query);
    return std::make_pair(res ? res->status : -1, res ? json::parse(res->body) : json());
  };
  auto [status, idle] = get_slots();
  ASSERT_EQ(status, 200);
  ASSERT_TRUE(idle.is_array() && idle.size() == 1) << idle;
  EXPECT_EQ(idle[0]["id"], 0);
  EXPECT_EQ(idle[0]["is_processing"], false);
  EXPECT_EQ(idle[0]["id_task"], -1);
  EXPECT_EQ(idle[0]["speculative"], false);
  EXPECT_GT(idle[0]["n_ctx"].get<int64_t>(), 0);
  EXPECT_EQ(idle[0]["params"]["repeat_penalty"], 1.1) << "an idle slot shows the server's defaults";
  EXPECT_EQ(get_slots("?fail_on_no_slot=1").first, 200);

  const json body = {{"prompt", kQuestion}, {"max_tokens", 300}, {"presence_penalty", 0.25}, {"stop", {"zzz"}},
                     {"seed", 5}, {"n", 2}};
  std::thread request([&] { s.client().Post("/v1/completions", body.dump(), "application/json"); });
  struct Join {
    std::thread& t;
    ~Join() { if (t.joinable()) t.join(); }  // also when an assertion returns early
  } join{request};
  json busy;
  int busy_status = 0;  // ?fail_on_no_slot=1 while the slot runs
  for (int i = 0; i < 500; ++i) {  // until the slot has decoded something
    busy = get_slots().second;
    if (busy.is_array() && busy[0]["is_processing"] == true && busy[0]["next_token"]["n_decoded"] > 0) {
      busy_status = get_slots("?fail_on_no_slot=1").first;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(busy.is_array() && busy[0]["is_processing"] == true) << busy;
  EXPECT_EQ(busy_status, 503);
  EXPECT_EQ(busy[0]["id_task"], 1);
  EXPECT_EQ(busy[0]["params"]["n_predict"], 300);
  EXPECT_EQ(busy[0]["params"]["presence_penalty"], 0.25);
  EXPECT_EQ(busy[0]["params"]["repeat_penalty"], 1.1) << "the request's own parameters, defaults filled in";
  EXPECT_EQ(busy[0]["params"]["seed"], 5);
  EXPECT_EQ(busy[0]["params"]["stop"], json({"zzz"}));
  EXPECT_EQ(busy[0]["params"]["n"], 2);
  EXPECT_TRUE(busy[0]["id_choice"] == 0 || busy[0]["id_choice"] == 1) << busy;  // the running one
  EXPECT_GT(busy[0]["n_prompt_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(busy[0]["id_request"].get<std::string>().rfind("cmpl-", 0), 0u);
  const int64_t decoded = busy[0]["next_token"]["n_decoded"];
  EXPECT_EQ(busy[0]["next_token"]["n_remain"], 300 - decoded);
  request.join();
  auto [after_status, after] = get_slots("?fail_on_no_slot=1");
  EXPECT_EQ(after_status, 200);
  EXPECT_EQ(after[0]["is_processing"], false);

  auto action = s.client().Post("/slots/0?action=save", "{}", "application/json");
  ASSERT_TRUE(action);
  EXPECT_EQ(action->status, 501);
  EXPECT_NE(json::parse(action->body)["error"]["message"].get<std::string>().find("slot action 'save'"),
            std::string::npos);
  // a POST with neither Content-Length nor chunked encoding: 411 at once (read with a timeout, so a hang fails)
  const int fd = connect_raw(s.port());
  ASSERT_GE(fd, 0);
  const timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const std::string no_length = "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::write(fd, no_length.data(), no_length.size()), static_cast<ssize_t>(no_length.size()));
  const std::string answer = read_until_closed(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 411", 0), 0u) << answer;
  EXPECT_NE(answer.find("a POST needs a Content-Length header"), std::string::npos) << answer;
  // a length that is no byte count is a 400, one over the 64 MiB cap a 413, and a method no route takes a 405, each
  // before any body is waited for (within 3 s here: a wait for the body would last the server's --timeout)
  const timeval quick{3, 0};
  for (const auto& [method, length, body, status, message] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>>{
           {"POST", "-5", "", "400", "Content-Length '-5' is not a byte count"},
           {"POST", "99999999999999999999", "", "413", "Content-Length 99999999999999999999 is larger than 64 MiB"},
           {"POST", "100000000", "", "413", "Content-Length 100000000 is larger than 64 MiB"},
           {"POST", "00000000000000000002", "{}", "400", "field 'prompt' is missing"},  // leading zeros are a length
           {"PUT", "-5", "", "405", "/v1/completions takes POST, not PUT"},
           {"PATCH", "", "", "405", "/v1/completions takes POST, not PATCH"},
           {"DELETE", "100000000", "", "405", "/v1/completions takes POST, not DELETE"}}) {
    const int raw = connect_raw(s.port());
    ASSERT_GE(raw, 0);
    ::setsockopt(raw, SOL_SOCKET, SO_RCVTIMEO, &quick, sizeof quick);
    const std::string head = method + " /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                             "application/json\r\n" + (length.empty() ? "" : "Content-Length: " + length + "\r\n") +
                             "\r\n" + body;
    ASSERT_EQ(::write(raw, head.data(), head.size()), static_cast<ssize_t>(head.size()));
    const std::string reply = read_one_response(raw);
    EXPECT_EQ(reply.rfind("HTTP/1.1 " + status, 0), 0u) << method << " " << length << ": " << reply;
    EXPECT_NE(reply.find(message), std::string::npos) << reply;
  }
  // a known path asked with another method: 405 naming the methods it takes, not 404
  auto wrong_method = s.client().Get("/v1/completions");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405) << wrong_method->body;
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST, OPTIONS");
  EXPECT_NE(wrong_method->body.find("/v1/completions takes POST, not GET"), std::string::npos) << wrong_method->body;
  EXPECT_EQ(s.client().Delete("/v1/models")->status, 405);
  EXPECT_EQ(s.client().Get("/v1/nothing")->status, 404);
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();

  ServerProcess off({"-m", demo_dir() + "/target", "--no-slots"});
  ASSERT_GT(off.port(), 0) << off.stderr_text();
  auto refused = off.client().Get("/slots");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 501);
  EXPECT_NE(refused->body.find("--no-slots"), std::string::npos) << refused->body;
}

// Requests that arrive together queue for the one slot; each gets its own, complete answer.
TEST(ServerHttp, ConcurrentRequestsAllFinishWithTheirOwnAnswers) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const std::vector<std::string> prompts = {"Tom has 3 apples.", "A train leaves at noon.", "What is 7 times 8?"};
  std::vector<std::string> alone;
  for (const auto& p : prompts) alone.push_back(post(s, "/v1/completions", {{"prompt", p}, {"max_tokens", 40}})["choices"][0]["text"]);
  std::vector<std::string> together(prompts.size() * 2);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < together.size(); ++i)
    threads.emplace_back([&, i] {
      json body = {{"prompt", prompts[i % prompts.size()]}, {"max_tokens", 40}, {"stream", i % 2 == 1}};
      auto res = s.client().Post("/v1/completions", body.dump(), "application/json");
      if (!res) return;
      if (i % 2 == 0) {
        together[i] = json::parse(res->body)["choices"][0]["text"];
      } else {
        for (const json& e : sse_events(res->body))
          if (e.is_object() && !e["choices"].empty()) together[i] += e["choices"][0]["text"].get<std::string>();
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < together.size(); ++i) EXPECT_EQ(together[i], alone[i % prompts.size()]) << "request " << i;
  EXPECT_EQ(metric(s, "requests_total"), static_cast<double>(prompts.size() + together.size()));
}

// However busy the slot, /health and /metrics answer at once; requests past --max-queue get 503 at once.
TEST(ServerHttp, BusyServerStillAnswersHealthAndRefusesPastItsQueue) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--ignore-eos", "--max-queue", "2"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  std::vector<int> status(12, 0);
  std::vector<double> seconds(status.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < status.size(); ++i)
    threads.emplace_back([&, i] {
      const auto start = std::chrono::steady_clock::now();
      auto res = s.client().Post("/v1/completions", json{{"prompt", kQuestion}, {"max_tokens", 150}}.dump(),
                                 "application/json");
      status[i] = res ? res->status : -100 - static_cast<int>(res.error());  // no answer: -100 - httplib::Error
      seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  for (int i = 0; i < 200 && metric(s, "requests_processing") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  auto health = s.client().Get("/health");
  const auto health_time = std::chrono::steady_clock::now() - t0;
  for (auto& t : threads) t.join();
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_LT(health_time, std::chrono::milliseconds(500));
  const auto ok = std::count(status.begin(), status.end(), 200), busy = std::count(status.begin(), status.end(), 503);
  EXPECT_EQ(ok + busy, static_cast<long>(status.size())) << ::testing::PrintToString(status) << s.stderr_text();
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1) << "12 requests at once, at most 1 running and 2 waiting";
  // the refusals come at once (in milliseconds): with cpp-httplib's listen backlog of 5 the burst's last
  // connections waited for the client's SYN retry (1 s) and one was at times reset (a read error, status -104 here)
  for (size_t i = 0; i < status.size(); ++i)
    if (status[i] == 503) EXPECT_LT(seconds[i], 0.9) << "request " << i;
  // --max-queue 0: nothing waits, but an idle slot still takes a request
  ServerProcess none({"-m", demo_dir() + "/target", "--max-queue", "0"});
  ASSERT_GT(none.port(), 0) << none.stderr_text();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(post(none, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})["usage"]["completion_tokens"], 2);
}

// Sampling: a request without a seed draws a fresh one (as llama-server's default -1); the same seed repeats.
TEST(ServerHttp, SeedsRepeatAndUnseededRequestsDiffer) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--temp", "1.5"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json base = {{"prompt", kQuestion}, {"max_tokens", 60}, {"ignore_eos", true}};
  json seeded = base;
  seeded["seed"] = 11;
  EXPECT_EQ(post(s, "/v1/completions", seeded)["choices"][0]["text"],
            post(s, "/v1/completions", seeded)["choices"][0]["text"]);
  EXPECT_NE(post(s, "/v1/completions", base)["choices"][0]["text"], post(s, "/v1/completions", base)["choices"][0]["text"]);
  json random = base;  // llama-server's LLAMA_DEFAULT_SEED, which /props shows for "random", draws a fresh one too
  random["seed"] = 4294967295u;
  EXPECT_NE(post(s, "/v1/completions", random)["choices"][0]["text"],
            post(s, "/v1/completions", random)["choices"][0]["text"]);
}

// A streaming client that closes its connection ends its generation at the next commit, and SIGTERM during a
// generation ends the server promptly with status 0.
TEST(ServerHttp, ClientThatGoesAwayEndsItsGenerationAndSigtermEndsTheServer) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--ignore-eos"});  // plain decoding: about 4 ms a token here
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const int64_t n = 1500;
  const int fd = send_raw_post(s.port(), "/v1/completions", {{"prompt", kQuestion}, {"max_tokens", n}, {"stream", true}});
  ASSERT_GE(fd, 0);
  std::string received;
  char buf[4096];
  while (received.find("data: ") == std::string::npos) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    ASSERT_GT(got, 0);
    received.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  for (int i = 0; i < 600 && metric(s, "requests_total") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(metric(s, "requests_total"), 1);
  EXPECT_LT(metric(s, "tokens_predicted_total"), n) << "the generation ran to its end after the client left";
  EXPECT_NE(s.stderr_text().find("(client went away)"), std::string::npos) << s.stderr_text();

  // the same for a client of a whole (non-streamed) response that stops waiting: noticed within about 2 s
  const double before = metric(s, "tokens_predicted_total");
  const int fd2 = send_raw_post(s.port(), "/v1/completions", {{"prompt", kQuestion}, {"max_tokens", n}});
  ASSERT_GE(fd2, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(fd2);
  for (int i = 0; i < 600 && metric(s, "requests_total") < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(metric(s, "requests_total"), 2);
  EXPECT_LT(metric(s, "tokens_predicted_total") - before, n) << "the whole response's generation ran to its end";

  std::string interrupted;
  int queued_status = 0;
  std::thread long_request([&] {
    auto res = s.client().Post("/v1/completions", json{{"prompt", kQuestion}, {"max_tokens", n}}.dump(), "application/json");
    if (res) interrupted = res->body;
  });
  for (int i = 0; i < 200 && metric(s, "requests_processing") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::thread queued_request([&] {
    auto res = s.client().Post("/v1/completions", json{{"prompt", kQuestion}, {"max_tokens", 5}}.dump(), "application/json");
    if (res) queued_status = res->status;
  });
  for (int i = 0; i < 200 && metric(s, "requests_deferred") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < 200 && metric(s, "requests_processing") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "shutdown waited for the generation";
  long_request.join();
  queued_request.join();
  EXPECT_EQ(queued_status, 503) << "a request still waiting at shutdown is refused with its own status";
  // the cut-short generation says so instead of looking finished
  json cut = json::parse(interrupted, nullptr, false);
  ASSERT_TRUE(cut.is_object()) << interrupted;
  EXPECT_EQ(cut["error"]["code"], 503) << interrupted;
  EXPECT_NE(cut["error"]["message"].get<std::string>().find("shut down"), std::string::npos) << interrupted;
}

// SIGTERM during an echo's scoring (a 2048-token prompt with 20 alternatives: about 3 s on the CI machine's class of
// CPU, pieces of 256 tokens) stops it at the next piece: a 503 naming the scoring, and the shutdown within its 5 s.
TEST(ServerHttp, ShutdownStopsAnEchosScoring) {
  ServerProcess s({"-m", demo_dir() + "/target", "-c", "0"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  json ids = json::array();
  for (int i = 0; i < 2048; ++i) ids.push_back((i * 7919) % 150000 + 10);
  std::string body;
  std::thread request([&] {
    auto res = s.client().Post("/v1/completions",
                               json{{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 20}}.dump(),
                               "application/json");
    if (res) body = res->body;
  });
  for (int i = 0; i < 200 && metric(s, "requests_processing") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.stop(SIGTERM, 30), 0) << s.stderr_text();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "shutdown waited for the scoring";
  request.join();
  const json cut = json::parse(body, nullptr, false);
  ASSERT_TRUE(cut.is_object()) << body << "\n" << s.stderr_text();
  EXPECT_EQ(cut["error"]["code"], 503) << body;
  EXPECT_NE(cut["error"]["message"].get<std::string>().find("shut down while this request's prompt was scored"),
            std::string::npos) << body;
}

// SIGTERM during a keep-alive client's stream: the stream ends with its error event, the server closes the connection
// and exits well within its 5 s grace. (The listener stops once every response's provider has started; had it waited
// for the body to be written, the connection would sit in cpp-httplib's keep-alive wait, 5 s, and the process would
// leave through the grace's hard exit.)
TEST(ServerHttp, ShutdownDuringAKeepAliveStreamEndsItAndExitsPromptly) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--ignore-eos"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const std::string text = json{{"prompt", kQuestion}, {"max_tokens", 1800}, {"stream", true}}.dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n"
                              "Content-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) +
                              "\r\n\r\n" + text;
  const int fd = connect_raw(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string stream;
  std::thread reader([&] { stream = read_until_closed(fd); });
  for (int i = 0; i < 200 && metric(s, "requests_processing") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.stop(SIGTERM, 10), 0) << s.stderr_text();
  const auto exited = std::chrono::steady_clock::now() - t0;
  reader.join();
  EXPECT_LT(exited, std::chrono::milliseconds(4000)) << s.stderr_text();
  EXPECT_EQ(s.stderr_text().find("connections still open"), std::string::npos) << s.stderr_text();
  EXPECT_NE(stream.find("the server shut down during this generation"), std::string::npos) << stream.substr(0, 2000);
  EXPECT_EQ(stream.find("[DONE]"), std::string::npos) << "a cut stream has no [DONE]";
}

// Clients that leave while queued give their places back (the server's comment lines find a stream's client gone,
// the spaces of a whole response's chunked body the other's), and a client still sending its request when SIGTERM
// comes does not hold the shutdown past its 5 s grace.
TEST(ServerHttp, QueuedClientsThatLeaveFreeTheirPlacesAndHalfSentRequestsDoNotHoldShutdown) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--ignore-eos", "--max-queue", "2"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  std::thread long_request([&] {
    // about 7 s (4 ms a token): it outlasts the wait below, so only an abandoned place can empty the queue
    s.client().Post("/v1/completions", json{{"prompt", kQuestion}, {"max_tokens", 1800}}.dump(), "application/json");
  });
  for (int i = 0; i < 200 && metric(s, "requests_processing") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (const bool stream : {true, false}) {
    const int fd =
        send_raw_post(s.port(), "/v1/completions", {{"prompt", kQuestion}, {"max_tokens", 50}, {"stream", stream}});
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  for (int i = 0; i < 100 && metric(s, "requests_deferred") < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(metric(s, "requests_deferred"), 2);
  for (int i = 0; i < 200 && metric(s, "requests_deferred") > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(metric(s, "requests_deferred"), 0) << "requests whose clients left still hold the queue";
  // a half-sent request (headers, part of the body) and SIGTERM
  const std::string partial = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"pro";
  const int fd = connect_raw(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, partial.data(), partial.size()), static_cast<ssize_t>(partial.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.stop(SIGTERM, 20), 0) << s.stderr_text();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  ::close(fd);
  long_request.join();
}

// A whole response that takes over a second is sent chunked (with spaces while it generates), except to an HTTP/1.0
// client, which cannot take chunks: it gets Content-Length and the JSON alone, and a stream ended by the connection.
TEST(ServerHttp, LongWholeResponsesAreChunkedExceptForHttp10) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  ServerProcess s({"-m", demo_dir() + "/target", "--ignore-eos"});  // plain decoding: about 4 ms a token here
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  for (const std::string version : {"HTTP/1.0", "HTTP/1.1"}) {
    // HTTP/1.1: long enough (about 4 ms a token here) to pass the one second after which the answer is chunked
    const int64_t n = version == "HTTP/1.0" ? 600 : 1500;
    const std::string response =
        read_until_closed(send_raw_post(s.port(), "/v1/completions", {{"prompt", kQuestion}, {"max_tokens", n}}, version));
    const size_t split = response.find("\r\n\r\n");
    ASSERT_NE(split, std::string::npos) << response;
    const std::string head = response.substr(0, split);
    EXPECT_NE(head.find(" 200 "), std::string::npos) << head;
    if (version == "HTTP/1.0") {
      EXPECT_EQ(head.find("chunked"), std::string::npos) << head;
      json j = json::parse(response.substr(split + 4));
      EXPECT_EQ(j["usage"]["completion_tokens"], n);
    } else {
      EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
      EXPECT_NE(response.find("\r\n1\r\n \r\n"), std::string::npos) << "no space sent while generating";
    }
  }
  // a stream to an HTTP/1.0 client: plain events, ended by closing the connection
  const std::string response = read_until_closed(
      send_raw_post(s.port(), "/v1/completions", {{"prompt", kQuestion}, {"max_tokens", 20}, {"stream", true}}, "HTTP/1.0"));
  const size_t split = response.find("\r\n\r\n");
  ASSERT_NE(split, std::string::npos) << response;
  EXPECT_EQ(response.substr(0, split).find("chunked"), std::string::npos) << response.substr(0, split);
  std::vector<json> events = sse_events(response.substr(split + 4));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
}

// --compress: every response reports its compressor's work (the reply is `generate --compress`'s) and a cache of fewer
// slots than its positions (in bytes the demo beacon's feature ring outweighs what 160 tokens save); n choices report
// each their own and the top level their totals; /metrics counts it all.
TEST(ServerHttp, CompressedGenerationsReportTheirCompression) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  const std::string pair = "-m " + demo_dir() + "/target -md " + demo_dir() + "/draft";
  ServerProcess s({"-m", demo_dir() + "/target", "-md", demo_dir() + "/draft", "--compress", demo_dir() + "/beacon"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  const json chat = {
      {"messages", {{{"role", "user"}, {"content", kQuestion}}}}, {"max_tokens", 160}, {"ignore_eos", true}};
  const json whole = post(s, "/v1/chat/completions", chat);
  const json& c = whole["compression"];
  EXPECT_GT(c["events"].get<int64_t>(), 0) << c;
  EXPECT_LT(c["cache_slots"].get<int64_t>(), c["positions"].get<int64_t>()) << c;
  EXPECT_LT(c["slots"].get<int64_t>(), c["positions"].get<int64_t>()) << c;
  const CommandResult cli = run_specpress("generate " + pair + " -p \"" + std::string(kQuestion) +
                                          "\" --chat -n 160 --ignore-eos --json --compress " + demo_dir() + "/beacon");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(whole["choices"][0]["message"]["content"], json::parse(cli.out)["text"]);
  EXPECT_EQ(c["events"], json::parse(cli.out)["compression"]["events"]);

  json two = chat;
  two["n"] = 2, two["temperature"] = 0.9, two["seed"] = 3;
  const json both = post(s, "/v1/chat/completions", two);
  const json& total = both["compression"];
  ASSERT_EQ(both["choices"].size(), 2u);
  const json& c0 = both["choices"][0]["compression"];
  const json& c1 = both["choices"][1]["compression"];
  EXPECT_EQ(total["choices"], 2);
  EXPECT_EQ(total["events"], c0["events"].get<int64_t>() + c1["events"].get<int64_t>());
  EXPECT_EQ(total["positions"], c0["positions"].get<int64_t>() + c1["positions"].get<int64_t>());
  EXPECT_EQ(total["cache_bytes"], std::max(c0["cache_bytes"].get<int64_t>(), c1["cache_bytes"].get<int64_t>()));
  EXPECT_DOUBLE_EQ(total["effective_ratio"].get<double>(),
                   total["positions"].get<double>() / total["slots"].get<double>());
  EXPECT_EQ(metric(s, "compression_events_total"), c["events"].get<double>() + total["events"].get<double>());
  EXPECT_EQ(metric(s, "compression_slots_freed_total"),
            c["slots_freed"].get<double>() + total["slots_freed"].get<double>());
}

// Bad flags and a model that cannot load end the command with a message and a non-zero status.
TEST(ServerCli, BadFlagsAndModelsExitNonZeroNamingThem) {
  SPECPRESS_REQUIRE_DEMO_TOKENIZER();
  struct Case {
    std::vector<std::string> args;
    std::string message;
    bool before_listening = false;  // refused before the port is bound (needs no model)
  };
  const std::vector<Case> cases = {
      {{"-m", demo_dir() + "/target", "--port", "70000"}, "--port"},
      {{"-m", demo_dir() + "/target", "--compress", "bogus"}, "--compress: unknown compression method 'bogus'", true},
      {{"-m", demo_dir() + "/target", "-s", "-2"}, "-s/--seed: expected -1 (a fresh seed) or a decimal integer", true},
      {{"-m", demo_dir() + "/target", "--compress", demo_dir() + "/no-such-beacon"}, "no-such-beacon does not exist",
       true},
      {{"-m", demo_dir() + "/target", "--compress", "drop", "--compress-window", "0"}, "--compress-window: must be >= 1",
       true},
      {{"-m", demo_dir() + "/target", "--compress", "drop", "--reasoning-budget", "50"},
       "--reasoning-budget: cannot be combined with --compress", true},
      {{"-m", demo_dir() + "/no-such-model"}, "no-such-model"},
      {{"-m", demo_dir() + "/target", "-c", "99999"}, "-c/--ctx-size: 99999 exceeds"},
      {{"-m", demo_dir() + "/target", "-n", "0"}, "-n/--n-predict"},
      {{"-m", demo_dir() + "/target", "--block-size", "4"}, "--block-size: needs a draft"},
      {{"-m", demo_dir() + "/target", "--temp", "-1"}, "--temp"},
      {{"-m", demo_dir() + "/target", "--host", ""}, "--host: empty"},
      {{"-m", demo_dir() + "/target", "--max-queue", "-1"}, "--max-queue"},
      {{"-m", demo_dir() + "/target", "--reasoning-format", "r1"}, "--reasoning-format: expected none"},
      {{"-m", demo_dir() + "/target", "--reasoning-budget", "-2"}, "--reasoning-budget: expected -1 (thinking on)"},
      {{"-m", demo_dir() + "/target", "--reasoning-budget", "0", "--think"}, "--reasoning-budget 0 (thinking off) contradicts"},
      {{"-m", demo_dir() + "/target", "--chat-template-kwargs", "{\"enable_thinking\": 1}"},
       "--chat-template-kwargs: enable_thinking must be true or false"},
      {{"-m", demo_dir() + "/target", "--chat-template-kwargs", "{\"tools\": []}"}, "--chat-template-kwargs: \"tools\""},
      {{"-m", demo_dir() + "/target", "--chat-template-kwargs", ""}, "--chat-template-kwargs: expected a JSON object"},
      {{"-m", demo_dir() + "/target", "--chat-template-kwargs", "{enable_thinking}"}, "--chat-template-kwargs: not valid JSON"},
  };
  for (const Case& c : cases) {
    ServerProcess s(c.args);
    EXPECT_TRUE(s.exited()) << c.message;
    EXPECT_EQ(s.stop(SIGKILL, 5), 1) << c.message << "\n" << s.stderr_text();
    EXPECT_NE(s.stderr_text().find(c.message), std::string::npos) << s.stderr_text();
    if (c.before_listening) EXPECT_EQ(s.stderr_text().find("listening"), std::string::npos) << s.stderr_text();
  }
  // a port in use is an error, not a second server sharing it
  ServerProcess first({"-m", demo_dir() + "/target"});
  ASSERT_GT(first.port(), 0) << first.stderr_text();
  ServerProcess second({"-m", demo_dir() + "/target", "--port", std::to_string(first.port())});
  EXPECT_EQ(second.stop(SIGKILL, 5), 1) << second.stderr_text();
  EXPECT_NE(second.stderr_text().find("cannot listen there"), std::string::npos) << second.stderr_text();
}

#endif  // SPECPRESS_HAVE_SERVER

}  // namespace
