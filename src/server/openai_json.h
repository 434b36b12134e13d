// openai_json.h — the replies of the OpenAI-compatible routes (/v1/completions, /v1/chat/completions) and of
// llama.cpp's /completion: whole responses, stream chunks, usage, llama.cpp's timings (with tau and the DFlash draft
// counts) and the logprobs in each API's form (logprobs_json.h). Anthropic's replies are messages_json.h's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation_job.h"
#include "server/logprobs_json.h"

namespace specpress::server {

// prompt_tokens, completion_tokens (the returned tokens, up to a stop string), total_tokens.
nlohmann::ordered_json usage_json(const Outcome& out);
// The same over a request's choices: the prompt once, the completions of all.
nlohmann::ordered_json usage_json(const std::vector<Outcome>& choices);
// llama.cpp's timings object (cli::result_json's), plus tau and the block size for DFlash.
nlohmann::ordered_json timings_json(const Outcome& out);
// When the request asks for logprobs: `tokens`' as its API writes them, into a response or chunk (`j`).
// text_offset: /v1/completions' characters before tokens[0], advanced past them.
void add_logprobs(nlohmann::ordered_json& j, const Job& job, const LogprobsJson& format,
                  const std::vector<LoggedToken>& tokens, int64_t& text_offset);
// The whole response (completions, chat or llama.cpp's), with the logprobs of the tokens the usage counts.
nlohmann::ordered_json response_json(const Job& job, const Outcome& out, const std::string& model_name,
                                     const LogprobsJson& format);
// A request's choices (CompletionRequest::n) as one response: each choice's own entry (its index, text, logprobs
// and finish_reason; with compression its own object too), usage (usage_json) and timings (merged_outcome) over all.
nlohmann::ordered_json response_json(const Job& job, const std::vector<Outcome>& choices,
                                     const std::string& model_name, const LogprobsJson& format);
// The choices' outcomes added up, for timings: the work of every choice (each prefills the prompt: prompt_n counts
// it each time), completion tokens, times and the DFlash verify steps.
Outcome merged_outcome(const std::vector<Outcome>& choices);
// With --compress, the choices' compression objects as one: counts and times summed (each choice compresses its own
// generation), the cache sizes and peak slots the largest, the effective ratio of the sums, and "choices".
nlohmann::ordered_json merged_compression(const std::vector<Outcome>& choices);
// An OpenAI tool call: {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::ordered_json tool_call_json(const ToolCall& call);
// A chat stream's chunk that carries one whole tool call, the response's `index`-th (delta.tool_calls).
nlohmann::ordered_json tool_call_chunk_json(const Job& job, const std::string& model_name, const ToolCall& call,
                                            int64_t index);
// One streamed chunk of text (finish_reason null) or the last one (text empty, finish_reason set). delta_field:
// "content", or "reasoning_content" for a chat chunk of thinking.
nlohmann::ordered_json chunk_json(const Job& job, const std::string& model_name, const std::string& text,
                                  const nlohmann::ordered_json& finish_reason, const char* delta_field = "content");

}  // namespace specpress::server
