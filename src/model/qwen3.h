// qwen3.h — the Qwen3 target: config, weights (loaded straight from an HF directory), static KV cache
// and the reference forward in plain ATen ops (CPU and CUDA). One forward call handles prefill, decode
// of one token and verification of a block at any start position; it can return the raw residual-stream
// outputs of chosen layers, which is what DFlash taps.
#pragma once
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "ops/rope.h"

namespace specpress::io {
class TensorStore;
}

namespace specpress::model {

// The most positions a config may state (max_position_embeddings): the RoPE tables hold every one (qwen3.cpp).
inline constexpr int64_t kMaxPositions = int64_t{1} << 22;

struct Qwen3Config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string checkpoint_dtype;      // "float32", "bfloat16", ... as the config states it
  std::vector<int64_t> eos_token_ids;
};

// Parses a config.json (transformers 4.x `rope_theta`/`torch_dtype` or 5.x `rope_parameters`/`dtype`). `architecture`:
// what its "architectures" must name where given (a target's "Qwen3ForCausalLM"); null for a draft's, which is not
// read (drafts made from their target's config keep "Qwen3ForCausalLM"; block_size and the taps tell a draft).
Qwen3Config parse_qwen3_config(const std::string& config_path, const char* architecture = "Qwen3ForCausalLM");

// Weights of one Qwen3 decoder layer; also the layer type of the DFlash draft.
struct DecoderLayerWeights {
  at::Tensor input_norm, q_proj, k_proj, v_proj, o_proj, q_norm, k_norm, post_norm, gate_proj, up_proj, down_proj;
};

// Takes `prefix` + "input_layernorm.weight" etc. from `store` with the shapes `config` implies.
DecoderLayerWeights load_decoder_layer(io::TensorStore& store, const std::string& prefix, const Qwen3Config& config,
                                       at::ScalarType dtype, at::Device device);

struct Qwen3Weights {
  at::Tensor embed_tokens;  // [V, H]
  at::Tensor final_norm;    // [H]
  at::Tensor lm_head;       // [V, H]; the same tensor as embed_tokens when tied
  std::vector<DecoderLayerWeights> layers;
};

// Static KV cache: one buffer per role for all layers, [L, n_kv, capacity, head_dim]. `length` is the
// number of slots in use; rollback only moves it. While nothing is compressed slot i holds position i;
// a compressed cache (src/compress) records each slot's absolute position in `slot_positions`, keeps
// slots in position order, and may carry a per-slot attention bias and an attention-mass accumulator.
struct KVCache {
  at::Tensor k, v;
  int64_t length = 0;
  std::vector<int64_t> slot_positions;  // empty: identity (slot i = position i)
  at::Tensor key_bias;                  // fp32 [L, n_kv, capacity] or undefined
  at::Tensor received_mass;             // fp32 [L, n_kv, capacity] or undefined (H2O-style scores)
  // With received_mass, after a forward with may_roll_back: its token rows' shares of it, fp32 [L, n_kv, T, slots
  // then], and the position of its first row, so that rollback takes back what the rows it drops gave (a verify's
  // rejected draft tokens are not queries of the sequence: H2O counts the committed tokens' attention, as the
  // fidelity replay does). Undefined after any other forward and after a compaction.
  at::Tensor last_rows_mass;
  int64_t last_rows_position = 0;
  int64_t capacity() const { return k.defined() ? k.size(2) : 0; }
  // One past the last committed position.
  int64_t next_position() const {
    return slot_positions.empty() ? length : (length > 0 ? slot_positions[length - 1] + 1 : 0);
  }
  // Number of slots holding positions before `position`.
  int64_t slot_of(int64_t position) const;
  // Keeps exactly the slots of positions < `position` (must be <= next_position()); with received_mass, subtracts the
  // mass the last forward's rows at positions >= `position` gave (once: rows of earlier forwards are not tracked).
  void rollback(int64_t position);
};
KVCache make_kv_cache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity, at::ScalarType dtype,
                      at::Device device);

