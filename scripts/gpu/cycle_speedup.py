#!/usr/bin/env python3
"""cycle_speedup.py — issue 6's "15x per DFlash cycle" from one device call: the fast path's cycle (fast_perf's JSON,
fast_ms.cycle) against the eager DFlash reference loop's cycle (bench/hf_dflash_cycle_bench.py's JSON lines) at the
same shape and context. Prints one line per JSON line whose shape fast_perf measured (with the loop's cuDNN attention
setting), then exits 1 if a file is missing, a line is malformed or at another context, or nothing could be compared.

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
        with open(ref_path) as f:
            lines = f.read().splitlines()
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"cycle_speedup.py: {e}")
    errors, found = [], 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ref = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"{ref_path}:{n}: not a JSON line ({e}): {line[:200]}")
            continue
        shape = f"Qwen3-{ref.get('shape')}"
        fast = perf.get(shape, {}).get("fast_ms", {}).get("cycle")
        if fast is None or "ref_cycle_ms" not in ref:
            errors.append(f"{ref_path}:{n}: {shape}: no fast_ms.cycle in {perf_path} or no ref_cycle_ms in the line")
            continue
        if ref.get("context") != perf.get("context"):
            errors.append(f"{ref_path}:{n}: {shape}: the reference loop ran at context {ref.get('context')}, "
                          f"fast_perf at {perf.get('context')}")
            continue
        found += 1
        cudnn = ref.get("sdpa_backends", {}).get("cudnn")
        backend = "?" if cudnn is None else "on" if cudnn else "off"
        print(f"{shape} DFlash cycle at context {perf['context']}: fast path {fast:.3f} ms, eager reference loop "
              f"(cuDNN attention {backend}) {ref['ref_cycle_ms']:.2f} ms (median of {ref['cycles']}; mean "
              f"{ref['ref_cycle_mean_ms']:.2f}, min {ref['ref_cycle_min_ms']:.2f}) -> {ref['ref_cycle_ms'] / fast:.1f}x "
              f"(target 15x)")
    for e in errors:
        print(e, file=sys.stderr)
    if found == 0:
        errors.append(f"cycle_speedup.py: nothing to compare in {ref_path}")
        print(errors[-1], file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
