// test_checkpoint.cpp — HF directory loading: both config formats, dtype conversion, tied heads, and
// each malformed input of the foundation issue failing with a message that names the problem.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "io/output_paths.h"
#include "decode/generation.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"
#include "model_fixtures.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;
namespace fs = std::filesystem;

namespace {

std::string load_error(const std::string& dir) {
  try {
    model::Qwen3Model::load(dir, at::kFloat, at::kCPU);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void rewrite_tensors(const std::string& dir, const std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)>& edit,
                     bool tied = false) {
  auto t = qwen3_tensors(TinyShape{}, tied);
  edit(t);
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), t);
}

TEST(Checkpoint, LoadsRandomTinyModel) {
  ScratchDir d("ckpt-ok");
  write_random_qwen3(d.str());
  model::Qwen3Model m = model::Qwen3Model::load(d.str(), at::kFloat, at::kCPU);
  EXPECT_EQ(m.config().num_layers, 2);
  EXPECT_FALSE(m.config().tie_word_embeddings);
}

// A model directory that is missing, or a file, is named as such before any config.json is looked for.
TEST(Checkpoint, MissingOrFileModelDirectoryIsNamed) {
  ScratchDir d("ckpt-dir");
  const std::string missing = (d.path / "no-such-model").string();
  EXPECT_NE(load_error(missing).find(missing + ": does not exist (expected an HF model directory)"), std::string::npos)
      << load_error(missing);
  write_random_qwen3(d.str());
  const std::string file = (d.path / "config.json").string();
  EXPECT_NE(load_error(file).find(file + ": not a directory"), std::string::npos) << load_error(file);
  fs::remove(d.path / "config.json");
  EXPECT_NE(load_error(d.str()).find(d.str() + ": no config.json"), std::string::npos) << load_error(d.str());
}

// An atomic write that cannot create its temporary file names the path asked for, and leaves nothing behind.
TEST(Checkpoint, AtomicWriteFailureNamesThePath) {
  ScratchDir d("ckpt-write");
  const std::string target = (d.path / "no-such-folder" / "out.safetensors").string();
  std::string message;
  try {
    io::write_file_atomic(target, "bytes");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message.rfind(target + ": cannot write: creating the temporary file", 0), 0u) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  io::write_file_atomic((d.path / "ok.bin").string(), "bytes");
  EXPECT_EQ(io::read_text_file((d.path / "ok.bin").string()), "bytes");
  for (const auto& entry : fs::directory_iterator(d.path))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

// Any name a file can have takes an atomic write: the temporary name is cut to the 255-byte limit, never inside a
// UTF-8 character, and nothing is left beside the file.
TEST(Checkpoint, AtomicWriteTakesNamesUpToTheLimit) {
  ScratchDir d("ckpt-long");
  for (size_t n : {200u, 250u, 255u}) {
    const std::string target = (d.path / std::string(n, 'a')).string();
    io::write_file_atomic(target, "bytes");
    EXPECT_EQ(io::read_text_file(target), "bytes") << n;
    io::check_output_files({{"--out", target}}, {});  // its probe beside it too
  }
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(d.path)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 3u);
  // one byte more is no file name: refused before a run, naming the flag
  expect_error([&] { io::check_output_files({{"--out", (d.path / std::string(256, 'a')).string()}}, {}); },
               "its name has 256 bytes, more than a file name may have (255)");
  std::string name = "x";  // and 127 two-byte characters: 255 bytes, of which 244 fit beside an 11-byte suffix
  for (int i = 0; i < 127; ++i) name += "\xc3\xa9";
  const std::string tmp = fs::path(io::temporary_path("/d/" + name, ".tmp.123456")).filename().string();
  EXPECT_EQ(tmp.size(), 1 + 2 * 121 + 11u);  // byte 245 would end inside the 122nd character: 243 kept
  EXPECT_EQ(tmp.substr(tmp.size() - 11), ".tmp.123456");
  EXPECT_EQ(io::temporary_path("/d/short", ".tmp.1"), "/d/short.tmp.1");
}