// Beacon latents fused into a forward (compression-design.md §7.2, §7.8): extra input rows after the
// tokens, given as embeddings, each at the absolute position of the span it replaces. Latent j attends
// to every cached slot (its own raw span included) and to latents 0..j; the token rows attend to all
// latents but not to `hidden_slots`, the raw spans the latents replace. The latents' K/V land in the
// slots after the tokens' (slot_positions = `positions`, so the slots are briefly out of position
// order); the compressor moves them into place and frees the raw spans right after the forward.
struct LatentRows {
  at::Tensor embeds;                                      // [n, H] in the compute dtype
  std::vector<int64_t> positions;                         // n absolute positions
  std::vector<std::pair<int64_t, int64_t>> hidden_slots;  // slot ranges [begin, end) of committed context
  int64_t count() const { return static_cast<int64_t>(positions.size()); }
};

struct ForwardOptions {
  bool all_logits = false;                 // logits for every row, else for the last row only
  std::vector<int64_t> tap_layers;         // 0-based layers whose raw outputs are concatenated into `taps`
  bool keep_hidden_states = false;         // HF-style hidden_states tuple (embedding, layer outputs, final norm)
  const LatentRows* latents = nullptr;     // fused beacon latents; logits and taps stay token rows only
  // A verify, whose rows past the accepted ones a rollback drops: with received_mass, each token row's share of it is
  // kept for that rollback (KVCache::last_rows_mass). Other forwards keep none: a prefill's would be L n_kv T^2 floats.
  bool may_roll_back = false;
};

struct ForwardOutput {
  at::Tensor logits;                       // fp32 [rows, V]
  at::Tensor taps;                         // [T, n_taps * H] in the compute dtype, if requested
  std::vector<at::Tensor> hidden_states;   // L+1 entries when requested, as transformers returns them
};

class Qwen3Model {
 public:
  // Loads an HF directory; every tensor must be present with its shape and every file tensor used.
  static Qwen3Model load(const std::string& dir, at::ScalarType dtype, at::Device device);
  Qwen3Model(Qwen3Config config, Qwen3Weights weights, at::ScalarType dtype, at::Device device);

  // Runs tokens `ids` (int64 [T] on device) at positions start .. start+T-1 with `cache` holding
  // positions 0 .. start-1. Writes their K/V and sets cache.length = start + T (+ fused latents).
  ForwardOutput forward(const at::Tensor& ids, int64_t start, KVCache& cache, const ForwardOptions& options) const;

  // A cache for `capacity` positions (at most max_position_embeddings) plus `extra_slots` slots for
  // rows that hold no new position (fused beacon latents before their raw units are freed).
  KVCache make_cache(int64_t capacity, int64_t extra_slots = 0) const;
  // Embedding rows and the LM head, shared with the DFlash draft.
  at::Tensor embed(const at::Tensor& ids) const;
  at::Tensor lm_head_logits(const at::Tensor& normed_hidden) const;  // fp32 [rows, V]
  const ops::RopeTable& rope() const { return rope_; }

  const Qwen3Config& config() const { return config_; }
  const Qwen3Weights& weights() const { return weights_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }

 private:
  Qwen3Config config_;
  Qwen3Weights weights_;
  at::ScalarType dtype_;
  at::Device device_;
  ops::RopeTable rope_;
};

// "cpu" | "cuda" | "cuda:N" | "auto" (the commands' default: CUDA where this build and machine have a GPU, as
// llama.cpp offloads and vLLM runs, else the CPU) -> device. Errors name the flag.
at::Device parse_device(const std::string& name, const std::string& flag);
// "f32" | "bf16" | "f16" | "auto" (the default: bf16 on CUDA, the checkpoints' own and the fast path's, f32 on the
// CPU) -> the compute dtype on `device`. Errors name the flag.
at::ScalarType parse_compute_dtype(const std::string& name, at::Device device, const std::string& flag);
// "f32" | "bf16" | "f16": the name reports give a compute dtype.
std::string compute_dtype_name(at::ScalarType dtype);
// Fails naming `flag` where this LibTorch cannot run the models' matrix products in `dtype` on `device` (float16 on
// the CPU in Debian's LibTorch 1.13: compat::kCpuHalfMatmul).
void check_dtype_on_device(at::ScalarType dtype, at::Device device, const std::string& flag);

}  // namespace specpress::model
