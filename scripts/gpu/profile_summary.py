#!/usr/bin/env python3
"""profile_summary.py CSV TITLE — summarise an `ncu --csv` run of `fast_perf --profile` (profile_kernels.sh):
the kernels of one decode, one verify and one draft step, in launch order. A step ends with its argmax
kernel (the decode step's position advance follows its argmax and belongs to it). Prints, per step, each
kernel name's count, total us and DRAM bytes read, with the step's total."""
import csv
import io
import sys
from collections import OrderedDict

path, title = sys.argv[1], sys.argv[2]
text = open(path).read()
start = text.find('"ID"')
if start < 0:
    sys.exit(f"{path}: no ncu CSV table in it (did ncu profile anything?)")
kernels = OrderedDict()  # id -> {name, us, bytes}
for row in csv.DictReader(io.StringIO(text[start:])):
    k = kernels.setdefault(int(row["ID"]), {"name": row["Kernel Name"], "grid": row.get("Grid Size", ""),
                                            "us": 0.0, "bytes": 0.0})
    value = float(row["Metric Value"].replace(",", ""))
    unit = row["Metric Unit"]
    if row["Metric Name"] == "gpu__time_duration.sum":
        k["us"] = value * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1.0)
    elif row["Metric Name"] == "dram__bytes_read.sum":
        k["bytes"] = value * {"byte": 1, "B": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}.get(unit, 1.0)

steps = [[], [], []]
step = 0
for k in kernels.values():
    name = k["name"].replace("void ", "")
    for junk in ("specpress::kernels::", "specpress::", "(anonymous namespace)::", "<unnamed>::", "unnamed>::",
                 "detail::", "at::native::"):
        name = name.replace(junk, "")
    name = name.split("(")[0] + " grid" + k["grid"].replace(" ", "")
    if name.startswith("advance"):
        steps[0].append((name, k))
        continue
    steps[min(step, 2)].append((name, k))
    if name.startswith("argmax"):
        step += 1
print(f"== {title}")
for label, ks in zip(("decode", "verify", "draft"), steps):
    total = sum(k["us"] for _, k in ks)
    gbytes = sum(k["bytes"] for _, k in ks) / 1e9
    print(f"{label}: {len(ks)} kernels, {total:.1f} us summed, {gbytes:.3f} GB read from DRAM")
    agg = OrderedDict()
    for name, k in ks:
        a = agg.setdefault(name, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += k["us"]
        a[2] += k["bytes"]
    for name, (n, us, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:<44} x{n:<4} {us:9.1f} us  {us / n:7.2f} us each  {b / 1e6:9.1f} MB"
              f"  {b / (us * 1e-6) / 1e9 if us else 0:7.0f} GB/s")
