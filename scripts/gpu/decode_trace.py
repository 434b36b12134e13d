#!/usr/bin/env python3
"""decode_trace.py — summarise fast_perf --decode-trace's CSV (one decode step, a row a block; kernels/step_trace.h).

A decode layer is five launches in order: qkv GEMV, attention, o GEMV (residual), gate/up GEMV (SwiGLU), down GEMV
(residual); or four, where the o and gate/up GEMVs are one launch (SPECPRESS_GEMV_O_GATE_UP, kernels/gemv_o_gate_up.h),
whose rows also hold the block's grid-barrier arrival and release, x in shared memory and its staged bytes' arrival;
or four, where the gate/up and down GEMVs are the fused MLP (SPECPRESS_GEMV_MLP=1, kernels/gemv_mlp.h, ordered sum),
whose rows hold its phases (gate/up rows done, SwiGLU done, down rows done), its arrival ticket and, for the parts
that add the sums, the wait for the last arrival released.
A GEMV row holds its warps' ends (columns q_ready .. counted, warp 0 .. 3): its block ends with its last warp. The attention's splits past the live length (start and end only) are counted apart, not in its phases. Prints, per kernel and field, the median over the layers of the earliest, median and latest block, in µs after
the layer's qkv GEMV ended (its last warp); then each boundary: when the next kernel's first block started and its
median block's PDL wait returned, after the kernel before it ended; then the o (or fused o + gate/up) kernel's blocks
by index eighth, which shows the last blocks starting only as the attention leaves.
Usage: decode_trace.py FILE.csv [LABEL]
"""
import csv
import statistics
import sys
from collections import defaultdict

FIELDS = ["start", "issued", "waited", "q_ready", "tiles", "partial", "counted", "arrived", "released", "x_ready",
          "staged", "first_warp_end", "phase1", "swiglu", "phase2", "ticket", "part_released", "end"]
MLP_FIELDS = {"q_ready": "phase1", "tiles": "swiglu", "partial": "phase2", "counted": "ticket",
              "x_ready": "part_released"}
WARP_ENDS = ["q_ready", "tiles", "partial", "counted"]  # a GEMV row's warp 0..3 ends
LAYOUTS = {  # the launches of a layer: (names, kinds)
    5: (["qkv", "attention", "o", "gate/up", "down"], ["gemv", "attention", "residual", "swiglu", "residual"]),
    4: (["qkv", "attention", "o+gate/up", "down"], ["gemv", "attention", "o_gate_up", "residual"]),
    "mlp": (["qkv", "attention", "o", "mlp"], ["gemv", "attention", "residual", "mlp"]),
}
NAMES, KINDS = LAYOUTS[5]


def fail(msg):
    sys.exit(f"decode_trace.py: {msg}")


def read(path):
    launches = defaultdict(list)
    idle = defaultdict(int)  # attention splits past the live length, by launch
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["kind"] == "attention" and not row["issued"]:
                    idle[int(row["launch"])] += 1
                    continue
                if row["kind"] == "o_gate_up":  # end: the barrier arrival, last: its release
                    row["arrived"], row["released"] = row["end"], row["last"]
                if row["kind"] == "mlp":  # its phases; last: 1 + its part (0: not a part)
                    for k, name in MLP_FIELDS.items():
                        row[name], row[k] = row[k], ""
                    row["part"] = row["last"]
                    launches[int(row["launch"])].append(row)
                    continue
                if row["kind"] != "attention":
                    ends = [float(row[k]) for k in WARP_ENDS if row[k]]
                    row["end"] = str(max(ends)) if ends else ""
                    row["first_warp_end"] = str(min(ends)) if ends else ""
                    for k in WARP_ENDS:
                        row[k] = ""
                launches[int(row["launch"])].append(row)
    except (OSError, KeyError, ValueError) as e:
        fail(f"{path}: not a --decode-trace CSV ({e})")
    order = sorted(launches)
    global NAMES, KINDS
    n, layout = 5, 5
    if len(order) > 3 and launches[order[3]][0]["kind"] == "mlp":
        n, layout = 4, "mlp"
    elif len(order) > 2 and launches[order[2]][0]["kind"] == "o_gate_up":
        n, layout = 4, 4
    NAMES, KINDS = LAYOUTS[layout]
    if not order or len(order) % n != 0:
        fail(f"{path}: {len(order)} launches, not whole layers of {n}")
    layers = [[launches[i] for i in order[k:k + n]] for k in range(0, len(order), n)]
    for index, layer in enumerate(layers):
        kinds = [rows[0]["kind"] for rows in layer]
        if kinds != KINDS:
            fail(f"{path}: layer {index}'s launches are {kinds}, expected {KINDS}")
    return layers, [idle[i] for i in order[1::n]]


