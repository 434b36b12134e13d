// api_request.cpp — see api_request.h. A null field counts as absent, as OpenAI's clients send them.
#include "server/api_request.h"

#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "server/json_fields.h"

namespace specpress::server {
namespace {
using json = nlohmann::json;

constexpr int kMaxDepth = 32;
constexpr int64_t kMaxTokenId = 999'999'999'999;  // 12 digits, as the string keys' bound

// top_logprobs, /v1/completions' logprobs, n_probs: how many alternatives a token reports.
int64_t top_logprobs_field(const json& v, const std::string& field) {
  if (v.is_boolean()) fail("field '{}': expected an integer 0..{}, got {}", field, decode::kMaxLogprobs, brief(v));
  const int64_t n = integer_field(v, field);
  if (n < 0 || n > decode::kMaxLogprobs) fail("field '{}': must be 0..{}, got {}", field, decode::kMaxLogprobs, n);
  return n;
}

// Completions' prompt: a string, token ids, or a batch of one of those.
void read_prompt(const json& v, CompletionRequest& r) {
  const json* p = &v;
  if (v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array())) p = &v[0];
  else if (v.is_array() && !v.empty() && (v[0].is_string() || v[0].is_array()))
    fail("field 'prompt': a batch of {} prompts; one prompt a request is supported", v.size());
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return;
  }
  if (!p->is_array() || p->empty())
    fail("field 'prompt': expected a string or a non-empty array of token ids, got {}", brief(v));
  for (size_t i = 0; i < p->size(); ++i) {
    if (!(*p)[i].is_number_integer())
      fail("field 'prompt': element {} is {}, expected a token id", i, brief((*p)[i]));
    r.prompt_ids.push_back(integer_field((*p)[i], "prompt"));
  }
}

// Chat messages: OpenAI's content may be an array of text parts; "developer" is OpenAI's newer name for the
// system role; a participant "name" does not enter Qwen3's template. The rest is tok::parse_messages's check.
void read_messages(const nlohmann::ordered_json& v, CompletionRequest& r) {
  using ojson = nlohmann::ordered_json;  // tool-call arguments keep their keys' order
  if (!v.is_array()) fail("field 'messages': expected an array of {{\"role\", \"content\"}} objects, got {}", v.type_name());
  ojson normalized = ojson::array();
  for (size_t i = 0; i < v.size(); ++i) {
    ojson m = v[i];
    if (!m.is_object()) fail("field 'messages': messages[{}] is {}, expected an object", i, m.type_name());
    if (m.contains("name") && !m["name"].is_string() && !m["name"].is_null())
      fail("field 'messages': messages[{}].name: expected a string, got {}", i, brief(m["name"]));
    m.erase("name");
    const bool has_role = m.contains("role") && m["role"].is_string();
    if (has_role && m["role"] == "developer") m["role"] = "system";
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (size_t k = 0; k < m["content"].size(); ++k) {
        const ojson& part = m["content"][k];
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
          fail("field 'messages': messages[{}].content[{}]: only {{\"type\": \"text\", \"text\": ...}} parts are "
               "supported", i, k);
        text += part["text"].get<std::string>();
      }
      m["content"] = text;
    } else if (m.contains("content") && m["content"].is_null() && has_role && m["role"] == "assistant") {
      m["content"] = "";
    }
    normalized.push_back(std::move(m));
  }
  r.messages = tok::parse_messages(normalized, "field 'messages'");
}

}  // namespace

std::string brief(const json& value) {
  std::string s = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

nlohmann::ordered_json parse_ordered_fields(const std::string& body) {
  using ojson = nlohmann::ordered_json;
  constexpr size_t kMaxKeys = 4096;
  std::vector<size_t> keys;    // keys seen in each open object of a kept field, innermost last
  bool kept = false;           // inside "tools" or "messages"
  const ojson::parser_callback_t keep = [&](int depth, ojson::parse_event_t event, ojson& parsed) {
    if (depth == 1 && event == ojson::parse_event_t::key) {
      kept = parsed == "tools" || parsed == "messages";
      return kept;
    }
    if (!kept || depth < 1) return true;
    if (event == ojson::parse_event_t::object_start) keys.push_back(0);
    else if (event == ojson::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == ojson::parse_event_t::key && !keys.empty() && ++keys.back() > kMaxKeys)
      fail("request body: an object in the tools or messages has more than {} keys", kMaxKeys);
    return true;
  };
  ojson j = ojson::parse(body, keep, /*allow_exceptions=*/false);
  return j.is_object() ? j : ojson::object();  // parse_body reports what is wrong with a body that is not an object
}

nlohmann::ordered_json ordered_field(const nlohmann::ordered_json& ordered, const std::string& key, const json& v) {
  return ordered.is_object() && ordered.contains(key) ? ordered[key] : nlohmann::ordered_json(v);
}

json parse_body(const std::string& body) {
  json j;
  const json::parser_callback_t limit_depth = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) fail("request body: values nested more than {} levels deep", kMaxDepth);
    return true;
  };
  try {
    j = json::parse(body, limit_depth);
  } catch (const json::parse_error& e) {
    fail("request body: not valid JSON ({})", e.what());
  } catch (const json::out_of_range& e) {  // e.g. 1e309: valid JSON, no double holds it
    fail("request body: a number out of range ({})", e.what());
  }
  if (!j.is_object()) fail("request body: expected a JSON object, got {}", j.type_name());
  return j;
}

