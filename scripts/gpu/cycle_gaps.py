#!/usr/bin/env python3
"""cycle_gaps.py TRACE.json — where a DFlash cycle's time goes between kernels, from a Kineto Chrome trace of
`fast_perf --profile MODE --timeline FILE --profile-cycles N` (one decode, verify and draft step, then N cycles as
the loop runs them). The GPU work is split where the host synchronised (a gap of more than 50 us). Per segment:
its span (first start to last end), the kernels' and copies' summed busy time (overlaps merged), and the gaps
between the end of everything before and the next start; for each cycle, the largest gaps with their
neighbours, where in the segment they fall (µs from its start, the next event's index, the three events started
just before), and the host-sync gap before it."""
import json
import sys

SYNC_GAP_US = 50.0


def short(name):
    n = name.replace("(anonymous namespace)::", "")
    n = n[len("void "):] if n.startswith("void ") else n
    return n.split("(")[0][:70]


def main():
    trace = json.load(open(sys.argv[1]))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    work = sorted((float(e["ts"]), float(e["dur"]), e["name"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    if not work:
        sys.exit(f"{sys.argv[1]}: no GPU events")
    segments, end = [], None
    for start, dur, name in work:
        if end is None or start - end > SYNC_GAP_US:
            segments.append({"items": [], "sync_gap": None if end is None else start - end})
        segments[-1]["items"].append((start, dur, name))
        end = start + dur if end is None else max(end, start + dur)
    if len(segments) < 4:
        print(f"note: {len(segments)} segments, expected 3 steps and at least one cycle: a gap of more than "
              f"{SYNC_GAP_US:.0f} us inside a step, or none between two, would mislabel them")
    labels = ["decode", "verify", "draft"] + [f"cycle {i + 1}" for i in range(len(segments) - 3)]
    for label, seg in zip(labels, segments):
        items = seg["items"]
        first, last_end, busy, gaps, cover_end, prev = items[0][0], 0.0, 0.0, [], None, None
        for i, (start, dur, name) in enumerate(items):
            if cover_end is not None and start > cover_end:
                # where: the gap's start from the segment's, the next event's index, and the 3 events started before
                before = " < ".join(short(n)[:40] for _, _, n in items[max(0, i - 3):i])
                gaps.append((start - cover_end, prev, name, cover_end - first, i, before))
            s = start if cover_end is None else max(start, cover_end)
            if start + dur > s:
                busy += start + dur - s
            if cover_end is None or start + dur > cover_end:
                cover_end, prev = start + dur, name
            last_end = max(last_end, start + dur)
        span = last_end - first
        sync = "" if seg["sync_gap"] is None else f", {seg['sync_gap']:.1f} us after the previous segment"
        print(f"{label}: span {span:.1f} us, busy {busy:.1f} us, {len(items)} events, idle gaps "
              f"{sum(g[0] for g in gaps):.1f} us in {len(gaps)}{sync}")
        if label.startswith("cycle"):
            for g, a, b, at, i, before in sorted(gaps, reverse=True)[:8]:
                print(f"    gap {g:6.1f} us: {short(a)} -> {short(b)}  (at +{at:.1f} us, before event #{i}; "
                      f"started before it: {before})")


if __name__ == "__main__":
    main()