// A SIGINT or SIGTERM at its default action during an atomic write ends the process without leaving the temporary
// file: the child's write blocks opening a FIFO made where its temporary file goes, and is signalled once its handler
// is in place (/proc's SigCgt), so the signal lands mid-write every time. A replaced file keeps its permissions.
TEST(Checkpoint, SignalDuringAnAtomicWriteLeavesNoTemporaryFile) {
  ScratchDir d("ckpt-signal");
  const std::string target = (d.path / "out.bin").string();
  auto catches = [](pid_t pid, int sig) {  // the signal's bit in /proc/PID/status's SigCgt (caught signals)
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1) & 1) != 0;
    return false;
  };
  for (const int sig : {SIGINT, SIGTERM}) {
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c = 0;
      if (::read(go[0], &c, 1) != 1) ::_exit(3);
      ::signal(sig, SIG_DFL);
      try {
        io::write_file_atomic(target, "bytes");
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(go[0]);
    const std::string tmp = target + ".tmp." + std::to_string(pid);
    ASSERT_EQ(::mkfifo(tmp.c_str(), 0600), 0);
    ASSERT_EQ(::write(go[1], "x", 1), 1);
    ::close(go[1]);
    for (int i = 0; i < 1000 && !catches(pid, sig); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(catches(pid, sig)) << "the write installed no handler for signal " << sig;
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    EXPECT_FALSE(fs::exists(fs::symlink_status(tmp))) << tmp << " was left";
    EXPECT_FALSE(fs::exists(target));
  }
  std::ofstream(target) << "old";
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  io::write_file_atomic(target, "new");
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(io::read_text_file(target), "new");
}

TEST(Checkpoint, MissingConfigField) {
  ScratchDir d("ckpt-field");
  write_random_qwen3(d.str());
  auto j = qwen3_config_json(TinyShape{}, false);
  j.erase("hidden_size");
  write_json(d.path / "config.json", j);
  EXPECT_NE(load_error(d.str()).find("missing field 'hidden_size'"), std::string::npos) << load_error(d.str());
}

TEST(Checkpoint, ConfigFieldOfWrongType) {
  ScratchDir d("ckpt-type");
  write_random_qwen3(d.str());
  auto j = qwen3_config_json(TinyShape{}, false);
  j["num_hidden_layers"] = "two";
  write_json(d.path / "config.json", j);
  EXPECT_NE(load_error(d.str()).find("'num_hidden_layers' must be an integer"), std::string::npos);
  j["num_hidden_layers"] = ~uint64_t{0};  // would wrap to -1
  write_json(d.path / "config.json", j);
  EXPECT_NE(load_error(d.str()).find("field 'num_hidden_layers' is 18446744073709551615, past the largest integer "
                                     "read here (2^63 - 1)"),
            std::string::npos) << load_error(d.str());
}

TEST(Checkpoint, MissingTensorIsNamed) {
  ScratchDir d("ckpt-missing");
  write_random_qwen3(d.str());
  rewrite_tensors(d.str(), [](auto& t) {
    std::erase_if(t, [](auto& kv) { return kv.first == "model.layers.1.mlp.up_proj.weight"; });
  });
  EXPECT_NE(load_error(d.str()).find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos)
      << load_error(d.str());
}

TEST(Checkpoint, ExtraTensorIsNamed) {
  ScratchDir d("ckpt-extra");
  write_random_qwen3(d.str());
  rewrite_tensors(d.str(), [](auto& t) { t.push_back({"model.layers.0.mlp.bias", at::zeros({4})}); });
  EXPECT_NE(load_error(d.str()).find("not used by the architecture: model.layers.0.mlp.bias"), std::string::npos)
      << load_error(d.str());
}

TEST(Checkpoint, WrongShapeShowsExpectedAndFound) {
  ScratchDir d("ckpt-shape");
  write_random_qwen3(d.str());
  rewrite_tensors(d.str(), [](auto& t) {
    for (auto& kv : t)
      if (kv.first == "model.layers.0.self_attn.k_proj.weight") kv.second = at::zeros({16, 33});
  });
  EXPECT_NE(load_error(d.str()).find((d.path / "model.safetensors").string() +  // the file that holds it
                                     ": tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 33], expected "
                                     "[16, 32]"),
            std::string::npos)
      << load_error(d.str());
}

TEST(Checkpoint, UnsupportedTensorDtype) {
  ScratchDir d("ckpt-dtype");
  write_random_qwen3(d.str());
  rewrite_tensors(d.str(), [](auto& t) {
    for (auto& kv : t)
      if (kv.first == "model.norm.weight") kv.second = at::zeros({32}, at::kLong);
  });
  // I64 parses but is no weight dtype: the message names the tensor and what was expected.
  std::string msg = load_error(d.str());
  EXPECT_NE(msg.find("tensor 'model.norm.weight' has dtype I64, expected F32, BF16 or F16"), std::string::npos) << msg;
}

TEST(Checkpoint, UnknownDtypeStringInFile) {
  ScratchDir d("ckpt-unknown-dtype");
  write_random_qwen3(d.str());
  std::string bytes = io::read_text_file((d.path / "model.safetensors").string());
  size_t at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"Q4K\"");
  write_text(d.path / "model.safetensors", bytes);
  EXPECT_NE(load_error(d.str()).find("unknown dtype 'Q4K'"), std::string::npos) << load_error(d.str());
}

