// test_cli.cpp — the specpress binary end to end: `generate --json` reproduces the reference's greedy
// and DFlash outputs (with acceptance lengths and per-step records) for all 8 golden runs, the bundled
// demo pair runs with its bundled beacon compressor, bad flags exit non-zero with a message naming
// the flag, numbers are read in base 10, and outputs are checked before a run (never written over a
// device, a directory, an input or each other; a failed write to standard output fails the run), and
// --version names the build.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "io/safetensors.h"
#include "test_util.h"

using namespace specpress::test;

namespace {

// The bundled demo pair's folder as `const std::string name`; the test skips where its tokenizer.json (git-ignored,
// fetched by scripts/setup.sh) is missing.
#define DEMO_PAIR_OR_SKIP(name)                                          \
  const std::string name = std::string(SPECPRESS_SOURCE_DIR) + "/demo";   \
  if (!std::filesystem::exists(name + "/target/tokenizer.json"))         \
    GTEST_SKIP() << name << "/target/tokenizer.json missing (scripts/setup.sh fetches it)"

// what printf writes
template <typename... Args>
std::string printf_string(const char* format, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

// a value as printf's %.4f writes it
std::string fmt_4(double v) { return printf_string("%.4f", v); }

std::string golden_args(const GoldenRun& run) {
  return "generate -m " + golden_dir() + "/target --prompt-ids \"" + join_ids(run.prompt) + "\" -n " +
         std::to_string(run.max_new_tokens) + " --temp 0 --stop-ids " + join_ids(run.stop_ids) +
         " --device cpu --dtype f32 --json";
}

// A sampled generation repeats with its seed: the default 0, or the fresh one -s -1 draws (printed and in --json), and
// llama.cpp's 4294967295 draws a fresh one too.
TEST(Cli, SampledGenerationRepeatsWithItsSeed) {
  SPECPRESS_REQUIRE_SHARED();
  const GoldenRun run = golden_runs()[0];
  const std::string base = "generate -m " + golden_dir() + "/target -md " + golden_dir() + "/draft --prompt-ids \"" +
                           join_ids(run.prompt) + "\" -n 24 --temp 1.5 --ignore-eos --json ";
  auto generate = [&](const std::string& seed) {
    CommandResult r = run_specpress(base + seed);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::make_pair(nlohmann::json::parse(r.out.empty() ? "{}" : r.out), r.err);
  };
  EXPECT_EQ(generate("").first["output_ids"], generate("-s 0").first["output_ids"]);
  EXPECT_EQ(generate("").first["seed"], 0);
  for (const std::string fresh : {"-s -1", "-s 4294967295"}) {
    const auto [drawn, err] = generate(fresh);
    ASSERT_TRUE(drawn.contains("seed")) << fresh;
    const uint64_t seed = drawn["seed"];
    EXPECT_NE(err.find("generate: sampling seed " + std::to_string(seed)), std::string::npos) << err;
    EXPECT_EQ(generate("-s " + std::to_string(seed)).first["output_ids"], drawn["output_ids"]) << fresh;
  }
  EXPECT_NE(generate("-s -1").first["seed"], generate("-s -1").first["seed"]);
  // the whole unsigned 64-bit range, as the server draws and shows seeds
  EXPECT_EQ(generate("-s 18446744073709551615").first["seed"], 18446744073709551615u);
  CommandResult bad = run_specpress(base + "-s -2");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("-s/--seed: expected -1 (a fresh seed) or a decimal integer in 0..18446744073709551615, "
                         "found '-2'"),
            std::string::npos)
      << bad.err;
}

TEST(Cli, GreedyGenerateReproducesArOutput) {
  SPECPRESS_REQUIRE_SHARED();
  for (const auto& run : golden_runs()) {
    CommandResult r = run_specpress(golden_args(run));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["output_ids"].get<std::vector<int64_t>>(), run.ar_output);
    EXPECT_EQ(j["timings"]["predicted_n"].get<size_t>(), run.ar_output.size());
    EXPECT_NE(r.err.find("prompt eval time ="), std::string::npos);
    EXPECT_NE(r.err.find("generate: cpu, f32, reference path\n"), std::string::npos) << r.err;
    EXPECT_EQ(j["device"], "cpu");
    EXPECT_EQ(j["dtype"], "f32");
    EXPECT_EQ(j["path"], "reference");
  }
  // the defaults (--device auto --dtype auto) without a GPU (run_specpress hides any): the CPU in f32, the same tokens
  const GoldenRun run = golden_runs()[0];
  std::string args = golden_args(run);
  args.erase(args.find(" --device cpu --dtype f32"), std::string(" --device cpu --dtype f32").size());
  const CommandResult r = run_specpress(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["dtype"], "f32");
  EXPECT_EQ(j["output_ids"].get<std::vector<int64_t>>(), run.ar_output);
  EXPECT_NE(r.err.find("generate: cpu, f32, reference path\n"), std::string::npos) << r.err;
  // the prompt's ids from a file or standard input (past one shell argument's limit), as dump and perplexity take them
  ScratchDir dir("cli-generate-ids");
  std::ofstream(dir.path / "ids.txt") << "[" << join_ids(run.prompt) << "]\n";
  std::string from_file = golden_args(run);
  from_file.replace(from_file.find("--prompt-ids \""), from_file.find("\" -n") + 1 - from_file.find("--prompt-ids \""),
                    "--prompt-ids-file - < " + dir.str() + "/ids.txt");
  const CommandResult f = run_specpress(from_file);
  ASSERT_EQ(f.exit_code, 0) << from_file << "\n" << f.err;
  EXPECT_EQ(nlohmann::json::parse(f.out)["output_ids"].get<std::vector<int64_t>>(), run.ar_output);
  const CommandResult chat = run_specpress(from_file + " --chat");
  EXPECT_NE(chat.exit_code, 0);
  EXPECT_NE(chat.err.find("--chat/--system: need a text prompt (-p or -f), not --prompt-ids-file"), std::string::npos)
      << chat.err;
}

TEST(Cli, DFlashGenerateReproducesReference) {
  SPECPRESS_REQUIRE_SHARED();
  for (const auto& run : golden_runs()) {
    CommandResult r = run_specpress(golden_args(run) + " -md " + golden_dir() + "/draft");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["output_ids"].get<std::vector<int64_t>>(), run.dflash_output);
    EXPECT_EQ(j["acceptance_lengths"].get<std::vector<int64_t>>(), run.acceptance_lengths);
    ASSERT_EQ(j["steps"].size(), run.steps.size());
    for (size_t s = 0; s < run.steps.size(); ++s) {
      EXPECT_EQ(j["steps"][s]["block"], run.steps[s]["block"]);
      EXPECT_EQ(j["steps"][s]["posterior"], run.steps[s]["posterior"]);
      EXPECT_EQ(j["steps"][s]["accepted"], run.steps[s]["accepted"]);
    }
    double hist_sum = 0;
    for (double h : j["acceptance_histogram"]) hist_sum += h;
    EXPECT_NEAR(hist_sum, 1.0, 1e-9);
    EXPECT_NE(r.err.find("draft acceptance rate ="), std::string::npos);
  }
}

TEST(Cli, StreamsIdsWithoutJson) {
  SPECPRESS_REQUIRE_SHARED();
  auto run = golden_runs()[2];
  CommandResult r = run_specpress("generate -m " + golden_dir() + "/target -md " + golden_dir() + "/draft --prompt-ids \"" +
                                  join_ids(run.prompt) + "\" -n 12 --stop-ids 1001");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string expected;
  for (int i = 0; i < 12; ++i) expected += std::to_string(run.ar_output[i]) + " ";
  EXPECT_EQ(r.out, expected + "\n");
}

