// cmd_serve.cpp — `specpress serve -m TARGET [-md DRAFT] [--host H] [--port P] [-c CTX] ...`: the flags of the
// HTTP server, spelt as llama-server spells them; the sampling flags are the requests' defaults. Builds without
// cpp-httplib (CMake's SPECPRESS_SERVER) keep the command, which then says why it cannot run.
#include "cli/cmd_serve.h"

#include <memory>

#include "cli/common.h"
#include "core/error.h"
#include "server/http_server.h"

namespace specpress::cli {

void add_serve_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<server::ServerOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, Anthropic's /v1/messages, "
               "SSE streaming, /health, /metrics)");
  cmd->add_option("-m,--model", o->model_dir, "target model directory (HF Qwen3)")->required();
  cmd->add_option("--model-draft", o->draft_dir, "DFlash draft directory (also -md): every request decodes with it")
      ->check(non_empty_check("expected a DFlash draft directory; leave the flag out for plain decoding"));
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: any free port, printed when listening)")->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->ctx_size,
                  "positions a request may use: prompt + output + block (default 4096, or the model's maximum when "
                  "smaller; 0: the model's maximum); on the CUDA fast path their KV cache is allocated at load");
  cmd->add_option("-n,--n-predict", o->n_predict,
                  "default max_tokens of the OpenAI and llama.cpp routes (-1: as many as the context leaves; "
                  "/v1/messages requires its own)")
      ->capture_default_str();
  add_sampling_flags(*cmd, o->sampling, "default ");
  [[maybe_unused]] auto seed_text = std::make_shared<std::string>();
  [[maybe_unused]] CLI::Option* seed = cmd->add_option("-s,--seed", *seed_text,
                                      "default sampling seed (default, -1 or 4294967295: a fresh one each request)");
  cmd->add_flag("--think", o->enable_thinking, "chat requests default to enable_thinking (off: what DFlash drafts need)");
  [[maybe_unused]] CLI::Option* budget = cmd->add_option(
      "--reasoning-budget", o->reasoning_budget,
      "llama-server's: -1 thinking on by default, 0 off (as --think / its absence); N > 0 thinking on and each "
      "think block capped at N tokens (\"\\n</think>\\n\\n\" forced, then the answer; a request's "
      "thinking_token_budget or thinking.budget_tokens replaces it)");
  [[maybe_unused]] CLI::Option* kwargs = cmd->add_option("--chat-template-kwargs", o->chat_template_kwargs,
                                        "JSON object of template parameters for every chat request, as llama-server "
                                        "takes it: {\"enable_thinking\": true|false} (overrides --think and --reasoning-budget)");
  cmd->add_option("--reasoning-format", o->reasoning_format,
                  "chat replies' thinking: none (left in content), deepseek (in reasoning_content), deepseek-legacy "
                  "(content whole; reasoning_content too in whole responses), auto (deepseek)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "never stop at the model's eos ids");
  cmd->add_flag("--return-tokens-as-token-ids", o->return_tokens_as_token_ids,
                "logprobs name each token \"token_id:ID\" (as vLLM's flag; a request's return_tokens_as_token_ids wins)");
  // on by default, each with its --no- form (two flags: CLI11 would print "--slots,--no-slots{false}" for one)
  cmd->add_flag_callback("--slots", [o] { o->slots = true; },
                         "serve GET /slots, the generation slot's state (the default)");
  cmd->add_flag_callback("--no-slots", [o] { o->slots = false; }, "do not serve GET /slots");
  cmd->add_flag_callback("--warmup", [o] { o->warmup = true; },
                         "run a short greedy generation at load, so that the first request pays no first-run costs "
                         "(the default; not counted in /metrics)");
  cmd->add_flag_callback("--no-warmup", [o] { o->warmup = false; }, "load without the warm-up generation");
  cmd->add_option("--block-size", o->block_size, "DFlash block size (0, the default: the draft's trained size)");
  cmd->add_option("--alias", o->alias, "model id reported to clients (default: the model directory's name)");
  cmd->add_option("--api-key", o->api_key,
                  "require \"Authorization: Bearer KEY\" (or \"X-Api-Key: KEY\") on every route but /health")
      ->check(non_empty_check("an unset variable? leave the flag out to serve without a key"));
  cmd->add_option("--timeout", o->timeout_s, "socket read/write timeout in seconds")->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "requests that may wait for the generation slot (more: 503 at once)")
      ->capture_default_str();
  add_placement_flags(*cmd, o->device, o->dtype);
  cmd->add_flag("--reference-path", o->reference_path, "use the reference ATen path even where the CUDA fast path applies");
  add_compression_flags(*cmd, o->compress, o->policy);
#ifdef SPECPRESS_HAVE_SERVER
  cmd->callback([&run, o, seed, seed_text, kwargs, budget]() {
    const bool seed_given = seed->count() > 0;
    o->reasoning_budget_given = budget->count() > 0;
    o->chat_template_kwargs_given = kwargs->count() > 0;
    run = [o, seed_given, seed_text]() {
      // no --seed, -1 or llama-server's "random" value: a fresh seed each request
      const std::optional<uint64_t> fixed = seed_given ? parse_seed_flag(*seed_text, "-s/--seed") : std::nullopt;
      o->random_seed = !fixed;
      if (fixed) o->sampling.seed = *fixed;
      return server::run_server(*o);
    };
  });
#else
  cmd->callback([&run]() {
    run = []() -> int { fail("serve: this build has no HTTP server (cpp-httplib was not found when it was configured)"); };
  });
#endif
}

}  // namespace specpress::cli