TEST(Checkpoint, TruncatedFile) {
  ScratchDir d("ckpt-trunc");
  write_random_qwen3(d.str());
  fs::resize_file(d.path / "model.safetensors", fs::file_size(d.path / "model.safetensors") - 100);
  std::string msg = load_error(d.str());
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

TEST(Checkpoint, IndexNamesMissingShard) {
  ScratchDir d("ckpt-index");
  write_random_qwen3(d.str());
  nlohmann::json index = {{"metadata", {{"total_size", 1}}},
                          {"weight_map", {{"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  write_json(d.path / "model.safetensors.index.json", index);
  std::string msg = load_error(d.str());
  EXPECT_NE(msg.find("names shard 'model-00002-of-00002.safetensors'"), std::string::npos) << msg;
  // a shard is a file of the model directory, never a path out of it
  for (const std::string shard : {"../model.safetensors", "/etc/passwd", "sub/x.safetensors", ".."}) {
    index["weight_map"]["model.norm.weight"] = shard;
    write_json(d.path / "model.safetensors.index.json", index);
    msg = load_error(d.str());
    EXPECT_NE(msg.find("weight_map['model.norm.weight'] is '" + shard + "', expected a file name in the model"),
              std::string::npos) << msg;
  }
}

// Files no exporter writes but a damaged download or a hostile directory can hold: each is refused naming the file,
// never a crash (a config nested 100,000 deep overflowed the stack printing its value), a hang (a named pipe in the
// weights' place blocked the open) or a LibTorch allocation error (2^62 layers).
TEST(Checkpoint, HostileFilesAreNamedErrors) {
  ScratchDir d("ckpt-hostile");
  write_random_qwen3(d.str());
  const std::string config = (d.path / "config.json").string();
  nlohmann::json j = qwen3_config_json(TinyShape{}, false);
  std::string text = j.dump();
  const std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
  text.replace(text.find("\"hidden_size\":32"), std::string("\"hidden_size\":32").size(), "\"hidden_size\":" + deep);
  write_text(config, text);
  EXPECT_NE(load_error(d.str()).find(config + ": values nested more than 256 levels deep"), std::string::npos)
      << load_error(d.str()).substr(0, 300);
  j["num_hidden_layers"] = int64_t{1} << 62;  // no allocation by the layer count: the missing layer is named
  write_json(config, j);
  EXPECT_NE(load_error(d.str()).find("missing tensor 'model.layers.2.input_layernorm.weight'"), std::string::npos)
      << load_error(d.str());
  write_json(config, qwen3_config_json(TinyShape{}, false));

  // an entry naming a field twice ("dtype" twice: the last would be read), as the reference parser refuses it
  const fs::path weights = d.path / "model.safetensors";
  const std::string bytes = io::read_text_file(weights.string());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  std::string header = bytes.substr(8, header_len);
  const size_t f32 = header.find("\"dtype\":\"F32\"");
  ASSERT_NE(f32, std::string::npos) << header.substr(0, 200);
  header.insert(f32, "\"dtype\":\"F16\",");
  std::string edited(8, '\0');
  for (int i = 0; i < 8; ++i) edited[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_text(weights, edited + header + bytes.substr(8 + header_len));
  const std::string entry_msg = load_error(d.str());
  EXPECT_NE(entry_msg.find(weights.string() + ": invalid JSON header: the entry '"), std::string::npos) << entry_msg;
  EXPECT_NE(entry_msg.find("' names its field 'dtype' more than once"), std::string::npos) << entry_msg;

  // a key twice in __metadata__ is kept, the last winning, as the reference parser keeps it
  header = bytes.substr(8, header_len);
  header.insert(1, "\"__metadata__\":{\"format\":\"np\",\"format\":\"pt\"},");
  for (int i = 0; i < 8; ++i) edited[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_text(weights, edited + header + bytes.substr(8 + header_len));
  EXPECT_EQ(load_error(d.str()), "");

  // a named pipe where the weights belong: refused at once (were the open to block again, the test would hang past
  // ctest's timeout for it)
  fs::remove(weights);
  ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
  EXPECT_NE(load_error(d.str()).find(weights.string() + ": not a regular file (a named pipe; expected a safetensors "
                                     "file)"), std::string::npos) << load_error(d.str());
  // a link to a blob that is not there (an HF cache's unfinished download)
  fs::remove(weights);
  fs::create_symlink(d.path / "blobs" / "0123abcd", weights);
  EXPECT_NE(load_error(d.str()).find(weights.string() + ": is a link to " + (d.path / "blobs" / "0123abcd").string() +
                                     ", which does not exist (an unfinished download?)"),
            std::string::npos) << load_error(d.str());
}

// The nesting limit counts brackets outside strings, 256 levels deep at most, and lets the parser report what is not
// JSON.
TEST(Checkpoint, JsonDepthLimitCountsOnlyRealNesting) {
  const auto nested = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  EXPECT_NO_THROW(check_json_depth(nested(256), "f.json"));
  expect_error([&] { check_json_depth(nested(257), "f.json"); }, "f.json: values nested more than 256 levels deep");
  EXPECT_NO_THROW(check_json_depth("[\"" + std::string(300, '[') + "\"]", "f.json"));  // in a string
  EXPECT_NO_THROW(check_json_depth("[\"\\\"" + std::string(300, '{') + "\"]", "f.json"));  // after an escaped quote
  expect_error([&] { check_json_depth("[\"\\\\\"" + nested(257) + "]", "f.json"); }, "nested more than 256");
  EXPECT_NO_THROW(check_json_depth(std::string(300, ']') + "{", "f.json"));  // not JSON: the parser's to report
  EXPECT_EQ(nlohmann::json::parse(depth_checked(nested(256), "f.json")).size(), 1u);
}

TEST(Checkpoint, InvalidConfigJson) {
  ScratchDir d("ckpt-json");
  write_random_qwen3(d.str());
  write_text(d.path / "config.json", "{\"vocab_size\": 64,");
  EXPECT_NE(load_error(d.str()).find("config.json: invalid JSON"), std::string::npos);
}

TEST(Checkpoint, Bf16AndF16WeightsConvertToComputeDtype) {
  ScratchDir d("ckpt-bf16");
  write_random_qwen3(d.str());
  auto t = qwen3_tensors(TinyShape{}, false);
  for (auto& kv : t) kv.second = kv.second.to(kv.first.find("mlp") != std::string::npos ? at::kHalf : at::kBFloat16);
  io::save_safetensors((d.path / "model.safetensors").string(), t);
  model::Qwen3Model m = model::Qwen3Model::load(d.str(), at::kFloat, at::kCPU);
  EXPECT_EQ(m.weights().embed_tokens.scalar_type(), at::kFloat);
  at::Tensor expected = t[0].second.to(at::kFloat);
  EXPECT_TRUE(at::equal(m.weights().embed_tokens, expected));
  model::Qwen3Model mb = model::Qwen3Model::load(d.str(), at::kBFloat16, at::kCPU);
  EXPECT_EQ(mb.weights().layers[0].gate_proj.scalar_type(), at::kBFloat16);
}

TEST(Checkpoint, TransformersV4ConfigAndTiedHead) {
  ScratchDir d("ckpt-v4");
  write_random_qwen3(d.str(), TinyShape{}, /*tied=*/true);
  model::Qwen3Model m = model::Qwen3Model::load(d.str(), at::kFloat, at::kCPU);
  EXPECT_TRUE(m.config().tie_word_embeddings);
  EXPECT_TRUE(m.weights().lm_head.is_same(m.weights().embed_tokens));
  EXPECT_DOUBLE_EQ(m.config().rope_theta, 1e6);
}

TEST(Checkpoint, RealQwen3ConfigsParse) {
  SPECPRESS_REQUIRE_SHARED();
  auto c4 = model::parse_qwen3_config(shared_dir() + "/data/qwen3-tokenizer/config_Qwen3-4B.json");
  EXPECT_EQ(c4.hidden_size, 2560);
  EXPECT_EQ(c4.num_layers, 36);
  EXPECT_EQ(c4.head_dim, 128);
  EXPECT_TRUE(c4.tie_word_embeddings);
  auto c8 = model::parse_qwen3_config(shared_dir() + "/data/qwen3-tokenizer/config_Qwen3-8B.json");
  EXPECT_EQ(c8.hidden_size, 4096);
  EXPECT_FALSE(c8.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c8.rope_theta, 1e6);
}

// What a Qwen3 config can say that this engine does not compute is refused by name, not ignored: a sliding window,
// layers of another attention type, another model type or architecture.
TEST(Checkpoint, ConfigsThisEngineDoesNotComputeAreRefused) {
  SPECPRESS_REQUIRE_SHARED();
  const std::string real = shared_dir() + "/data/qwen3-tokenizer/config_Qwen3-4B.json";
  EXPECT_NO_THROW(model::parse_qwen3_config(real));
  EXPECT_THROW(model::parse_qwen3_config(real, "DFlashDraftModel"), Error);
  std::ifstream in(real);
  const nlohmann::json base = nlohmann::json::parse(in);
  ScratchDir dir("config");
  const std::string path = (dir.path / "config.json").string();
  std::vector<std::string> one_sliding(36, "full_attention");
  one_sliding[1] = "sliding_attention";
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"use_sliding_window", true}, {"sliding_window", 4096}, {"max_window_layers", 28}},
       "layer 28 attends through a sliding window of 4096"},
      {{{"use_sliding_window", true}, {"sliding_window", 4096}, {"layer_types", one_sliding}},
       "layer 1 attends through a sliding window of 4096"},
      {{{"layer_types", {"full_attention", "chunked_attention"}}}, "layer_types[1] is \"chunked_attention\""},
      {{{"layer_types", {"full_attention", "full_attention"}}},
       "field 'layer_types' has 2 entries; expected one a layer, num_hidden_layers 36"},
      {{{"max_position_embeddings", int64_t{1} << 40}},
       "field 'max_position_embeddings' is 1099511627776, more than the 4194304 positions specpress builds its RoPE "
       "tables for"},
      {{{"layer_types", "full_attention"}}, "field 'layer_types' must be an array"},
      {{{"model_type", "llama"}}, "model_type 'llama' is not supported"},
  };
  for (const auto& [change, expected] : cases) {
    nlohmann::json j = base;
    j.update(change);
    write_text(path, j.dump());
    try {
      model::parse_qwen3_config(path);
      ADD_FAILURE() << change.dump() << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  nlohmann::json full = base;
  full["layer_types"] = std::vector<std::string>(36, "full_attention");  // transformers' newer exports
  write_text(path, full.dump());
  EXPECT_NO_THROW(model::parse_qwen3_config(path));
  // what transformers also computes as full attention: the flag with every layer below max_window_layers (36 of 36
  // here), and sliding_attention entries without the flag
  for (const nlohmann::json& change :
       {nlohmann::json{{"use_sliding_window", true}, {"sliding_window", 4096}},
        nlohmann::json{{"layer_types", std::vector<std::string>(36, "sliding_attention")}}}) {
    nlohmann::json j = base;
    j.update(change);
    write_text(path, j.dump());
    EXPECT_NO_THROW(model::parse_qwen3_config(path)) << change.dump();
  }
  full["architectures"] = {"LlamaForCausalLM"};
  write_text(path, full.dump());
  EXPECT_NO_THROW(model::parse_qwen3_config(path, /*architecture=*/nullptr));  // a draft's is not read
  expect_error([&] { model::parse_qwen3_config(path); },
               "architectures [\"LlamaForCausalLM\"] where Qwen3ForCausalLM is expected (specpress runs Qwen3 models)");
  full["architectures"] = {"DFlashDraftModel"};  // a draft given as the target: the flags are named
  write_text(path, full.dump());
  expect_error([&] { model::parse_qwen3_config(path); },
               "(this is a DFlash draft: a Qwen3 target is given with -m (the trainers' --target), its draft with "
               "-md (--draft))");
  full["architectures"] = {"Qwen3ForCausalLM"};  // and a target given as the draft
  write_text(path, full.dump());
  expect_error([&] { model::parse_dflash_config(path); },
               "architectures [\"Qwen3ForCausalLM\"] is a target's config, not a DFlash draft's (no block_size): the "
               "draft is given with -md");
}

// NaN weights load (they are valid bf16/f32 values) but their logits are NaN: decoding says so instead of emitting
// token 0 again and again (perplexity likewise: PerplexityErrors.NanWeightsAreAnError).
TEST(Checkpoint, NanWeightsAreReportedByDecoding) {
  ScratchDir d("ckpt-nan");
  write_qwen3_with_a_nan_weight(d.str());
  const model::Qwen3Model m = model::Qwen3Model::load(d.str(), at::kFloat, at::kCPU);
  decode::GenerationParams p;
  p.max_new_tokens = 3;
  try {
    decode::generate_plain(m, {1, 2, 3}, p);
    ADD_FAILURE() << "NaN logits decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits after the prompt are NaN"), std::string::npos) << e.what();
  }
}

}  // namespace

// --device and --dtype: auto (every command's default) takes CUDA where this build and machine have a GPU, and bf16
// there, else the CPU in f32; explicit names as given; anything else named with the flag.
TEST(Checkpoint, DeviceAndDtypeAutoFollowTheMachine) {
  const at::Device automatic = model::parse_device("auto", "--device");
  EXPECT_EQ(automatic.is_cuda(), at::hasCUDA());
  EXPECT_TRUE(model::parse_device("cpu", "--device").is_cpu());
  EXPECT_EQ(model::parse_compute_dtype("auto", at::Device(at::kCPU), "--dtype"), at::kFloat);
  EXPECT_EQ(model::parse_compute_dtype("auto", at::Device(at::kCUDA), "--dtype"), at::kBFloat16);
  EXPECT_EQ(model::parse_compute_dtype("f16", at::Device(at::kCUDA), "--dtype"), at::kHalf);
  EXPECT_EQ(model::parse_compute_dtype("bfloat16", at::Device(at::kCPU), "--dtype"), at::kBFloat16);
  EXPECT_EQ(model::compute_dtype_name(model::parse_compute_dtype("auto", automatic, "--dtype")),
            at::hasCUDA() ? "bf16" : "f32");
  try {
    model::parse_compute_dtype("fp8", at::Device(at::kCPU), "--kl-base-dtype");
    ADD_FAILURE() << "fp8 was taken";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--kl-base-dtype: unknown dtype 'fp8' (expected auto, f32, bf16 or f16)");
  }
  try {
    model::parse_device("gpu", "--device");
    ADD_FAILURE() << "gpu was taken";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--device: unknown device 'gpu' (expected auto, cpu, cuda or cuda:N)");
  }
}
