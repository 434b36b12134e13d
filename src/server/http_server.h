// http_server.h — `specpress serve`: an OpenAI-compatible (and Anthropic Messages) HTTP server over one target
// (and optionally its DFlash draft), with llama.cpp's conventions (engineering-notes.md §3.5–3.7): it listens before
// the model loads (/health answers 503 until ready; on the CUDA fast path the load builds the engine for the whole
// -c/--ctx-size, GenerationRunner::reserve, so no request waits for one, then warms up with a short generation unless
// --no-warmup), runs one generation at a time on one thread (batch 1: requests
// queue, up to --max-queue, then 503), streams Server-Sent Events as blocks are committed and puts llama.cpp's
// `timings` (with draft_n and draft_n_accepted) on every completion.
//
// Counting: `usage` and `timings.predicted_n` count the returned tokens (up to a stop string, whatever a DFlash
// block committed past it); draft_n and draft_n_accepted are the engine's. A whole (non-streamed) response that
// takes over a second is sent chunked, with a space of JSON whitespace each second while it generates, so that a
// client that goes away is noticed and its generation ends (HTTP/1.0 clients wait for Content-Length instead); an
// error after that point is the body's error object under status 200, and a client's read timeout does not fire.
// A stream sends an SSE comment line (": waiting") after a second without text, for the same purpose: a client that
// leaves while its request is queued gives its place back. Shutdown waits at most 5 s for open connections.
//
// Chat replies put Qwen3's thinking in reasoning_content (reasoning.h; --reasoning-format, or a request's
// reasoning_format); stop strings apply to the reply as generated, thinking included, before that split.
// Logprobs (logprobs_json.h): one entry a token the usage counts, in each API's form; the generation then runs the
// fast path's unpipelined loop. A stream sends each token's entry with the first chunk of text after it.
// /v1/completions' echo puts the prompt's text first (a stream's first chunk) and, with logprobs, the prompt tokens'
// entries (GenerationRunner::prompt_logprobs: the fast path's forward where the generations run there; a --compress
// server's runner takes the reference path only) before the reply's; max_tokens 0 with echo generates nothing, and
// max_tokens 1 draws its token from that forward's last row (decode::generate_one_from_logits) without a second
// forward over the prompt.
// return_tokens_as_token_ids (or --return-tokens-as-token-ids) names logprobs' tokens "token_id:ID", as vLLM does.
//
// Anthropic's Messages API (messages_request.h, messages_json.h) runs the same generations: its replies, event streams
// (a ping event, not a comment line, keeps a quiet one alive) and errors (the /v1/messages routes' 401 and 404 too)
// take Anthropic's form; x-api-key is accepted as well as the Bearer header.
//
// GET /slots reports the one slot as llama-server's does (what it runs, with its parameters and progress;
// ?fail_on_no_slot=1 answers 503 while it is busy); --no-slots turns it off. llama-server's slot actions (POST
// /slots/ID?action=save|restore|erase: prompt-cache files) get a 501 naming the action: there is no prompt cache.
//
// Routes: GET /health, /v1/health, /v1/models, /models, /props, /metrics, /slots; POST /v1/completions,
// /completions, /v1/chat/completions, /chat/completions, /completion (llama.cpp native), /v1/messages,
// /v1/messages/count_tokens (Anthropic), /tokenize, /detokenize, /apply-template; OPTIONS (CORS preflight) everywhere.
#pragma once
#include <cstdint>
#include <string>

#include "compress/policy.h"
#include "decode/sampler.h"

namespace specpress::server {

// cpp-httplib waits on a socket for the timeout in int milliseconds (poll): the longest --timeout it can keep.
constexpr int64_t kMaxTimeoutSeconds = 2147483;

struct ServerOptions {
  std::string model_dir, draft_dir;
  std::string host = "127.0.0.1";
  int64_t port = 8080;       // 0: any free port (printed when listening)
  // positions a request may use (prompt + output + block); 0: the model's maximum; -1: 4096 or the model's maximum
  // when that is smaller
  int64_t ctx_size = -1;
  int64_t n_predict = -1;    // default max_tokens; -1: as many as the context leaves
  int64_t block_size = 0;    // DFlash; 0: the draft's trained size
  decode::SamplingParams sampling;  // request defaults
  bool random_seed = true;          // requests without a seed draw one (false: sampling.seed, set by --seed)
  int64_t max_queue = 32;           // requests that may wait for the slot; past that, 503 at once
  bool enable_thinking = false;     // chat default
  // llama-server's --reasoning-budget: -1 thinking on, 0 off (the chat default, as --think sets it), when given; N > 0
  // thinking on with each think block capped at N tokens (decode/thinking_budget.h)
  int64_t reasoning_budget = -1;
  bool reasoning_budget_given = false;
  std::string chat_template_kwargs;  // llama-server's flag: a JSON object; {"enable_thinking": B} sets the default
  bool chat_template_kwargs_given = false;  // the flag was given (an empty value is refused)
  std::string reasoning_format = "auto";  // chat default: none, deepseek, deepseek-legacy or auto (= deepseek)
  bool ignore_eos = false;
  bool return_tokens_as_token_ids = false;  // vLLM's flag: logprobs name tokens "token_id:ID" by default
  bool slots = true;         // serve GET /slots (llama-server's --slots / --no-slots)
  bool warmup = true;        // a short greedy generation at load (llama-server's --warmup / --no-warmup)
  std::string alias;         // the model id clients see; empty: the model directory's name
  std::string api_key;  // when set, every route but /health needs "Authorization: Bearer KEY" or "X-Api-Key: KEY"
  std::string device = "auto", dtype = "auto";
  bool reference_path = false;
  std::string compress = "none";
  compress::Policy policy;
  int64_t timeout_s = 600;   // socket read/write timeout, 1..kMaxTimeoutSeconds
};

// Runs until SIGINT or SIGTERM (returns 0) or until the model fails to load (throws specpress::Error).
int run_server(const ServerOptions& options);

}  // namespace specpress::server