def times(rows, field):
    return sorted(float(r[field]) for r in rows if r.get(field))


def main():
    if len(sys.argv) < 2:
        fail("usage: decode_trace.py FILE.csv [LABEL]")
    layers, idle = read(sys.argv[1])
    label = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    table = defaultdict(lambda: ([], [], []))  # (kernel, field) -> per layer [earliest], [median], [latest]
    refs, combine_end = [], []
    for layer in layers:
        ref = times(layer[0], "end")[-1]
        refs.append(ref)
        for name, rows in zip(NAMES, layer):
            for field in FIELDS:
                v = [(t - ref) / 1000.0 for t in times(rows, field)]
                if v:
                    for j, x in enumerate((v[0], v[len(v) // 2], v[-1])):
                        table[(name, field)][j].append(x)
        last = [(float(r["end"]) - ref) / 1000.0 for r in layer[1] if r["last"] == "1" and r["end"]]
        if last:
            combine_end.append(min(last))
    med = statistics.median
    print(f"== {label}: {len(layers)} layers; µs after the layer's qkv GEMV ended, median over the layers of "
          "[earliest / median / latest block]")
    print("  blocks a launch: " + ", ".join(f"{n} {int(med(len(l[k]) for l in layers))}" for k, n in enumerate(NAMES))
          + f" (and {int(med(idle))} attention splits past the live length)")
    for name in NAMES:
        for field in FIELDS:
            if (name, field) in table:
                lo, mid, hi = (med(x) for x in table[(name, field)])
                print(f"  {name:9s} {field:14s} {lo:8.2f} {mid:8.2f} {hi:8.2f}")
    if combine_end:
        print(f"  attention: the combining blocks' earliest end {med(combine_end):.2f}")
    # boundaries, each kernel after the one before it (the qkv GEMV after the previous layer's down GEMV)
    flat = [rows for layer in layers for rows in layer]
    gaps = defaultdict(lambda: ([], []))
    for k in range(1, len(flat)):
        end = times(flat[k - 1], "end")[-1]
        n = len(NAMES)
        pair = f"{NAMES[(k - 1) % n]} -> {NAMES[k % n]}"
        gaps[pair][0].append((times(flat[k], "start")[0] - end) / 1000.0)
        waited = times(flat[k], "waited")
        gaps[pair][1].append((waited[len(waited) // 2] - end) / 1000.0)
    print("  boundaries, µs after the earlier kernel's end: [first block start / median block's wait released]")
    for pair, (start, waited) in gaps.items():
        print(f"  {pair:20s} {med(start):8.2f} {med(waited):8.2f}")
    # The kernel after the attention, its blocks by index eighth. Blocks are placed in index order, so the last ones
    # are those that wait for the attention's blocks to leave their SMs; for the fused kernel, "o rows written" is its
    # barrier arrival.
    o_field = "arrived" if KINDS[2] == "o_gate_up" else "end"
    eighths = defaultdict(lambda: ([], [], []))
    for layer, ref in zip(layers, refs):
        nb = max(int(r["block"]) for r in layer[2]) + 1
        groups = defaultdict(list)
        for r in layer[2]:
            groups[int(r["block"]) * 8 // nb].append(r)
        for g, group in groups.items():
            for j, field in enumerate(("start", "issued", o_field)):
                v = times(group, field)
                if v:
                    eighths[g][j].append((v[len(v) // 2] - ref) / 1000.0)
    print(f"  {NAMES[2]} blocks by index eighth (median block): start / loads issued / o rows written")
    for g in sorted(eighths):
        print(f"  {NAMES[2]} eighth {g}: " + " ".join(f"{med(x):8.2f}" if x else "       -" for x in eighths[g]))
    if KINDS[-1] == "mlp":  # the fused MLP's tail: its blocks' down rows done (the launch trigger) to its end
        tail, spread = [], []
        for layer in layers:
            phase2, end = times(layer[3], "phase2"), times(layer[3], "end")
            if phase2 and end:
                tail.append((end[-1] - phase2[-1]) / 1000.0)
                spread.append((phase2[-1] - phase2[0]) / 1000.0)
        if tail:
            print(f"  mlp: down rows done, earliest to latest block {med(spread):.2f} µs; latest to the kernel's end "
                  f"{med(tail):.2f} µs (medians)")
    if len(refs) > 1:
        print(f"  a layer (qkv end to the next layer's qkv end): "
              f"{med((b - a) / 1000.0 for a, b in zip(refs, refs[1:])):.2f} µs (median)")


if __name__ == "__main__":
    main()
