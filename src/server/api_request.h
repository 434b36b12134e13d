// api_request.h — the JSON bodies of the server's generation endpoints, parsed and checked before any work:
// OpenAI's /v1/completions and /v1/chat/completions and llama.cpp's native /completion (Anthropic's /v1/messages:
// messages_request.h, into the same CompletionRequest). Every field the engine cannot honour is refused by name
// (n > 1, a forced tool call, ...) rather than ignored; unknown fields are refused too, so a misspelt parameter never
// silently does nothing.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decode/generation.h"
#include "decode/sampler.h"
#include "server/reasoning.h"
#include "tokenizer/chat_template.h"

namespace specpress::server {

enum class Api { kCompletions, kChatCompletions, kNativeCompletion, kMessages };

// What a request gets for the fields it leaves out: the server's flags.
struct RequestDefaults {
  int64_t max_tokens = -1;  // -1: as many as the context size leaves
  decode::SamplingParams sampling;
  bool random_seed = false;  // no "seed" in the request: a fresh one each time
  bool enable_thinking = false;  // chat: Qwen3's enable_thinking (off: what the DFlash drafts are trained on)
  int64_t thinking_budget = -1;  // chat and messages: --reasoning-budget N > 0 (-1: no cap)
  ReasoningFormat reasoning_format = ReasoningFormat::kDeepseek;  // chat: --reasoning-format
  bool tokens_as_ids = false;  // --return-tokens-as-token-ids
};

struct CompletionRequest {
  Api api = Api::kCompletions;
  // The prompt: text, token ids, or (chat) messages.
  std::optional<std::string> prompt_text;
  std::vector<int64_t> prompt_ids;
  std::vector<tok::ChatMessage> messages;
  // chat: the tools' JSON as the template writes them (python_json), and whether the reply's tool calls are taken
  // out of its text (tools given and tool_choice not "none")
  std::vector<std::string> tools;
  bool tool_calls = false;
  // Messages API: the text of a last assistant message, which the reply continues (after the template's empty think
  // block, as HF's continue_final_message renders Qwen3's last assistant turn; the request's thinking does not apply)
  std::optional<std::string> assistant_prefill;
  bool enable_thinking = false;
  // chat and messages with thinking on: the think block's cap in tokens (decode/thinking_budget.h; vLLM's
  // thinking_token_budget, the Messages API's thinking.budget_tokens), -1 none
  int64_t thinking_budget = -1;
  bool thinking_budget_given = false;  // by the request (else the server's --reasoning-budget, or none)
  // chat and messages: the thinking's place in the reply (messages: kDeepseek = thinking blocks); else none
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  int64_t max_tokens = -1;  // -1: as many as the context size leaves; 0 (echo only): the prompt scored, no output
  bool max_tokens_given = false;  // false: the server's default, which the context may shorten
  decode::SamplingParams sampling;  // logit_bias: the request's token ids (its field replaces the server's default)
  // logit_bias entries named by text, each of whose tokens gets the bias (the server tokenizes them)
  std::vector<std::pair<std::string, double>> logit_bias_texts;
  bool random_seed = false;  // seed -1 (or none, where the server's default is random): the server draws one
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;
  // -1: none; else each output token's log-probability with this many alternatives (chat: logprobs and
  // top_logprobs; /v1/completions: logprobs; /completion: n_probs)
  int64_t logprobs = -1;
  // /v1/completions: the prompt's text before the reply, and with logprobs the prompt tokens' own (the first null),
  // as OpenAI's legacy completions and vLLM return them for scoring (lm-evaluation-harness's loglikelihood)
  bool echo = false;
  // chat and /v1/completions (vLLM's return_tokens_as_token_ids): logprobs name tokens "token_id:ID"
  bool tokens_as_ids = false;
  std::string model;  // as the client named it (echoed back; one model is served)
  // chat and /v1/completions: choices, generated one after another on the slot; choice i samples with seed + i (a
  // random seed each where the request has none); greedy choices are alike
  int64_t n = 1;
};
// A request's choices run one after another on the one slot, holding it for all of them: a small cap.
constexpr int64_t kMaxChoices = 16;

// Throws specpress::Error naming the field and what was expected. `api`: any but kMessages (messages_request.h).
// `ordered`: parse_ordered_fields' of the same body, whose tools and messages keep the client's key order in the
// prompt (without it, or for a field it lacks, the body's own value is taken: its keys sorted).
CompletionRequest parse_completion_request(const nlohmann::json& body, Api api, const RequestDefaults& defaults,
                                           const nlohmann::ordered_json& ordered = nullptr);

// The request body as JSON, or an Error saying why it is not a JSON object (also for values nested deeper than
// 32 levels, which no endpoint takes: copying or printing one a hundred thousand levels deep would overflow the stack).
nlohmann::json parse_body(const std::string& body);

// The body's "tools" and "messages" with every object's keys in the order the client wrote them (the chat template
// writes tools and tool-call arguments as they came); the other fields are skipped while parsing. An object there
// with more than 4096 keys is an Error: an ordered object finds its keys by a linear search, so a huge one would take
// quadratic time, which parse_body's sorted objects do not (a logit_bias of any size stays fast).
nlohmann::ordered_json parse_ordered_fields(const std::string& body);

// Request field `key` (its value `v` in the sorted body) from `ordered` when that has it, else `v` itself.
nlohmann::ordered_json ordered_field(const nlohmann::ordered_json& ordered, const std::string& key,
                                     const nlohmann::json& v);

// A JSON value for an error message: compact, ASCII, at most about 60 characters.
std::string brief(const nlohmann::json& value);

}  // namespace specpress::server
