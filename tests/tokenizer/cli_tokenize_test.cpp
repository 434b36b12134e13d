// cli_tokenize_test.cpp — `specpress tokenize` / `detokenize` end to end, torch-free: the
// subcommands are registered on a CLI11 app exactly as main.cpp does, run with stdout captured.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include "cli/cmd_tokenize.h"
#include "cli/escapes.h"
#include "core/error.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace specpress::cli {
namespace {

struct CliResult {
  int code = -1;
  std::string out;    // stdout
  std::string error;  // specpress::Error or CLI11 parse error text
};

// Parses `args` (without the program name) and runs the chosen subcommand with stdout captured.
CliResult run_cli(std::vector<std::string> args) {
  CLI::App app{"specpress"};
  app.require_subcommand(1);
  std::function<int()> run;
  add_tokenize_commands(app, run);
  args.insert(args.begin(), "specpress");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  CliResult result;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    result.error = e.what();
    return result;
  }
  std::fflush(stdout);
  FILE* capture = std::tmpfile();
  const int saved = dup(fileno(stdout));
  dup2(fileno(capture), fileno(stdout));
  try {
    result.code = run();
  } catch (const Error& e) {
    result.error = e.what();
  }
  std::fflush(stdout);
  dup2(saved, fileno(stdout));
  close(saved);
  std::rewind(capture);
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, capture)) > 0) result.out.append(buffer, n);
  std::fclose(capture);
  return result;
}

std::string temp_file(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

// run_cli with standard input read from `file`.
CliResult run_cli_with_stdin(const std::vector<std::string>& args, const std::string& file) {
  FILE* in = std::fopen(file.c_str(), "rb");
  const int saved = dup(fileno(stdin));
  dup2(fileno(in), fileno(stdin));
  std::clearerr(stdin);
  CliResult result = run_cli(args);
  dup2(saved, fileno(stdin));
  close(saved);
  std::clearerr(stdin);
  std::fclose(in);
  return result;
}

TEST(CliTokenize, PromptFileAndMessages) {
  SKIP_WITHOUT_QWEN3();
  const std::string dir = tok::testing::qwen3_dir();
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "-p", "Hello world"}).out, "[9707,1879]\n");
  // -f: the exact bytes, trailing newline included.
  const std::string file = temp_file("specpress_cli_tok.txt", "Hello world\n");
  std::string expected = "[";
  for (int32_t id : tok::testing::qwen3().encode("Hello world\n")) {
    expected += (expected.size() > 1 ? "," : "") + std::to_string(id);
  }
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "-f", file}).out, expected + "]\n");
  EXPECT_NE(run_cli({"tokenize", "-m", dir, "-f", file}).out, "[9707,1879]\n");
  const std::string messages = temp_file("specpress_cli_msgs.json", R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "--messages", messages}).out,
            "[151644,872,198,13048,151645,198,151644,77091,198,151667,271,151668,271]\n");
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "--messages", messages, "--think"}).out,
            "[151644,872,198,13048,151645,198,151644,77091,198]\n");
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "--messages", messages, "--no-generation-prompt"}).out,
            "[151644,872,198,13048,151645,198]\n");
  // --tools: the template's tools block, each tool in its own key order
  const std::string tools = temp_file(
      "specpress_cli_tools.json", R"([{"type":"function","function":{"name":"now","parameters":{"type":"object"}}}])");
  std::string tool_ids;
  for (int32_t id : tok::testing::qwen3().encode(tok::render_qwen3_chat(
           {{"user", "Hi"}}, true, false,
           {R"({"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}})"})))
    tool_ids += (tool_ids.empty() ? "" : ",") + std::to_string(id);
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "--messages", messages, "--tools", tools}).out, "[" + tool_ids + "]\n");
  // -m may also name tokenizer.json itself.
  EXPECT_EQ(run_cli({"tokenize", "-m", dir + "/tokenizer.json", "-p", "Hello"}).out, "[9707]\n");
}

// The escapes of typed text, as llama.cpp's tools process them: \n \r \t \' \" \\ and \xHH; any other backslash, a \x
// without two hex digits and a trailing backslash stay as typed.
TEST(CliEscapes, AsLlamaCpp) {
  EXPECT_EQ(process_escapes(R"(a\nb\rc\td\'e\"f\\g)"), "a\nb\rc\td'e\"f\\g");
  EXPECT_EQ(process_escapes(R"(\x41\x7a\x7A\xC3\xA9)"), "Azz\xC3\xA9");  // two bytes: é in UTF-8
  EXPECT_EQ(process_escapes(R"(\x4 \xg1 \x)"), R"(\x4 \xg1 \x)");
  EXPECT_EQ(process_escapes(R"(\q \0 \frac{1}{2} \)"), R"(\q \0 \frac{1}{2} \)");
  EXPECT_EQ(process_escapes(R"(\\n \\\n)"), "\\n \\\n");  // an escaped backslash, then a plain n
  EXPECT_EQ(process_escapes(""), "");
  EXPECT_EQ(process_escapes("no escapes: ü"), "no escapes: ü");
}

