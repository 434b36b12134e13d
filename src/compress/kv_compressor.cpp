// kv_compressor.cpp — span tracking, the training-free replacements and cache compaction (see
// kv_compressor.h). All cache edits are plain ATen ops on the static buffers, CPU or CUDA.
#include "compress/kv_compressor.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "compress/beacon.h"
#include "core/error.h"

namespace specpress::compress {
namespace {

// Inverse of the NeoX rotation: x = y*cos - rotate_half(y)*sin, with y, cos, sin broadcastable.
at::Tensor unrotate(const at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = y.size(-1) / 2;
  at::Tensor rotated = at::cat({-y.narrow(-1, half, half), y.narrow(-1, 0, half)}, -1);
  return y * cos - rotated * sin;
}
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace

KVCompressor::KVCompressor(const Policy& policy, const model::Qwen3Model& target, int64_t prompt_tokens)
    : policy_(policy), target_(&target), tracker_(policy, prompt_tokens) {
  validate(policy_);
}

int64_t KVCompressor::reserve(int64_t max_commit) {
  max_commit_ = max_commit;
  return policy_.method == Method::kBeacon ? max_commit : 0;
}

// With units of m >= 1 tokens, the slots held when a forward starts are at most: the raw head (the prompt and the
// sinks); a slot for each compressed unit (generated / m; drop keeps none; window-only evicts down to that count);
// the raw generated tokens, which are the window's units (the oldest ends inside the window, so it starts less than
// m before it) and the partial unit, fewer than W + m together; for the beacon also the units the last commit aged,
// raw until this forward fuses their latents: each ended after the previous commit's end less W, so with a commit of
// at most B tokens the raw tokens are at most W + m + B - 1 (the controls' W + m - 1, and the bound's W + m, spare
// one). The forward adds its B token rows (the latents come on top, reserve()). Units of a verify span each (m = 0)
// can be single tokens, so they bound nothing. test_compress and test_beacon check the bound against caches of every
// position.
int64_t KVCompressor::cache_slots(int64_t positions, int64_t max_commit) {
  stats_.cache_positions = positions;
  const int64_t m = policy_.merge_tokens;
  if (!policy_.enabled() || m == 0) return positions;
  const int64_t head = tracker_.raw_head(), generated = std::max<int64_t>(positions - head, 0);
  const int64_t aged_raw = policy_.method == Method::kBeacon ? std::max<int64_t>(max_commit - 1, 0) : 0;
  const int64_t bound = head + generated / m + policy_.window + m + max_commit + aged_raw;
  return std::min(positions, bound);
}

const std::vector<int64_t>& KVCompressor::feature_layers() const {
  return policy_.method == Method::kBeacon ? policy_.beacon->config().feature_layers : CommitObserver::feature_layers();
}

const model::LatentRows* KVCompressor::pending_latents() const {
  return pending_.count() == 0 ? nullptr : &pending_;
}

int64_t KVCompressor::slot_bytes(const model::KVCache& cache) {
  return 2 * cache.k.size(0) * cache.k.size(1) * cache.k.size(3) * static_cast<int64_t>(cache.k.element_size());
}

void KVCompressor::ensure_slot_positions(model::KVCache& cache) {
  if (!cache.slot_positions.empty()) return;
  cache.slot_positions.resize(cache.capacity());
  for (int64_t i = 0; i < cache.capacity(); ++i) cache.slot_positions[i] = i;
}

void KVCompressor::on_cache_created(model::KVCache& cache) {
  if (stats_.positions != 0 || pending_.count() != 0)
    fail("internal: a KVCompressor serves one generation; make a new one for the next");
  if (policy_.enabled()) make_policy_buffers(cache);
  stats_.cache_capacity = cache.capacity();
  stats_.kv_bytes_per_slot = slot_bytes(cache);
  for (const at::Tensor* t : {&cache.k, &cache.v, &cache.key_bias, &cache.received_mass, &feature_rows_, &id_rows_})
    if (t->defined()) stats_.cache_bytes += t->numel() * t->element_size();
}

void KVCompressor::make_policy_buffers(model::KVCache& cache) {
  ensure_slot_positions(cache);
  auto f32 = cache.k.options().dtype(at::kFloat);
  const auto shape = std::vector<int64_t>{cache.k.size(0), cache.k.size(1), cache.capacity()};
  if (policy_.method == Method::kMeanMerge) cache.key_bias = at::zeros(shape, f32);
  if (policy_.method == Method::kTopAttention) cache.received_mass = at::zeros(shape, f32);
  if (policy_.method == Method::kBeacon) {
    const int64_t largest_unit = std::max(policy_.merge_tokens, max_commit_);
    ring_ = max_commit_ > 0 ? std::min(cache.capacity(), policy_.window + largest_unit + max_commit_ + 1) : cache.capacity();
    feature_rows_ = at::zeros({ring_, policy_.beacon->config().feature_dim()}, cache.k.options());
    id_rows_ = at::zeros({ring_}, cache.k.options().dtype(at::kLong));
    stats_.feature_buffer_bytes = feature_rows_.numel() * feature_rows_.element_size();
  }
}

void KVCompressor::on_commit(model::KVCache& cache, const decode::CommittedSpan& span) {
  stats_.peak_slots = std::max(stats_.peak_slots, cache.length);
  stats_.positions = cache.next_position();
  stats_.slots = cache.length;
  stats_.events = done_.events;
  stats_.tokens_compressed = done_.tokens_compressed;
  stats_.slots_freed = done_.slots_freed;
  stats_.overhead_ms = done_.overhead_ms;
  if (!policy_.enabled()) return;
  auto t0 = std::chrono::steady_clock::now();
  if (cache.slot_positions.empty()) fail("internal: KV compressor attached after the cache was created");
  if (span.end > cache.next_position())
    fail("internal: commit of positions {}..{} not in the KV cache", span.begin, span.end - 1);
  if (policy_.method == Method::kBeacon) {
    const int64_t n = span.end - span.begin;
    if (!span.features.defined() || span.features.size(0) != n || static_cast<int64_t>(span.ids.size()) != n)
      fail("internal: the beacon compressor needs the ids and features of every committed token");
    at::Tensor rows = at::arange(span.begin, span.end, id_rows_.options()).remainder(ring_);
    feature_rows_.index_copy_(0, rows, span.features.to(feature_rows_.scalar_type()));
    id_rows_.index_copy_(0, rows, at::tensor(span.ids, at::kLong).to(id_rows_.device()));
  }
  const std::vector<Unit> aged = tracker_.commit(span.begin, span.end);
  const int64_t next = cache.next_position();
  if (policy_.method == Method::kWindowOnly) {
    for (const Unit& unit : aged) {
      ++units_done_;
      tokens_in_units_ += unit.size();
    }
    // StreamingLLM at the memory a one-slot-per-unit policy would use now: sinks + the most recent tokens.
    if (!aged.empty()) evict_to_budget(cache, next - tokens_in_units_ + units_done_);
  } else if (policy_.method == Method::kBeacon) {
    if (!aged.empty()) queue_beacons(cache, aged);
  } else {
    for (const Unit& unit : aged) compress_unit(cache, unit);
  }
  if (!aged.empty()) stats_.event_positions.push_back(next);
  done_.overhead_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void KVCompressor::queue_beacons(model::KVCache& cache, const std::vector<Unit>& units) {
  const int64_t E = static_cast<int64_t>(units.size());
  int64_t n_max = 1;
  for (const Unit& u : units) n_max = std::max(n_max, u.size());
  std::vector<int64_t> rows(E * n_max, 0), lengths;
  for (int64_t e = 0; e < E; ++e) {
    const Unit& u = units[e];
    const int64_t s0 = cache.slot_of(u.begin);
    if (s0 + u.size() > cache.length || cache.slot_positions[s0] != u.begin ||
        cache.slot_positions[s0 + u.size() - 1] != u.end - 1)
      fail("internal: span {}..{} is not raw and contiguous in the KV cache", u.begin, u.end - 1);
    if (u.begin < stats_.positions - ring_)  // a row the ring has overwritten
      fail("internal: unit {}..{} is older than the beacon's feature ring of {} positions", u.begin, u.end - 1, ring_);
    for (int64_t i = 0; i < u.size(); ++i) rows[e * n_max + i] = (u.begin + i) % ring_;
    lengths.push_back(u.size());
    pending_.positions.push_back(u.end - 1);
    pending_.hidden_slots.emplace_back(s0, s0 + u.size());
  }
  const at::Device device = cache.k.device();
  const BeaconCompressor& beacon = *policy_.beacon;
  at::Tensor embeds = beacon_embed_rows(beacon.config(), beacon.weights(), *target_, feature_rows_, id_rows_,
                                        at::tensor(rows, at::kLong).view({E, n_max}).to(device),
                                        at::tensor(lengths, at::kLong).to(device))
                          .to(cache.k.scalar_type());
  pending_.embeds = pending_.embeds.defined() ? at::cat({pending_.embeds, embeds}) : embeds;
}

void KVCompressor::after_forward(model::KVCache& cache) {
  auto t0 = std::chrono::steady_clock::now();
  const int64_t n_lat = pending_.count();
  if (n_lat == 0) return;
  // The forward left the latents' K/V in the last n_lat slots; each takes the place of its unit.
  at::Tensor k_lat = cache.k.narrow(2, cache.length - n_lat, n_lat).clone();
  at::Tensor v_lat = cache.v.narrow(2, cache.length - n_lat, n_lat).clone();
  std::vector<int64_t> order(n_lat);
  for (int64_t i = 0; i < n_lat; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return pending_.hidden_slots[a].first > pending_.hidden_slots[b].first; });
  for (int64_t i : order) {  // last unit first, so earlier slot ranges stay where they were
    const auto [s0, s1] = pending_.hidden_slots[i];
    cache.k.select(2, s0).copy_(k_lat.select(2, i));
    cache.v.select(2, s0).copy_(v_lat.select(2, i));
    cache.slot_positions[s0] = pending_.positions[i];
    compact(cache, s0, s1 - s0, 1);
    done_.events += 1;
    done_.tokens_compressed += s1 - s0;
  }
  cache.length -= n_lat;  // the latents' own slots, now at the end again
  pending_ = model::LatentRows{};
  done_.overhead_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void KVCompressor::compress_unit(model::KVCache& cache, const Unit& unit) {
  const int64_t n = unit.end - unit.begin;
  const int64_t s0 = cache.slot_of(unit.begin);
  if (s0 + n > cache.length || cache.slot_positions[s0] != unit.begin || cache.slot_positions[s0 + n - 1] != unit.end - 1)
    fail("internal: span {}..{} is not raw and contiguous in the KV cache", unit.begin, unit.end - 1);
  const int64_t last = unit.end - 1;
  at::Tensor k_span = cache.k.narrow(2, s0, n), v_span = cache.v.narrow(2, s0, n);  // [L, n_kv, n, hd]
  switch (policy_.method) {
    case Method::kDrop:
      compact(cache, s0, n, 0);
      break;
    case Method::kKeepLast:
      cache.k.select(2, s0).copy_(cache.k.select(2, s0 + n - 1));
      cache.v.select(2, s0).copy_(cache.v.select(2, s0 + n - 1));
      cache.slot_positions[s0] = last;
      compact(cache, s0, n, 1);
      break;
    case Method::kMeanMerge: {
      // Un-rotate keys at their own positions, average, restore the mean key norm (k_norm keeps keys at a
      // fixed scale; an average of directions is shorter), re-rotate at the span's last position, and bias
      // the slot by log n so it can draw the attention mass n tokens drew.
      const model::Qwen3Model& t = *target_;
      auto pos = at::arange(unit.begin, unit.end, at::TensorOptions().dtype(at::kLong).device(cache.k.device()));
      at::Tensor cos = t.rope().cos.index_select(0, pos).view({1, 1, n, -1});
      at::Tensor sin = t.rope().sin.index_select(0, pos).view({1, 1, n, -1});
      at::Tensor raw = unrotate(k_span.to(at::kFloat), cos, sin);             // [L, n_kv, n, hd]
      at::Tensor mean_k = raw.mean(2, /*keepdim=*/true);
      at::Tensor target_norm = raw.norm(2, -1, /*keepdim=*/true).mean(2, /*keepdim=*/true);
      mean_k = mean_k * (target_norm / mean_k.norm(2, -1, /*keepdim=*/true).clamp_min(1e-12));
      at::Tensor last_pos = at::full({1}, last, pos.options());
      at::Tensor k_new = rotate(mean_k, t.rope().cos.index_select(0, last_pos).view({1, 1, 1, -1}),
                                t.rope().sin.index_select(0, last_pos).view({1, 1, 1, -1}));
      at::Tensor v_new = v_span.to(at::kFloat).mean(2, /*keepdim=*/true);
      cache.k.narrow(2, s0, 1).copy_(k_new);
      cache.v.narrow(2, s0, 1).copy_(v_new);
      cache.key_bias.narrow(2, s0, 1).fill_(std::log(static_cast<double>(n)));
      cache.slot_positions[s0] = last;
      compact(cache, s0, n, 1);
      break;
    }
    case Method::kTopAttention: {
      // H2O/SnapKV: per layer and KV head keep the span token that received the most attention so far.
      at::Tensor mass = cache.received_mass.narrow(2, s0, n);                   // [L, n_kv, n]
      at::Tensor best = mass.argmax(2, /*keepdim=*/true);                        // [L, n_kv, 1]
      at::Tensor idx = best.unsqueeze(-1).expand({cache.k.size(0), cache.k.size(1), 1, cache.k.size(3)});
      at::Tensor k_new = k_span.gather(2, idx), v_new = v_span.gather(2, idx);
      at::Tensor m_new = mass.gather(2, best);
      cache.k.narrow(2, s0, 1).copy_(k_new);
      cache.v.narrow(2, s0, 1).copy_(v_new);
      cache.received_mass.narrow(2, s0, 1).copy_(m_new);
      cache.slot_positions[s0] = last;
      compact(cache, s0, n, 1);
      break;
    }
    default:
      fail("internal: compress_unit with method {}", method_name(policy_.method));
  }
  done_.events += 1;
  done_.tokens_compressed += n;
}

void KVCompressor::evict_to_budget(model::KVCache& cache, int64_t budget) {
  const int64_t sinks = std::min(policy_.sinks, cache.length);
  const int64_t excess = cache.length - std::max(budget, sinks);
  if (excess <= 0) return;
  compact(cache, sinks, excess, 0);
  done_.events += 1;
  done_.tokens_compressed += excess;
}

void KVCompressor::compact(model::KVCache& cache, int64_t s0, int64_t n, int64_t keep) {
  const int64_t tail = cache.length - (s0 + n);
  if (tail > 0) {
    auto move_left = [&](at::Tensor& t) {
      if (t.defined()) t.narrow(2, s0 + keep, tail).copy_(t.narrow(2, s0 + n, tail).clone());
    };
    move_left(cache.k);
    move_left(cache.v);
    move_left(cache.key_bias);
    move_left(cache.received_mass);
    std::copy(cache.slot_positions.begin() + s0 + n, cache.slot_positions.begin() + cache.length,
              cache.slot_positions.begin() + s0 + keep);
  }
  cache.length -= n - keep;
  cache.last_rows_mass = at::Tensor();  // its columns were the slots before this move: no rollback takes it back now
  done_.slots_freed += n - keep;
}

}  // namespace specpress::compress
