// openai_json.cpp — see openai_json.h.
#include "server/openai_json.h"

#include "cli/common.h"

namespace specpress::server {
using json = nlohmann::ordered_json;

json usage_json(const Outcome& out) {
  const int64_t p = out.result.prompt_tokens, c = out.completion_tokens;
  return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
}

json usage_json(const std::vector<Outcome>& choices) {
  Outcome all = choices.front();  // the prompt once
  for (size_t i = 1; i < choices.size(); ++i) all.completion_tokens += choices[i].completion_tokens;
  return usage_json(all);
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

// The tokens whose logprobs a reply returns: the echoed prompt's, then those the usage counts (up to the one
// completing a stop string).
std::vector<LoggedToken> returned_logprobs(const Outcome& out) {
  std::vector<LoggedToken> returned = out.echo_logprobs;
  const decode::GenerationResult& r = out.result;
  for (int64_t i = 0; i < out.completion_tokens && i < static_cast<int64_t>(r.logprobs.size()); ++i)
    returned.push_back({r.output_ids[i], r.logprobs[i]});
  return returned;
}

// One choice of a completions or chat response: its text or message, its logprobs and its finish_reason.
json choice_json(const Job& job, const Outcome& out, int64_t index, const LogprobsJson& format) {
  json choice = {{"index", index}};
  if (job.request.api == Api::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", out.text}};
    if (!out.reasoning.empty()) choice["message"]["reasoning_content"] = out.reasoning;
    if (!out.tool_calls.empty()) {
      if (out.text.empty()) choice["message"]["content"] = nullptr;  // calls alone, as OpenAI's
      json calls = json::array();
      for (const ToolCall& call : out.tool_calls) calls.push_back(tool_call_json(call));
      choice["message"]["tool_calls"] = std::move(calls);
    }
  } else {
    choice["text"] = out.text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = out.finish_reason;
  json holder = {{"choices", json::array({std::move(choice)})}};  // where add_logprobs writes a choice's
  int64_t text_offset = 0;
  add_logprobs(holder, job, format, returned_logprobs(out), text_offset);
  return std::move(holder["choices"][0]);
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
    int64_t text_offset = 0;
    add_logprobs(j, job, format, returned_logprobs(out), text_offset);
  } else {
    j = {{"id", job.id},
         {"object", job.request.api == Api::kChatCompletions ? "chat.completion" : "text_completion"},
         {"created", job.created},
         {"model", model_name},
         {"choices", json::array({choice_json(job, out, 0, format)})},
         {"usage", usage_json(out)},
         {"timings", timings_json(out)}};
  }
  if (!out.compression.is_null()) j["compression"] = out.compression;
  return j;
}

Outcome merged_outcome(const std::vector<Outcome>& choices) {
  Outcome all = choices.front();
  decode::GenerationResult& r = all.result;
  for (size_t i = 1; i < choices.size(); ++i) {
    const Outcome& o = choices[i];
    all.completion_tokens += o.completion_tokens;
    r.prompt_tokens += o.result.prompt_tokens;  // each choice prefills the prompt
    r.output_ids.insert(r.output_ids.end(), o.result.output_ids.begin(), o.result.output_ids.end());
    r.acceptance_lengths.insert(r.acceptance_lengths.end(), o.result.acceptance_lengths.begin(),
                                o.result.acceptance_lengths.end());
    r.prefill_ms += o.result.prefill_ms;
    r.first_draft_ms += o.result.first_draft_ms;
    r.decode_ms += o.result.decode_ms;
    r.draft_ms += o.result.draft_ms;
    r.verify_ms += o.result.verify_ms;
  }
  return all;
}

json merged_compression(const std::vector<Outcome>& choices) {
  json all = choices.front().compression;
  // a choice that ended before its generation (a client gone) has no object: it adds nothing
  auto value = [](const Outcome& o, const char* key) {
    return o.compression.is_object() && o.compression.contains(key) ? o.compression[key].get<double>() : 0.0;
  };
  for (const char* key : {"events", "tokens_compressed", "slots_freed", "positions", "slots", "overhead_ms"}) {
    double sum = 0;  // counts stay integers in the JSON below
    for (const Outcome& o : choices) sum += value(o, key);
    all[key] = all[key].is_number_integer() ? json(static_cast<int64_t>(sum)) : json(sum);
  }
  for (const char* key : {"peak_slots", "cache_slots", "cache_bytes", "uncompressed_cache_bytes"}) {
    double most = 0;  // one generation at a time: the largest cache any choice held
    for (const Outcome& o : choices) most = std::max(most, value(o, key));
    all[key] = static_cast<int64_t>(most);
  }
  const double slots = all["slots"].get<double>();
  all["effective_ratio"] = slots > 0 ? all["positions"].get<double>() / slots : 1.0;
  all["choices"] = choices.size();
  return all;
}

json response_json(const Job& job, const std::vector<Outcome>& choices, const std::string& model_name,
                   const LogprobsJson& format) {
  json j = response_json(job, choices.front(), model_name, format);
  if (choices.size() == 1 || job.request.api == Api::kNativeCompletion) return j;
  for (size_t i = 1; i < choices.size(); ++i)
    j["choices"].push_back(choice_json(job, choices[i], static_cast<int64_t>(i), format));
  j["usage"] = usage_json(choices);
  j["timings"] = timings_json(merged_outcome(choices));
  if (j.contains("compression")) {  // each choice its own; the top level their totals, as timings and usage
    for (size_t i = 0; i < choices.size(); ++i) j["choices"][i]["compression"] = choices[i].compression;
    j["compression"] = merged_compression(choices);
  }
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
