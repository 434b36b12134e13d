#!/usr/bin/env python3
"""hf_dflash_cycle_bench.py — the DFlash reference loop's cycle time in PyTorch eager (GPU machine), the baseline of
issue 6's "15x per DFlash cycle" target, measured on the same GPU as bench/fast_perf.cpp.

What it runs: a random-weight Qwen3ForCausalLM at the Qwen3-4B/8B shapes (bf16, sdpa, HF DynamicCache) and a
random-weight DFlash draft at the published 4B/8B draft shapes (5 layers, block 16, taps [1, 9, 17, 25, 33]),
driven by the speculative loop of ../shared/docs/dflash-spec.md §3.3 at temperature 0. The draft module and the
loop are written here from that spec (§2.2, §2.3, §3) after reading z-lab/dflash `dflash/model.py`; they make the
same library calls per cycle as the reference does:
  - draft: the target's embedding of the block, fc + hidden_norm over the new context rows, per layer q/k/v/o
    projections on the block and k/v on the context, per-head q/k RMSNorm, rotate-half RoPE, DynamicCache.update,
    transformers' sdpa attention function (non-causal), Qwen3MLP; final norm; the target's lm_head on the last
    15 rows; the draft cache cropped back to the committed length;
  - verify: the target's 16-token forward with output_hidden_states=True, argmax, the accepted length through
    cumprod(...).sum().item() (a host sync, as in the reference), the stop-token check, the target cache cropped,
    the committed rows' features concatenated for the next draft call.
torch's cuDNN attention backend is off by default (--cudnn-sdpa): with torch 2.11 on an H200 sdpa picks it, and in
this loop it spent 2.77 ms of host time per attention call (41 a cycle; the torch profiler's
aten::_cudnn_attention_forward) and made the cycle 2-3x longer, for reasons not established (docs/PERF.md,
fourteenth pass). Off, sdpa takes the flash or memory-efficient kernels, and the baseline is the faster one.
With random weights almost nothing is accepted, so each cycle commits one token and feeds one context row to the
draft (a trained pair feeds about tau rows); the cycle's kernel count and host work do not depend on that.

Prints one JSON line: the median and mean cycle over --cycles timed cycles (after --warmup), each timed from the
cycle's start to its end with a device sync at both ends; then the median phases of --phase-cycles more cycles with
a sync between phases (draft, the target's verify forward, the rest), and the target's 16-token forward alone with and
without output_hidden_states.

Usage: python3 bench/hf_dflash_cycle_bench.py --shape 4B [--context 512] [--cycles 20] [--warmup 3] [--phase-cycles 10]
       [--cudnn-sdpa off|on]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers
from torch import nn
from transformers import DynamicCache, Qwen3ForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_decode_bench import (SHAPES, add_cudnn_sdpa_flag, apply_cudnn_sdpa, crop_to, median_ms,  # noqa: E402
                             qwen3_config, sdpa_backends)

TAPS = [1, 9, 17, 25, 33]  # the published 4B/8B drafts' target_layer_ids (dflash-spec.md §2.1)
MASK_ID = 151669
BLOCK = 16
DRAFT_LAYERS = 5


class DraftAttention(nn.Module):
    """One draft layer's attention (dflash-spec.md §2.3): block queries over cached context K/V + block K/V."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx, self.head_dim = layer_idx, cfg.head_dim
        self.num_key_value_groups = cfg.num_attention_heads // cfg.num_key_value_heads  # read by the sdpa function
        self.is_causal = False
        self.scaling = cfg.head_dim ** -0.5
        h, nq, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(h, nq * hd, bias=False)
        self.k_proj = nn.Linear(h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nq * hd, h, bias=False)
        self.q_norm = Qwen3RMSNorm(hd, eps=cfg.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(hd, eps=cfg.rms_norm_eps)

    def forward(self, x, ctx, cos, sin, cache):
        b, q_len, _ = x.shape
        ctx_len = ctx.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, q_len, -1, self.head_dim)).transpose(1, 2)
        k = torch.cat([self.k_proj(ctx), self.k_proj(x)], dim=1).view(b, ctx_len + q_len, -1, self.head_dim)
        v = torch.cat([self.v_proj(ctx), self.v_proj(x)], dim=1).view(b, ctx_len + q_len, -1, self.head_dim)
        k = self.k_norm(k).transpose(1, 2)
        v = v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, ctx_len + q_len, hd]; q takes the last q_len
        q = q * cos[..., -q_len:, :] + rotate_half(q) * sin[..., -q_len:, :]
        k = k * cos + rotate_half(k) * sin
        k, v = cache.update(k, v, self.layer_idx)
        out, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](self, q, k, v, None, dropout=0.0, scaling=self.scaling)
        return self.o_proj(out.reshape(b, q_len, -1))


class DraftLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.input_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg, layer_idx)
        self.post_attention_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = Qwen3MLP(cfg)

    def forward(self, x, ctx, cos, sin, cache):
        x = x + self.self_attn(self.input_layernorm(x), ctx, cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Draft(nn.Module):
    """The DFlash draft (dflash-spec.md §2.1-2.2): no embedding and no head of its own."""

    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(DraftLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(cfg)
        self.fc = nn.Linear(len(TAPS) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, noise, target_hidden, position_ids, cache):
        ctx = self.hidden_norm(self.fc(target_hidden))  # once, the same for every layer
        cos, sin = self.rotary_emb(noise, position_ids)
        h = noise
        for layer in self.layers:
            h = layer(h, ctx, cos, sin, cache)
        return self.norm(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4B", choices=sorted(SHAPES))
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--phase-cycles", type=int, default=10)
    add_cudnn_sdpa_flag(ap)
    args = ap.parse_args()
    # at least one warm-up cycle: the first draft call projects the whole prompt's context rows
    for flag, least in (("context", 1), ("cycles", 1), ("warmup", 1), ("phase_cycles", 0)):
        if getattr(args, flag) < least:
            ap.error(f"--{flag.replace('_', '-')} must be at least {least}")
    apply_cudnn_sdpa(args)
    cfg = qwen3_config(args.shape)
    dcfg = qwen3_config(args.shape, num_hidden_layers=DRAFT_LAYERS)
    torch.manual_seed(0)
    with torch.device("cuda"):
        target = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
        draft = Draft(dcfg)
        for name, p in draft.named_parameters():
            if name.endswith("proj.weight") or name == "fc.weight":
                nn.init.normal_(p, std=0.02)
        draft = draft.to(torch.bfloat16).eval()
    embed, lm_head = target.get_input_embeddings(), target.lm_head
    stop = torch.tensor([151645], device="cuda")  # <|im_end|>; random weights never stop in practice

    n_cycles = args.warmup + args.cycles
    N = args.context
    max_length = N + (n_cycles + args.phase_cycles) * BLOCK + 1  # room for every cycle even at full acceptance
    times, accepted = [], []
    with torch.inference_mode():
        output_ids = torch.full((1, max_length + BLOCK), MASK_ID, dtype=torch.long, device="cuda")
        position_ids = torch.arange(output_ids.shape[1], device="cuda").unsqueeze(0)
        tcache, dcache = DynamicCache(), DynamicCache()
        prompt = torch.randint(0, 150000, (1, N), device="cuda")
        out = target(prompt, position_ids=position_ids[:, :N], past_key_values=tcache, use_cache=True,
                     logits_to_keep=1, output_hidden_states=True)
        output_ids[:, :N] = prompt
        output_ids[:, N] = out.logits[:, -1].argmax(-1)
        target_hidden = torch.cat([out.hidden_states[l + 1] for l in TAPS], dim=-1)
        start = N
        # The timed cycles first, then --phase-cycles more with a device sync between the phases (draft; the
        # target's verify forward; the acceptance, cache crops and features), for where a cycle's time goes.
        phases = {"draft": [], "verify_forward": [], "accept": []}
        for cycle in range(n_cycles + args.phase_cycles):
            timed_phases = cycle >= n_cycles
            marks = []

            def mark():
                if timed_phases:
                    torch.cuda.synchronize()
                    marks.append(time.perf_counter())

            torch.cuda.synchronize()
            t0 = time.perf_counter()
            block = output_ids[:, start:start + BLOCK].clone()  # [bonus, MASK x 15]
            h = draft(embed(block), target_hidden, position_ids[:, start - target_hidden.shape[1]:start + BLOCK],
                      dcache)[:, 1 - BLOCK:, :]
            crop_to(dcache, start)  # drop the block's K/V: keep the context 0..start-1
            block[:, 1:] = lm_head(h).argmax(-1)
            mark()
            out = target(block, position_ids=position_ids[:, start:start + BLOCK], past_key_values=tcache,
                         use_cache=True, output_hidden_states=True)
            mark()
            posterior = out.logits.argmax(-1)
            a = (block[:, 1:] == posterior[:, :-1]).cumprod(dim=1).sum(dim=1)[0].item()
            output_ids[:, start:start + a + 1] = block[:, :a + 1]
            output_ids[:, start + a + 1] = posterior[:, a]
            produced = a + 1
            hit = torch.isin(output_ids[0, start + 1:start + produced + 1], stop).nonzero(as_tuple=True)[0]
            if hit.numel() > 0:
                produced = hit[0].item() + 1
            start += produced
            crop_to(tcache, start)
            target_hidden = torch.cat([out.hidden_states[l + 1] for l in TAPS], dim=-1)[:, :produced, :]
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            if timed_phases:
                phases["draft"].append((marks[0] - t0) * 1e3)
                phases["verify_forward"].append((marks[1] - marks[0]) * 1e3)
                phases["accept"].append((t1 - marks[1]) * 1e3)
            elif cycle >= args.warmup:
                times.append((t1 - t0) * 1e3)
                accepted.append(produced)
        # The target's 16-token forward alone over the same cache, with and without the hidden states the loop
        # asks for (hf_decode_bench.py times it without).
        def forward16(hidden):
            target(output_ids[:, start:start + BLOCK], position_ids=position_ids[:, start:start + BLOCK],
                   past_key_values=tcache, use_cache=True, output_hidden_states=hidden)
            crop_to(tcache, start)

        forward16_ms = {k: median_ms(lambda: forward16(v), 10) for k, v in (("hidden", True), ("plain", False))}
    print(json.dumps({"shape": args.shape, "context": args.context, "cycles": len(times), "warmup": args.warmup,
                      "ref_cycle_ms": statistics.median(times), "ref_cycle_mean_ms": statistics.fmean(times),
                      "ref_cycle_min_ms": min(times), "ref_cycle_max_ms": max(times),
                      "tokens_per_cycle": statistics.fmean(accepted),
                      "phase_cycles": args.phase_cycles,
                      "phase_median_ms": {k: statistics.median(v) for k, v in phases.items() if v},
                      "forward16_ms": forward16_ms,
                      "sdpa_backends": sdpa_backends(), "block": BLOCK, "draft_layers": DRAFT_LAYERS,
                      "transformers": transformers.__version__, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