// The bundled demo pair with its bundled beacon compressor (demo/beacon, scripts/train_demo.sh):
// generate --compress DIR loads it, compresses aged units and reports it; a directory that is not a
// compressor fails naming the flag's value.
TEST(Cli, GenerateWithTheBundledBeaconCompressor) {
  DEMO_PAIR_OR_SKIP(demo);
  CommandResult r = run_specpress("generate -m " + demo + "/target -md " + demo + "/draft -p \"Tom has 3 apples and buys "
                                  "5 more. How many apples does he have?\" --chat -n 160 --temp 0 --compress " + demo +
                                  "/beacon --compress-window 32 --compress-merge 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["compression"]["method"], "beacon");
  EXPECT_GT(j["compression"]["events"].get<int64_t>(), 5);
  EXPECT_GT(j["compression"]["effective_ratio"].get<double>(), 1.2);
  EXPECT_EQ(j["output_ids"].size(), 160u);
  // the flags left out take the policy the compressor was trained with (compressor.json: window 32, sinks 4, merge 8)
  const std::string pair = "generate -m " + demo + "/target -md " + demo + "/draft --prompt-ids 1,2,3 -n 60 --json "
                           "--compress " + demo + "/beacon";
  r = run_specpress(pair);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["compression"]["window"], 32);
  EXPECT_EQ(j["compression"]["sinks"], 4);
  EXPECT_EQ(j["compression"]["merge_tokens"], 8);
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  r = run_specpress(pair + " --compress-sinks 2");  // a flag given wins, and the difference is said
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["compression"]["sinks"], 2);
  EXPECT_EQ(j["compression"]["window"], 32);
  EXPECT_NE(r.err.find("was trained with window 32, sinks 4, merge 8; running with window 32, sinks 2, merge 8"),
            std::string::npos) << r.err;
  // units of one token each keep a slot: nothing is freed, and the run says so (drop frees them: no note)
  r = run_specpress(pair + " --compress-merge 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["compression"]["slots_freed"], 0);
  EXPECT_NE(r.err.find("with --compress-merge 1 every unit is one token and keeps one KV slot"), std::string::npos)
      << r.err;
  const std::string plain =
      "generate -m " + demo + "/target --prompt-ids 1,2,3 -n 40 --ignore-eos --json --compress-window 8 ";
  r = run_specpress(plain + "--compress mean-merge");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["compression"]["slots_freed"], 0);
  EXPECT_NE(r.err.find("and no draft (a token a forward) every unit is one token"), std::string::npos) << r.err;
  r = run_specpress(plain + "--compress drop");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["compression"]["slots_freed"].get<int64_t>(), 0);
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  r = run_specpress(pair + " --compress-window 9223372036854775807");  // too large for any context: named
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--compress-window: must be at most 1073741824"), std::string::npos) << r.err;
  r = run_specpress("generate -m " + demo + "/target --prompt-ids 1,2,3 -n 4 --compress " + demo + "/draft");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no compressor.json"), std::string::npos) << r.err;
}

// Ctrl-C or SIGTERM during a trainer's on-policy generations: those done are saved (with the record of what made
// them), the exit status is 128 + the signal, and --resume generates only the rest.
TEST(Cli, TrainerStoppedDuringItsGenerationsKeepsThem) {
  const std::string demo = std::string(SPECPRESS_SOURCE_DIR) + "/demo";
  ScratchDir d("cli-train-signal");
  const std::string prompts = (d.path / "prompts.jsonl").string(), out = (d.path / "out").string();
  {
    std::ofstream p(prompts);
    for (int i = 0; i < 24; ++i) p << "{\"ids\": [" << 100 + 37 * i << ", 20, 30, 40]}\n";
  }
  const std::string args = "train-draft --target " + demo + "/target --on-policy-prompts " + prompts +
                           " --gen-tokens 160 --seq-len 192 --steps 1 --device cpu --out " + out;
  // the trainer in the background; once its generations start (OUT/generations.json), a second, then SIGTERM
  const std::string status =
      signal_specpress(args, (d.path / "err").string(), "[ -f " + out + "/generations.json ] && sleep 1", "TERM");
  std::ifstream err_in(d.path / "err");
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, "143\n") << err;
  EXPECT_NE(err.find("specpress: stopping after the generation in flight, with the ones done saved"),
            std::string::npos) << err;
  std::smatch m;
  size_t done = 0;
  if (std::regex_search(err, m, std::regex("stopped by SIGTERM after (\\d+) of 24 generations; (\\S+) holds them"))) {
    done = std::stoul(m[1]);
    EXPECT_EQ(m[2].str(), out + "/onpolicy.jsonl");
    std::ifstream cache(out + "/onpolicy.jsonl");
    EXPECT_EQ(static_cast<size_t>(std::count(std::istreambuf_iterator<char>(cache), {}, '\n')), done);
  } else {  // the signal came before the first answer ended (a slow machine)
    EXPECT_NE(err.find("stopped by SIGTERM before its first generation ended; nothing was saved"), std::string::npos)
        << err;
  }
  const CommandResult resumed = run_specpress(args + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  if (done > 0)
    EXPECT_NE(resumed.err.find(fmt::format("reusing {} on-policy generations from {}/onpolicy.jsonl (a stopped run's); "
                                           "generating the other {}", done, out, 24 - done)),
              std::string::npos) << resumed.err;
  std::ifstream cache(out + "/onpolicy.jsonl");
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(cache), {}, '\n'), 24);
}

// bench --checkpoint names a beacon compressor as it names models: its canonical path and its files' fingerprint. The
// same folder spelled another way resumes; a copy, or a compressor rewritten in place, is another compressor.
TEST(Cli, BenchCheckpointKnowsTheCompressorsFiles) {
  SPECPRESS_REQUIRE_SHARED();
  DEMO_PAIR_OR_SKIP(demo);
  ScratchDir d("cli-bench-beacon");
  std::filesystem::copy(demo + "/beacon", d.path / "beacon");
  const std::string ckpt = (d.path / "b.ckpt").string();
  auto bench = [&](const std::string& beacon, const std::string& extra) {
    return run_specpress("bench -m " + demo + "/target -md " + demo + "/draft --dataset gsm8k --data " + shared_dir() +
                         "/data/gsm8k_test.jsonl --max-samples 1 --max-new-tokens 48 --no-progress --compress " +
                         beacon + " --compress-window 32 --compress-merge 8 --checkpoint " + ckpt + extra);
  };
  CommandResult r = bench((d.path / "beacon").string(), "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = bench((d.path / "." / "beacon" / "").string(), " --resume");  // the same folder
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("bench: reused 1 of the 1 records"), std::string::npos) << r.err;
  {  // a checkpoint of a specpress before the counts' meaning was named: refused as such, not by a flag
    std::ifstream in(ckpt);
    std::string header, rest, line;
    std::getline(in, header);
    while (std::getline(in, line)) rest += line + "\n";
    auto j = nlohmann::json::parse(header);
    ASSERT_TRUE(j["settings"]["compress_counts"].is_string()) << j["settings"];
    j["settings"].erase("compress_counts");
    const std::string old_ckpt = (d.path / "old.ckpt").string();
    std::ofstream(old_ckpt) << j.dump() << "\n" << rest;
    r = run_specpress("bench -m " + demo + "/target -md " + demo + "/draft --dataset gsm8k --data " + shared_dir() +
                      "/data/gsm8k_test.jsonl --max-samples 1 --max-new-tokens 48 --no-progress --compress " +
                      (d.path / "beacon").string() + " --compress-window 32 --compress-merge 8 --checkpoint " +
                      old_ckpt + " --resume");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("holds compressed records of an older specpress (compress_counts not recorded, now"),
              std::string::npos) << r.err;
  }
  r = bench(demo + "/beacon", " --resume");  // the bundled one: equal files, another folder
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("holds records made with compress = "), std::string::npos) << r.err;
  std::ofstream(d.path / "beacon" / "compressor.json", std::ios::app) << "\n";  // rewritten in place
  r = bench((d.path / "beacon").string(), " --resume");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("holds records made with compress = "), std::string::npos) << r.err;
}

