#!/usr/bin/env python3
"""persistent_trace.py — summarise the persistent decode kernel's timeline (fast_perf --persistent-trace FILE).

Reads FILE.<shape>.csv (a row a (block, op), kernels::DecodeLayersArgs::trace's fields) and prints, per op kind
(qkv, attention, o, gate_up, down), microseconds summed over the layers of the median over the blocks of:
  wall      from this op's grid-wide release to the next op's (the step's time spent in the op)
  wait      a block's wait for the slowest block at the op's start
  prologue  the op's x load and norm factor (attention: q/k rows staged and transformed)
  body      the rest of the op up to the block's arrival
  starve    consumer warp 0 waiting for a full stage (the weight stream behind the arithmetic)
  blocked   the producer waiting for a free stage to issue this op's tiles (the ring full: the stream stopped)
  lead      how long before the op's release the producer issued its first tile of the op
Cycles are converted to ns with each block's own clock64 / %globaltimer ratio (its last row). The attention's wait
includes the issue of its prefetched K/V loads (stamped before them). The "all" row's wait and lead are plain sums.
Check the printed stamp resolution before trusting sub-microsecond numbers. Standard library only.
Usage: persistent_trace.py FILE.csv [--json OUT]
"""
import csv
import json
import statistics
import sys

KINDS = ["qkv", "attention", "o", "gate_up", "down"]


COLUMNS = ["block", "op", "layer", "kind", "begin_ns", "ready_ns", "prologue_ns", "end_ns", "starve_cycles",
           "first_copy_ns", "blocked_cycles", "last_copy_ns"]


def load(path):
    rows = {}
    clocks = {}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                sys.exit(f"{path}: header {reader.fieldnames}, expected fast_perf --persistent-trace's {COLUMNS}")
            for line, r in enumerate(reader, start=2):
                try:
                    b, op = int(r["block"]), int(r["op"])
                    vals = {k: int(r[k]) for k in COLUMNS[4:]}
                    layer = int(r["layer"])
                except (TypeError, ValueError):
                    sys.exit(f"{path}:{line}: expected integers in every field but kind, found {list(r.values())}")
                if r["kind"] == "clock":
                    clocks[b] = vals
                elif r["kind"] in KINDS:
                    rows[(b, op)] = (r["kind"], layer, vals)
                else:
                    sys.exit(f"{path}:{line}: kind '{r['kind']}', expected one of {KINDS + ['clock']}")
    except OSError as e:
        sys.exit(f"{path}: cannot read it ({e.strerror})")
    if not rows or not clocks:
        sys.exit(f"{path}: no trace rows (expected fast_perf --persistent-trace output)")
    n_ops = 1 + max(op for _, op in rows)
    missing = [(b, op) for b in clocks for op in range(n_ops) if (b, op) not in rows]
    if missing or set(b for b, _ in rows) != set(clocks):
        sys.exit(f"{path}: incomplete: expected every block to have ops 0..{n_ops - 1} and a clock row "
                 f"(first gap: block, op = {missing[0] if missing else 'a block without its clock row'})")
    return rows, clocks


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("--"):
        sys.exit(__doc__)
    path, out_json = args[0], None
    if len(args) == 3 and args[1] == "--json":
        out_json = args[2]
    elif len(args) != 1:
        sys.exit("usage: persistent_trace.py FILE.csv [--json OUT]")
    rows, clocks = load(path)
    blocks = sorted(clocks)
    n_ops = 1 + max(op for _, op in rows)
    # per block: ns a cycle (fields 0-3 of the clock row: begin_ns, ready_ns (clock64), prologue_ns, end_ns (clock64))
    ns_per_cycle = {}
    for b, c in clocks.items():
        dt, dc = c["prologue_ns"] - c["begin_ns"], c["end_ns"] - c["ready_ns"]
        if dt <= 0 or dc <= 0:
            sys.exit(f"{path}: block {b} has no start/end stamps")
        ns_per_cycle[b] = dt / dc
    t0 = min(clocks[b]["begin_ns"] for b in blocks)
    t1 = max(clocks[b]["prologue_ns"] for b in blocks)
    # the stamps' resolution: the smallest non-zero step between two stamps of a block
    res = 10**9
    for b in blocks:
        stamps = sorted({rows[(b, op)][2][f] for op in range(n_ops) for f in ("begin_ns", "ready_ns", "end_ns")})
        res = min([res] + [y - x for x, y in zip(stamps, stamps[1:])])

    def med(xs):
        return statistics.median(xs) if xs else 0.0

    per_kind = {k: {f: 0.0 for f in ["wall", "wait", "prologue", "body", "starve", "blocked", "lead"]} for k in KINDS}
    layers = {k: 0 for k in KINDS}
    for op in range(n_ops):
        kind = rows[(blocks[0], op)][0]
        layers[kind] += 1
        vals = [rows[(b, op)][2] for b in blocks]
        if op + 1 < n_ops:
            nxt = [rows[(b, op + 1)][2]["ready_ns"] for b in blocks]
            wall = med([n - v["ready_ns"] for n, v in zip(nxt, vals)])
        else:
            wall = med([v["end_ns"] - v["ready_ns"] for v in vals])
        acc = per_kind[kind]
        acc["wall"] += wall
        acc["wait"] += med([v["ready_ns"] - v["begin_ns"] for v in vals])
        acc["prologue"] += med([v["prologue_ns"] - v["ready_ns"] for v in vals])
        acc["body"] += med([v["end_ns"] - v["prologue_ns"] for v in vals])
        acc["starve"] += med([v["starve_cycles"] * ns_per_cycle[b] for b, v in zip(blocks, vals)])
        acc["blocked"] += med([v["blocked_cycles"] * ns_per_cycle[b] for b, v in zip(blocks, vals)])
        leads = [v["ready_ns"] - v["first_copy_ns"] for v in vals if v["first_copy_ns"] > 0]
        acc["lead"] += med(leads)
    print(f"{path}: {len(blocks)} blocks, {n_ops} ops, kernel span {(t1 - t0) / 1e3:.1f} us, "
          f"stamp resolution <= {res if res < 10**9 else 'n/a'} ns, "
          f"{statistics.mean(ns_per_cycle.values()):.4f} ns a cycle")
    print("us summed over layers (median over blocks); per layer in brackets")
    cols = ["wall", "wait", "prologue", "body", "starve", "blocked", "lead"]
    print(f"{'op':<10}" + "".join(f"{c:>18}" for c in cols))
    total = {c: 0.0 for c in cols}
    for k in KINDS:
        n = max(layers[k], 1)
        line = f"{k:<10}"
        for c in cols:
            v = per_kind[k][c] / 1e3
            total[c] += v
            line += f"{v:>9.1f} ({v / n:>5.2f})"
        print(line)
    print(f"{'all':<10}" + "".join(f"{total[c]:>9.1f}{'':>9}" for c in cols))
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"file": path, "blocks": len(blocks), "ops": n_ops, "span_us": (t1 - t0) / 1e3,
                       "per_kind_us": {k: {c: per_kind[k][c] / 1e3 for c in cols} for k in KINDS},
                       "layers": layers}, f, indent=1)


if __name__ == "__main__":
    main()
