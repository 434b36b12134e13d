// http_server.cpp — see http_server.h. Handlers parse and check a request on their own thread (cpp-httplib's pool)
// and queue it for the one generation thread (the slot), which runs every generation, so that all model work (and
// CUDA) stays on one thread. The handler then relays what the generation produces: SSE events as each block is
// committed, or the whole response. A generation ends early (GenerationParams::cancel) on a stop string, a client
// that went away, or shutdown.
#include "server/http_server.h"

#include <httplib.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <utility>

#include <sys/socket.h>

#include <fmt/chrono.h>

#include "cli/common.h"
#include "compress/beacon.h"
#include "compress/kv_compressor.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "decode/logprobs.h"
#include "model/config_json.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"
#include "server/api_request.h"
#include "server/generation_job.h"
#include "server/json_fields.h"
#include "server/logprobs_json.h"
#include "server/messages_json.h"
#include "server/messages_request.h"
#include "server/openai_json.h"
#include "server/reasoning.h"
#include "server/stop_strings.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"
#include "tools/build_info.h"
#include "tools/prompting.h"
#include "tools/runner.h"

namespace specpress::server {
namespace {

constexpr uint64_t kMaxBodyBytes = 64u << 20;  // a request body's cap (the 413 errors say 64 MiB)

using json = nlohmann::ordered_json;

std::atomic<bool> g_signalled{false};
// The first SIGINT/SIGTERM asks for a clean shutdown (generations end at their next commit); a second one
// gets the default action.
extern "C" void on_stop_signal(int sig) {
  g_signalled = true;
  std::signal(sig, SIG_DFL);
}

// An error the client caused (or the server's state, e.g. 503 while loading): sent as OpenAI's error object.
struct HttpError : Error {
  HttpError(int status, const std::string& message, std::string type = "invalid_request_error")
      : Error(message), status(status), type(std::move(type)) {}
  int status;
  std::string type;
};

json error_json(int status, const std::string& message, const std::string& type) {
  return {{"error", {{"code", status}, {"message", message}, {"type", type}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json; charset=utf-8");
}

// The error object for the exception being handled.
json current_error_json() {
  try {
    throw;
  } catch (const HttpError& e) {
    return error_json(e.status, e.what(), e.type);
  } catch (const Error& e) {
    return error_json(400, e.what(), "invalid_request_error");
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong type met while reading a request
    return error_json(400, fmt::format("request body: {}", e.what()), "invalid_request_error");
  } catch (const c10::Error& e) {
    return error_json(500, e.what_without_backtrace(), "server_error");
  } catch (const std::exception& e) {
    return error_json(500, e.what(), "server_error");
  } catch (...) {
    return error_json(500, "an unknown error", "server_error");
  }
}

// The Messages API's routes answer errors in Anthropic's form.
bool anthropic_route(const std::string& path) {
  return path == "/v1/messages" || path.rfind("/v1/messages/", 0) == 0;
}

// The error object of a generation that failed.
json error_json_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (...) {
    return current_error_json();
  }
}

// Choice `c` of a request: choice 0's job with seed + c (a fresh random seed where the request gave none).
Job choice_job(const Job& first, int64_t c) {
  Job job = first;
  if (c > 0) job.params.sampling.seed = first.request.random_seed ? cli::fresh_seed() : first.params.sampling.seed + c;
  return job;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string completion_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}{:x}{:06x}", prefix, salt & 0xffffffff, counter++);
}

// What the model load produces; read-only once `ready` is set.
struct Model {
  std::unique_ptr<model::Qwen3Model> target;
  std::unique_ptr<model::DFlashDraft> draft;
  std::optional<tok::Tokenizer> tokenizer;
  std::unique_ptr<tools::GenerationRunner> runner;
  compress::Policy policy;
  std::vector<int64_t> eos_ids;
  int64_t ctx_size = 0;
  int64_t reserve = 1;  // positions a generation needs past its output: the DFlash block, 1 for plain decoding
  double engine_ms = 0;  // the fast path's engine for ctx_size positions: built and captured at load, in this time
  double warmup_ms = -1;  // the warm-up generation at load (-1: none, --no-warmup)
};

// One queued request, as the slot thread and the request's HTTP thread share it (under `mutex`): its choices
// (CompletionRequest::n), generated one after another.
struct Generation {
  Job job;  // choice 0's (choice_job gives the others theirs)
  std::mutex mutex;
  std::condition_variable changed;
  bool started = false, done = false;
  const std::chrono::steady_clock::time_point submitted_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point started_at;
  // [choice]: final reasoning, text and tool calls the HTTP thread has not taken yet, and the logprobs of the tokens
  // counted since (when asked for)
  std::vector<ReplyParts> fresh;
  std::vector<std::vector<LoggedToken>> fresh_logprobs;
  std::vector<Outcome> outcomes;  // the choices that ended, in order: every one when done without error
  std::exception_ptr error;       // when done with one
  std::atomic<bool> client_gone{false};
  std::atomic<int64_t> decoded{0};  // output tokens the running choice committed so far, for /slots
  std::atomic<int64_t> choice{0};   // the running choice, for /slots
  int64_t task = 0;                 // the slot's count of generations started, this one's (set when it starts)

  explicit Generation(Job j)
      : job(std::move(j)), fresh(static_cast<size_t>(job.request.n)),
        fresh_logprobs(static_cast<size_t>(job.request.n)) {}
  int64_t choices() const { return job.request.n; }
  // The HTTP thread: waits until `ready(*this)` holds or `timeout` passes; returns with the lock held.
  template <typename Ready>
  std::unique_lock<std::mutex> wait(const Ready& ready, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait_for(lock, timeout, [&] { return ready(*this); });
    return lock;
  }
};

// A generation's response not yet under way: counted from the start of its handler until the content provider it
// left starts (each provider writes its whole body in its first call), or until the handler returns without one, or
// cpp-httplib drops an unstarted one. A shutdown waits for them before it stops the listener: cpp-httplib's stop()
// skips a chunked body's provider that has not started, so such a response went out as headers and nothing more (a
// whole response that had turned chunked, its generation or scoring then cut by the shutdown: the client got neither
// the 503 nor the text). A provider already running finishes its body after stop(), and its connection closes then,
// as before (waiting for whole bodies instead would hold keep-alive connections open for their idle timeout).
class ResponseInFlight {
 public:
  explicit ResponseInFlight(std::atomic<int>& count) : count_(count) { ++count_; }
  ~ResponseInFlight() { started(); }
  void started() {
    if (!started_.exchange(true)) --count_;
  }
  ResponseInFlight(const ResponseInFlight&) = delete;
  ResponseInFlight& operator=(const ResponseInFlight&) = delete;

 private:
  std::atomic<int>& count_;
  std::atomic<bool> started_{false};
};

class Server {
 public:
  explicit Server(const ServerOptions& o)
      : o_(o), reasoning_format_(parse_reasoning_format(o.reasoning_format, "--reasoning-format")), alias_(o.alias) {
    std::filesystem::path dir = std::filesystem::path(o.model_dir).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();  // "models/qwen3/"
    if (alias_.empty()) alias_ = dir.filename().string();
    if (alias_.empty()) alias_ = o.model_dir;
  }
  int run();

 private:
  void load();
  void add_routes();
  // Registers a GET or POST route and records it, so that a known path asked with another method gets 405 and the
  // methods it takes (Allow), not 404.
  void route(const char* method, const std::string& pattern, const httplib::Server::Handler& handler);
  // "GET, POST"-style list of the methods `path` takes, empty where no route has it.
  std::string allowed_methods(const std::string& path) const;
  const Model& model() const {
    if (!ready_) throw HttpError(503, "Loading model", "unavailable_error");
    return model_;
  }
  RequestDefaults request_defaults() const;
  // The prompt's token ids (chat and messages: through the chat template), checked against the vocabulary.
  std::vector<int64_t> prompt_ids(const CompletionRequest& request) const;
  Job prepare(const CompletionRequest& request) const;
  // Queues a generation for the slot thread; a 503 when --max-queue requests already wait (so that waiting
  // requests never hold every HTTP thread: /health and /metrics always answer).
  std::shared_ptr<Generation> submit(Job job);
  // The client of `g` has gone away: its generation ends at its next commit, or never starts.
  void abandon(const std::shared_ptr<Generation>& g);
  void slot_loop();
  // Runs one generation on the slot thread. `emit` gets the text each commit makes final (possibly empty), with the
  // logprobs of the tokens counted since its last call when the request asks for them (their text may still be
  // held back), and returns false once the client has gone away, which ends the generation.
  // `decoded` (may be null) counts the output tokens as they are committed.
  Outcome generate(Job& job, const std::function<bool(const ReplyParts&, std::vector<LoggedToken>&&)>& emit,
                   std::atomic<int64_t>* decoded = nullptr);
  // The sampling and length defaults requests start from (/props' params, an idle slot's in /slots).
  json default_params_json() const;
  // GET /slots: the slot as llama-server describes one.
  json slots_json() const;
  void complete(const httplib::Request& req, httplib::Response& res, Api api);
  // A stream's text, as the slot makes it final: the SSE frames for a piece of reasoning, answer and tool calls (any
  // may be empty), given the logprobs of the tokens counted since the last piece.
  using Frames = std::function<std::string(const ReplyParts& fresh, std::vector<LoggedToken>&& logprobs)>;
  // Relays the text of g's choice `choice` to `sink` until that choice has ended or the generation is done (an error):
  // `frames` for each piece, `keep_alive` after a second without any (queued, or a long prompt), so that a client
  // that has gone away is noticed even before its generation starts. Returns false when a write failed (the
  // generation is then abandoned).
  bool relay(const std::shared_ptr<Generation>& g, int64_t choice, httplib::DataSink& sink,
             const std::string& keep_alive, const Frames& frames);
  // The model name a reply gives: the request's, else the alias.
  const std::string& model_name(const Job& job) const { return job.request.model.empty() ? alias_ : job.request.model; }
  // The whole reply in the request's API (openai_json.h, messages_json.h).
  json reply_json(const Job& job, const std::vector<Outcome>& choices) const;
  std::string metrics_text() const;
  // Runs `body` for a route: errors become OpenAI error objects (400 for bad input, 500 for the engine's), or, for
  // the Messages API's routes (`anthropic`), Anthropic's.
  void guarded(httplib::Response& res, const std::function<void()>& body) const { guarded(res, false, body); }
  void guarded(httplib::Response& res, bool anthropic, const std::function<void()>& body) const;

  ServerOptions o_;
  ReasoningFormat reasoning_format_;
  std::string alias_;
  httplib::Server http_;
  std::vector<std::pair<std::string, std::regex>> routes_;  // (method, path pattern) of each route()
  Model model_;
  std::atomic<bool> ready_{false}, shutting_down_{false};
  std::atomic<int> responses_in_flight_{0};  // ResponseInFlight: responses not yet under way
  // the slot: generations waiting and the thread that runs them
  mutable std::mutex queue_mutex_;
  std::condition_variable queue_changed_;
  std::deque<std::shared_ptr<Generation>> queue_;
  std::shared_ptr<Generation> running_;  // the generation the slot runs (null while idle)
  int64_t tasks_started_ = 0;
  bool busy_ = false, stop_slot_ = false;
  std::thread slot_thread_;
  int64_t started_ = unix_time();
  // metrics
  mutable std::mutex metrics_mutex_;
  int64_t requests_ = 0, prompt_tokens_ = 0, predicted_tokens_ = 0, draft_tokens_ = 0, accepted_tokens_ = 0;
  int64_t verify_steps_ = 0;
  std::vector<int64_t> accepted_at_;  // [i - 1]: verify steps that accepted the block's drafted token i
  // --compress: what the KV compressors of all generations did (compress::CompressionStats)
  int64_t compression_events_ = 0, compression_tokens_ = 0, compression_slots_freed_ = 0;
  double compression_seconds_ = 0;
  double prompt_seconds_ = 0, predicted_seconds_ = 0;
};

void Server::guarded(httplib::Response& res, bool anthropic, const std::function<void()>& body) const {
  try {
    body();
  } catch (...) {
    const json error = current_error_json();
    send_json(res, error["error"]["code"].get<int>(), anthropic ? anthropic_error(error) : error);
  }
}

void Server::load() {
  c10::InferenceMode inference_mode;
  // run() has checked the flags that need no model (device, dtype, --block-size without a draft)
  const auto [device, dtype] = cli::parse_placement(o_.device, o_.dtype);
  Model m;
  m.tokenizer = cli::load_tokenizer_if_present(o_.model_dir);
  m.eos_ids = cli::default_stop_ids(o_.model_dir);
  if (!o_.draft_dir.empty()) model::draft_config_for_dirs(o_.draft_dir, o_.model_dir);  // before the weights load
  m.target = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(o_.model_dir, dtype, device));
  if (!o_.draft_dir.empty()) {
    m.draft = std::make_unique<model::DFlashDraft>(model::DFlashDraft::load(o_.draft_dir, *m.target, dtype, device));
    m.reserve = decode::resolve_block_size(*m.draft, o_.block_size);
  }
  const int64_t max_positions = m.target->config().max_position_embeddings;
  m.ctx_size = o_.ctx_size == 0 ? max_positions : o_.ctx_size == -1 ? std::min<int64_t>(4096, max_positions) : o_.ctx_size;
  if (m.ctx_size > max_positions)
    fail("-c/--ctx-size: {} exceeds the model's max_position_embeddings {}", m.ctx_size, max_positions);
  if (m.ctx_size < m.reserve + 2)
    fail("-c/--ctx-size: {} leaves no room for a prompt and an output token (block {})", m.ctx_size, m.reserve);
  if (o_.n_predict != -1 && o_.n_predict + m.reserve + 1 > m.ctx_size)
    fail("-n/--n-predict: {} + a prompt token + block {} exceeds -c/--ctx-size {}", o_.n_predict, m.reserve, m.ctx_size);
  m.policy = compress::resolve_compress(o_.compress, "--compress", o_.policy, *m.target);
  compress::validate(m.policy);
  if (const std::string note = compress::no_saving_note(m.policy, m.draft == nullptr); !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  // a --compress server's generations all follow a KV compressor, which only the reference loops take; its echo
  // scoring runs there too, and no fast engine is built
  m.runner =
      std::make_unique<tools::GenerationRunner>(*m.target, m.draft.get(), o_.reference_path || m.policy.enabled());
  // the fast path's engine holds the whole context from the start (as llama-server allocates it), so no request
  // waits for one to be built or grown, and a context that does not fit fails here rather than mid-request
  try {
    m.engine_ms = m.runner->reserve(m.ctx_size, o_.block_size);
  } catch (...) {  // specpress's errors, and LibTorch's or CUDA's without their backtraces
    fail("-c/--ctx-size {} (--reference-path builds no engine): {}", m.ctx_size,
         current_error_json()["error"]["message"].get<std::string>());
  }
  if (o_.warmup) {  // as llama-server warms up: the first replays, allocations and kernel loads happen here
    const auto t0 = std::chrono::steady_clock::now();
    decode::GenerationParams p;
    // no stop id: the prefill's token, then (fast path) a block's worth, at least two DFlash cycles or decode
    // steps; one step on the reference path, which may be a large model on the CPU
    p.max_new_tokens = std::min<int64_t>(m.runner->fast() ? m.reserve + 2 : 2, m.ctx_size - 1 - m.reserve);
    p.block_size = o_.block_size;
    const std::vector<int64_t> prompt = {m.eos_ids.empty() ? 0 : m.eos_ids.front()};
    try {
      m.draft ? m.runner->dflash(prompt, p) : m.runner->plain(prompt, p);
    } catch (...) {
      fail("the warm-up generation at load (--no-warmup skips it): {}",
           current_error_json()["error"]["message"].get<std::string>());
    }
    m.warmup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  model_ = std::move(m);
}

RequestDefaults Server::request_defaults() const {
  RequestDefaults defaults;
  defaults.max_tokens = o_.n_predict;
  defaults.sampling = o_.sampling;
  defaults.random_seed = o_.random_seed;
  defaults.enable_thinking = o_.enable_thinking;
  defaults.thinking_budget = o_.reasoning_budget > 0 ? o_.reasoning_budget : -1;
  defaults.reasoning_format = reasoning_format_;
  defaults.tokens_as_ids = o_.return_tokens_as_token_ids;
  return defaults;
}

std::vector<int64_t> Server::prompt_ids(const CompletionRequest& request) const {
  const Model& m = model();
  const bool text_prompt = request.prompt_text.has_value() || !request.messages.empty();
  if (text_prompt && !m.tokenizer)
    throw HttpError(400, fmt::format("the model directory {} has no tokenizer.json: send the prompt as token ids",
                                     o_.model_dir));
  std::vector<int64_t> prompt;
  if (request.assistant_prefill) {
    // the reply continues the last assistant turn: the template's closed (empty) think block, then its text
    std::vector<int32_t> ids = m.tokenizer->encode(
        tok::render_qwen3_chat(request.messages, true, /*enable_thinking=*/false, request.tools) +
        *request.assistant_prefill);
    prompt.assign(ids.begin(), ids.end());
  } else if (!request.messages.empty()) {
    prompt = tools::chat_prompt_ids(*m.tokenizer, request.messages, request.enable_thinking, request.tools);
  } else if (request.prompt_text) {
    std::vector<int32_t> ids = m.tokenizer->encode(*request.prompt_text);
    prompt.assign(ids.begin(), ids.end());
  } else {
    prompt = request.prompt_ids;
  }
  if (prompt.empty()) fail("field 'prompt': the text encodes to no tokens");
  const int64_t vocab = m.target->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      fail("field 'prompt': token id {} at index {} is outside the vocabulary 0..{}", prompt[i], i, vocab - 1);
  return prompt;
}

Job Server::prepare(const CompletionRequest& request) const {
  const Model& m = model();
  Job job;
  job.request = request;
  job.created = unix_time();
  job.id = completion_id(request.api == Api::kChatCompletions ? "chatcmpl-"
                         : request.api == Api::kMessages      ? "msg_"
                                                              : "cmpl-");
  job.prompt = prompt_ids(request);
  const int64_t n = static_cast<int64_t>(job.prompt.size());
  const char* prompt_field = request.api == Api::kCompletions || request.api == Api::kNativeCompletion ? "prompt"
                                                                                                        : "messages";
  job.params.block_size = o_.block_size;  // the server's (--block-size), as its engine was built for
  if (request.max_tokens == 0) {  // echo only: the prompt scored, nothing generated
    if (n > m.ctx_size)
      fail("field '{}': the prompt ({} tokens) exceeds the context size {} (-c/--ctx-size)", prompt_field, n,
           m.ctx_size);
    job.params.max_new_tokens = 0;
    job.params.logprobs = request.logprobs;
    return job;
  }
  const int64_t room = m.ctx_size - n - m.reserve;
  if (room < 1)
    fail("field '{}': the prompt ({} tokens) leaves no room for output in the context size {} (-c/--ctx-size; "
         "block {})", prompt_field, n, m.ctx_size, m.reserve);
  int64_t max_tokens = request.max_tokens;
  if (max_tokens == -1 || (!request.max_tokens_given && max_tokens > room)) max_tokens = room;  // defaults fit
  if (max_tokens > room)
    fail("field 'max_tokens': the prompt ({} tokens) + {} tokens + block {} exceed the context size {} (-c/--ctx-size; "
         "at most {} tokens fit)", n, max_tokens, m.reserve, m.ctx_size, room);
  job.params.max_new_tokens = max_tokens;
  job.params.sampling = request.sampling;
  for (const auto& [text, bias] : request.logit_bias_texts) {  // every token of the text gets the bias
    if (!m.tokenizer)
      fail("field 'logit_bias': \"{}\" is text, but the model has no tokenizer.json: give token ids", text);
    for (int32_t id : m.tokenizer->encode(text)) job.params.sampling.logit_bias.push_back({id, bias});
  }
  const int64_t vocab = m.target->config().vocab_size;
  std::set<int64_t> banned;
  for (const auto& [id, bias] : job.params.sampling.logit_bias) {
    if (id < 0 || id >= vocab) fail("field 'logit_bias': token id {} is outside the vocabulary 0..{}", id, vocab - 1);
    if (std::isinf(bias) && bias < 0) banned.insert(id);
  }
  if (static_cast<int64_t>(banned.size()) == vocab)
    fail("field 'logit_bias': bans every token of the vocabulary (false or -inf for all {} ids)", vocab);
  if (request.random_seed) job.params.sampling.seed = cli::fresh_seed();
  job.params.logprobs = request.logprobs;
  if (request.thinking_budget > 0 && request.enable_thinking) {  // without thinking there is no block to cap
    // the request's own cap, or the server's default one (which a request with thinking on cannot lift)
    const char* field = !request.thinking_budget_given ? "the server's --reasoning-budget (a cap on every thinking "
                                                         "request; turn thinking off to run without it)"
                        : request.api == Api::kMessages ? "field 'thinking.budget_tokens'"
                                                        : "field 'thinking_token_budget'";
    if (request.logprobs >= 0)
      fail("{}: cannot be combined with logprobs (the tokens forced at the cap have none)", field);
    if (m.policy.enabled())
      fail("{}: cannot be combined with the server's KV compression (--compress; it follows one generation)", field);
    if (!m.tokenizer) fail("{}: needs the model's tokenizer.json", field);
    job.thinking = tools::qwen3_thinking_budget(*m.tokenizer, request.thinking_budget, field);
  }
  if (!request.ignore_eos && !o_.ignore_eos) job.params.stop_ids = m.eos_ids;
  return job;
}

Outcome Server::generate(Job& job, const std::function<bool(const ReplyParts&, std::vector<LoggedToken>&&)>& emit,
                         std::atomic<int64_t>* decoded) {
  const Model& m = model();

  std::atomic<bool> cancel{false};
  std::unique_ptr<compress::KVCompressor> compressor;
  struct ResetParams {  // the params must not keep pointers to this call's locals, whichever way it ends
    decode::GenerationParams& params;
    ~ResetParams() { params.cancel = nullptr, params.observer = nullptr; }
  } reset_params{job.params};
  job.params.cancel = &cancel;
  if (m.policy.enabled() && job.params.max_new_tokens > 0) {
    compressor = std::make_unique<compress::KVCompressor>(m.policy, *m.target, static_cast<int64_t>(job.prompt.size()));
    job.params.observer = compressor.get();
  }
  Outcome out;
  StopStrings stops(job.request.stop);
  ReasoningSplit split(job.request.reasoning_format);
  std::optional<tok::StreamDecoder> decoder;
  if (m.tokenizer) decoder.emplace(*m.tokenizer, /*skip_special=*/true);
  bool client_gone = false, interrupted = false;
  std::vector<LoggedToken> logprobs;  // the counted tokens' since the last delivery, when the request asks
  std::optional<ToolCallSplit> calls;  // chat with tools: the calls taken out of the answer
  if (job.request.tool_calls) calls.emplace();
  auto emit_parts = [&](const ReplyParts& parts) {
    out.reasoning += parts.reasoning;
    out.text += parts.content;
    out.tool_calls.insert(out.tool_calls.end(), parts.tool_calls.begin(), parts.tool_calls.end());
    if (emit && !client_gone && !emit(parts, std::move(logprobs))) client_gone = true;
    logprobs.clear();
  };
  auto deliver_parts = [&](ReplyParts parts) {
    if (calls) {
      ToolCallParts taken = calls->push(parts.content);
      parts.content = std::move(taken.content), parts.tool_calls = std::move(taken.calls);
    }
    emit_parts(parts);
  };
  auto deliver = [&](const std::string& final_text) { deliver_parts(split.push(final_text)); };
  const int64_t n_prompt = static_cast<int64_t>(job.prompt.size());
  // max_tokens 1 with echo and logprobs (lm-evaluation-harness's loglikelihood requests): the scoring forward also
  // computes the row after the prompt, and the one token is drawn from it, with no second forward over the prompt
  const bool one_from_scoring = job.request.echo && job.params.logprobs >= 0 && job.params.max_new_tokens == 1 &&
                                !job.thinking.on() && !compressor;
  at::Tensor next_logits;
  if (job.request.echo) {
    // the prompt's text (as sent, or its ids decoded with special tokens written out) and, with logprobs, its
    // tokens' own from a forward over it; stop strings and the reasoning split see only the reply
    const auto t0 = std::chrono::steady_clock::now();
    if (job.params.logprobs >= 0) {
      // between pieces: stop for a shutdown or a client that went away (an empty emit asks whether it is there)
      auto keep_going = [&] {
        if (emit && !client_gone && !emit({}, {})) client_gone = true;
        return !client_gone && !shutting_down_;
      };
      // on the path (and the fast path's engine) the generation then takes
      const std::vector<decode::TokenLogprob> scored = m.runner->prompt_logprobs(
          job.prompt, job.params, job.params.logprobs, 256, keep_going, one_from_scoring ? &next_logits : nullptr);
      if (static_cast<int64_t>(scored.size()) < n_prompt - 1 || (one_from_scoring && !next_logits.defined())) {
        if (!client_gone)
          throw HttpError(503, "the server shut down while this request's prompt was scored", "unavailable_error");
        std::fprintf(stderr, "%s: the client went away while its prompt was scored\n", job.id.c_str());
        out.result.prompt_tokens = n_prompt;
        return out;
      }
      for (int64_t i = 0; i < n_prompt; ++i)
        out.echo_logprobs.push_back(
            {job.prompt[i], i > 0 ? scored[i - 1] : decode::TokenLogprob{}, /*echoed=*/true, /*scored=*/i > 0});
    }
    out.result.prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::string prompt_text;
    if (job.request.prompt_text) {
      prompt_text = *job.request.prompt_text;
    } else {
      const LogprobsJson format(m.tokenizer);
      for (int64_t id : job.prompt) prompt_text += format.bytes(id);
    }
    logprobs = out.echo_logprobs;
    deliver_parts({"", prompt_text});
  }
  const double scoring_ms = out.result.prefill_ms;
  // Token by token, so that the text (and the tokens counted for it) end where a stop string completes, however
  // many tokens a DFlash block commits at once.
  decode::TokenCallback on_tokens = [&](const std::vector<int64_t>& tokens,
                                        const std::vector<decode::TokenLogprob>& token_logprobs) {
    if (decoded) *decoded += static_cast<int64_t>(tokens.size());
    std::string released;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t t = tokens[i];
      if (stops.stopped()) break;
      ++out.completion_tokens;
      if (!token_logprobs.empty()) logprobs.push_back({t, token_logprobs[i]});
      if (!decoder) {
        released += stops.push(fmt::format("{} ", t));  // no tokenizer: the ids as text, as `generate` prints them
      } else if (t >= 0 && t < m.tokenizer->vocab_size()) {
        released += stops.push(decoder->push(static_cast<int32_t>(t)));
      }
    }
    deliver(released);
    if (stops.stopped() || client_gone) cancel = true;
    if (shutting_down_) cancel = true, interrupted = true;
  };
  if (one_from_scoring) {
    out.result = decode::generate_one_from_logits(*m.target, job.prompt, next_logits, job.params, on_tokens);
    out.result.prefill_ms += scoring_ms;
  } else if (job.params.max_new_tokens > 0) {
    const decode::GenerateFn run = [&](const std::vector<int64_t>& ids, const decode::GenerationParams& p,
                                       const decode::TokenCallback& cb) {
      return m.draft ? m.runner->dflash(ids, p, cb) : m.runner->plain(ids, p, cb);
    };
    out.result = decode::generate_with_thinking_budget(run, job.prompt, job.params, job.thinking, on_tokens);
    out.result.prefill_ms += scoring_ms;  // the prompt's processing: the echo's scoring, then the prefill
  } else {
    out.result.prompt_tokens = n_prompt;
  }
  if (!stops.stopped()) {
    std::string rest = decoder ? stops.push(decoder->flush()) : std::string();
    if (!stops.stopped()) rest += stops.flush();
    deliver(rest);
  }
  deliver_parts(split.flush());
  if (calls) {
    ToolCallParts rest = calls->flush();
    emit_parts({"", std::move(rest.content), std::move(rest.calls)});
  }
  if (stops.stopped()) {
    out.finish_reason = "stop", out.stop_type = "word", out.stopping_word = stops.stopping_word();
  } else if (out.result.stopped) {
    out.finish_reason = "stop", out.stop_type = "eos";
  } else {
    out.finish_reason = "length", out.stop_type = "limit";
  }
  if (out.finish_reason == "stop" && !out.tool_calls.empty()) out.finish_reason = "tool_calls";  // as OpenAI's
  if (compressor) out.compression = cli::compression_json(*compressor);

  const decode::GenerationResult& r = out.result;
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++requests_;
    // an echo of max_tokens 0 without logprobs runs no model
    if (job.params.max_new_tokens > 0 || (job.request.echo && job.params.logprobs >= 0))
      prompt_tokens_ += r.prompt_tokens;
    predicted_tokens_ += out.completion_tokens;
    prompt_seconds_ += r.prefill_ms / 1e3;
    predicted_seconds_ += (r.first_draft_ms + r.decode_ms) / 1e3;
    if (r.block_size > 1) {
      draft_tokens_ += r.drafted_tokens(), accepted_tokens_ += r.accepted_tokens();
      verify_steps_ += static_cast<int64_t>(r.acceptance_lengths.size());
      const std::vector<int64_t> accepted_at = r.accepted_per_position();
      if (accepted_at_.size() < accepted_at.size()) accepted_at_.resize(accepted_at.size(), 0);
      for (size_t i = 0; i < accepted_at.size(); ++i) accepted_at_[i] += accepted_at[i];
    }
    if (compressor) {
      const compress::CompressionStats& st = compressor->stats();
      compression_events_ += st.events, compression_tokens_ += st.tokens_compressed;
      compression_slots_freed_ += st.slots_freed, compression_seconds_ += st.overhead_ms / 1e3;
    }
  }
  std::string spec;
  if (r.block_size > 1) spec = fmt::format(", tau {:.2f}", r.mean_acceptance_length());
  if (job.request.echo && job.params.logprobs >= 0) spec += fmt::format(", prompt scored in {:.1f} ms", scoring_ms);
  if (one_from_scoring) spec += ", the token drawn from the scoring forward";
  std::fprintf(stderr, "%s: prompt %lld tokens in %.1f ms, %zu tokens generated in %.1f ms (%.2f tokens/s%s), %s%s\n",
               job.id.c_str(), static_cast<long long>(r.prompt_tokens), r.prefill_ms, r.output_ids.size(),
               r.first_draft_ms + r.decode_ms, r.decode_ms > 0 ? 1e3 * r.output_ids.size() / r.decode_ms : 0.0,
               spec.c_str(), out.finish_reason.c_str(),
               client_gone ? " (client went away)" : interrupted ? " (interrupted by shutdown)" : "");
  // cut short by the shutdown (a generation that had just ended on its own stands)
  if (interrupted && !client_gone && out.finish_reason == "length" &&
      static_cast<int64_t>(r.output_ids.size()) < job.params.max_new_tokens)
    throw HttpError(503, fmt::format("the server shut down during this generation: its output stopped after {} tokens",
                                     out.completion_tokens), "unavailable_error");
  return out;
}

json Server::reply_json(const Job& job, const std::vector<Outcome>& choices) const {
  if (choices.empty()) throw HttpError(503, "the generation ended early", "unavailable_error");
  if (job.request.api == Api::kMessages)
    return messages_response(job, choices.front(), model_name(job), timings_json(choices.front()));
  return response_json(job, choices, model_name(job), LogprobsJson(model().tokenizer, job.request.tokens_as_ids));
}

std::shared_ptr<Generation> Server::submit(Job job) {
  auto g = std::make_shared<Generation>(std::move(job));
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (shutting_down_) throw HttpError(503, "the server is shutting down", "unavailable_error");
    // an idle slot takes one more at once
    if (static_cast<int64_t>(queue_.size()) >= o_.max_queue + (busy_ ? 0 : 1))
      throw HttpError(503, fmt::format("the server is busy: {} requests are waiting for the generation slot "
                                       "(--max-queue); retry later", queue_.size()), "unavailable_error");
    queue_.push_back(g);
  }
  queue_changed_.notify_all();
  return g;
}

void Server::abandon(const std::shared_ptr<Generation>& g) {
  g->client_gone = true;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.erase(std::remove(queue_.begin(), queue_.end(), g), queue_.end());
  }
  queue_changed_.notify_all();
}