namespace {

// OpenAI's logit_bias ({"TOKEN_ID": bias}) and llama-server's forms: object keys that are text, and
// [[TOKEN_ID or "text", bias], ...]; a bias of false bans the token (-inf). Text is tokenized by the server
// (CompletionRequest::logit_bias_texts). The field replaces the server's default biases.
void read_logit_bias(const json& v, CompletionRequest& r) {
  r.sampling.logit_bias.clear();
  r.logit_bias_texts.clear();
  auto bias_of = [](const json& b, const std::string& where) {
    if (b == false) return -std::numeric_limits<double>::infinity();
    if (!b.is_number() || !std::isfinite(b.get<double>()))
      fail("field 'logit_bias': {}: the bias must be a finite number or false (never), got {}", where, brief(b));
    return b.get<double>();
  };
  auto add = [&](const json& token, const json& b, const std::string& where) {
    if (token.is_number_integer() || token.is_number_unsigned()) {
      if (!token.is_number_unsigned() && token.get<int64_t>() < 0)
        fail("field 'logit_bias': {}: token id {} is negative", where, brief(token));
      if (token.is_number_unsigned() && token.get<uint64_t>() > static_cast<uint64_t>(kMaxTokenId))
        fail("field 'logit_bias': {}: token id {} is outside any vocabulary", where, brief(token));
      r.sampling.logit_bias.push_back({token.get<int64_t>(), bias_of(b, where)});
    } else if (token.is_string()) {
      const std::string& key = token.get_ref<const std::string&>();
      if (key.empty()) fail("field 'logit_bias': {}: an empty string names no token", where);
      if (key.find_first_not_of("0123456789") != std::string::npos) {  // text: the server tokenizes it
        r.logit_bias_texts.push_back({key, bias_of(b, where)});
      } else {  // an id, as OpenAI's keys are (never read as the text of its digits)
        if (key.size() > 12) fail("field 'logit_bias': {}: token id {} is outside any vocabulary", where, key);
        r.sampling.logit_bias.push_back({std::stoll(key), bias_of(b, where)});
      }
    } else {
      fail("field 'logit_bias': {}: expected a token id or a string, got {}", where, brief(token));
    }
  };
  if (v.is_object()) {
    for (const auto& [k, b] : v.items()) add(json(k), b, brief(json(k)));
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const json& item = v[i];
      if (!item.is_array() || item.size() != 2)
        fail("field 'logit_bias': item {}: expected [token id or text, bias], got {}", i, brief(item));
      add(item[0], item[1], fmt::format("item {}", i));
    }
  } else {
    fail("field 'logit_bias': expected an object {{\"TOKEN_ID\": bias}} or an array [[token, bias], ...], got {}",
         brief(v));
  }
}

// llama-server's `samplers`: sampler names, or its one-letter form as a string.
std::vector<std::string> sampler_names_field(const json& v) {
  const std::string field = "field 'samplers'";
  if (v.is_string()) return decode::sampler_names_of_letters(v.get<std::string>(), field);
  if (!v.is_array() || v.empty()) fail("{}: expected an array of sampler names or a string of letters, got {}", field,
                                       brief(v));
  std::vector<std::string> names;
  for (const json& name : v) names.push_back(string_field(name, "samplers[]"));
  return names;
}