// bench and diagnose check every selected sample's first turn against the context before running any (the demo
// target's context is 2048 positions, bench's default --max-new-tokens as many), naming the sample and the flag.
TEST(Cli, BenchAndDiagnoseRefuseSamplesThatDoNotFitBeforeRunningAny) {
  SPECPRESS_REQUIRE_SHARED();
  DEMO_PAIR_OR_SKIP(demo);
  const std::string data = " --dataset gsm8k --data " + shared_dir() + "/data/gsm8k_test.jsonl --max-samples 5";
  for (const std::string tool : {"bench", "diagnose"}) {
    CommandResult r = run_specpress(tool + " -m " + demo + "/target -md " + demo + "/draft" + data +
                                    " --max-new-tokens 2040");
    EXPECT_NE(r.exit_code, 0) << tool;
    EXPECT_NE(r.err.find("5 of the 5 selected samples do not fit, the first: gsm8k sample gsm8k-test-"),
              std::string::npos) << tool << ": " << r.err;
    EXPECT_NE(r.err.find("+ --max-new-tokens 2040 + block"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("tau"), std::string::npos) << tool << ": a sample ran\n" << r.err;
  }
  // diagnose runs a whole draft block at every start up to the trajectory's end, so it needs a block's room too (it
  // checked for one position, and a prompt that fitted that failed in the draft after the whole target pass)
  const std::string one = " --dataset gsm8k --data " + shared_dir() + "/data/gsm8k_test.jsonl --max-samples 1";
  CommandResult r = run_specpress("diagnose -m " + demo + "/target -md " + demo + "/draft" + one +
                                  " --max-new-tokens 2040");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("the prompt \\((\\d+) tokens\\)"))) << r.err;
  const int64_t n = 2048 - std::stoll(m[1]) - 8;  // room for one more position, not for a block of 16
  r = run_specpress("diagnose -m " + demo + "/target -md " + demo + "/draft" + one + " --max-new-tokens " +
                    std::to_string(n) + " --no-progress");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(fmt::format("+ --max-new-tokens {} + block 16 exceed", n)), std::string::npos) << r.err;
}

// --reasoning-budget N on the demo pair, whose think block is empty unless </think> is banned (logit bias, which also
// holds in the answer; the forced tokens are not sampled): the first N tokens, "\n</think>\n\n", then the answer,
// greedy and sampled, plain and DFlash (greedy: the same tokens); a block that ends within the budget is untouched;
// bad values named.
TEST(Cli, ReasoningBudgetCutsTheThinkingAndAnswers) {
  DEMO_PAIR_OR_SKIP(demo);
  const std::string base = "generate -m " + demo + "/target -p \"What is 2+3?\" --chat -n 40 --json ";
  auto ids_of = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["output_ids"].get<std::vector<int64_t>>();
  };
  // greedy: DFlash equals plain decoding; sampled (lossless in distribution, not token for token): the same cut
  const std::string greedy = base + "--temp 0 --reasoning-budget 8 --logit-bias 151668-inf";
  const std::string sampled = base + "--temp 0.8 --top-k 20 --seed 3 --reasoning-budget 8 --logit-bias 151668-inf";
  const std::string draft = " -md " + demo + "/draft";
  const std::vector<int64_t> plain = ids_of(run_specpress(greedy));
  ASSERT_EQ(plain.size(), 40u);
  EXPECT_EQ(ids_of(run_specpress(greedy + draft)), plain) << "DFlash";
  const std::vector<int64_t> sampled_plain = ids_of(run_specpress(sampled));
  for (const std::vector<int64_t>& out : {plain, sampled_plain, ids_of(run_specpress(sampled + draft))}) {
    ASSERT_GE(out.size(), 11u);
    EXPECT_EQ(out[0], 151667) << "<think>";
    EXPECT_EQ(std::vector<int64_t>(out.begin() + 8, out.begin() + 11), (std::vector<int64_t>{198, 151668, 271}))
        << "the forced end after the 8 thinking tokens";
    EXPECT_EQ(std::count(out.begin(), out.end(), 151668), 1) << "the model never writes </think> itself";
  }
  // the demo model closes its block at once: a budget of 8 changes nothing
  EXPECT_EQ(ids_of(run_specpress(base + "--reasoning-budget 8")), ids_of(run_specpress(base + "--think")));
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--reasoning-budget -2", "--reasoning-budget: expected -1"},
           {"--reasoning-budget 0 --think", "contradicts --think"},
           {"--reasoning-budget 8 --logprobs 1", "cannot be combined with --logprobs"},
           {"--reasoning-budget 8 --compress drop", "cannot be combined with --compress"}}) {
    const CommandResult r = run_specpress(base + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.err.find(expected), std::string::npos) << flags << ": " << r.err;
  }
  const CommandResult ids = run_specpress("generate -m " + demo + "/target --prompt-ids 1,2 -n 4 --reasoning-budget 4");
  EXPECT_NE(ids.err.find("--reasoning-budget: only applies with --chat"), std::string::npos) << ids.err;
}

// generate --stop (-r): the text ends right before the first stop string to complete, as the server's "stop": the
// output ids end at the token that completed it (the rest of a DFlash block is dropped), so DFlash gives plain
// decoding's output; --json says it; the streamed text is the same; an empty string or no tokenizer is refused.
TEST(Cli, GenerateStopStringsEndTheText) {
  DEMO_PAIR_OR_SKIP(demo);
  const std::string prompt = "generate -m " + demo + "/target -p \"Tom has 3 apples and buys 5 more. How many?\" --chat";
  const std::string base = prompt + " -n 48";
  const std::string draft = " -md " + demo + "/draft";
  auto json_of = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json whole = json_of(run_specpress(base + " --json"));
  const std::string text = whole["text"];
  const std::vector<int64_t> ids = whole["output_ids"];
  ASSERT_EQ(ids.size(), 48u) << text;
  // the demo model loops on a phrase: a stop string that completes inside a later token, twice in the text
  const std::string stop = "number of the";
  const size_t at = text.find(stop);
  ASSERT_NE(at, std::string::npos) << text;
  ASSERT_GT(at, 0u) << text;
  for (const std::string& model : {std::string(), draft}) {
    const nlohmann::json j = json_of(run_specpress(base + model + " --json --stop \"" + stop + "\" --stop never-there"));
    EXPECT_EQ(j["text"], text.substr(0, at)) << model;
    EXPECT_EQ(j["stop_reason"], "stop") << model;
    EXPECT_EQ(j["stopping_word"], stop) << model;
    const std::vector<int64_t> cut = j["output_ids"];
    ASSERT_LT(cut.size(), ids.size()) << model;
    EXPECT_EQ(cut, std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut.size()))) << model;
    EXPECT_EQ(j["timings"]["predicted_n"], cut.size()) << model;
    // the shortest prefix whose text holds the stop string
    const nlohmann::json shorter = json_of(run_specpress(prompt + " --json -n " + std::to_string(cut.size() - 1)));
    EXPECT_EQ(shorter["text"].get<std::string>().find(stop), std::string::npos) << model;
    const CommandResult streamed = run_specpress(base + model + " -r \"" + stop + "\"");
    EXPECT_EQ(streamed.exit_code, 0) << streamed.err;
    EXPECT_EQ(streamed.out, text.substr(0, at) + "\n") << model;
  }
  // --logprobs: one a token of the cut output
  const nlohmann::json logged = json_of(run_specpress(base + " --json --logprobs 2 --stop \"" + stop + "\""));
  EXPECT_EQ(logged["logprobs"].size(), logged["output_ids"].size());
  EXPECT_LT(logged["output_ids"].size(), ids.size());
  // not found: the whole output, stop_reason as without it
  const nlohmann::json none = json_of(run_specpress(base + " --json --stop never-there"));
  EXPECT_EQ(none["text"], text);
  EXPECT_EQ(none["stop_reason"], whole["stop_reason"]);
  EXPECT_FALSE(none.contains("stopping_word"));
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {base + " --stop ''", "--stop: empty value"},
           {base + " --stop a b", "The following argument was not expected: b"},  // one string a flag
           {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 4 --stop x",
            "--stop: a stop string is found in the output's text, but " + golden_dir() + "/target has no tokenizer.json"}}) {
    const CommandResult r = run_specpress(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << ": " << r.err;
  }
}

