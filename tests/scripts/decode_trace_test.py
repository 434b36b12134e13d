#!/usr/bin/env python3
"""decode_trace_test.py — scripts/gpu/decode_trace.py on synthetic --decode-trace CSVs (ctest, CPU): both layer
layouts (five launches, and four with the fused o + gate/up kernel), the idle attention splits counted from the
attention launches (a reused loop variable once took them from the wrong launches), the fused kernel's barrier fields
read from its end/last columns, the o kernel's blocks by index eighth, and a CSV whose launches are not whole layers
refused with a message.
Usage: decode_trace_test.py PATH/TO/decode_trace.py"""
import contextlib
import csv
import importlib.util
import io
import os
import re
import sys
import tempfile

HEADER = "launch,kind,block,sm,start,issued,waited,q_ready,tiles,partial,counted,end,last,x_ready,staged".split(",")


def write(path, kinds, layers, idle_splits):
    """`layers` layers of `kinds`; each launch 4 blocks 200 ns apart; attention launches with `idle_splits` idle rows."""
    rows, t, launch = [], 1000, 0
    for _ in range(layers):
        for kind in kinds:
            for b in range(4):
                r = dict.fromkeys(HEADER, "")
                r.update(launch=launch, kind=kind, block=b, sm=b, start=t + b, issued=t + 20 + b, waited=t + 30 + b)
                if kind == "attention":
                    r.update(q_ready=t + 40, tiles=t + 50, partial=t + 60, counted=t + 70, end=t + 80 + b,
                             last=int(b == 0))
                else:
                    r.update(q_ready=t + 100 + b, tiles=t + 110, partial=t + 120, counted=t + 130 + b, last=0)
                    if kind == "o_gate_up":
                        r.update(end=t + 60 + b, last=t + 70 + b, x_ready=t + 80, staged=t + 90)
                rows.append(r)
            if kind == "attention":
                for b in range(idle_splits):
                    r = dict.fromkeys(HEADER, "")
                    r.update(launch=launch, kind=kind, block=4 + b, sm=0, start=t, end=t + 5, last=0)
                    rows.append(r)
            t += 200
            launch += 1
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, HEADER)
        w.writeheader()
        w.writerows(rows)


def run(module, argv):
    out = io.StringIO()
    saved = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out):
            module.main()
    finally:
        sys.argv = saved
    return out.getvalue()


def main():
    spec = importlib.util.spec_from_file_location("decode_trace", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failures = []
    with tempfile.TemporaryDirectory() as d:
        five, four, broken = (os.path.join(d, n) for n in ("five.csv", "four.csv", "broken.csv"))
        write(five, ["gemv", "attention", "residual", "swiglu", "residual"], 36, 7)
        write(four, ["gemv", "attention", "o_gate_up", "residual"], 36, 7)
        text5 = run(module, ["decode_trace.py", five, "five"])
        text4 = run(module, ["decode_trace.py", four, "four"])
        for label, text in (("five", text5), ("four", text4)):
            if "(and 7 attention splits past the live length)" not in text:
                failures.append(f"{label}: idle splits not 7:\n{text}")
        if "o         waited" not in text5 or "gate/up -> down" not in text5:
            failures.append(f"five: the five-launch names missing:\n{text5}")
        for needle in ("o+gate/up arrived", "o+gate/up released", "o+gate/up x_ready", "o+gate/up staged",
                       "attention -> o+gate/up", "o+gate/up -> down"):
            if needle not in text4:
                failures.append(f"four: '{needle}' missing:\n{text4}")
        # arrived/released come from the end/last columns (60 and 70 ns after the launch's base), not the warp ends
        line = next((l for l in text4.splitlines() if "o+gate/up arrived" in l), "")
        if line and abs(float(line.split()[2]) - float(next(
                l for l in text4.splitlines() if "o+gate/up start" in l).split()[2]) - 0.06) > 1e-6:
            failures.append(f"four: arrived is not 60 ns after start: {line}")
        # the o kernel's blocks by index eighth (4 blocks: eighths 0, 2, 4, 6); o rows written: the fused kernel's
        # barrier arrival (60 ns after its start), the o GEMV's last warp end (130 ns)
        for label, text, gap in (("five", text5, 0.13), ("four", text4, 0.06)):
            rows = [l.split() for l in text.splitlines() if re.search(r" eighth \d+:", l)]
            if [r[2] for r in rows] != ["0:", "2:", "4:", "6:"]:
                failures.append(f"{label}: eighths not 0, 2, 4, 6:\n{text}")
            elif abs(float(rows[0][5]) - float(rows[0][3]) - gap) > 0.011:
                failures.append(f"{label}: o rows written not {gap} us after the start: {rows[0]}")
        write(broken, ["gemv", "attention", "residual", "swiglu", "residual"], 1, 0)
        with open(broken, "a") as f:
            f.write("5,gemv,0,0,99999,,,,,,,,0,,\n")
        try:
            run(module, ["decode_trace.py", broken])
            failures.append("broken: a CSV of 6 launches was accepted")
        except SystemExit as e:
            if "not whole layers of 5" not in str(e.code):
                failures.append(f"broken: unexpected message {e.code!r}")
    for f in failures:
        print("FAIL", f)
    print("decode_trace_test:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
