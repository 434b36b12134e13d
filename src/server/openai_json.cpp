// openai_json.cpp — see openai_json.h.
#include "server/openai_json.h"

#include "cli/common.h"

namespace specpress::server {
using json = nlohmann::ordered_json;

json usage_json(const Outcome& out) {
  const int64_t p = out.result.prompt_tokens, c = out.completion_tokens;
  return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
}

// llama.cpp's timings object (cli::result_json's), plus tau and the block size for DFlash. predicted_n counts the
// returned tokens (up to a stop string, as usage does); the draft counts are the engine's.
json timings_json(const Outcome& out) {
  json full = cli::result_json(out.result);
  json t = full["timings"];
  const double ms = out.result.decode_ms;
  t["predicted_n"] = out.completion_tokens;
  t["predicted_per_token_ms"] = out.completion_tokens > 0 ? ms / static_cast<double>(out.completion_tokens) : 0.0;
  t["predicted_per_second"] = ms > 0 ? 1e3 * static_cast<double>(out.completion_tokens) / ms : 0.0;
  if (out.result.block_size > 1) {
    t["tau"] = full["mean_acceptance_length"];
    t["block_size"] = out.result.block_size;
  }
  return t;
}

void add_logprobs(json& j, const Job& job, const LogprobsJson& format, const std::vector<LoggedToken>& tokens,
                  int64_t& text_offset) {
  if (job.request.logprobs < 0) return;
  switch (job.request.api) {
    case Api::kNativeCompletion: j["completion_probabilities"] = format.native(tokens); break;
    case Api::kChatCompletions: j["choices"][0]["logprobs"] = format.chat(tokens); break;
    case Api::kCompletions: j["choices"][0]["logprobs"] = format.completion(tokens, text_offset); break;
    case Api::kMessages: break;  // the Messages API has no logprobs (its parser takes none)
  }
}

json tool_call_json(const ToolCall& call) {
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

json response_json(const Job& job, const Outcome& out, const std::string& model_name, const LogprobsJson& format) {
  json j;
  if (job.request.api == Api::kNativeCompletion) {
    j = {{"content", out.text},
         {"id_slot", 0},
         {"stop", true},
         {"model", model_name},
         {"tokens_predicted", out.completion_tokens},
         {"tokens_evaluated", out.result.prompt_tokens},
         {"stop_type", out.stop_type},
         {"stopping_word", out.stopping_word},
         {"truncated", false},
         {"timings", timings_json(out)}};
  } else {
    json choice = {{"index", 0}};
    if (job.request.api == Api::kChatCompletions) {
      choice["message"] = {{"role", "assistant"}, {"content", out.text}};
      if (!out.reasoning.empty()) choice["message"]["reasoning_content"] = out.reasoning;
      if (!out.tool_calls.empty()) {
        if (out.text.empty()) choice["message"]["content"] = nullptr;  // calls alone, as OpenAI's
        json calls = json::array();
        for (const ToolCall& call : out.tool_calls) calls.push_back(tool_call_json(call));
        choice["message"]["tool_calls"] = std::move(calls);
      }
    } else
      choice["text"] = out.text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = out.finish_reason;
    j = {{"id", job.id},
         {"object", job.request.api == Api::kChatCompletions ? "chat.completion" : "text_completion"},
         {"created", job.created},
         {"model", model_name},
         {"choices", json::array({choice})},
         {"usage", usage_json(out)},
         {"timings", timings_json(out)}};
  }
  if (!out.compression.is_null()) j["compression"] = out.compression;
  // the returned tokens': those the usage counts (up to the one completing a stop string)
  std::vector<LoggedToken> returned = out.echo_logprobs;
  const decode::GenerationResult& r = out.result;
  for (int64_t i = 0; i < out.completion_tokens && i < static_cast<int64_t>(r.logprobs.size()); ++i)
    returned.push_back({r.output_ids[i], r.logprobs[i]});
  int64_t text_offset = 0;
  add_logprobs(j, job, format, returned, text_offset);
  return j;
}

json chunk_json(const Job& job, const std::string& model_name, const std::string& text, const json& finish_reason,
                const char* delta_field) {
  if (job.request.api == Api::kNativeCompletion) return {{"content", text}, {"id_slot", 0}, {"stop", false}};
  json choice = {{"index", 0}};
  if (job.request.api == Api::kChatCompletions)
    choice["delta"] = finish_reason.is_null() ? json{{delta_field, text}} : json::object();
  else
    choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  json j = {{"id", job.id},
            {"object", job.request.api == Api::kChatCompletions ? "chat.completion.chunk" : "text_completion"},
            {"created", job.created},
            {"model", model_name},
            {"choices", json::array({choice})}};
  if (job.request.include_usage) j["usage"] = nullptr;
  return j;
}

json tool_call_chunk_json(const Job& job, const std::string& model_name, const ToolCall& call, int64_t index) {
  json chunk = chunk_json(job, model_name, "", nullptr);
  json delta_call = {{"index", index}};
  delta_call.update(tool_call_json(call));  // index first, then the call's own fields
  chunk["choices"][0]["delta"] = {{"tool_calls", json::array({delta_call})}};
  return chunk;
}

}  // namespace specpress::server
