// messages_request.h — Anthropic's Messages API request (POST /v1/messages, /v1/messages/count_tokens), which
// llama-server and vLLM also serve to Anthropic clients, parsed into the server's CompletionRequest:
//   - `system`: a string or text blocks, the system turn; `messages`: user and assistant turns whose content is a
//     string or text blocks, joined as they are (no separator, as the chat API joins text parts; an assistant's
//     thinking blocks are dropped: Qwen3's template drops earlier thinking), an assistant's tool_use blocks (its
//     tool_calls) and a user's tool_result blocks (role "tool" turns before the user's text); a last assistant
//     message is a prefill that the reply continues (refused with thinking enabled by the request, as llama.cpp
//     refuses it, and when it has tool_use blocks);
//   - tools (client tools, as OpenAI function tools for the template) and tool_choice auto or none (any and tool
//     would need constrained decoding);
//   - max_tokens, stop_sequences, stream, temperature, top_p, top_k, metadata (ignored), and, as llama.cpp's
//     extensions, min_p and seed;
//   - thinking {"type": "enabled", "budget_tokens": N} turns Qwen3's thinking on (its text comes back as thinking
//     blocks), {"type": "disabled"} off; without it the server's default applies (off unless --think). The budget
//     is checked as Anthropic checks it (>= 1024, < max_tokens) but not enforced: Qwen3 ends its thinking itself,
//     and max_tokens bounds the whole reply.
// Images, documents and server tools are refused by name, as are unknown fields. count_tokens takes only the
// prompt's fields (model, system, messages, thinking, tools, tool_choice).
#pragma once
#include <nlohmann/json.hpp>

#include "server/api_request.h"

namespace specpress::server {

enum class MessagesRoute { kGenerate, kCountTokens };

// Throws specpress::Error naming the field and what was expected. `ordered`: as parse_completion_request's.
CompletionRequest parse_messages_request(const nlohmann::json& body, MessagesRoute route,
                                         const RequestDefaults& defaults,
                                         const nlohmann::ordered_json& ordered = nullptr);

}  // namespace specpress::server
