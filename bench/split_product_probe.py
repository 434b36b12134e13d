#!/usr/bin/env python3
# split_product_probe.py — a screening probe (GPU machine, PyTorch): does a 16-row residual product with few
# output tiles (Qwen3's o and down projections: N = hidden size, so cuBLAS(Lt) runs about N / 64 thread blocks)
# finish sooner as two or three products over K slices on side streams, running at once, plus one add? The
# verify step's o and down products measured 48-70% of the copy bandwidth alone at 4B (docs/PERF.md); this tells
# whether spreading the same bytes over more SMs pays for the extra add before it is built into the engine.
#
# Each variant is one CUDA graph over L distinct weight matrices (the step's layers, so the weights come from
# DRAM as in the step), replayed; the time a product is the replay's median / L. Variants:
#   single   x += a @ W^T                      (one addmm_, beta = 1)
#   kS       S products over K slices at once: x += a[:, s0] @ W[:, s0]^T on the main stream, the others into
#            their own buffers on side streams, then x += each buffer (S - 1 adds)
#   n2       two products over halves of N at once (a control: the same thread blocks as single)
# Usage: python3 bench/split_product_probe.py [--layers 36] [--replays 20] [--json FILE]
import argparse
import json
import statistics

import torch

SHAPES = {  # name: (N, K) of W (N x K), the 16-row product y = a @ W^T
    "4B o": (2560, 4096),
    "4B down": (2560, 9728),
    "8B o": (4096, 4096),
    "8B down": (4096, 12288),
}


def time_graph(body, replays):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (workspaces, plans)
        body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        body()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(b.elapsed_time(e) * 1000.0)  # us
    return statistics.median(times)


def run_shape(name, N, K, layers, replays):
    dev = torch.device("cuda")
    W = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(layers)]
    a = torch.randn(16, K, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(16, N, device=dev, dtype=torch.bfloat16)
    x = x0.clone()
    side = [torch.cuda.Stream() for _ in range(2)]
    bufs = [torch.empty(16, N, device=dev, dtype=torch.bfloat16) for _ in range(2)]

    def single():
        for w in W:
            x.addmm_(a, w.t())

    def ksplit(S):
        bounds = [K * i // S // 64 * 64 for i in range(S)] + [K]

        def body():
            main = torch.cuda.current_stream()
            for w in W:
                for j in range(1, S):
                    side[j - 1].wait_stream(main)
                    with torch.cuda.stream(side[j - 1]):
                        torch.mm(a[:, bounds[j]:bounds[j + 1]], w[:, bounds[j]:bounds[j + 1]].t(), out=bufs[j - 1])
                x.addmm_(a[:, bounds[0]:bounds[1]], w[:, bounds[0]:bounds[1]].t())
                for j in range(1, S):
                    main.wait_stream(side[j - 1])
                for j in range(1, S):
                    x.add_(bufs[j - 1])
        return body

    def nsplit():
        h = N // 2
        main = torch.cuda.current_stream()
        for w in W:
            side[0].wait_stream(main)
            with torch.cuda.stream(side[0]):
                x[:, h:].addmm_(a, w[h:].t())
            x[:, :h].addmm_(a, w[:h].t())
            main.wait_stream(side[0])

    # correctness of the split variants against single (one pass each from x0)
    ref = x0.float() + sum(a.float() @ w.float().t() for w in W)
    out = {}
    for label, body in [("single", single), ("k2", ksplit(2)), ("k3", ksplit(3)), ("n2", nsplit)]:
        x.copy_(x0)
        body()
        torch.cuda.synchronize()
        err = ((x.float() - ref).abs().max() / ref.abs().max()).item()
        us = time_graph(body, replays) / layers
        out[label] = {"us": us, "rel_err": err}
    gb = N * K * 2 / 1e9
    print(f"{name}: N {N} K {K}, {gb * 1e3:.1f} MB a product")
    for label, r in out.items():
        bw = gb / (r["us"] * 1e-6)
        print(f"  {label:8s} {r['us']:8.2f} us  {bw:7.0f} GB/s  x{out['single']['us'] / r['us']:.3f}  rel err {r['rel_err']:.2e}")
    del W
    torch.cuda.empty_cache()
    return out


def main():
    p = argparse.ArgumentParser(description="16-row residual products split over K on side streams (a screening probe)")
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--json", default="")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("split_product_probe.py: needs a CUDA device")
    if args.layers < 1 or args.replays < 1:
        raise SystemExit("split_product_probe.py: --layers and --replays must be at least 1")
    # copy bandwidth, for scale
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    b.record()
    for _ in range(10):
        dst.copy_(src)
    e.record()
    e.synchronize()
    copy_gbps = 2 * 10 * src.numel() / (b.elapsed_time(e) * 1e-3) / 1e9
    del src, dst
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {copy_gbps:.0f} GB/s")
    results = {"copy_GBps": copy_gbps}
    for name, (N, K) in SHAPES.items():
        results[name] = run_shape(name, N, K, args.layers, args.replays)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