// -p, --system and --stop process the escapes \n \r \t \' \" \\ \xHH as llama.cpp's tools do by default (other
// backslashes stay as typed); --no-escape keeps them all as typed; -f is never processed; a \xHH that makes the text
// invalid UTF-8 is refused naming the flag.
TEST(Cli, TypedTextEscapesAsLlamaCpp) {
  DEMO_PAIR_OR_SKIP(demo);
  const std::string tokenize = "tokenize -m " + demo + "/target ";
  auto ids_of = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  // (run through sh: inside '...' every backslash reaches specpress as typed)
  const std::string escaped = ids_of(run_specpress(tokenize + "-p 'a\\nb\\tc\\x41\\\\d\\q\\x4\\\"\\'\\''\\'"));
  const std::string typed = ids_of(run_specpress(tokenize + "--no-escape -p 'a\nb\tcA\\d\\q\\x4\"'\\''\\'"));
  EXPECT_EQ(escaped, typed);
  // (tokenize's -e, --no-escape and -f: tests/tokenizer/cli_tokenize_test.cpp)

  const std::string prompt = "generate -m " + demo + "/target -p \"Tom has 3 apples and buys 5 more. How many?\" --chat";
  auto json_of = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out.empty() ? "{}" : r.out);
  };
  const nlohmann::json stopped = json_of(run_specpress(prompt + " -n 48 --json --stop 'number of the'"));
  ASSERT_EQ(stopped["stop_reason"], "stop");
  const nlohmann::json escaped_stop = json_of(run_specpress(prompt + " -n 48 --json --stop 'number\\x20of the'"));
  EXPECT_EQ(escaped_stop["text"], stopped["text"]);
  EXPECT_EQ(escaped_stop["stopping_word"], "number of the");
  const nlohmann::json typed_stop =
      json_of(run_specpress(prompt + " -n 48 --json --no-escape --stop 'number\\x20of the'"));
  EXPECT_NE(typed_stop["stop_reason"], "stop");
  // the system message: an escaped newline is the newline (the same prompt tokens; as typed, one more)
  auto prompt_n = [&](const std::string& system) {
    return json_of(run_specpress(prompt + " -n 2 --json --system " + system))["timings"]["prompt_n"];
  };
  EXPECT_EQ(prompt_n("'Be brief.\\nAnswer.'"), prompt_n("'Be brief.\nAnswer.'"));
  EXPECT_NE(prompt_n("'Be brief.\\nAnswer.' --no-escape"), prompt_n("'Be brief.\nAnswer.'"));

  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {tokenize + "-p 'a\\xffb'", "-p/--prompt (its escapes processed; --no-escape keeps them): "},
           {prompt + " -n 4 --system 'x\\xff'",
            "--system (its escapes processed; --no-escape keeps them): invalid UTF-8"},
           {prompt + " -n 4 --stop 'x\\xff'", "--stop (its escapes processed; --no-escape keeps them): invalid UTF-8"}}) {
    const CommandResult r = run_specpress(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << ": " << r.err;
  }
}

// Ctrl-C or SIGTERM during generate ends the generation after the commit in flight: the output so far is printed (the
// --json object says "interrupted"), then the timings, and the exit status is 128 + the signal.
TEST(Cli, GenerateStoppedBySignalPrintsTheOutputSoFar) {
  const std::string demo = std::string(SPECPRESS_SOURCE_DIR) + "/demo";
  ScratchDir d("cli-generate-signal");
  const std::string out = (d.path / "out").string(), err_path = (d.path / "err").string();
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // --json: started once its status line is out (2000 tokens take seconds on the CPU); as text, once it has printed
  // (each run's files removed first, so that the last run's do not say it)
  const std::string ready = "grep -q reference.path " + err_path + " && sleep 0.3";
  const std::string printing = "[ -s " + out + " ]";
  auto signalled = [&](const std::string& args, const std::string& when, const std::string& signal) {
    std::filesystem::remove(out), std::filesystem::remove(err_path);
    return signal_specpress(args, err_path, when, signal, out);
  };
  for (const std::string& model : {std::string(), " -md " + demo + "/draft"}) {
    const std::string args = "generate -m " + demo + "/target" + model + " --prompt-ids 1,2,3 -n 2000 --ignore-eos";
    std::string status = signalled(args + " --json", ready, "INT");
    std::string err = read(err_path);
    ASSERT_EQ(status, "130\n") << err;
    EXPECT_NE(err.find("specpress: stopping after the commit in flight, with the output so far printed"),
              std::string::npos) << err;
    const nlohmann::json j = nlohmann::json::parse(read(out));
    const size_t n = j["output_ids"].size();
    EXPECT_GT(n, 0u) << model;
    EXPECT_LT(n, 2000u) << model;
    EXPECT_EQ(j["stop_reason"], "interrupted");
    EXPECT_EQ(j["interrupted_by"], "SIGINT");
    EXPECT_NE(err.find("eval time"), std::string::npos) << "the timings: " << err;
    EXPECT_NE(err.find(fmt::format("generate: stopped by SIGINT after {} tokens; the output so far is printed", n)),
              std::string::npos) << err;
    // as text: what was streamed stays, ended by a newline
    status = signalled(args, printing, "TERM");
    err = read(err_path);
    EXPECT_EQ(status, "143\n") << err;
    const std::string streamed = read(out);
    EXPECT_GT(streamed.size(), 2u) << err;
    EXPECT_EQ(streamed.back(), '\n');
    EXPECT_NE(err.find("generate: stopped by SIGTERM after"), std::string::npos) << err;
  }
}