void Server::slot_loop() {
  // thread-local state every generation runs under: inference mode and the model's device as the current one
  c10::InferenceMode inference_mode;
  const c10::DeviceGuard device_guard(model_.target->device());
  for (;;) {
    std::shared_ptr<Generation> g;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_changed_.wait(lock, [&] { return stop_slot_ || !queue_.empty(); });
      if (queue_.empty()) return;
      g = queue_.front();
      queue_.pop_front();
      busy_ = true;
      running_ = g;
      g->task = ++tasks_started_;
    }
    {
      std::lock_guard<std::mutex> lock(g->mutex);
      g->started = true;
      g->started_at = std::chrono::steady_clock::now();
    }
    g->changed.notify_all();
    std::exception_ptr error;
    try {
      for (int64_t c = 0; c < g->choices() && !g->client_gone; ++c) {
        if (shutting_down_) throw HttpError(503, "the server is shutting down", "unavailable_error");
        Job job = choice_job(g->job, c);
        g->decoded = 0;
        g->choice = c;
        Outcome outcome = generate(job, [&g, c](const ReplyParts& parts, std::vector<LoggedToken>&& logprobs) {
          // a stream's pieces (a whole response takes its parts from the outcome)
          if (g->job.request.stream &&
              (!parts.reasoning.empty() || !parts.content.empty() || !parts.tool_calls.empty() || !logprobs.empty())) {
            std::lock_guard<std::mutex> lock(g->mutex);
            ReplyParts& fresh = g->fresh[static_cast<size_t>(c)];
            fresh.reasoning += parts.reasoning;
            fresh.content += parts.content;
            fresh.tool_calls.insert(fresh.tool_calls.end(), parts.tool_calls.begin(), parts.tool_calls.end());
            std::vector<LoggedToken>& fresh_logprobs = g->fresh_logprobs[static_cast<size_t>(c)];
            fresh_logprobs.insert(fresh_logprobs.end(), logprobs.begin(), logprobs.end());
          }
          g->changed.notify_all();
          return !g->client_gone;
        }, &g->decoded);
        {
          std::lock_guard<std::mutex> lock(g->mutex);
          g->outcomes.push_back(std::move(outcome));
        }
        g->changed.notify_all();
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      // the slot is free before the answer goes out: a client's next request must find it free
      std::lock_guard<std::mutex> lock(queue_mutex_);
      busy_ = false;
      running_.reset();
    }
    {
      std::lock_guard<std::mutex> lock(g->mutex);
      g->error = error;
      g->done = true;
    }
    g->changed.notify_all();
  }
}