TEST(CliTokenize, PromptEscapes) {
  SKIP_WITHOUT_QWEN3();
  const std::string dir = tok::testing::qwen3_dir();
  const std::string lines = run_cli({"tokenize", "-m", dir, "-p", "Hello\nworld"}).out;
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "-p", R"(Hello\nworld)"}).out, lines);
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "-e", "-p", R"(Hello\nworld)"}).out, lines);
  EXPECT_NE(run_cli({"tokenize", "-m", dir, "--no-escape", "-p", R"(Hello\nworld)"}).out, lines);
  EXPECT_EQ(run_cli({"tokenize", "-m", dir, "--no-escape", "-p", R"(Hello\nworld)"}).out,
            run_cli({"tokenize", "-m", dir, "-f", temp_file("specpress_cli_escapes.txt", R"(Hello\nworld)")}).out);
  const CliResult bad = run_cli({"tokenize", "-m", dir, "-p", R"(a\xffb)"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.error.find("-p/--prompt (its escapes processed; --no-escape keeps them): "), std::string::npos)
      << bad.error;
}

TEST(CliTokenize, Detokenize) {
  SKIP_WITHOUT_QWEN3();
  const std::string dir = tok::testing::qwen3_dir();
  const std::string ids = "151644,872,198,13048,151645,198,151644,77091,198,151667,271,151668,271,9707,0,151645";
  EXPECT_EQ(run_cli({"detokenize", "-m", dir, "--ids", ids}).out,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>");
  EXPECT_EQ(run_cli({"detokenize", "-m", dir, "--ids", ids, "--skip-special"}).out,
            "user\nHi\nassistant\n<think>\n\n</think>\n\nHello!");
  EXPECT_EQ(run_cli({"detokenize", "-m", dir, "--ids", "[9707, 0]"}).out, "Hello!");
  // ids too many for a command line come from a file or standard input, as tokenize writes them; so does text
  const std::string text = temp_file("specpress_cli_stdin.txt", "Hello!");
  const CliResult tokenized = run_cli_with_stdin({"tokenize", "-m", dir, "-f", "-"}, text);
  EXPECT_EQ(tokenized.out, "[9707,0]\n") << tokenized.error;
  const std::string id_file = temp_file("specpress_cli_ids.json", tokenized.out);
  EXPECT_EQ(run_cli({"detokenize", "-m", dir, "-f", id_file}).out, "Hello!");
  EXPECT_EQ(run_cli_with_stdin({"detokenize", "-m", dir, "-f", "-"}, id_file).out, "Hello!");
  const std::string bad_ids = temp_file("specpress_cli_bad_ids.txt", "1,x");
  EXPECT_NE(run_cli({"detokenize", "-m", dir, "-f", bad_ids}).error.find("-f/--file " + bad_ids + ": "),
            std::string::npos);
  EXPECT_NE(run_cli({"detokenize", "-m", dir}).error.find("give exactly one of --ids IDS or -f FILE"),
            std::string::npos);
}

TEST(CliTokenize, ErrorsAreClear) {
  SKIP_WITHOUT_QWEN3();
  const std::string dir = tok::testing::qwen3_dir();
  const auto empty = std::filesystem::temp_directory_path() / "specpress_cli_empty";
  std::filesystem::create_directories(empty);
  std::string e = run_cli({"tokenize", "-m", empty.string(), "-p", "x"}).error;
  EXPECT_NE(e.find(empty.string()), std::string::npos) << e;
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  e = run_cli({"tokenize", "-m", dir}).error;
  EXPECT_NE(e.find("exactly one of"), std::string::npos) << e;
  e = run_cli({"tokenize", "-m", dir, "-p", "a", "--think"}).error;
  EXPECT_NE(e.find("--messages"), std::string::npos) << e;
  e = run_cli({"tokenize", "-m", dir, "-f", temp_file("specpress_cli_bad.txt", "ok\xFFno")}).error;
  EXPECT_NE(e.find("byte offset 2"), std::string::npos) << e;
  e = run_cli({"tokenize", "-m", dir, "--messages", temp_file("specpress_cli_tool.json",
                                                             R"([{"role":"tool","content":1}])")}).error;
  EXPECT_NE(e.find("messages[0]: field 'content' must be a string"), std::string::npos) << e;
  const std::string msgs = temp_file("specpress_cli_msgs2.json", R"([{"role":"user","content":"Hi"}])");
  e = run_cli({"tokenize", "-m", dir, "--messages", msgs, "--tools",
               temp_file("specpress_cli_badtools.json", R"([{"type":"function","function":{}}])")}).error;
  EXPECT_NE(e.find("specpress_cli_badtools.json: tools[0].function.name"), std::string::npos) << e;
  e = run_cli({"tokenize", "-m", dir, "-p", "a", "--tools", msgs}).error;
  EXPECT_NE(e.find("--messages"), std::string::npos) << e;
  e = run_cli({"detokenize", "-m", dir, "--ids", "1,x"}).error;
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
  e = run_cli({"detokenize", "-m", dir, "--ids", "1,151669"}).error;
  EXPECT_NE(e.find("151669"), std::string::npos) << e;
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace specpress::cli
