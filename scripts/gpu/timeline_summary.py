#!/usr/bin/env python3
"""timeline_summary.py TRACE.json LABEL — summarises a Kineto Chrome trace of one decode, verify and draft step
(fast_perf --profile MODE --timeline; scripts/gpu/timeline.sh). GPU kernels are split into steps at each argmax
kernel (every step ends with one). Per step: the span (first start to last end) and the kernels' summed
durations; per kernel class: count, mean duration, mean start relative to the previous kernels' end (negative:
it started early, under PDL) and the mean and total time it adds to the step (its end past the previous end)."""
import json
import sys
from collections import OrderedDict


def kernel_class(name):
    """'void ns::(anonymous namespace)::gemv_kernel<4, 1, true>(Args)' -> 'gemv_kernel<4, 1, true>'."""
    n = name.replace("(anonymous namespace)::", "")
    if n.startswith("void "):
        n = n[len("void "):]
    head, lt, tmpl = n.split("(")[0].partition("<")
    return head.split("::")[-1] + lt + tmpl


def main():
    path, label = sys.argv[1], sys.argv[2]
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kernels = sorted((float(e["ts"]), float(e["dur"]), e["name"]) for e in events
                     if e.get("cat") == "kernel" and e.get("ph") == "X")
    if not kernels:
        sys.exit(f"{path}: no kernel events (was the CUDA activity recorded?)")
    steps, cur = [], []
    for k in kernels:
        cur.append(k)
        if "argmax" in k[2]:
            steps.append(cur)
            cur = []
    print(f"== {label}: {len(kernels)} kernels, {len(steps)} steps (us)")
    for name, ks in zip(["decode", "verify", "draft"], steps):
        span = max(s + d for s, d, _ in ks) - ks[0][0]
        print(f"{name}: {len(ks)} kernels, span {span:.1f}, summed durations {sum(d for _, d, _ in ks):.1f}")
        classes = OrderedDict()
        prev_end = ks[0][0]
        for s, d, n in ks:
            c = classes.setdefault(kernel_class(n), [0, 0.0, 0.0, 0.0])
            c[0] += 1
            c[1] += d
            c[2] += s - prev_end
            c[3] += max(s + d, prev_end) - prev_end
            prev_end = max(prev_end, s + d)
        print(f"  {'class':58s} {'n':>4s} {'dur':>8s} {'start-prev end':>14s} {'adds':>8s} {'adds total':>10s}")
        for c, (n, dur, gap, add) in sorted(classes.items(), key=lambda kv: -kv[1][3]):
            print(f"  {c[:58]:58s} {n:4d} {dur / n:8.2f} {gap / n:14.2f} {add / n:8.2f} {add:10.1f}")
        # a stretch from the middle of the step, kernel by kernel: start and end relative to its first kernel
        mid = ks[len(ks) // 2:len(ks) // 2 + 12]
        t0, prev_end = mid[0][0], mid[0][0]
        print(f"  middle of the step: {'start':>8s} {'end':>8s} {'start-prev end':>14s}  kernel")
        for s, d, n in mid:
            print(f"  {'':19s} {s - t0:8.2f} {s + d - t0:8.2f} {s - prev_end:14.2f}  {kernel_class(n)[:60]}")
            prev_end = max(prev_end, s + d)


if __name__ == "__main__":
    main()