void Server::complete(const httplib::Request& req, httplib::Response& res, Api api) {
  const bool messages = api == Api::kMessages;
  const auto in_flight = std::make_shared<ResponseInFlight>(responses_in_flight_);
  guarded(res, messages, [&] {
    const RequestDefaults defaults = request_defaults();
    const nlohmann::json body = parse_body(req.body);
    const nlohmann::ordered_json ordered = parse_ordered_fields(req.body);  // tools and messages in the client's order
    const CompletionRequest request = messages
                                          ? parse_messages_request(body, MessagesRoute::kGenerate, defaults, ordered)
                                          : parse_completion_request(body, api, defaults, ordered);
    std::shared_ptr<Generation> g = submit(prepare(request));
    using std::chrono::milliseconds;
    // the body of a finished generation: its response, or its error object
    auto final_body = [this, g, messages] {
      if (!g->error) return dump(reply_json(g->job, g->outcomes));
      const json error = error_json_of(g->error);
      return dump(messages ? anthropic_error(error) : error);
    };
    if (!g->job.request.stream) {
      // A request answered within a second of its arrival (or an HTTP/1.0 request, which cannot be chunked) gets
      // its answer with its own status. A longer one, queued or running, is answered chunked: a space (JSON
      // whitespace) goes out each second, so that a client that has gone away is noticed (the write fails) and its
      // place in the queue is freed or its generation ends; an error after that point is the body's error object
      // under status 200.
      const bool chunked_ok = req.version != "HTTP/1.0";
      auto settled = [chunked_ok](const Generation& x) {
        return x.done || (chunked_ok && std::chrono::steady_clock::now() - x.submitted_at >= milliseconds(1000));
      };
      for (;;) {
        std::unique_lock<std::mutex> lock = g->wait(settled, milliseconds(100));
        if (g->done) {
          if (g->error) std::rethrow_exception(g->error);
          send_json(res, 200, reply_json(g->job, g->outcomes));
          return;
        }
        if (settled(*g)) break;
      }
      res.set_chunked_content_provider("application/json; charset=utf-8", [this, g, final_body, in_flight](
                                                                              size_t, httplib::DataSink& sink) {
        in_flight->started();
        for (;;) {
          std::unique_lock<std::mutex> lock = g->wait([](const Generation& x) { return x.done; }, milliseconds(1000));
          if (g->done) break;
          lock.unlock();
          if (!sink.write(" ", 1)) {
            abandon(g);
            return false;
          }
        }
        const std::string body = final_body();
        sink.write(body.data(), body.size());
        sink.done();
        return true;
      });
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    httplib::ContentProviderWithoutLength stream_events;
    // After relay(g, c, ...): choice c's outcome (a copy: the slot may still add later choices), or none where the
    // generation failed (`error` then says why).
    auto choice_outcome = [g](int64_t c, std::exception_ptr& error) {
      std::lock_guard<std::mutex> lock(g->mutex);
      std::optional<Outcome> out;
      if (static_cast<int64_t>(g->outcomes.size()) > c) out = g->outcomes[static_cast<size_t>(c)];
      error = g->error;
      if (!out && !error)  // done without its outcome: never left by a live client's generation
        error = std::make_exception_ptr(HttpError(503, "the generation ended early", "unavailable_error"));
      return out;
    };
    if (messages) {
      stream_events = [this, g, choice_outcome](size_t, httplib::DataSink& sink) {
        MessagesStream stream(g->job, model_name(g->job));
        std::string start = stream.start();
        if (!sink.write(start.data(), start.size())) {
          abandon(g);
          return false;
        }
        // Anthropic's keep-alive is a ping event
        const bool relayed =
            relay(g, 0, sink, MessagesStream::ping(),
                  [&](const ReplyParts& fresh, std::vector<LoggedToken>&&) {
                    std::string frames = stream.text(fresh.reasoning, fresh.content);
                    for (const ToolCall& call : fresh.tool_calls) frames += stream.tool_use(call);
                    return frames;
                  });
        if (!relayed) return false;
        // an error event and no message_stop: the stream did not complete
        std::exception_ptr error;
        const std::optional<Outcome> out = choice_outcome(0, error);
        const std::string end =
            out ? stream.finish(*out, timings_json(*out)) : MessagesStream::error(error_json_of(error));
        sink.write(end.data(), end.size());
        sink.done();
        return true;
      };
    } else {
      stream_events = [this, g, choice_outcome](size_t, httplib::DataSink& sink) {
        auto event = [](const json& j) { return "data: " + dump(j) + "\n\n"; };
        const Job& job = g->job;
        const std::string& name = model_name(job);
        const LogprobsJson format(model().tokenizer, job.request.tokens_as_ids);
        const bool native = job.request.api == Api::kNativeCompletion;
        // the choices one after another, each chunk naming its own
        for (int64_t c = 0; c < g->choices(); ++c) {
          auto indexed = [c, native](json chunk) {
            if (!native) chunk["choices"][0]["index"] = c;
            return chunk;
          };
          if (job.request.api == Api::kChatCompletions) {
            json first = indexed(chunk_json(job, name, "", nullptr));
            first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
            const std::string line = event(first);
            if (!sink.write(line.data(), line.size())) {
              abandon(g);
              return false;
            }
          }
          // Logprobs go out with the next chunk of text (or the last chunk): a token's text may be held back after
          // its logprob came.
          std::vector<LoggedToken> logprobs;
          int64_t text_offset = 0;
          auto text_event = [&](const std::string& text, const char* field) {
            json chunk = indexed(chunk_json(job, name, text, nullptr, field));
            add_logprobs(chunk, job, format, logprobs, text_offset);
            logprobs.clear();
            return event(chunk);
          };
          // An SSE comment line keeps a quiet stream alive (clients ignore it)
          int64_t calls_sent = 0;
          const bool relayed = relay(g, c, sink, ": waiting\n\n",
                                     [&](const ReplyParts& fresh, std::vector<LoggedToken>&& fresh_logprobs) {
                                       logprobs.insert(logprobs.end(), fresh_logprobs.begin(), fresh_logprobs.end());
                                       // deepseek: the reasoning first, as all of it comes before any of the
                                       // answer; deepseek-legacy streams the reply whole in content (tags included)
                                       // and no reasoning deltas, as llama-server does
                                       std::string frames;
                                       if (!fresh.reasoning.empty() &&
                                           job.request.reasoning_format != ReasoningFormat::kDeepseekLegacy)
                                         frames += text_event(fresh.reasoning, "reasoning_content");
                                       if (!fresh.content.empty()) frames += text_event(fresh.content, "content");
                                       // each call whole in one delta, as it closes
                                       for (const ToolCall& call : fresh.tool_calls)
                                         frames += event(indexed(tool_call_chunk_json(job, name, call, calls_sent++)));
                                       return frames;
                                     });
          if (!relayed) return false;
          std::exception_ptr error;
          const std::optional<Outcome> out = choice_outcome(c, error);
          std::string end;
          if (!out) {
            end = event(error_json_of(error));  // and no [DONE]: the stream did not complete
          } else if (native) {
            json last = response_json(job, *out, name, format);
            last["content"] = "";
            add_logprobs(last, job, format, logprobs, text_offset);  // only the tokens no chunk carried
            end = event(last);
          } else {
            json last = indexed(chunk_json(job, name, "", out->finish_reason));
            if (!logprobs.empty()) add_logprobs(last, job, format, logprobs, text_offset);
            last["timings"] = timings_json(*out);
            if (!out->compression.is_null()) last["compression"] = out->compression;
            end = event(last);
          }
          const bool last_one = !out || native || c + 1 == g->choices();
          if (last_one && out && !native) {
            if (job.request.include_usage) {
              json usage = chunk_json(job, name, "", nullptr);
              usage["choices"] = json::array();
              std::lock_guard<std::mutex> lock(g->mutex);  // every choice has ended: all are in `outcomes`
              usage["usage"] = usage_json(g->outcomes);
              end += event(usage);
            }
            end += "data: [DONE]\n\n";
          }
          if (!sink.write(end.data(), end.size()) && !last_one) {
            abandon(g);
            return false;
          }
          if (last_one) break;
        }
        sink.done();
        return true;
      };
    }
    // the response counts as under way once its provider runs; HTTP/1.0 cannot take chunks: its stream ends with
    // the connection
    stream_events = [events = std::move(stream_events), in_flight](size_t offset, httplib::DataSink& sink) {
      in_flight->started();
      return events(offset, sink);
    };
    if (req.version == "HTTP/1.0") res.set_content_provider("text/event-stream", stream_events);
    else res.set_chunked_content_provider("text/event-stream", stream_events);
  });
}

bool Server::relay(const std::shared_ptr<Generation>& g, int64_t choice, httplib::DataSink& sink,
                   const std::string& keep_alive, const Frames& frames) {
  using std::chrono::milliseconds;
  const size_t c = static_cast<size_t>(choice);
  for (;;) {
    std::unique_lock<std::mutex> lock = g->wait(
        [c](const Generation& x) {
          const ReplyParts& fresh = x.fresh[c];
          return x.done || x.outcomes.size() > c || !fresh.content.empty() || !fresh.reasoning.empty() ||
                 !fresh.tool_calls.empty();
        },
        milliseconds(1000));
    const bool ended = g->done || g->outcomes.size() > c;  // its parts are all in `fresh` once it has ended
    ReplyParts fresh = std::exchange(g->fresh[c], {});
    std::vector<LoggedToken> logprobs;
    logprobs.swap(g->fresh_logprobs[c]);
    lock.unlock();
    std::string out = frames(fresh, std::move(logprobs));
    if (out.empty() && !ended) out = keep_alive;
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      abandon(g);
      return false;
    }
    if (ended) return true;
  }
}

