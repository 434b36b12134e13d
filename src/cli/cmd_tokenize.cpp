// cmd_tokenize.cpp — `specpress tokenize -m DIR (-p TEXT [--no-escape] | -f FILE | --messages FILE.json
// [--tools FILE.json] [--think] [--no-generation-prompt])` prints a JSON array of ids; `specpress detokenize -m DIR
// (--ids "1,2,3" | -f FILE) [--skip-special]` prints the text exactly, with no newline added (-f - reads standard
// input, for both). -m may name a model directory, a folder holding only tokenizer files, or a tokenizer.json file.
// Torch-free.
#include "cli/cmd_tokenize.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/escapes.h"
#include "cli/id_list.h"
#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specpress::cli {
namespace {

struct TokenizeOptions {
  std::string model, prompt, file, messages, tools;
  CLI::Option* prompt_opt = nullptr;
  CLI::Option* file_opt = nullptr;
  CLI::Option* messages_opt = nullptr;
  bool think = false, no_generation_prompt = false;
  bool escape = true;  // -e/--escape (the default), --no-escape: -p's escapes processed (cli/escapes.h)
};

struct DetokenizeOptions {
  std::string model, ids, file;
  CLI::Option* ids_opt = nullptr;
  CLI::Option* file_opt = nullptr;
  bool skip_special = false;
};

tok::Tokenizer load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return tok::Tokenizer::from_dir(path);
  if (fs::is_regular_file(path, ec)) return tok::Tokenizer::from_file(path);
  fail("-m/--model: {} does not exist (expected a model directory, a folder with tokenizer.json, "
       "or a tokenizer.json file)", path);
}

// Encodes `text`, prefixing errors (invalid UTF-8) with where the text came from.
std::vector<int32_t> encode_from(const tok::Tokenizer& t, const std::string& text,
                                 const std::string& origin) {
  try {
    return t.encode(text);
  } catch (const Error& e) {
    fail("{}: {}", origin, e.what());
  }
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int run_tokenize(const TokenizeOptions& o) {
  const int given = static_cast<int>(o.prompt_opt->count() > 0) +
                    static_cast<int>(o.file_opt->count() > 0) +
                    static_cast<int>(o.messages_opt->count() > 0);
  if (given != 1) fail("tokenize: give exactly one of -p TEXT, -f FILE or --messages FILE.json");
  const tok::Tokenizer t = load_tokenizer(o.model);
  if (o.prompt_opt->count()) {
    const std::string text = o.escape ? process_escapes(o.prompt) : o.prompt;
    print_ids(encode_from(t, text, typed_text_origin("-p/--prompt", text != o.prompt)));
  } else if (o.file_opt->count()) {
    print_ids(encode_from(t, read_input(o.file, "-f/--file", /*stdin_dash=*/true), "-f/--file: " + o.file));
  } else {
    const auto messages = tok::parse_messages_json(read_input(o.messages, "--messages"), o.messages);
    const std::vector<std::string> tools =
        o.tools.empty() ? std::vector<std::string>() : tok::parse_tools_json(read_input(o.tools, "--tools"), o.tools);
    if (!t.chat_template().empty() && !tok::is_qwen3_chat_template(t.chat_template())) {
      std::fprintf(stderr, "warning: the chat template of %s differs from Qwen3's; rendering with "
                           "the built-in Qwen3 template\n", o.model.c_str());
    }
    const std::string text =
        tok::render_qwen3_chat(messages, !o.no_generation_prompt, /*enable_thinking=*/o.think, tools);
    print_ids(encode_from(t, text, "--messages: " + o.messages));
  }
  return 0;
}

int run_detokenize(const DetokenizeOptions& o) {
  if (o.ids_opt->count() + o.file_opt->count() != 1)
    fail("detokenize: give exactly one of --ids IDS or -f FILE (a file of ids, - for standard input)");
  const std::string flag = o.ids_opt->count() ? "--ids" : "-f/--file " + o.file;
  std::vector<int32_t> ids;
  const std::string id_text = o.ids_opt->count() ? o.ids : read_input(o.file, "-f/--file", /*stdin_dash=*/true);
  for (int64_t id : parse_id_list(id_text, flag)) {
    if (id < INT32_MIN || id > INT32_MAX) fail("{}: {} is not a token id", flag, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  const tok::Tokenizer t = load_tokenizer(o.model);
  const std::string text = t.decode(ids, o.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, std::function<int()>& run) {
  auto tokenize = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  cmd->add_option("-m,--model", tokenize->model,
                  "model directory, folder with tokenizer.json, or a tokenizer.json file")
      ->required();
  tokenize->prompt_opt = cmd->add_option("-p,--prompt", tokenize->prompt, "text to tokenize");
  add_escape_flag(*cmd, tokenize->escape, "-p");
  tokenize->file_opt =
      cmd->add_option("-f,--file", tokenize->file, "tokenize this file's exact bytes (- reads standard input)");
  tokenize->messages_opt = cmd->add_option(
      "--messages", tokenize->messages,
      "a file holding a JSON array of {\"role\",\"content\"} messages, rendered with the Qwen3 chat template first");
  tokenize->prompt_opt->excludes(tokenize->file_opt)->excludes(tokenize->messages_opt);
  tokenize->file_opt->excludes(tokenize->messages_opt);
  cmd->add_option("--tools", tokenize->tools,
                  "with --messages: JSON array of OpenAI function tools, rendered in the template's tools block")
      ->needs(tokenize->messages_opt);
  cmd->add_flag("--think", tokenize->think,
                "with --messages: enable_thinking=true (default: false, the empty think block)")
      ->needs(tokenize->messages_opt);
  cmd->add_flag("--no-generation-prompt", tokenize->no_generation_prompt,
                "with --messages: do not append the assistant generation prompt")
      ->needs(tokenize->messages_opt);
  cmd->callback([tokenize, &run] { run = [tokenize] { return run_tokenize(*tokenize); }; });

  auto detokenize = std::make_shared<DetokenizeOptions>();
  CLI::App* de = app.add_subcommand("detokenize", "print the text of token ids (no newline added)");
  de->add_option("-m,--model", detokenize->model,
                 "model directory, folder with tokenizer.json, or a tokenizer.json file")
      ->required();
  detokenize->ids_opt = de->add_option("--ids", detokenize->ids, "token ids, e.g. \"1,2,3\" or \"[1, 2, 3]\"");
  detokenize->file_opt = de->add_option("-f,--file", detokenize->file,
                                        "a file of token ids (as --ids takes them, e.g. tokenize's output); - reads "
                                        "standard input");
  detokenize->ids_opt->excludes(detokenize->file_opt);
  de->add_flag("--skip-special", detokenize->skip_special,
               "drop special tokens such as <|im_end|> (keeps <think>, as HF does)");
  de->callback([detokenize, &run] { run = [detokenize] { return run_detokenize(*detokenize); }; });
}

}  // namespace specpress::cli
