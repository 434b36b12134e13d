// prompt_flags.cpp — see prompt_flags.h.
#include "cli/prompt_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/common.h"
#include "cli/escapes.h"
#include "cli/id_list.h"
#include "core/error.h"

namespace specpress::cli {

void add_raw_prompt_flags(CLI::App& cmd, RawPromptFlags& flags, const std::string& what, const std::string& escaped) {
  cmd.add_option("-f,--file", flags.file, what + ", from a file (its exact bytes; - for standard input)")
      ->check(non_empty_check("expected a file path"));
  cmd.add_option("-p,--prompt", flags.text, what)->check(non_empty_check("expected the text"));
  add_escape_flag(cmd, flags.escape, escaped);
  cmd.add_option("--prompt-ids", flags.ids, what + " as token ids, comma-separated")
      ->check(non_empty_check("expected token ids"));
  cmd.add_option("--prompt-ids-file", flags.ids_file,
                 what + " as token ids in a file (as --prompt-ids takes them; - for standard input)")
      ->check(non_empty_check("expected a file path, or - for standard input"));
}

const char* raw_prompt_flag(const RawPromptFlags& flags) {
  return !flags.ids.empty() ? "--prompt-ids" : !flags.ids_file.empty() ? "--prompt-ids-file"
         : !flags.file.empty()  ? "-f/--file"
                                : "-p/--prompt";
}

void check_one_raw_prompt(const RawPromptFlags& flags, const std::string& command) {
  std::vector<std::string> given;
  for (const auto& [value, flag] :
       {std::pair{&flags.file, "-f/--file"}, std::pair{&flags.text, "-p/--prompt"},
        std::pair{&flags.ids, "--prompt-ids"}, std::pair{&flags.ids_file, "--prompt-ids-file"}})
    if (!value->empty()) given.push_back(flag);
  if (given.size() != 1)
    fail("{}: give exactly one of -f/--file, -p/--prompt, --prompt-ids or --prompt-ids-file ({})", command,
         given.empty() ? std::string("none given") : fmt::format("given: {}", fmt::join(given, " and ")));
}

bool raw_prompt_is_ids(const RawPromptFlags& flags) { return !flags.ids.empty() || !flags.ids_file.empty(); }

std::vector<int64_t> raw_prompt_ids(const RawPromptFlags& flags) {
  if (!flags.ids.empty()) return parse_id_list(flags.ids, "--prompt-ids");
  return parse_id_list(read_input(flags.ids_file, "--prompt-ids-file", /*stdin_dash=*/true),
                       "--prompt-ids-file " + flags.ids_file);
}

void check_raw_prompt_vocab(const RawPromptFlags& flags, const std::vector<int64_t>& ids, int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      fail("{}: token id {} at index {} is outside the vocabulary 0..{}", raw_prompt_flag(flags), ids[i], i,
           vocab_size - 1);
}

std::vector<int64_t> raw_prompt_tokens(const RawPromptFlags& flags, const std::string& model_dir,
                                       const std::string& command) {
  check_one_raw_prompt(flags, command);
  if (raw_prompt_is_ids(flags)) return raw_prompt_ids(flags);
  const std::optional<tok::Tokenizer> tokenizer = load_tokenizer_if_present(model_dir);
  if (!tokenizer)
    fail("{}: -f/-p need the model's tokenizer, but the directory has no tokenizer.json; pass --prompt-ids", model_dir);
  const std::vector<int32_t> ids = tokenizer->encode(read_prompt_text(flags.text, flags.file, flags.escape));
  return {ids.begin(), ids.end()};
}

}  // namespace specpress::cli
