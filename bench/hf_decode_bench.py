#!/usr/bin/env python3
"""hf_decode_bench.py — HF transformers eager baseline for docs/PERF.md (GPU machine): a random-weight
Qwen3ForCausalLM at the Qwen3-4B/8B shapes in bf16 (sdpa), a `--context`-token prompt prefilled into a
DynamicCache, then the median time of a 1-token forward (decode) and a 16-token forward (verify) over that
cache, cropping it back after each. torch's cuDNN attention backend is off unless --cudnn-sdpa on
(add_cudnn_sdpa_flag). Prints one JSON line.

Usage: python3 bench/hf_decode_bench.py --shape 4B [--context 512] [--iters 20]
"""
import argparse
import json
import time

import torch
import transformers
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

SHAPES = {
    "4B": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "8B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
}


def qwen3_config(shape, **overrides):
    """A Qwen3Config at the real Qwen3-4B/8B shape (random weights come from it), sdpa attention; overrides
    replace fields (e.g. num_hidden_layers for a DFlash draft of that width)."""
    common = dict(vocab_size=151936, rms_norm_eps=1e-6, max_position_embeddings=40960, hidden_act="silu",
                  attention_bias=False)
    if int(transformers.__version__.split(".")[0]) >= 5:
        common["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    else:
        common["rope_theta"] = 1000000.0
    cfg = Qwen3Config(**{**SHAPES[shape], **common, **overrides})
    cfg._attn_implementation = "sdpa"
    return cfg


def crop_to(cache, length):
    """Keeps the first `length` positions of every layer (crop's negative form: how many to drop)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


def add_cudnn_sdpa_flag(ap):
    """--cudnn-sdpa off|on (off by default): torch's cuDNN attention backend, which sdpa prefers on an H200 with
    torch 2.11. In the DFlash reference loop it spent about 2.8 ms of host time per attention call and made the cycle
    2-3x longer (docs/PERF.md, fourteenth pass); off, sdpa takes the flash or memory-efficient kernels. Call
    apply_cudnn_sdpa(args) after parsing."""
    ap.add_argument("--cudnn-sdpa", choices=["off", "on"], default="off",
                    help="torch's cuDNN attention backend for sdpa (default off; see docs/PERF.md, fourteenth pass)")


def apply_cudnn_sdpa(args):
    torch.backends.cuda.enable_cudnn_sdp(args.cudnn_sdpa == "on")


def sdpa_backends():
    return {"cudnn": torch.backends.cuda.cudnn_sdp_enabled(), "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled()}


def median_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4B", choices=sorted(SHAPES))
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--iters", type=int, default=20)
    add_cudnn_sdpa_flag(ap)
    args = ap.parse_args()
    apply_cudnn_sdpa(args)
    cfg = qwen3_config(args.shape)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 150000, (1, args.context + 16), device="cuda")
    with torch.no_grad():
        cache = DynamicCache()
        model(ids[:, :args.context], past_key_values=cache, use_cache=True)

        def step(n):
            model(ids[:, args.context:args.context + n], past_key_values=cache, use_cache=True)
            crop_to(cache, args.context)

        decode = median_ms(lambda: step(1), args.iters)
        verify = median_ms(lambda: step(16), args.iters)
    print(json.dumps({"shape": args.shape, "context": args.context, "hf_decode_ms": decode, "hf_verify16_ms": verify,
                      "sdpa_backends": sdpa_backends(),
                      "transformers": transformers.__version__, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
