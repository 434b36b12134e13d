// messages_json.cpp — see messages_json.h.
#include "server/messages_json.h"

#include "server/api_request.h"

namespace specpress::server {
namespace {
using json = nlohmann::ordered_json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage(int64_t input_tokens, int64_t output_tokens) {
  return {{"input_tokens", input_tokens},
          {"output_tokens", output_tokens},
          {"cache_creation_input_tokens", 0},  // no prompt cache: every prompt token is processed
          {"cache_read_input_tokens", 0}};
}

// stop_reason and stop_sequence
std::pair<const char*, json> stop_of(const Outcome& out) {
  if (out.finish_reason == "tool_calls") return {"tool_use", nullptr};
  if (out.stop_type == "word") return {"stop_sequence", out.stopping_word};
  if (out.stop_type == "eos") return {"end_turn", nullptr};
  return {"max_tokens", nullptr};
}

json message_object(const Job& job, const std::string& model_name, json content, const json& stop_reason,
                    const json& stop_sequence, const json& usage_object) {
  return {{"id", job.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_name},
          {"content", std::move(content)},
          {"stop_reason", stop_reason},
          {"stop_sequence", stop_sequence},
          {"usage", usage_object}};
}

json thinking_block(const std::string& thinking) {
  return {{"type", "thinking"}, {"thinking", thinking}, {"signature", ""}};
}
json text_block(const std::string& text) { return {{"type", "text"}, {"text", text}}; }
// Anthropic's ids are "toolu_..." where OpenAI's are "call_...": the same random part
std::string tool_use_id(const ToolCall& call) { return "toolu_" + call.id.substr(call.id.find('_') + 1); }
json tool_use_block(const ToolCall& call, json input) {
  return {{"type", "tool_use"}, {"id", tool_use_id(call)}, {"name", call.name}, {"input", std::move(input)}};
}

}  // namespace

json messages_response(const Job& job, const Outcome& out, const std::string& model_name, const json& timings) {
  json content = json::array();
  if (!out.reasoning.empty()) content.push_back(thinking_block(out.reasoning));
  if (!out.text.empty() || out.tool_calls.empty()) content.push_back(text_block(out.text));  // calls alone: no text
  for (const ToolCall& call : out.tool_calls) content.push_back(tool_use_block(call, json::parse(call.arguments)));
  const auto [stop_reason, stop_sequence] = stop_of(out);
  json j = message_object(job, model_name, std::move(content), stop_reason, stop_sequence,
                          usage(out.result.prompt_tokens, out.completion_tokens));
  j["timings"] = timings;
  if (!out.compression.is_null()) j["compression"] = out.compression;
  return j;
}

json anthropic_error(const json& openai_error) {
  const json& e = openai_error.at("error");
  const int status = e.value("code", 500);
  const char* type = status == 400   ? "invalid_request_error"
                     : status == 401 ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                                     : "api_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.value("message", "")}}}};
}

std::string messages_event(const json& data) {
  return "event: " + data.at("type").get<std::string>() + "\ndata: " + dump(data) + "\n\n";
}

std::string MessagesStream::start() const {
  return messages_event({{"type", "message_start"},
                         {"message", message_object(job_, model_name_, json::array(), nullptr, nullptr,
                                                    usage(static_cast<int64_t>(job_.prompt.size()), 0))}});
}

std::string MessagesStream::open(Block block) {
  std::string s = close();
  block_ = block;
  ++index_;
  text_sent_ |= block == Block::kText;
  return s + messages_event({{"type", "content_block_start"},
                             {"index", index_},
                             {"content_block", block == Block::kText ? text_block("") : thinking_block("")}});
}

std::string MessagesStream::close() {
  if (block_ == Block::kNone) return "";
  block_ = Block::kNone;
  return messages_event({{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessagesStream::tool_use(const ToolCall& call) {
  std::string s = close();
  ++index_;
  calls_sent_ = true;
  s += messages_event(
      {{"type", "content_block_start"}, {"index", index_}, {"content_block", tool_use_block(call, json::object())}});
  s += messages_event({{"type", "content_block_delta"},
                       {"index", index_},
                       {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
  return s + messages_event({{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessagesStream::text(const std::string& reasoning, const std::string& content) {
  std::string s;
  if (!reasoning.empty()) {
    if (block_ != Block::kThinking) s += open(Block::kThinking);
    s += messages_event({{"type", "content_block_delta"},
                         {"index", index_},
                         {"delta", {{"type", "thinking_delta"}, {"thinking", reasoning}}}});
  }
  if (!content.empty()) {
    if (block_ != Block::kText) s += open(Block::kText);
    s += messages_event({{"type", "content_block_delta"},
                         {"index", index_},
                         {"delta", {{"type", "text_delta"}, {"text", content}}}});
  }
  return s;
}

std::string MessagesStream::ping() { return messages_event({{"type", "ping"}}); }

std::string MessagesStream::finish(const Outcome& out, const json& timings) {
  std::string s;
  if (!text_sent_ && !calls_sent_) s += open(Block::kText);
  s += close();
  const auto [stop_reason, stop_sequence] = stop_of(out);
  json delta = {{"type", "message_delta"},
                {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}},
                {"usage", {{"output_tokens", out.completion_tokens}}},
                {"timings", timings}};
  if (!out.compression.is_null()) delta["compression"] = out.compression;
  return s + messages_event(delta) + messages_event({{"type", "message_stop"}});
}

std::string MessagesStream::error(const json& openai_error) { return messages_event(anthropic_error(openai_error)); }

}  // namespace specpress::server