namespace {

// A request's sampling parameters under llama-server's names.
json sampling_json(const decode::SamplingParams& p) {
  return {{"temperature", p.temperature},       {"top_k", p.top_k},
          {"top_p", p.top_p},                   {"min_p", p.min_p},
          {"seed", p.seed},                     {"repeat_penalty", p.repeat_penalty},
          {"repeat_last_n", p.repeat_last_n},   {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty}, {"logit_bias", decode::logit_bias_json(p)},
          {"samplers", decode::sampler_sequence(p)}};
}

}  // namespace

json Server::default_params_json() const {
  json params = sampling_json(o_.sampling);
  if (o_.random_seed) params["seed"] = kRandomSeedValue;  // llama-server's "random": a fresh one each request
  params["n_predict"] = o_.n_predict;
  params["enable_thinking"] = o_.enable_thinking;
  params["ignore_eos"] = o_.ignore_eos;
  params["reasoning_format"] = reasoning_format_name(reasoning_format_);
  return params;
}

json Server::slots_json() const {
  const Model& m = model();
  json slot = {{"id", 0}, {"n_ctx", m.ctx_size}, {"speculative", m.draft != nullptr}};
  if (m.draft) slot["block_size"] = m.reserve;
  std::lock_guard<std::mutex> lock(queue_mutex_);
  const std::shared_ptr<Generation> g = running_;
  slot["is_processing"] = g != nullptr;
  slot["id_task"] = g ? g->task : -1;
  slot["n_queued"] = queue_.size();  // the slot's queue (llama-server keeps one for all slots)
  if (!g) {
    slot["params"] = default_params_json();
    slot["next_token"] = {{"has_next_token", false}, {"n_remain", -1}, {"n_decoded", 0}};
    return json::array({slot});
  }
  const Job& job = g->job;
  json params = sampling_json(job.params.sampling);
  params["n_predict"] = job.params.max_new_tokens;
  params["stream"] = job.request.stream;
  params["stop"] = job.request.stop;
  params["n_probs"] = std::max<int64_t>(job.params.logprobs, 0);
  params["ignore_eos"] = job.params.stop_ids.empty();
  params["n"] = job.request.n;
  slot["params"] = params;
  slot["id_choice"] = g->choice.load();  // the running one of the request's n choices
  slot["id_request"] = job.id;
  slot["n_prompt_tokens"] = job.prompt.size();
  const int64_t decoded = g->decoded;
  slot["next_token"] = {{"has_next_token", true},
                        {"n_remain", std::max<int64_t>(job.params.max_new_tokens - decoded, 0)},
                        {"n_decoded", decoded}};
  return json::array({slot});
}

