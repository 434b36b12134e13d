// generation_job.h — a checked request ready for the generation slot (Job) and what its generation produced
// (Outcome), as the server's routes and each API's response writers (http_server.cpp, messages_json.h) share them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decode/generation.h"
#include "decode/thinking_budget.h"
#include "server/api_request.h"
#include "server/logprobs_json.h"
#include "server/tool_calls.h"

namespace specpress::server {

struct Job {
  CompletionRequest request;
  std::vector<int64_t> prompt;
  decode::GenerationParams params;
  decode::ThinkingBudget thinking;  // the request's cap on its think block, when it has one and thinks
  std::string id;
  int64_t created = 0;
};

struct Outcome {
  decode::GenerationResult result;
  std::string text;       // the reply (after the prompt's text, with echo), or (chat and messages, deepseek
                          // reasoning format) its answer
  std::string reasoning;  // chat and messages: the thinking (reasoning.h)
  std::vector<ToolCall> tool_calls;  // chat with tools: the calls the reply made (tool_calls.h)
  int64_t completion_tokens = 0;  // output tokens up to the end of the text (the one completing a stop string)
  std::string finish_reason;  // "stop" (eos or a stop string), "tool_calls" (a stop after tool calls) or "length"
  std::string stop_type;      // llama.cpp's: "eos", "word" or "limit"
  std::string stopping_word;
  nlohmann::ordered_json compression;  // null unless the server compresses
  // echo with logprobs: the prompt tokens' entries (the first unscored), before the output's
  std::vector<LoggedToken> echo_logprobs;
};

}  // namespace specpress::server
