// prompt_flags.h — the prompt flags of generate, perplexity and dump (raw: no chat template, no special tokens added,
// unless generate's --chat renders the text): exactly one of
// -p TEXT (its escapes \n \t ... processed, as llama.cpp's, unless --no-escape), -f FILE (text, encoded by the model's
// tokenizer.json), --prompt-ids IDS or --prompt-ids-file FILE (ids as
// --prompt-ids takes them; - for standard input, so that `specpress tokenize -f long.txt | specpress dump
// --prompt-ids-file - ...` passes prompts longer than one shell argument can hold).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace specpress::cli {

struct RawPromptFlags {
  std::string text, file, ids, ids_file;
  bool escape = true;  // -e/--escape (the default), --no-escape: -p's escapes processed (cli/escapes.h)
};

// Adds the four flags and -e/--escape, --no-escape; `what` describes the input in their help ("the text to score"),
// `escaped` the flags whose escapes --no-escape keeps (-p, and generate's --system and --stop).
void add_raw_prompt_flags(CLI::App& cmd, RawPromptFlags& flags, const std::string& what,
                          const std::string& escaped = "-p");

// The flag the prompt came from ("--prompt-ids", "--prompt-ids-file", "-f/--file" or "-p/--prompt"), for errors.
const char* raw_prompt_flag(const RawPromptFlags& flags);

// Fails unless exactly one of the four is given; `command` names the subcommand in the error.
void check_one_raw_prompt(const RawPromptFlags& flags, const std::string& command);
// Whether the prompt is given as ids (--prompt-ids or --prompt-ids-file), and those ids.
bool raw_prompt_is_ids(const RawPromptFlags& flags);
std::vector<int64_t> raw_prompt_ids(const RawPromptFlags& flags);

// Fails naming `flags`' flag where an id lies outside 0..vocab_size-1 (the model's, known once its config is read).
void check_raw_prompt_vocab(const RawPromptFlags& flags, const std::vector<int64_t>& ids, int64_t vocab_size);

// The prompt's token ids (text encoded by `model_dir`'s tokenizer, without special tokens); `command` names the
// subcommand in the "give exactly one" error.
std::vector<int64_t> raw_prompt_tokens(const RawPromptFlags& flags, const std::string& model_dir,
                                       const std::string& command);

}  // namespace specpress::cli