std::string Server::metrics_text() const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  std::string s;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    s += fmt::format("# HELP specpress:{} {}\n# TYPE specpress:{} {}\nspecpress:{} {}\n", name, help, name, type, name, value);
  };
  {  // the build as labels of a constant 1, as Prometheus exporters' *_build_info
    const tools::BuildInfo b = tools::build_info();
    auto label = [](const std::string& v) {  // the exposition format's escapes
      std::string out;
      for (char c : v) out += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
      return out;
    };
    s += fmt::format("# HELP specpress:build_info The build serving: version, source commit, LibTorch, CUDA.\n"
                     "# TYPE specpress:build_info gauge\nspecpress:build_info{{version=\"{}\",commit=\"{}\","
                     "torch=\"{}\",cuda_runtime=\"{}\"}} 1\n",
                     label(b.version), label(b.commit), label(b.torch), label(b.cuda_runtime));
  }
  metric("requests_total", "counter", "Generations run (to their end, a stop, or a client that left).",
         static_cast<double>(requests_));
  metric("prompt_tokens_total", "counter", "Prompt tokens processed.", static_cast<double>(prompt_tokens_));
  metric("prompt_seconds_total", "counter", "Prompt processing time.", prompt_seconds_);
  metric("tokens_predicted_total", "counter", "Generated tokens returned (up to a stop string).",
         static_cast<double>(predicted_tokens_));
  metric("tokens_predicted_seconds_total", "counter", "Generation time (after the prompt).", predicted_seconds_);
  metric("draft_tokens_total", "counter", "Tokens proposed by the DFlash draft.", static_cast<double>(draft_tokens_));
  metric("draft_tokens_accepted_total", "counter", "Draft tokens accepted by the target.",
         static_cast<double>(accepted_tokens_));
  metric("verify_steps_total", "counter", "DFlash verify steps (a block each; tau = 1 + accepted / steps).",
         static_cast<double>(verify_steps_));
  // per block position, as vLLM's spec_decode_num_accepted_tokens_per_pos: from the block size once loaded
  const size_t block_positions = ready_ && model_.draft ? static_cast<size_t>(model_.reserve - 1) : 0;
  const size_t positions = std::max(accepted_at_.size(), block_positions);
  if (positions > 0) {
    s += "# HELP specpress:draft_accepted_per_position_total Verify steps that accepted the drafted token at this block "
         "position (1: the first after the bonus token).\n# TYPE specpress:draft_accepted_per_position_total counter\n";
    for (size_t i = 0; i < positions; ++i)
      s += fmt::format("specpress:draft_accepted_per_position_total{{position=\"{}\"}} {}\n", i + 1,
                       i < accepted_at_.size() ? accepted_at_[i] : 0);
  }
  if (ready_ && model_.policy.enabled()) {  // counted at each generation's last forward, as its "compression" object
    metric("compression_events_total", "counter", "Units of committed tokens replaced in the KV cache (--compress).",
           static_cast<double>(compression_events_));
    metric("compression_tokens_total", "counter", "Committed tokens those units held.",
           static_cast<double>(compression_tokens_));
    metric("compression_slots_freed_total", "counter", "KV cache slots freed by compression.",
           static_cast<double>(compression_slots_freed_));
    metric("compression_seconds_total", "counter", "Time spent compressing the KV cache.", compression_seconds_);
  }
  std::lock_guard<std::mutex> queue_lock(queue_mutex_);
  metric("requests_processing", "gauge", "Generations running (0 or 1).", busy_ ? 1.0 : 0.0);
  metric("requests_deferred", "gauge", "Generations waiting for the slot.", static_cast<double>(queue_.size()));
  return s;
}