// llama-server's fields for samplers and features this engine does not have: accepted at the value that leaves them
// off (what llama.cpp's web UI and clients send when the user has not turned them on), refused by name otherwise;
// the parameters read only while such a sampler is on are type-checked. False when `key` is none of them.
bool read_llama_cpp_off_field(const std::string& key, const json& v) {
  auto number_is = [&](double x) { return v.is_number() && v.get<double>() == x; };
  if (key == "typical_p" || key == "typ_p") {
    require_off(v, key, number_is(1), "typical sampling (1 = off)");
  } else if (key == "dynatemp_range") {
    require_off(v, key, number_is(0), "dynamic temperature (0 = off)");
  } else if (key == "xtc_probability") {
    require_off(v, key, number_is(0), "XTC sampling (0 = off)");
  } else if (key == "dry_multiplier") {
    require_off(v, key, number_is(0), "DRY sampling (0 = off)");
  } else if (key == "mirostat") {
    require_off(v, key, number_is(0), "mirostat sampling (0 = off)");
  } else if (key == "top_n_sigma") {
    require_off(v, key, v.is_number() && v.get<double>() <= 0, "top-n-sigma sampling (<= 0 = off)");
  } else if (key == "min_keep") {
    require_off(v, key, number_is(0) || number_is(1), "min_keep above 1 (top-p and min-p keep the likeliest token)");
  } else if (key == "id_slot") {
    require_off(v, key, number_is(-1) || number_is(0), "a slot other than 0 (there is one)");
  } else if (key == "grammar") {
    require_off(v, key, v == "", "a grammar (constrained decoding)");
  } else if (key == "n_indent" || key == "t_max_predict_ms") {
    require_off(v, key, number_is(0), "a limit by indentation or time (0 = off)");
  } else if (key == "timings_per_token" || key == "post_sampling_probs" || key == "return_progress" ||
             key == "backend_sampling" || key == "penalize_nl") {
    require_off(v, key, v == false, "this llama-server feature");
  } else if (key == "dynatemp_exponent" || key == "xtc_threshold" || key == "dry_base" || key == "mirostat_tau" ||
             key == "mirostat_eta") {
    number_field(v, key);  // read only with its sampler on
  } else if (key == "dry_allowed_length" || key == "dry_penalty_last_n" || key == "n_keep") {
    integer_field(v, key);  // DRY's (off); n_keep: no context shift here, a prompt that does not fit is refused
  } else if (key == "dry_sequence_breakers") {
    if (!v.is_string() && !v.is_array()) fail("field '{}': expected an array of strings, got {}", key, brief(v));
  } else if (key == "cache_prompt") {
    bool_field(v, key);  // no effect on a single-slot engine
  } else {
    return false;
  }
  return true;
}

}  // namespace

