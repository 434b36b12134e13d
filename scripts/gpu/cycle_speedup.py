#!/usr/bin/env python3
"""cycle_speedup.py — issue 6's "15x per DFlash cycle" from one device call: the fast path's cycle (fast_perf's JSON,
fast_ms.cycle) against the eager DFlash reference loop's cycle (bench/hf_dflash_cycle_bench.py's JSON lines) at the
same shape and context. Prints one line per shape found in both; exits 1 when a file is missing or malformed, or when
no shape is in both.

Usage: python3 scripts/gpu/cycle_speedup.py PERF_JSON HF_DFLASH_JSONL
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    perf_path, ref_path = sys.argv[1], sys.argv[2]
    try:
        with open(perf_path) as f:
            perf = json.load(f)
        refs = []
        with open(ref_path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    refs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{ref_path}:{n}: not a JSON line ({e}): {line[:200]}")
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"cycle_speedup.py: {e}")
    found = 0
    for ref in refs:
        shape = f"Qwen3-{ref.get('shape')}"
        fast = perf.get(shape, {}).get("fast_ms", {}).get("cycle")
        if fast is None or "ref_cycle_ms" not in ref:
            continue
        if ref.get("context") != perf.get("context"):
            sys.exit(f"{shape}: the reference loop ran at context {ref.get('context')}, "
                     f"fast_perf at {perf.get('context')}")
        found += 1
        print(f"{shape} DFlash cycle at context {perf['context']}: fast path {fast:.3f} ms, eager reference loop "
              f"{ref['ref_cycle_ms']:.2f} ms (median of {ref['cycles']}; mean {ref['ref_cycle_mean_ms']:.2f}, "
              f"min {ref['ref_cycle_min_ms']:.2f}) -> {ref['ref_cycle_ms'] / fast:.1f}x (target 15x)")
    if found == 0:
        sys.exit(f"cycle_speedup.py: no shape with both a fast_ms.cycle in {perf_path} "
                 f"and a ref_cycle_ms in {ref_path}")


if __name__ == "__main__":
    main()