void Server::route(const char* method, const std::string& pattern, const httplib::Server::Handler& handler) {
  if (std::string_view(method) == "GET") http_.Get(pattern, handler);
  else http_.Post(pattern, handler);
  routes_.emplace_back(method, std::regex(pattern));
}

std::string Server::allowed_methods(const std::string& path) const {
  std::string allowed;
  for (const auto& [method, pattern] : routes_)
    if (std::regex_match(path, pattern) && allowed.find(method) == std::string::npos)
      allowed += (allowed.empty() ? "" : ", ") + method;
  return allowed;
}

void Server::add_routes() {
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (ready_) send_json(res, 200, {{"status", "ok"}});
    else send_json(res, 503, error_json(503, "Loading model", "unavailable_error"));
  };
  route("GET", "/health", health);
  route("GET", "/v1/health", health);
  // OpenAI's model object, with Anthropic's fields beside (type, display_name, created_at), so that both APIs'
  // clients can list and retrieve the one model
  auto model_object = [this] {
    const Model& m = model();
    const json meta = {{"n_ctx", m.ctx_size},
                       {"n_ctx_train", m.target->config().max_position_embeddings},
                       {"n_vocab", m.target->config().vocab_size},
                       {"draft", o_.draft_dir.empty() ? json(nullptr) : json(o_.draft_dir)},
                       {"block_size", m.reserve}};
    return json{{"id", alias_},
                {"object", "model"},
                {"created", started_},
                {"owned_by", "specpress"},
                {"type", "model"},
                {"display_name", alias_},
                {"created_at", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(static_cast<std::time_t>(started_)))},
                {"meta", meta}};
  };
  auto models = [this, model_object](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      send_json(res, 200, {{"object", "list"},
                           {"data", json::array({model_object()})},
                           {"has_more", false},
                           {"first_id", alias_},
                           {"last_id", alias_}});
    });
  };
  route("GET", "/v1/models", models);
  route("GET", "/models", models);
  // GET /v1/models/{id} (the SDKs' models.retrieve): the served model under its alias (ids may hold '/')
  auto one_model = [this, model_object](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const json object = model_object();  // 503 while loading
      if (req.matches[1].str() != alias_)
        throw HttpError(404, fmt::format("model '{}' not found: this server serves '{}'", req.matches[1].str(), alias_),
                        "not_found_error");
      send_json(res, 200, object);
    });
  };
  route("GET", R"(/v1/models/(.+))", one_model);
  route("GET", R"(/models/(.+))", one_model);
  route("GET", "/props", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      const Model& m = model();
      send_json(res, 200, {{"default_generation_settings", {{"n_ctx", m.ctx_size}, {"params", default_params_json()}}},
                           {"total_slots", 1},
                           {"model_alias", alias_},
                           {"model_path", o_.model_dir},
                           {"draft_path", o_.draft_dir},
                           {"block_size", m.reserve},
                           {"fast_path", m.runner->fast()},
                           {"compress", compress::policy_json(m.policy)},
                           {"chat_template", "Qwen3 (built in)"},
                           {"build_info", tools::build_line()}});
    });
  });
  route("GET", "/slots", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      if (!o_.slots) throw HttpError(501, "the slots endpoint is off (--no-slots)", "not_supported_error");
      const json slots = slots_json();
      // any value, as llama-server reads the parameter
      if (req.has_param("fail_on_no_slot") && slots[0]["is_processing"] == true)
        throw HttpError(503, "no slot available", "unavailable_error");
      send_json(res, 200, slots);
    });
  });
  route("POST", R"(/slots/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const std::string action = req.get_param_value("action");
      throw HttpError(501, fmt::format("slot action '{}': specpress keeps no prompt cache to save, restore or erase",
                                       action.empty() ? "(none given)" : action), "not_supported_error");
    });
  });
  route("GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  auto completing = [this](Api api) {
    return [this, api](const httplib::Request& q, httplib::Response& s) { complete(q, s, api); };
  };
  route("POST", "/v1/completions", completing(Api::kCompletions));
  route("POST", "/completions", completing(Api::kCompletions));
  route("POST", "/v1/chat/completions", completing(Api::kChatCompletions));
  route("POST", "/chat/completions", completing(Api::kChatCompletions));
  route("POST", "/completion", completing(Api::kNativeCompletion));
  route("POST", "/v1/messages", completing(Api::kMessages));
  route("POST", "/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, /*anthropic=*/true, [&] {
      const CompletionRequest r =
          parse_messages_request(parse_body(req.body), MessagesRoute::kCountTokens, request_defaults(),
                                 parse_ordered_fields(req.body));
      send_json(res, 200, {{"input_tokens", prompt_ids(r).size()}});
    });
  });
  route("POST", "/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const Model& m = model();
      if (!m.tokenizer) throw HttpError(400, "the model directory has no tokenizer.json");
      const nlohmann::json body = parse_body(req.body);
      bool with_pieces = false, parse_special = true;
      std::string content;
      for (const auto& [key, v] : body.items()) {
        if (key == "content" && v.is_string()) content = v.get<std::string>();
        else if (key == "with_pieces" && v.is_boolean()) with_pieces = v.get<bool>();
        else if (key == "parse_special" && v.is_boolean()) parse_special = v.get<bool>();
        else if (key != "add_special" || !v.is_boolean())  // add_special: Qwen3 adds no BOS either way
          fail("field '{}': unknown or not of the expected type (content: string; with_pieces, parse_special, "
               "add_special: true or false)", key);
      }
      if (!body.contains("content")) fail("field 'content' is missing");
      json tokens = json::array();
      for (int32_t id : m.tokenizer->encode(content, parse_special)) {
        if (!with_pieces) {
          tokens.push_back(id);
          continue;
        }
        // llama-server's form: the piece as text where its bytes are whole UTF-8, else the bytes as numbers (a
        // character split across tokens), so that the pieces concatenate to the content
        std::string piece;
        m.tokenizer->append_token_bytes(id, piece);
        if (tok::utf8::find_invalid(piece) == tok::utf8::npos) {
          tokens.push_back({{"id", id}, {"piece", piece}});
        } else {
          json bytes = json::array();
          for (unsigned char c : piece) bytes.push_back(c);
          tokens.push_back({{"id", id}, {"piece", bytes}});
        }
      }
      send_json(res, 200, {{"tokens", tokens}});
    });
  });
  route("POST", "/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const Model& m = model();
      if (!m.tokenizer) throw HttpError(400, "the model directory has no tokenizer.json");
      const nlohmann::json body = parse_body(req.body);
      if (!body.contains("tokens") || !body["tokens"].is_array()) fail("field 'tokens': expected an array of token ids");
      for (const auto& [key, v] : body.items())
        if (key != "tokens") fail("unknown field '{}' for /detokenize (it takes tokens)", key);
      // ids of the model's vocabulary past the tokenizer's (Qwen3's padding rows, which a model can emit) decode to
      // nothing, as Hugging Face's decode drops them and the completions' text does
      const int64_t vocab = std::max<int64_t>(m.target->config().vocab_size, m.tokenizer->vocab_size());
      std::vector<int32_t> ids;
      for (const auto& v : body["tokens"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
          fail("field 'tokens': {} is not a token id (0..{})", brief(v), vocab - 1);
        if (v.get<int64_t>() < m.tokenizer->vocab_size()) ids.push_back(v.get<int32_t>());
      }
      send_json(res, 200, {{"content", m.tokenizer->decode(ids)}});
    });
  });
  route("POST", "/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      model();
      const CompletionRequest r =
          parse_completion_request(parse_body(req.body), Api::kChatCompletions, request_defaults(),
                                   parse_ordered_fields(req.body));
      send_json(res, 200, {{"prompt", tok::render_qwen3_chat(r.messages, true, r.enable_thinking, r.tools)}});
    });
  });
  // CORS, as llama-server allows it: browser clients on other origins may call every route.
  http_.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
  // The preflight allows the headers the browser asks for (SDKs add their own, e.g. Anthropic's x-stainless-*).
  http_.Options(R"(.*)", [](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers",
                   asked.empty() ? "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta" : asked);
    res.status = 204;
  });
  // Before a body is read: a POST must say how long its body is (cpp-httplib would read one without a length until
  // the client closes, and the client waits for the answer: both hang), and every route but /health needs the key.
  // No route for the request: 405 with the methods the path takes (Allow) where it is known, else 404; sets the status.
  auto no_route = [this](const httplib::Request& req, httplib::Response& res) {
    const std::string allowed = allowed_methods(req.path);
    if (allowed.empty()) {
      res.status = 404;
      return error_json(404, fmt::format("no route {} {}", req.method, req.path), "not_found_error");
    }
    res.status = 405;
    res.set_header("Allow", allowed + ", OPTIONS");
    return error_json(405, fmt::format("{} takes {}, not {}", req.path, allowed, req.method), "invalid_request_error");
  };
  http_.set_pre_routing_handler([this, no_route](const httplib::Request& req, httplib::Response& res) {
    // a method no route takes is answered before cpp-httplib reads a body for it (PUT, PATCH and DELETE have one)
    if (req.method != "GET" && req.method != "HEAD" && req.method != "POST" && req.method != "OPTIONS") {
      const json error = no_route(req, res);
      send_json(res, res.status, anthropic_route(req.path) ? anthropic_error(error) : error);
      res.set_header("Connection", "close");  // a body the client may send is not a request
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method == "POST" && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      const json error = error_json(411, "request body: a POST needs a Content-Length header (0 for no body) or "
                                         "Transfer-Encoding: chunked", "invalid_request_error");
      send_json(res, 411, anthropic_route(req.path) ? anthropic_error(error) : error);
      res.set_header("Connection", "close");  // whatever the client sends next is not a request
      return httplib::Server::HandlerResponse::Handled;
    }
    // cpp-httplib reads a body of the length it is told before its own checks: a length that is no number, or one
    // over the cap, would hold the connection until --timeout (or until all of it arrived) before any answer
    if (req.method == "POST" && req.has_header("Content-Length")) {
      const std::string length = req.get_header_value("Content-Length");
      const bool digits = !length.empty() && std::all_of(length.begin(), length.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      const std::string significant = length.substr(std::min(length.find_first_not_of('0'), length.size()));
      if (!digits || significant.size() > 19 || (!significant.empty() && std::stoull(significant) > kMaxBodyBytes)) {
        const int status = digits ? 413 : 400;
        const json error = error_json(status, status == 413 ? fmt::format("request body: Content-Length {} is larger "
                                                                          "than 64 MiB", length)
                                                            : fmt::format("request body: Content-Length '{}' is not a "
                                                                          "byte count", length),
                                      "invalid_request_error");
        send_json(res, status, anthropic_route(req.path) ? anthropic_error(error) : error);
        res.set_header("Connection", "close");  // the body that may follow is not a request
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (o_.api_key.empty() || req.path == "/health" || req.path == "/v1/health" || req.method == "OPTIONS")
      return httplib::Server::HandlerResponse::Unhandled;
    // the scheme's name is case-insensitive (RFC 7235); the key is not
    const std::string authorization = req.get_header_value("Authorization");
    const bool bearer = authorization.size() == 7 + o_.api_key.size() &&
                        std::equal(authorization.begin(), authorization.begin() + 7, "bearer ",
                                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }) &&
                        authorization.compare(7, std::string::npos, o_.api_key) == 0;
    if (bearer || req.get_header_value("X-Api-Key") == o_.api_key) return httplib::Server::HandlerResponse::Unhandled;
    const json error = error_json(401, "Invalid API Key", "authentication_error");
    send_json(res, 401, anthropic_route(req.path) ? anthropic_error(error) : error);
    return httplib::Server::HandlerResponse::Handled;
  });
  http_.set_error_handler([this, no_route](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a route's own error
    json error;
    if (res.status == 404) {
      error = no_route(req, res);
    } else if (res.status == 413) {
      // cpp-httplib caps form-encoded bodies (curl -d's default Content-Type) at 8 KiB
      const bool form = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
      error = error_json(413, form ? "request body: over 8192 bytes with Content-Type "
                                     "application/x-www-form-urlencoded; send Content-Type: application/json"
                                   : "request body: larger than 64 MiB", "invalid_request_error");
    } else {
      error = error_json(res.status, fmt::format("HTTP status {}", res.status), "invalid_request_error");
    }
    send_json(res, res.status, anthropic_route(req.path) ? anthropic_error(error) : error);
  });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_json(res, 500, error_json(500, message, "server_error"));
  });
  http_.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (req.path == "/health" || req.path == "/v1/health" || req.path == "/metrics") return;  // polled
    std::fprintf(stderr, "request: %s %s %s %d\n", req.method.c_str(), req.path.c_str(), req.remote_addr.c_str(),
                 res.status);
  });
  http_.set_read_timeout(static_cast<time_t>(o_.timeout_s));
  http_.set_write_timeout(static_cast<time_t>(o_.timeout_s));
  http_.set_payload_max_length(kMaxBodyBytes);
}

