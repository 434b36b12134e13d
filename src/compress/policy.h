// policy.h — accepted-span compression policy (compression-design.md §7.1, §7.3): which committed
// tokens stay raw (attention sinks, the prompt, a recent window of W generated tokens) and how a span
// that ages out of the window is replaced in the target's KV cache: a training-free control (drop,
// keep-last, mean-merge, top-attention, window-only) or the learned beacon latent (beacon.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace specpress::compress {

enum class Method { kNone, kDrop, kKeepLast, kMeanMerge, kTopAttention, kWindowOnly, kBeacon };

class BeaconCompressor;

struct Policy {
  Method method = Method::kNone;
  int64_t sinks = 4;          // first positions never compressed (StreamingLLM sinks)
  bool keep_prompt = true;    // the whole prompt stays raw
  int64_t window = 64;        // most recent generated tokens kept raw
  int64_t merge_tokens = 0;   // 0: one unit per verify-step span; m > 0: units of m aged tokens
  std::shared_ptr<const BeaconCompressor> beacon;  // kBeacon: the trained compressor
  std::string beacon_dir;     // where it was loaded from (reports)
  // Which knobs were set by the command line (add_compression_flags clears those not given): resolve_compress gives a
  // beacon compressor's trained values to the others, so that `--compress DIR` alone runs the policy it learned.
  struct KnobsGiven {
    bool sinks = true, window = true, merge_tokens = true;
  } given;
  bool enabled() const { return method != Method::kNone; }
};

// "none", "drop", "keep-last", "mean-merge", "top-attention", "window-only"; errors name `flag`.
// ("beacon" is not a name: the learned method comes from a checkpoint, see beacon.h.)
Method parse_method(const std::string& name, const std::string& flag);
// Whether `name` is one of those names.
bool is_method_name(const std::string& name);
const char* method_name(Method method);
// Validates ranges; errors name the flags (--compress-window, --compress-sinks, --compress-merge).
void validate(const Policy& policy);
// A note for the user where `policy` can free no KV slot: units of one token (--compress-merge 1, or 0 where each
// forward commits one token, as plain decoding without a draft does), each replaced by a slot of its own. Else empty.
std::string no_saving_note(const Policy& policy, bool one_token_a_forward);
// {"window", "sinks", "merge_tokens"}: the knobs a compressor is trained and run with.
nlohmann::ordered_json policy_knobs_json(const Policy& policy);
// {"method", "window", "sinks", "merge_tokens"} (+ "checkpoint" for the beacon) for reports.
nlohmann::ordered_json policy_json(const Policy& policy);

}  // namespace specpress::compress