CompletionRequest parse_completion_request(const json& body, Api api, const RequestDefaults& defaults,
                                           const nlohmann::ordered_json& ordered) {
  if (api == Api::kMessages) fail("internal: Messages API requests are parse_messages_request's (messages_request.h)");
  CompletionRequest r;
  r.api = api;
  r.max_tokens = defaults.max_tokens;
  r.sampling = defaults.sampling;
  r.random_seed = defaults.random_seed;
  r.enable_thinking = defaults.enable_thinking;
  if (api == Api::kChatCompletions) r.reasoning_format = defaults.reasoning_format;
  std::optional<int64_t> max_completion_tokens;  // OpenAI's newer name wins over max_tokens
  std::optional<int64_t> best_of;
  const bool chat = api == Api::kChatCompletions, native = api == Api::kNativeCompletion;
  r.tokens_as_ids = defaults.tokens_as_ids && !native;  // llama.cpp's entries have the id beside the text
  if (chat) r.thinking_budget = defaults.thinking_budget;
  bool have_prompt = false, have_stream_options = false, chat_logprobs = false;
  std::optional<int64_t> top_logprobs;  // chat: alternatives a token, with "logprobs": true
  bool tool_choice_none = false;
  std::optional<std::vector<std::string>> samplers;  // applied once every sampling field is read
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    if (key == "prompt" && !chat) {
      read_prompt(v, r);
      have_prompt = true;
    } else if (key == "messages" && chat) {
      read_messages(ordered_field(ordered, key, v), r);
      have_prompt = true;
    } else if (key == "max_tokens" || (key == "max_completion_tokens" && chat) || (key == "n_predict" && native)) {
      const int64_t n = integer_field(v, key);
      if (native && n == -1) continue;  // llama.cpp: -1 = no limit (here: the context size)
      // 0: /v1/completions' echo scores the prompt alone; llama-server's n_predict 0 generates nothing
      if (n < 0 || (n == 0 && api == Api::kChatCompletions))
        fail("field '{}': must be at least {}, got {}{}", key, native ? "0 (or -1 for no limit)" : "1", n,
             api == Api::kCompletions ? " (0 only with \"echo\": true, which scores the prompt)" : "");
      if (key == "max_completion_tokens") max_completion_tokens = n;
      else if (!max_completion_tokens) r.max_tokens = n;
      r.max_tokens_given = true;
    } else if (read_sampling_field(key, v, r.sampling, r.random_seed)) {
      // temperature, top_p, top_k, min_p, seed
    } else if (key == "stop") {
      r.stop = stop_strings_field(v, key);
    } else if (key == "stream") {
      r.stream = bool_field(v, key);
    } else if (key == "stream_options" && !native) {
      if (!v.is_object()) fail("field 'stream_options': expected an object, got {}", v.type_name());
      for (const auto& [k, o] : v.items()) {
        if (k != "include_usage") fail("field 'stream_options': unknown field '{}' (expected include_usage)", k);
        if (!o.is_null()) r.include_usage = bool_field(o, "stream_options.include_usage");
      }
      have_stream_options = true;
    } else if (key == "ignore_eos") {
      r.ignore_eos = bool_field(v, key);
    } else if (key == "model") {
      r.model = string_field(v, key);
    } else if (key == "chat_template_kwargs" && chat) {
      if (!v.is_object()) fail("field 'chat_template_kwargs': expected an object, got {}", v.type_name());
      for (const auto& [k, o] : v.items()) {
        if (k != "enable_thinking")
          fail("field 'chat_template_kwargs': {} is not supported (the built-in Qwen3 template takes "
               "enable_thinking)", brief(json(k)));
        r.enable_thinking = bool_field(o, "chat_template_kwargs.enable_thinking");
      }
    } else if (key == "thinking_token_budget" && chat) {  // vLLM's
      r.thinking_budget = integer_field(v, key);
      r.thinking_budget_given = true;
      if (r.thinking_budget < 1)
        fail("field 'thinking_token_budget': must be at least 1, got {}", r.thinking_budget);
    } else if (key == "reasoning_format" && chat) {
      if (!v.is_string()) fail("field 'reasoning_format': expected a string, got {}", brief(v));
      r.reasoning_format = parse_reasoning_format(v.get<std::string>(), "field 'reasoning_format'");
    } else if (key == "n" && !native) {
      r.n = integer_field(v, key);
      if (r.n < 1 || r.n > kMaxChoices) fail("field 'n': must be in 1..{}, got {}", kMaxChoices, r.n);
    } else if (key == "best_of" && !native) {  // ranking candidates by their log-probability is not done here
      best_of = integer_field(v, key);
    } else if (key == "n" || key == "best_of") {
      const int64_t n = integer_field(v, key);
      require_off(v, key, n == 1, "more than one completion a request on /completion (/v1 routes take n)");
    } else if (key == "return_tokens_as_token_ids" && !native) {
      r.tokens_as_ids = bool_field(v, key);
    } else if (key == "echo" && api == Api::kCompletions) {
      r.echo = bool_field(v, key);
    } else if (key == "echo" && native) {
      require_off(v, key, v == false, "echoing the prompt on /completion (/v1/completions does)");
    } else if (key == "logprobs" && chat) {
      chat_logprobs = bool_field(v, key);
    } else if (key == "top_logprobs" && chat) {
      top_logprobs = top_logprobs_field(v, key);
    } else if ((key == "logprobs" && !chat && !native) || (key == "n_probs" && native)) {
      if (v == false) continue;  // none, as clients that send every field write it
      const int64_t n = top_logprobs_field(v, key);
      r.logprobs = native && n == 0 ? -1 : n;  // llama.cpp's n_probs 0: none
    } else if (key == "logprobs" || key == "top_logprobs" || key == "n_probs") {
      // another API's field: accepted where it means none
      if (!(v == false || v == 0))
        fail("field '{}': {} takes {} for log-probabilities (got {})", key,
             chat ? "/v1/chat/completions" : native ? "/completion" : "/v1/completions",
             chat ? "'logprobs': true and 'top_logprobs'" : native ? "'n_probs'" : "'logprobs'", brief(v));
    } else if (key == "presence_penalty" || key == "frequency_penalty") {
      // llama-server's penalties (over the last repeat_last_n tokens, the prompt's included), on every route as there
      const double p = number_field(v, key);
      if (!(p >= -2 && p <= 2)) fail("field '{}': must be in [-2, 2] (0 = off), got {}", key, brief(v));
      (key == "presence_penalty" ? r.sampling.presence_penalty : r.sampling.frequency_penalty) = p;
    } else if (key == "repeat_penalty") {
      r.sampling.repeat_penalty = number_field(v, key);
      if (!(r.sampling.repeat_penalty > 0) || !std::isfinite(r.sampling.repeat_penalty))
        fail("field 'repeat_penalty': must be a finite number > 0 (1 = off), got {}", brief(v));
    } else if (key == "repeat_last_n") {
      r.sampling.repeat_last_n = integer_field(v, key);
      if (r.sampling.repeat_last_n < -1)
        fail("field 'repeat_last_n': must be >= 0 tokens (0 = off) or -1 (the whole context), got {}",
             r.sampling.repeat_last_n);
    } else if (key == "logit_bias") {
      read_logit_bias(v, r);
    } else if (key == "suffix" && !chat) {
      require_off(v, key, v == "", "a suffix (fill-in-the-middle)");
    } else if (key == "response_format") {
      require_off(v, key, v.is_object() && v.contains("type") && v["type"] == "text", "a response format other than text");
    } else if (key == "tools" && chat) {
      r.tools = tok::parse_tools(ordered_field(ordered, key, v), "field 'tools'");
    } else if (key == "tool_choice" && chat) {
      if (v == "required" || v.is_object())
        fail("field 'tool_choice': {} forces a tool call, which needs constrained decoding; \"auto\" and \"none\" are "
             "supported", brief(v));
      if (v != "auto" && v != "none") fail("field 'tool_choice': expected \"auto\" or \"none\", got {}", brief(v));
      tool_choice_none = v == "none";
    } else if ((key == "functions" || key == "function_call") && chat) {
      require_off(v, key, (v.is_array() && v.empty()) || v == "none", "the deprecated function calling (send tools)");
    } else if (key == "user") {  // OpenAI's end-user id and stored-completion fields: checked, with no effect here
      string_field(v, key);
    } else if (key == "metadata") {
      if (!v.is_object()) fail("field 'metadata': expected an object of strings, got {}", brief(v));
      for (const auto& [k, o] : v.items())
        if (!o.is_null()) string_field(o, "metadata." + k);
    } else if (key == "store" || key == "parallel_tool_calls") {
      bool_field(v, key);  // no effect on a single-slot engine (parallel_tool_calls: every call is returned)
    } else if (key == "samplers") {
      samplers = sampler_names_field(v);
    } else if (read_llama_cpp_off_field(key, v)) {
      // typical_p, mirostat, DRY, XTC, ... at their "off" values
    } else {
      fail("unknown field '{}' for {}", key,
           chat ? "/v1/chat/completions" : native ? "/completion" : "/v1/completions");
    }
  }
  // the request's sequence, else the server's (--samplers): as in llama-server's chain, a sampler left out stays off
  // whatever value the request gives it
  if (samplers) {
    decode::apply_sampler_sequence(*samplers, r.sampling, "field 'samplers'");
  } else if (!r.sampling.sequence.empty()) {
    const std::vector<std::string> server_sequence = r.sampling.sequence;
    decode::apply_sampler_sequence(server_sequence, r.sampling, "--samplers");
  }
  if (max_completion_tokens) r.max_tokens = *max_completion_tokens;
  if (r.max_tokens_given && r.max_tokens == 0 && !r.echo && !native)
    fail("field 'max_tokens': must be at least 1, got 0 (0 only with \"echo\": true, which scores the prompt)");
  if (r.n > 1 && r.max_tokens == 0) fail("field 'n': {} choices of nothing (max_tokens 0 scores the prompt once)", r.n);
  if (best_of && *best_of != r.n)
    fail("field 'best_of': {} is not supported: only best_of = n ({}), which ranks nothing (n gives several "
         "completions)", *best_of, r.n);
  if (top_logprobs && !chat_logprobs) fail("field 'top_logprobs': only allowed with \"logprobs\": true");
  if (chat_logprobs) r.logprobs = top_logprobs.value_or(0);
  r.tool_calls = !r.tools.empty() && !tool_choice_none;  // "none": the tools stay in the prompt, as vLLM's
  if (!have_prompt) fail("field '{}' is missing", chat ? "messages" : "prompt");
  if (have_stream_options && !r.stream) fail("field 'stream_options': only allowed with \"stream\": true");
  return r;
}

}  // namespace specpress::server
