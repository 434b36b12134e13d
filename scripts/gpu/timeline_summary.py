#!/usr/bin/env python3
"""timeline_summary.py TRACE.json LABEL — summarises a Kineto Chrome trace of one decode, verify and draft step
(fast_perf --profile MODE --timeline; scripts/gpu/timeline.sh). GPU kernels are split into steps where the
host synchronised between them (a gap of more than STEP_GAP_US). Per step: the span (first start to last end)
and the kernels' summed durations. Per kernel class: count, mean duration, mean start relative to the previous
kernels' end (negative: it started early, under PDL), and the mean and total time it adds to the step (its end
past the previous end). Then the same per position of the repeating layer pattern (medians over the layers), found
without the side kernels (SIDE_CLASSES: the L2 prefetches and the side row factors, which run beside the layers), so
that verify's layers show their pattern too; there, times are against the previous end of the kernels kept. Before
that, each attention's end to the next one's, so that a layer unlike the rest (a tapped one) shows even where the
pattern leaves it out. (The trace's stream ids cannot tell the side kernels apart: a graph's replay spreads even the
main chain over several.)"""
import json
import statistics
import sys
from collections import OrderedDict


STEP_GAP_US = 50.0  # microseconds; inside a step's graph the gaps are a few
SIDE_CLASSES = ("l2_prefetch_kernel", "row_rms_kernel")  # side-stream kernels, left out of the layer pattern


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
    # The profiled steps are separated by host syncs: a gap of more than STEP_GAP_US between one kernel's end and
    # the next one's start. Inside a step's graph the gaps are a few microseconds.
    steps, last_end = [], None
    for start, dur, name in kernels:
        if last_end is None or start - last_end > STEP_GAP_US:
            steps.append([])
            last_end = start + dur
        steps[-1].append((start, dur, name))
        last_end = max(last_end, start + dur)
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
        attention_intervals(ks)
        # the repeating layer pattern without the side kernels: per position, the median duration, start, time added
        n_all = len(ks)
        ks = [k for k in ks if kernel_class(k[2]).split("<")[0] not in SIDE_CLASSES]
        period = layer_period([kernel_class(n) for _, _, n in ks])
        if period is None:
            continue
        off, p, count = period
        side = f", {n_all - len(ks)} side kernels left out" if len(ks) < n_all else ""
        print(f"  per layer ({count} layers of {p} kernels, medians{side}): {'dur':>8s} {'start-prev end':>14s} "
              f"{'adds':>8s}")
        rows = [[] for _ in range(p)]
        prev_end = max((s + d for s, d, _ in ks[:off]), default=ks[0][0])
        for i in range(off, off + p * count):
            s, d, n = ks[i]
            rows[(i - off) % p].append((d, s - prev_end, max(s + d, prev_end) - prev_end))
            prev_end = max(prev_end, s + d)
        for j, r in enumerate(rows):
            med = [statistics.median(x[k] for x in r) for k in range(3)]
            print(f"  {kernel_class(ks[off + j][2])[:48]:48s} {med[0]:8.2f} {med[1]:14.2f} {med[2]:8.2f}")
        print(f"  {'a layer':48s} {'':8s} {'':14s} {sum(statistics.median(x[2] for x in r) for r in rows):8.2f}")


def attention_intervals(ks):
    """Prints each attention's end to the next attention's end (one per layer: layer l's o, gate/up and down products,
    then layer l + 1's qkv product and attention), so that layers unlike the rest (the tapped ones, whose layer pattern
    the medians below may leave out) show up one by one."""
    ends = [s + d for s, d, n in ks if "attention" in kernel_class(n).split("<")[0]]
    if len(ends) < 3:
        return
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    print(f"  attention to attention ({len(gaps)} intervals, median {statistics.median(gaps):.2f}, interval i from "
          f"attention i, counted from 0):")
    for i in range(0, len(gaps), 12):
        print("    " + " ".join(f"{g:6.2f}" for g in gaps[i:i + 12]))


def layer_period(classes):
    """(offset, period, repeats) of the longest run of a repeating kernel pattern (the layers), or None."""
    best = None
    for p in range(2, 17):
        for off in range(0, min(8, len(classes))):
            n = 0
            while off + (n + 1) * p <= len(classes) and classes[off + n * p:off + (n + 1) * p] == classes[off:off + p]:
                n += 1
            if n >= 3 and (best is None or n * p > best[1] * best[2]):
                best = (off, p, n)
    return best


if __name__ == "__main__":
    main()