int Server::run() {
  // what can be checked without the model, before listening
  cli::parse_placement(o_.device, o_.dtype);
  if (o_.draft_dir.empty() && o_.block_size != 0) fail("--block-size: needs a draft model (-md DIR)");
  model::config_path_in(o_.model_dir, "an HF model directory (-m/--model)");
  if (!o_.draft_dir.empty()) model::config_path_in(o_.draft_dir, "a DFlash draft directory (-md/--model-draft)");

  add_routes();
  // Enough HTTP threads for every request allowed to wait, the running one and 32 more, so that /health, /metrics
  // and bad requests answer at once however busy the slot is. (cpp-httplib keeps a thread on each keep-alive
  // connection for up to 5 s between requests: the 32 cover the idle connections of pooling clients.)
  const size_t threads = static_cast<size_t>(o_.max_queue) + 33;
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second server on a port in use
  // starts and silently takes half of its connections.
  int listen_socket = -1;  // the last socket cpp-httplib set up: the one it binds, when binding succeeds
  http_.set_socket_options([&listen_socket](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket = sock;
  });
  int port = static_cast<int>(o_.port);  // 0..65535, checked by run_server
  if (port == 0) {
    port = http_.bind_to_any_port(o_.host);
    if (port < 0) fail("--host {}: cannot listen there (not an address of this machine?)", o_.host);
  } else if (!http_.bind_to_port(o_.host, port)) {
    fail("--host {} --port {}: cannot listen there (in use, or not an address of this machine)", o_.host, port);
  }
  // Debian's cpp-httplib (a compiled library) listens with a backlog of 5: a burst of clients past it (twelve
  // requests at once) waited for a SYN retry and could be reset, a client's read error with no request in the log.
  // A second listen() on the bound socket raises the backlog (the kernel caps it at net.core.somaxconn).
  if (listen_socket >= 0) ::listen(listen_socket, 512);
  std::atomic<bool> listener_returned{false};
  std::thread listener([this, &listener_returned] {
    http_.listen_after_bind();
    listener_returned = true;
  });
  // cpp-httplib's stop() does nothing until the accept loop runs: wait for it, so that a quick failure or shutdown
  // cannot leave listener.join() waiting for a loop nobody stops
  while (!http_.is_running() && !listener_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::fprintf(stderr, "specpress serve: listening on http://%s:%d (loading %s)\n", o_.host.c_str(), port,
               o_.model_dir.c_str());
  std::fflush(stderr);
  // Shutdown: running generations end at their next commit and queued ones fail with 503 (the slot thread drains
  // the queue), so the HTTP threads waiting on them finish, and the providers they hand their bodies to start
  // (ResponseInFlight) before the listener stops, within a 5 s grace; then the slot thread ends.
  // cpp-httplib's stop() also waits for connections still sending a request (up to --timeout): past 5 s the process
  // exits without them, with `exit_code`, after printing `error` (a failed load's message) where there is one.
  auto stop_all = [&](int exit_code, const std::string& error) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      shutting_down_ = true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (responses_in_flight_ > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http_.stop();
    while (!listener_returned && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!listener_returned) {
      std::fprintf(stderr, "specpress serve: connections still open 5 s into the shutdown; exiting without them\n");
      if (!error.empty()) std::fprintf(stderr, "error: %s\n", error.c_str());
      std::fflush(stderr);
      std::_Exit(exit_code);  // nothing to save: generations write no files
    }
    listener.join();
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stop_slot_ = true;
    }
    queue_changed_.notify_all();
    if (slot_thread_.joinable()) slot_thread_.join();
  };
  try {
    load();
  } catch (...) {
    stop_all(1, current_error_json()["error"]["message"].get<std::string>());
    throw;
  }
  slot_thread_ = std::thread([this] { slot_loop(); });
  std::signal(SIGINT, on_stop_signal);  // until here, a signal ends the load the default way
  std::signal(SIGTERM, on_stop_signal);
  ready_ = true;
  std::string engine =
      model_.runner->fast() ? fmt::format("CUDA fast path, its engine built in {:.0f} ms", model_.engine_ms)
                            : std::string("reference path");
  if (!model_.runner->fast() && model_.target->device().is_cuda())  // on a GPU, why not the fast path
    engine += fmt::format(" ({})", model_.policy.enabled() ? "--compress edits the reference path's KV cache"
                                                            : model_.runner->why_not_fast());
  if (model_.warmup_ms >= 0) engine += fmt::format(", warmed up in {:.0f} ms", model_.warmup_ms);
  std::fprintf(stderr, "specpress serve: model %s ready (%s%s, context %lld, %s)\n", alias_.c_str(),
               model_.draft ? "DFlash, block " : "plain decoding",
               model_.draft ? std::to_string(model_.reserve).c_str() : "", static_cast<long long>(model_.ctx_size),
               engine.c_str());
  std::fflush(stderr);
  while (!g_signalled && http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "specpress serve: shutting down\n");
  stop_all(0, "");
  return 0;
}

}  // namespace

