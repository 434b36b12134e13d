// policy.cpp — see policy.h.
#include "compress/policy.h"

#include "core/error.h"

namespace specpress::compress {
namespace {
struct Entry {
  Method method;
  const char* name;
};
constexpr Entry kMethods[] = {{Method::kNone, "none"},           {Method::kDrop, "drop"},
                              {Method::kKeepLast, "keep-last"},  {Method::kMeanMerge, "mean-merge"},
                              {Method::kTopAttention, "top-attention"}, {Method::kWindowOnly, "window-only"},
                              {Method::kBeacon, "beacon"}};
}  // namespace

bool is_method_name(const std::string& name) {
  for (const auto& e : kMethods)
    if (name == e.name && e.method != Method::kBeacon) return true;
  return false;
}

Method parse_method(const std::string& name, const std::string& flag) {
  for (const auto& e : kMethods)
    if (name == e.name && e.method != Method::kBeacon) return e.method;
  fail("{}: unknown compression method '{}' (expected none, drop, keep-last, mean-merge, top-attention, window-only, or a directory written by specpress train-compressor)",
       flag, name);
}

const char* method_name(Method method) {
  for (const auto& e : kMethods)
    if (e.method == method) return e.name;
  return "?";
}

void validate(const Policy& p) {
  if (p.sinks < 0) fail("--compress-sinks: must be >= 0, found {}", p.sinks);
  if (p.window < 0 || (p.enabled() && p.window < 1))  // the newest token has no KV entry until its forward
    fail("--compress-window: must be >= 1 (the newest token stays raw until its forward), found {}", p.window);
  if (p.merge_tokens < 0) fail("--compress-merge: must be >= 0 (0 = one unit per verify span), found {}", p.merge_tokens);
  // past any context, and small enough that sums of them (a ring's rows, a budget) cannot overflow
  constexpr int64_t kMost = int64_t{1} << 30;
  for (const auto& [flag, value] : {std::pair{"--compress-sinks", p.sinks}, std::pair{"--compress-window", p.window},
                                    std::pair{"--compress-merge", p.merge_tokens}})
    if (value > kMost)
      fail("{}: must be at most {} (more positions than any context holds), found {}", flag, kMost, value);
  if ((p.method == Method::kBeacon) != (p.beacon != nullptr))
    fail("internal: the beacon method needs exactly its loaded compressor");
}

std::string no_saving_note(const Policy& p, bool one_token_a_forward) {
  // drop removes a unit whole; every other method (the beacon included) keeps one slot a unit
  const bool single_token_units = p.merge_tokens == 1 || (p.merge_tokens == 0 && one_token_a_forward);
  if (!p.enabled() || p.method == Method::kDrop || !single_token_units) return "";
  return fmt::format("note: --compress {}: with --compress-merge {}{} every unit is one token and keeps one KV slot, "
                     "so no slot is freed (give --compress-merge 2 or more)",
                     p.method == Method::kBeacon ? p.beacon_dir : method_name(p.method), p.merge_tokens,
                     p.merge_tokens == 0 ? " (a unit a forward) and no draft (a token a forward)" : "");
}

nlohmann::ordered_json policy_knobs_json(const Policy& p) {
  return {{"window", p.window}, {"sinks", p.sinks}, {"merge_tokens", p.merge_tokens}};
}

nlohmann::ordered_json policy_json(const Policy& p) {
  nlohmann::ordered_json j = {{"method", method_name(p.method)}};
  j.update(policy_knobs_json(p));
  if (p.method == Method::kBeacon) j["checkpoint"] = p.beacon_dir;
  return j;
}

}  // namespace specpress::compress