// `specpress perplexity`: llama-perplexity's progress ([1]x,[2]y,...) and final line, the same value in --json with
// the build; a text file through the tokenizer (demo target); bad input named by flag.
TEST(Cli, PerplexityPrintsLlamaPerplexitysLines) {
  SPECPRESS_REQUIRE_SHARED();
  std::vector<int64_t> ids;
  for (const auto& run : golden_runs()) {
    ids.insert(ids.end(), run.prompt.begin(), run.prompt.end());
    ids.insert(ids.end(), run.ar_output.begin(), run.ar_output.end());
  }
  ids.resize(100);
  const std::string base = "perplexity -m " + golden_dir() + "/target --prompt-ids " + join_ids(ids) + " -c 24";
  const CommandResult r = run_specpress(base);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.out, m, std::regex(R"(Final estimate: PPL = (\d+\.\d{4}) \+/- (\d+\.\d{5})\n)")))
      << r.out;
  EXPECT_NE(r.err.find("100 tokens, 4 chunks of 24"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\[1\]\d+\.\d{4},\[2\]\d+\.\d{4},\[3\]\d+\.\d{4},\[4\]\d+\.\d{4},)")))
      << r.err;
  const CommandResult j = run_specpress(base + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json out = nlohmann::json::parse(j.out);
  EXPECT_EQ(fmt_4(out["ppl"].get<double>()), m[1].str());
  EXPECT_EQ(out["chunks"], 4);
  EXPECT_EQ(out["tokens_scored"], 4 * 11);
  EXPECT_EQ(out["running_ppl"].size(), 4u);
  EXPECT_EQ(out["running_ppl"][3], out["ppl"]);
  EXPECT_EQ(out["device"], "cpu");  // the defaults, --device auto --dtype auto, on a machine without CUDA
  EXPECT_EQ(out["dtype"], "f32");
  EXPECT_EQ(out["path"], "reference") << "no fast path on the CPU";
  EXPECT_NE(j.err.find("tokens/s evaluated) on the reference path\n"), std::string::npos) << j.err;
  EXPECT_NE(out["build"].get<std::string>().find("specpress "), std::string::npos);
  const CommandResult forced = run_specpress(base + " --json --reference-path");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(nlohmann::json::parse(forced.out)["ppl"], out["ppl"]);
  // a base that is the model itself (the same directory, however spelt, device and dtype) is scored, with a warning
  const CommandResult itself = run_specpress(base + " --kl-base-device cpu --kl-base-model " + golden_dir() +
                                             "/target/");
  ASSERT_EQ(itself.exit_code, 0) << itself.err;
  EXPECT_NE(itself.err.find("warning: the base is the model itself ("), std::string::npos) << itself.err;
  const CommandResult two = run_specpress(base + " --chunks 2 --json");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(nlohmann::json::parse(two.out)["ppl"], out["running_ppl"][1]);
  // bfloat16 against the float32 base: llama-perplexity's --kl-divergence lines, and the same in --json
  const CommandResult kl = run_specpress(base + " --dtype bf16 --kl-base-dtype f32");
  ASSERT_EQ(kl.exit_code, 0) << kl.err;
  EXPECT_EQ(kl.err.find("warning:"), std::string::npos) << "another dtype is another base\n" << kl.err;
  const std::string number = R"(-?\d+\.\d+)", pm = " \u00b1 ";
  std::string blocks = R"(Final estimate: PPL = \d+\.\d{4} \+/- \d+\.\d{5}\n\n====== Perplexity statistics ======\n)";
  for (const char* label : {R"(Mean PPL\(Q\)                   )", R"(Mean PPL\(base\)                )"})
    blocks += std::string(label) + ": +" + number + pm + " *" + number + "\n";
  blocks += R"(Cor\(ln\(PPL\(Q\)\), ln\(PPL\(base\)\)\): +\d+\.\d\d%\n)";
  for (const char* label : {R"(Mean ln\(PPL\(Q\)/PPL\(base\)\)     )", R"(Mean PPL\(Q\)/PPL\(base\)         )",
                            R"(Mean PPL\(Q\)-PPL\(base\)         )"})
    blocks += std::string(label) + ": +" + number + pm + " *" + number + "\n";
  blocks += "\n====== KL divergence statistics ======\nMean    KLD: +" + number + pm + " *" + number + "\n";
  for (const char* label : {"Maximum ", R"(99\.9%   )", R"(99\.0%   )", R"(95\.0%   )", R"(90\.0%   )", "Median  ",
                            R"(10\.0%   )", R"( 5\.0%   )", R"( 1\.0%   )", R"( 0\.1%   )", "Minimum "})
    blocks += std::string(label) + "KLD: +" + number + "\n";
  blocks += "\n====== Token probability statistics ======\nMean    \u0394p: +" + number + pm + number + " %\n";
  for (const char* label : {"Maximum ", R"(99\.9%   )", R"(99\.0%   )", R"(95\.0%   )", R"(90\.0%   )", R"(75\.0%   )",
                            "Median  ", R"(25\.0%   )", R"(10\.0%   )", R"( 5\.0%   )", R"( 1\.0%   )", R"( 0\.1%   )",
                            "Minimum "})
    blocks += std::string(label) + "\u0394p: +" + number + "%\n";
  blocks += "RMS \u0394p    : +" + number + pm + number + " %\nSame top p: +" + number + pm + number + " %\n";
  EXPECT_TRUE(std::regex_match(kl.out, std::regex(blocks))) << kl.out;
  // the per-chunk table on stderr: its header and a row a chunk
  EXPECT_NE(kl.err.find("perplexity: base " + golden_dir() + "/target (cpu, f32)\nchunk             PPL"),
            std::string::npos) << kl.err;
  const std::string fourth_row = R"(\n    4 +\d+\.\d{4})" + pm + R"( *\d+\.\d{4} +-?\d\.\d{5})" + pm;
  EXPECT_TRUE(std::regex_search(kl.err, std::regex(fourth_row)))
      << kl.err;
  const CommandResult kl_json = run_specpress(base + " --dtype bf16 --kl-base-dtype f32 --json");
  ASSERT_EQ(kl_json.exit_code, 0) << kl_json.err;
  const nlohmann::json k = nlohmann::json::parse(kl_json.out);
  EXPECT_EQ(k["dtype"], "bf16");
  EXPECT_EQ(k["kl"]["base_model"], golden_dir() + "/target");
  EXPECT_EQ(k["kl"]["base_dtype"], "f32");
  EXPECT_EQ(k["kl"]["base_device"], "cpu");
  EXPECT_EQ(k["kl"]["base_path"], "reference");
  EXPECT_NE(kl_json.err.find("on the reference path, the base on the reference path\n"), std::string::npos)
      << kl_json.err;
  EXPECT_EQ(k["kl"]["base_ppl"], out["ppl"]) << "the base is the float32 run";
  EXPECT_GT(k["kl"]["kld"]["mean"].get<double>(), 0.0);
  EXPECT_EQ(k["kl"]["kld"]["quantiles"].size(), 13u);
  EXPECT_LE(k["kl"]["kld"]["quantiles"]["p99.9"].get<double>(), k["kl"]["kld"]["quantiles"]["max"].get<double>());
  EXPECT_TRUE(k["kl"]["delta_p"]["quantiles"].contains("p0.1"));
  // the printed lines are the JSON's numbers
  auto line_of = [&](const std::string& label) {
    const size_t at = kl.out.find(label);
    return at == std::string::npos ? std::string() : kl.out.substr(at, kl.out.find('\n', at) - at);
  };
  EXPECT_EQ(line_of("Mean PPL(base)"), printf_string("Mean PPL(base)                : %10.6f \u00b1 %10.6f",
                                                     k["kl"]["base_ppl"].get<double>(),
                                                     k["kl"]["base_ppl_stderr"].get<double>()));
  EXPECT_EQ(line_of("Median  KLD"),
            printf_string("Median  KLD: %10.6f", k["kl"]["kld"]["quantiles"]["median"].get<double>()));
  EXPECT_EQ(line_of("Same top p"), printf_string("Same top p: %6.3f \u00b1 %5.3f %%",
                                                 100 * k["kl"]["same_top"].get<double>(),
                                                 100 * k["kl"]["same_top_stderr"].get<double>()));
  // another checkpoint as the base: the same checkpoint named by --kl-base-model gives the same numbers
  const CommandResult named =
      run_specpress(base + " --dtype bf16 --kl-base-model " + golden_dir() + "/target --kl-base-dtype f32 --json");
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(nlohmann::json::parse(named.out)["kl"], k["kl"]);
  EXPECT_FALSE(out.contains("kl"));

  const std::string demo = std::string(SPECPRESS_SOURCE_DIR) + "/demo/target";
  ScratchDir dir("perplexity");
  const bool demo_tokenizer = std::filesystem::exists(demo + "/tokenizer.json");
  if (demo_tokenizer) {
    std::string text;
    for (int i = 0; i < 12; ++i) text += "Tom has " + std::to_string(i) + " apples and buys 5 more. ";
    write_text(dir.path / "text.txt", text);
    const CommandResult f = run_specpress("perplexity -m " + demo + " -f " + (dir.path / "text.txt").string() + " -c 32");
    EXPECT_EQ(f.exit_code, 0) << f.err;
    EXPECT_EQ(f.out.rfind("Final estimate: PPL = ", 0), 0u) << f.out;
    // -f - reads the text from standard input, as tokenize -f - does
    const CommandResult in =
        run_specpress("perplexity -m " + demo + " -f - -c 32 < " + (dir.path / "text.txt").string());
    EXPECT_EQ(in.exit_code, 0) << in.err;
    EXPECT_EQ(in.out, f.out);
    write_text(dir.path / "bad.txt", "ok \xff");
  }
  struct Case {
    std::string args, message;
  } cases[] = {
      {"perplexity -m " + golden_dir() + "/target",
       "give exactly one of -f/--file, -p/--prompt, --prompt-ids or --prompt-ids-file (none given)"},
      {base + " -p hello", "give exactly one of -f/--file, -p/--prompt, --prompt-ids or --prompt-ids-file (given: "
                           "-p/--prompt and --prompt-ids)"},
      {base.substr(0, base.size() - 5) + " -c 3", "-c/--ctx-size: 3 is too small"},
      {base.substr(0, base.size() - 5) + " -c 200", "the input has 100 tokens, fewer than one chunk of -c/--ctx-size 200"},
      {base + " --chunks -2", "--chunks: must be >= 0 (0 or -1: all)"},
      {"perplexity -m " + golden_dir() + "/target -p hello", "no tokenizer.json; pass --prompt-ids"},
      {"perplexity -m " + golden_dir() + "/target --prompt-ids 1,x", "--prompt-ids: item 2 ('x') is not a token id"},
      {base + " --dtype f8", "--dtype: unknown dtype 'f8'"},
      {base + " --kl-base-dtype f8", "--kl-base-dtype: unknown dtype 'f8'"},
      {base + " --kl-base-device tpu", "--kl-base-device: unknown device 'tpu'"},
      {base + " --kl-base-model " + std::string(SPECPRESS_SOURCE_DIR) + "/demo/target",
       "--kl-base-model: the base model's vocabulary (151936) differs from the model's (1024)"},
      {base + " --kl-base-model /nonexistent/base", "--kl-base-model: /nonexistent/base is not a directory"},
  };
  for (const auto& c : cases) {
    const CommandResult e = run_specpress(c.args);
    EXPECT_NE(e.exit_code, 0) << c.args;
    EXPECT_NE(e.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << e.err;
    EXPECT_EQ(e.err.find("chunks of"), std::string::npos) << c.args << ": the plan of a refused run\n" << e.err;
  }
  if (demo_tokenizer) {
    const CommandResult missing = run_specpress("perplexity -m " + demo + " -f " + (dir.path / "none.txt").string());
    EXPECT_NE(missing.exit_code, 0);
    EXPECT_NE(missing.err.find("-f/--file: "), std::string::npos) << missing.err;
    const CommandResult bad = run_specpress("perplexity -m " + demo + " -f " + (dir.path / "bad.txt").string());
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.err.find("invalid UTF-8 at byte 3"), std::string::npos) << bad.err;
  }
}

// --version: the version, the commit built ("unknown" outside a git checkout), the build kind and LibTorch.
TEST(Cli, VersionNamesTheBuild) {
  const CommandResult r = run_specpress("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::regex line(R"(specpress \d+\.\d+\.\d+ \(commit [0-9A-Za-z._-]+, (CPU|CUDA) build, )"
                        R"(LibTorch \d+\.\d+\.\d+[^)]*\)\n)");
  EXPECT_TRUE(std::regex_match(r.out, line)) << r.out;
}

TEST(Cli, BadFlagsNameTheFlag) {
  SPECPRESS_REQUIRE_SHARED();
  const std::string base = "generate -m " + golden_dir() + "/target --prompt-ids 1,2,3 -n 4";
  struct Case {
    std::string args, message;
  } cases[] = {
      {base + " --dtype f8", "--dtype: unknown dtype 'f8'"},
      {base + " --device tpu", "--device: unknown device 'tpu'"},
      {base + " --temp -1", "--temp: must be >= 0"},
      {base + " --temp ''", "--temp: empty value (expected a finite decimal number)"},  // an unset variable, not 0
      {base + " --top-p ''", "--top-p: empty value"},
      {base + " --top-p inf", "--top-p: expected a finite decimal number, found 'inf'"},
      {base + " --top-p 1e999", "--top-p: '1e999' is out of range"},
      {base + " --temp 1e-400", "--temp: '1e-400' is out of range"},  // not 0, greedy
      {base + " --block-size ''", "--block-size: empty value (expected a decimal integer)"},
      {base + " --reasoning-budget ''", "--reasoning-budget: empty value"},
      {base + " -n 0x10", "--n-predict: expected a decimal integer, found '0x10'"},  // not read as 16
      {base + " -n 99999999999999999999", "--n-predict: '99999999999999999999' is out of range"},  // not saturated
      {"train-compressor --target " + golden_dir() + "/target --data x.jsonl -o never --steps ''",
       "--steps: empty value"},
      {base + " --top-p 0", "--top-p: must be in (0, 1]"},
      {base + " --repeat-penalty -1", "--repeat-penalty: must be > 0 and finite"},
      {base + " --presence-penalty 3", "--presence-penalty: must be in [-2, 2]"},
      {base + " --repeat-last-n -5", "--repeat-last-n: must be >= 0 tokens (0 = off) or -1"},
      {base + " --logit-bias 5", "--logit-bias: '5': no + or - between the token id and the bias"},
      {base + " --logit-bias 5+x", "--logit-bias: '5+x': the bias is not a finite number or -inf"},
      {base + " --logit-bias 5+inf", "the bias is not a finite number or -inf"},
      {base + " --logit-bias 99999+1", "--logit-bias: token id 99999 is outside the vocabulary 0..1023"},
      {base + " --stop-ids 5,x", "--stop-ids: item 2 ('x') is not a token id"},
      {base + " --stop-ids 5,,6", "--stop-ids: item 2 is empty (after 5)"},  // the item, not the whole list
      {base + " --stop-ids ,5", "--stop-ids: item 1 is empty (before the first id)"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2,99999 -n 4",
       "--prompt-ids: token id 99999 at index 2 is outside"},
      {"perplexity -m " + golden_dir() + "/target --prompt-ids 1,2,99999 -c 2",
       "--prompt-ids: token id 99999 at index 2 is outside"},
      {"generate -m " + golden_dir() + "/target -p hi --system '' -n 4", "--system: empty value"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 0", "-n/--n-predict: must be at least 1"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 2 -t 0",
       "--threads: expected -1 (LibTorch's choice) or a thread count of 1 .. 1024, found 0"},
      {"train-lm -t 2000", "--threads: expected -1 (LibTorch's choice) or a thread count of 1 .. 1024, found 2000"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 9223372036854775807",
       "+ -n 9223372036854775807 + block 1 exceeds the model's max_position_embeddings"},
      {base + " -md ''", "--model-draft: empty value (expected a DFlash draft directory"},
      {"bench -m " + golden_dir() + "/target -md " + golden_dir() + "/draft --dataset gsm8k --data " + shared_dir() +
           "/data/gsm8k_test.jsonl --indices /dev/zero",
       "/dev/zero: more than 256 MiB from a stream"},
      {base + " --temp 0.7 --samplers 'top_p;top_k;temperature'", "--samplers: top_k, top_p and min_p must come"},
      {base + " --sampling-seq kq", "--sampling-seq: unknown sampler letter 'q'"},
      {base + " --compress drop --compress-window 0", "--compress-window: must be >= 1"},
      {"serve -m " + golden_dir() + "/target --api-key ''", "--api-key: empty value (an unset variable?"},
      // 64-bit fields: past 32 bits still the range check naming the flag, not CLI11's "Could not convert"
      {"serve -m " + golden_dir() + "/target --port 99999999999", "--port: 99999999999 is not a TCP port (0..65535"},
      {"serve -m " + golden_dir() + "/target --timeout 99999999999", "--timeout: must be 1..2147483 seconds"},
      {"serve -m " + golden_dir() + "/target --timeout 0", "--timeout: must be 1..2147483 seconds"},
      {"dump -m " + golden_dir() + "/target -o ''", "--out: empty value"},
      {"tokenize -m " + golden_dir() + "/target/config.json -p hi", "config.json: not a tokenizer.json (no 'model'"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 4 --block-size 4", "--block-size: needs a draft"},
      {"generate -m /nonexistent/model --prompt-ids 1,2 -n 4", "/nonexistent/model: does not exist (expected an HF"},
      {"generate -m /nonexistent/model -p hello -n 4", "/nonexistent/model: does not exist (expected an HF"},
      {"generate -m " + golden_dir() + "/target/config.json --prompt-ids 1,2 -n 4", "config.json: not a directory"},
      {"generate -m " + golden_dir() + " --prompt-ids 1,2 -n 4", golden_dir() + ": no config.json"},
      {base + " -md /nonexistent/draft", "/nonexistent/draft: does not exist (expected a DFlash draft directory)"},
      {"generate -m " + golden_dir() + "/target -p hello -n 4", "no tokenizer"},
      {base + " -md " + golden_dir() + "/draft --block-size 1", "--block-size: must be at least 2"},
      {"bench -m " + golden_dir() + "/target -md " + golden_dir() + "/draft --dataset gsm8k --data " + shared_dir() +
           "/data/gsm8k_test.jsonl --subset foo",
       "--subset: needs --indices"},
      {base + " --compress-window 5", "--compress-window requires --compress"},
      {base + " --compress none --compress-sinks 2", "--compress-sinks: has no effect with --compress none"},
      {base + " --seed 1.5", "-s/--seed: expected -1 (a fresh seed) or a decimal integer in 0..18446744073709551615, "
                             "found '1.5'"},
      {base + " --seed 99999999999999999999999", "found '99999999999999999999999'"},
      {"train-compressor --target " + golden_dir() + "/target --data x.jsonl -o never --feature-layers a",
       "--feature-layers: item 1 ('a') is not a layer index"},
  };
  for (const auto& c : cases) {
    CommandResult r = run_specpress(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;  // refused by CLI11 or by the command: 1 either way
#ifndef SPECPRESS_HAVE_SERVER  // a build without the server (-DSPECPRESS_SERVER=AUTO/OFF): serve says so first
    if (c.args.rfind("serve ", 0) == 0 && r.err.find("serve: this build has no HTTP server") != std::string::npos)
      continue;
#endif
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
  EXPECT_EQ(run_specpress("generate --no-such-flag").exit_code, 1);
  EXPECT_EQ(run_specpress("--help").exit_code, 0);
}

// Numbers are decimal as llama.cpp reads them: a leading zero is not octal, a '+' is fine (CLI11 alone read -n 010
// as 8).
TEST(Cli, NumbersAreReadInBaseTen) {
  SPECPRESS_REQUIRE_SHARED();
  const std::string base = "generate -m " + golden_dir() + "/target --prompt-ids 1,2,3 --ignore-eos --json";
  for (const std::string n : {"010", "+10"}) {
    const CommandResult r = run_specpress(base + " -n " + n);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"].size(), 10u) << "-n " << n;
  }
}


// dump's prompt from a file of ids (Notepad's too: a byte-order mark, CRLF) or standard input (past one shell
// argument's limit) gives the file --prompt-ids gives; '-' as the output, a prompt past the model's positions and no
// prompt are refused naming the flag.
TEST(Cli, DumpTakesItsPromptFromAFileOrStandardInput) {
  SPECPRESS_REQUIRE_SHARED();
  namespace fs = std::filesystem;
  ScratchDir dir("cli-dump");
  const std::string dump = "dump -m " + golden_dir() + "/target ";
  std::ofstream(dir.path / "ids.txt") << "[5, 6, 7, 8]\n";
  std::ofstream(dir.path / "notepad.txt") << "\xEF\xBB\xBF" "5 6 7 8\r\n";  // a byte-order mark, CRLF
  const std::vector<std::string> ways = {"--prompt-ids 5,6,7,8", "--prompt-ids-file " + dir.str() + "/ids.txt",
                                         "--prompt-ids-file - < " + dir.str() + "/ids.txt",
                                         "--prompt-ids-file " + dir.str() + "/notepad.txt"};
  for (size_t i = 0; i < ways.size(); ++i) {
    const CommandResult r = run_specpress(dump + ways[i] + " -o " + dir.str() + "/" + std::to_string(i) + ".st");
    ASSERT_EQ(r.exit_code, 0) << ways[i] << "\n" << r.err;
  }
  auto bytes = [&](const std::string& name) {
    std::ifstream in(dir.path / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_GT(bytes("0.st").size(), 100u);
  EXPECT_EQ(bytes("1.st"), bytes("0.st"));
  EXPECT_EQ(bytes("2.st"), bytes("0.st"));
  EXPECT_EQ(bytes("3.st"), bytes("0.st"));
  // --logits last keeps the last row of every position's logits (a product of one row, so equal to rounding);
  // --logits none keeps none
  for (const char* which : {"last", "none"}) {
    const CommandResult r = run_specpress(dump + ways[0] + " --logits " + which + " -o " + dir.str() + "/" + which);
    ASSERT_EQ(r.exit_code, 0) << which << "\n" << r.err;
  }
  auto logits = [&](const std::string& name) {  // the logits' shape and bytes ({} and "" where there are none)
    const std::string file = bytes(name);
    const auto h = specpress::io::parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), name);
    for (const auto& t : h.tensors)
      if (t.name == "logits") return std::pair{t.shape, file.substr(h.data_start + t.begin, t.end - t.begin)};
    return std::pair{std::vector<int64_t>{}, std::string()};
  };
  const auto [all_shape, all] = logits("0.st");
  const auto [last_shape, last] = logits("last");
  ASSERT_EQ(all_shape.size(), 2u);
  EXPECT_EQ(all_shape[0], 4);
  EXPECT_EQ(last_shape, std::vector<int64_t>({1, all_shape[1]}));
  ASSERT_EQ(last.size() % sizeof(float), 0u);
  std::vector<float> a(last.size() / sizeof(float)), b(a.size());
  std::memcpy(a.data(), last.data(), last.size());
  std::memcpy(b.data(), all.data() + all.size() - last.size(), last.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i]))) << i;
  EXPECT_TRUE(logits("none").first.empty());
  EXPECT_NE(run_specpress(dump + ways[0] + " --logits first -o " + dir.str() + "/x").exit_code, 0);

  const int64_t most =
      nlohmann::json::parse(std::ifstream(golden_dir() + "/target/config.json"))["max_position_embeddings"];
  std::string too_many;
  for (int64_t i = 0; i <= most; ++i) too_many += "1,";
  too_many.pop_back();
  std::ofstream(dir.path / "long.txt") << too_many;
  struct Case {
    std::string args, message;
  } cases[] = {
      {dump + "--prompt-ids 1,2 -o -", "-o/--out: '-' would be a file named '-'"},
      {dump + "--prompt-ids-file " + dir.str() + "/long.txt -o " + dir.str() + "/x.st",
       fmt::format("--prompt-ids-file: the prompt has {} tokens, more than the model's max_position_embeddings {}",
                   most + 1, most)},
      {dump + "--prompt-ids-file " + dir.str() + "/none.txt -o " + dir.str() + "/x.st", "--prompt-ids-file: "},
      {dump + "-o " + dir.str() + "/x.st", "dump: give exactly one of -f/--file, -p/--prompt, --prompt-ids"},
      {dump + "--prompt-ids-file " + dir.str() + "/ids.txt -o " + dir.str() + "/ids.txt",
       "-o/--out: " + dir.str() + "/ids.txt would write over --prompt-ids-file"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run_specpress(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
  EXPECT_FALSE(fs::exists(dir.path / "x.st"));
  EXPECT_EQ(bytes("ids.txt"), "[5, 6, 7, 8]\n") << "the refused output wrote over its input";
}

// Outputs are checked before the run: a directory, a FIFO, a missing directory, an input or one of an input's files
// (also through its link, as a Hugging Face cache links shards) and two outputs naming one file are refused naming
// the flags, before anything loads; a new file next to a model's files and a symbolic link (written through, the
// link kept) are fine; a config whose epsilon or RoPE base would give NaN is refused; a failed write to standard
// output fails the run.
TEST(Cli, OutputsAreCheckedBeforeTheRun) {
  SPECPRESS_REQUIRE_SHARED();
  namespace fs = std::filesystem;
  ScratchDir dir("cli-out");
  const std::string target = golden_dir() + "/target", dump = "dump -m " + target + " --prompt-ids 1,2,3 -o ";
  const fs::path fifo = dir.path / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // the golden target's files copied to shards/ and linked from model/ (as a Hugging Face cache lays a model out),
  // with a config of our own
  fs::create_directories(dir.path / "model");
  fs::create_directories(dir.path / "shards");
  for (const fs::directory_entry& e : fs::directory_iterator(target)) {
    if (e.path().filename() == "config.json") continue;
    fs::copy_file(e.path(), dir.path / "shards" / e.path().filename());
    fs::create_symlink(dir.path / "shards" / e.path().filename(), dir.path / "model" / e.path().filename());
  }
  std::ofstream(dir.path / "model" / "config.json") << std::ifstream(target + "/config.json").rdbuf();
  const std::string bench = "bench -m " + target + " -md " + golden_dir() + "/draft --dataset gsm8k --data " +
                            shared_dir() + "/data/gsm8k_test.jsonl --max-samples 1 ";
  struct Case {
    std::string args, message;
  } cases[] = {
      {dump + dir.str(), "-o/--out: " + dir.str() + " is a directory (expected a file to write)"},
      {dump + fifo.string(), "exists and is not a regular file"},
      {dump + dir.str() + "/no/such/dir/x.safetensors", "the directory of " + dir.str() + "/no/such/dir/x.safetensors"},
      {"dump -m " + dir.str() + "/model --prompt-ids 1,2 -o " + dir.str() + "/model/config.json",
       "would write over -m/--model " + dir.str() + "/model"},
      // a model's shard through its link (as in a Hugging Face cache): the linked file, named from outside the model
      {"dump -m " + dir.str() + "/model --prompt-ids 1,2 -o " + dir.str() + "/shards/model-00001-of-00006.safetensors",
       "would write over -m/--model " + dir.str() + "/model"},
      {bench + "--json " + dir.str() + "/r.json --markdown " + dir.str() + "/r.json",
       "--json and --markdown: both name"},
      {bench + "--json " + shared_dir() + "/data/gsm8k_test.jsonl",
       "--json: " + shared_dir() + "/data/gsm8k_test.jsonl would write over --data"},
      {"generate -m " + target + " --prompt-ids 1,2 -n 2 --think", "--think: only applies with --chat"},
      {"tokenize -m " + shared_dir() + "/data/qwen3-tokenizer -f " + dir.str(),
       "-f/--file: " + dir.str() + ": is a directory"},
  };
  for (const auto& c : cases) {
    CommandResult r = run_specpress(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";

  // a new file inside the model's directory writes over none of its files
  CommandResult next_to_model = run_specpress("dump -m " + dir.str() + "/model --prompt-ids 1,2 -o " + dir.str() +
                                              "/model/logits.safetensors");
  EXPECT_EQ(next_to_model.exit_code, 0) << next_to_model.err;
  fs::remove(dir.path / "model" / "logits.safetensors");

  // a symbolic link is followed: the file it names is written, the link stays
  const fs::path real = dir.path / "real.safetensors", link = dir.path / "link.safetensors";
  std::ofstream(real) << "old";
  fs::create_symlink(real, link);
  CommandResult r = run_specpress(dump + link.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_GT(fs::file_size(real), 100u);

  // NaN-making config values are refused, naming the field
  for (const std::string name : {"rms_norm_eps", "rope_theta"}) {
    std::ifstream in(target + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j[name] = name == "rms_norm_eps" ? -1.0 : 0.0;  // a top-level rope_theta is read before rope_parameters
    std::ofstream(dir.path / "model" / "config.json") << j.dump(2);
    r = run_specpress("generate -m " + dir.str() + "/model --prompt-ids 1,2 -n 2");
    EXPECT_NE(r.exit_code, 0) << name;
    EXPECT_NE(r.err.find("field '" + name + "' must be a positive number"), std::string::npos) << r.err;
  }

  // standard output that cannot be written fails the run
  if (fs::is_character_file("/dev/full")) {
    r = run_specpress("tokenize -m " + shared_dir() + "/data/qwen3-tokenizer -p hello >/dev/full");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("writing to standard output failed"), std::string::npos) << r.err;
  }
  // float16 on the CPU: runs where this LibTorch has the kernel, else a message naming the flag (no raw trace)
  r = run_specpress("generate -m " + target + " --prompt-ids 1,2 -n 2 --dtype f16");
  if (r.exit_code != 0) {
    EXPECT_NE(r.err.find("--dtype f16: this LibTorch ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("has no float16 matrix product on the CPU"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("frame #"), std::string::npos) << "a raw stack trace: " << r.err;
  }
}

}  // namespace
