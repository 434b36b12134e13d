// test_cli.cpp — the specpress binary end to end: `generate --json` reproduces the reference's greedy
// and DFlash outputs (with acceptance lengths and per-step records) for all 8 golden runs, the bundled
// demo pair runs with its bundled beacon compressor, and bad flags exit non-zero with a message naming
// the flag.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

using namespace specpress::test;

namespace {

std::string golden_args(const GoldenRun& run) {
  return "generate -m " + golden_dir() + "/target --prompt-ids \"" + join_ids(run.prompt) + "\" -n " +
         std::to_string(run.max_new_tokens) + " --temp 0 --stop-ids " + join_ids(run.stop_ids) +
         " --device cpu --dtype f32 --json";
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
  }
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
  const std::string demo = std::string(SPECPRESS_SOURCE_DIR) + "/demo";
  if (!std::filesystem::exists(demo + "/target/tokenizer.json"))
    GTEST_SKIP() << demo << "/target/tokenizer.json missing (scripts/setup.sh fetches it)";
  CommandResult r = run_specpress("generate -m " + demo + "/target -md " + demo + "/draft -p \"Tom has 3 apples and buys "
                                  "5 more. How many apples does he have?\" --chat -n 160 --temp 0 --compress " + demo +
                                  "/beacon --compress-window 32 --compress-merge 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["compression"]["method"], "beacon");
  EXPECT_GT(j["compression"]["events"].get<int64_t>(), 5);
  EXPECT_GT(j["compression"]["effective_ratio"].get<double>(), 1.2);
  EXPECT_EQ(j["output_ids"].size(), 160u);
  r = run_specpress("generate -m " + demo + "/target --prompt-ids 1,2,3 -n 4 --compress " + demo + "/draft");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no compressor.json"), std::string::npos) << r.err;
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
      {base + " --top-p 0", "--top-p: must be in (0, 1]"},
      {base + " --stop-ids 5,x", "--stop-ids: item 2 ('x') is not a token id"},
      {base + " --stop-ids 5,,6", "--stop-ids: empty item"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2,99999 -n 4", "token id 99999 at index 2 is outside"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 0", "-n/--n-predict: must be at least 1"},
      {"generate -m " + golden_dir() + "/target --prompt-ids 1,2 -n 4 --block-size 4", "--block-size: needs a draft"},
      {"generate -m /nonexistent/model --prompt-ids 1,2 -n 4", "/nonexistent/model: does not exist (expected an HF"},
      {"generate -m /nonexistent/model -p hello -n 4", "/nonexistent/model: does not exist (expected an HF"},
      {"generate -m " + golden_dir() + "/target/config.json --prompt-ids 1,2 -n 4", "config.json: not a directory"},
      {"generate -m " + golden_dir() + " --prompt-ids 1,2 -n 4", golden_dir() + ": no config.json"},
      {base + " -md /nonexistent/draft", "/nonexistent/draft: does not exist (expected a DFlash draft directory)"},
      {"generate -m " + golden_dir() + "/target -p hello -n 4", "no tokenizer"},
      {base + " -md " + golden_dir() + "/draft --block-size 1", "--block-size: must be at least 2"},
  };
  for (const auto& c : cases) {
    CommandResult r = run_specpress(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
}

}  // namespace
