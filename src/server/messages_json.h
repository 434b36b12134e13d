// messages_json.h — the Anthropic Messages API's replies (messages_request.h): the whole message object, the SSE
// event sequence of a stream, and errors in Anthropic's form. A reply's content is a thinking block (when Qwen3
// thought; its signature empty: nothing is signed here), one text block (left out only when empty and the reply made
// tool calls), then a tool_use block for each call. stop_reason: "end_turn" (eos), "stop_sequence" (with
// stop_sequence), "tool_use" (a stop after tool calls) or "max_tokens". A stream sends the blocks as the reply makes
// them, so text the model writes after a call (rare: Qwen3 ends its turn after its calls) comes in a text block after
// that tool_use block, where the whole message has all the text before the calls. Like every specpress reply, the
// message and the stream's message_delta carry llama.cpp's `timings` (DFlash: tau, draft_n, draft_n_accepted).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/generation_job.h"

namespace specpress::server {

// The whole reply. `model_name`: the name the request gave, else the server's alias.
nlohmann::ordered_json messages_response(const Job& job, const Outcome& out, const std::string& model_name,
                                         const nlohmann::ordered_json& timings);

// An OpenAI-form error object ({"error": {"code", "message", "type"}}) in Anthropic's form
// ({"type": "error", "error": {"type", "message"}}), its type from the HTTP status.
nlohmann::ordered_json anthropic_error(const nlohmann::ordered_json& openai_error);

// One SSE event in Anthropic's framing: "event: TYPE\ndata: JSON\n\n", TYPE being data["type"].
std::string messages_event(const nlohmann::ordered_json& data);

// A stream's events, in order: start(), then text() for each piece of the reply as it becomes final (and ping() while
// none comes), then finish() or error(). Each returns the SSE text to send.
class MessagesStream {
 public:
  MessagesStream(const Job& job, std::string model_name) : job_(job), model_name_(std::move(model_name)) {}
  std::string start() const;  // message_start (input tokens counted, no output yet)
  // thinking_delta events in a thinking block, then text_delta events in a text block (a block opens with its first
  // piece; the thinking block closes when the text begins)
  std::string text(const std::string& reasoning, const std::string& content);
  // a whole tool_use block: its start (input {}), one input_json_delta with the input's JSON text, its stop
  std::string tool_use(const ToolCall& call);
  static std::string ping();
  // closes the open blocks (a text block is always sent, empty if need be, unless tool_use blocks were), then
  // message_delta and message_stop
  std::string finish(const Outcome& out, const nlohmann::ordered_json& timings);
  // an error event (the stream ends without message_stop)
  static std::string error(const nlohmann::ordered_json& openai_error);

 private:
  enum class Block { kNone, kThinking, kText };
  std::string open(Block block);
  std::string close();

  const Job& job_;
  std::string model_name_;
  Block block_ = Block::kNone;
  int64_t index_ = -1;  // the open (or last) block's index
  bool text_sent_ = false;
  bool calls_sent_ = false;
};

}  // namespace specpress::server