int run_server(const ServerOptions& options) {
  if (options.port < 0 || options.port > 65535) fail("--port: {} is not a TCP port (0..65535; 0 = any free port)", options.port);
  if (options.ctx_size < -1) fail("-c/--ctx-size: must be >= 0 (0 = the model's maximum), got {}", options.ctx_size);
  if (options.n_predict < -1 || options.n_predict == 0)
    fail("-n/--n-predict: must be >= 1, or -1 for as many as the context leaves; got {}", options.n_predict);
  if (options.timeout_s < 1 || options.timeout_s > kMaxTimeoutSeconds)
    fail("--timeout: must be 1..{} seconds (cpp-httplib's longest wait), got {}", kMaxTimeoutSeconds,
         options.timeout_s);
  if (options.host.empty()) fail("--host: empty (expected an address such as 127.0.0.1 or 0.0.0.0)");
  if (options.max_queue < 0 || options.max_queue > 1024)
    fail("--max-queue: must be in 0..1024 (an HTTP thread each), got {}", options.max_queue);
  decode::validate(options.sampling);
  ServerOptions o = options;
  if (o.reasoning_budget_given) {
    if (o.reasoning_budget < -1)
      fail("--reasoning-budget: expected -1 (thinking on), 0 (thinking off) or a token count (thinking on, capped), "
           "found {}", o.reasoning_budget);
    if (o.reasoning_budget == 0 && o.enable_thinking) fail("--reasoning-budget 0 (thinking off) contradicts --think");
    o.enable_thinking = o.reasoning_budget != 0;
  }
  if (o.chat_template_kwargs_given) {
    if (o.chat_template_kwargs.empty()) fail("--chat-template-kwargs: expected a JSON object, found an empty string");
    nlohmann::json kwargs;
    try {
      kwargs = nlohmann::json::parse(depth_checked(o.chat_template_kwargs, "--chat-template-kwargs"));
    } catch (const nlohmann::json::parse_error& e) {
      fail("--chat-template-kwargs: not valid JSON ({})", e.what());
    }
    if (!kwargs.is_object()) fail("--chat-template-kwargs: expected a JSON object, got {}", kwargs.type_name());
    for (const auto& [key, value] : kwargs.items()) {
      if (key != "enable_thinking")
        fail("--chat-template-kwargs: {} is not supported (the built-in Qwen3 template takes enable_thinking)",
             brief(nlohmann::json(key)));
      if (!value.is_boolean())
        fail("--chat-template-kwargs: enable_thinking must be true or false, got {}", brief(value));
      o.enable_thinking = value.get<bool>();
    }
  }
  // what needs no model is refused before the port is bound (the model loads after it, /health answering 503)
  compress::check_compress_flags(o.compress, "--compress", o.policy);
  if (o.reasoning_budget > 0 && o.compress != "none")
    fail("--reasoning-budget: cannot be combined with --compress (the compressor follows one generation)");
  std::signal(SIGPIPE, SIG_IGN);  // a client that disconnects mid-stream is a failed write, not a dead server
  Server server(o);
  return server.run();
}

}  // namespace specpress::server
