#!/usr/bin/env python3
"""timeline_summary_test.py — scripts/gpu/timeline_summary.py on a synthetic Kineto trace (ctest, CPU): three steps of
four five-kernel layers, layer 1's attention 2 us and layer 2's down product 6 us longer. Checks the steps' spans, the
per-class adds, the attention-to-attention intervals (end to end: 67, 65, 71, where starts would give 65, 67, 71) and
the layer pattern's medians; a trace without kernel events is refused with a message.
Usage: timeline_summary_test.py PATH/TO/timeline_summary.py"""
import json
import os
import subprocess
import sys
import tempfile

LAYER = [("gemv_kernel<2, 0, false, 10, false>", 10.0), ("decode_attention_kernel<128, 8, false>", 10.0),
         ("gemv_kernel<1, 2, false, 16, false>", 3.0), ("gemv_kernel<4, 1, false, 8, false>", 28.0),
         ("gemv_kernel<1, 2, false, 10, false>", 14.0)]


def kernel(ts, dur, cls):
    head, _, args = cls.partition("<")
    name = f"void specpress::kernels::(anonymous namespace)::{head}<{args}(specpress::kernels::Args)"
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}


def trace():
    """Three steps 1000 us apart; in each, layer 1's attention takes 12 us instead of 10, layer 2's down product 20
    instead of 14."""
    events, t = [], 1000.0
    for _ in range(3):
        for layer in range(4):
            for i, (cls, dur) in enumerate(LAYER):
                if layer == 1 and i == 1:
                    dur += 2.0
                if layer == 2 and i == 4:
                    dur += 6.0
                events.append(kernel(t, dur, cls))
                t += dur
        t += 1000.0
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5.0, "dur": 1.0})  # not a kernel: ignored
    return {"traceEvents": events}


def run(script, payload):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        with open(path, "w") as f:
            json.dump(payload, f)
        return subprocess.run([sys.executable, script, path, "synthetic"], capture_output=True, text=True)


def main():
    script = sys.argv[1]
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    r = run(script, trace())
    out = r.stdout
    expect(r.returncode == 0, f"exit status {r.returncode}: {r.stderr}")
    expect("== synthetic: 60 kernels, 3 steps (us)" in out, "the step count")
    expect("decode: 20 kernels, span 268.0" in out, "the decode step's span (4 layers of 65 us + 2 + 6)")
    expect("attention to attention (3 intervals, median 67.00, interval i from attention i, counted from 0):" in out,
           "the attention intervals' header")
    expect("     67.00  65.00  71.00" in out, "the intervals, end to end: layer 1's attention in interval 0, layer 2's "
           "down product in interval 2")
    expect("per layer (4 layers of 5 kernels, medians):" in out, "the layer pattern")
    expect(out.count("a layer") == 3 and "65.00" in out.split("a layer")[1].splitlines()[0],
           "a layer's median adds: 65 us")
    down = [line for line in out.splitlines() if line.strip().startswith("gemv_kernel<1, 2, false, 10, false>")]
    expect(len(down) == 6 and down[0].split()[-2] == "15.50", f"the down class's mean adds (15.5 us): {down[:1]}")

    r = run(script, {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 0, "dur": 1}]})
    expect(r.returncode != 0 and "no kernel events" in r.stderr, f"a trace without kernels: {r.returncode} {r.stderr}")

    for f in failures:
        print("FAILED:", f)
    if failures:
        print(out)
        sys.exit(1)
    print("timeline_summary.py: every check passed")


if __name__ == "__main__":
    main()
