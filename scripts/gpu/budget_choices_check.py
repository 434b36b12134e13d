#!/usr/bin/env python3
"""budget_choices_check.py — the thinking budget and n choices on the CUDA fast path (GPU machine, after gpu_build of
specpress). PAIR: a fast-path pair with the tokenizer files (tools_check.py --work DIR writes one). The random target
is made to open its think block (a logit bias of +1000 on <think>, so that every token is one), so that a budget of N cuts it: `generate --reasoning-budget
N` must give <think>..., then "\\n</think>\\n\\n" at N, greedy DFlash equal to plain. Then `serve` on the pair: a chat
with n 3 at T 50 (the random model is that peaked) must return the replies of seeds s, s+1, s+2 sent alone, whole and streamed. Prints one line each and
exits 1 on a mismatch.

Usage: python3 scripts/gpu/budget_choices_check.py --specpress build-gpu/bin/specpress --pair /tmp/tc"""
import argparse, json, socket, subprocess, sys, time, urllib.request

THINK, END = 151667, 151668


def generate(exe, pair, extra):
    cmd = [exe, "generate", "-m", pair + "/target", "--device", "cuda", "--dtype", "bf16", "-p", "Natalia sold clips",
           "--chat", "-n", "24", "--json", "--temp", "0", "--logit-bias", f"{THINK}+1000", "--reasoning-budget", "6"]
    return json.loads(subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout)["output_ids"]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specpress", required=True)
    ap.add_argument("--pair", required=True)
    a = ap.parse_args()
    ok = True
    plain = generate(a.specpress, a.pair, [])
    dflash = generate(a.specpress, a.pair, ["-md", a.pair + "/draft"])
    cut = plain[6:9] == [198, END, 271] and plain[0] == THINK
    print(f"budget: plain {plain[:10]}..., forced end at 6: {cut}, DFlash equal: {dflash == plain}")
    ok &= cut and dflash == plain
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([a.specpress, "serve", "-m", a.pair + "/target", "-md", a.pair + "/draft", "--device",
                               "cuda", "--dtype", "bf16", "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:
                time.sleep(0.5)
        chat = {"messages": [{"role": "user", "content": "Natalia sold clips"}], "max_tokens": 32, "temperature": 50.0}
        alone = [json.loads(post(port, dict(chat, seed=7 + i)))["choices"][0]["message"]["content"] for i in range(3)]
        whole = json.loads(post(port, dict(chat, seed=7, n=3)))
        got = [c["message"]["content"] for c in whole["choices"]]
        streamed = ["", "", ""]
        for line in post(port, dict(chat, seed=7, n=3, stream=True)).splitlines():
            if line.startswith("data: {"):
                e = json.loads(line[6:])
                if e.get("choices"):
                    streamed[e["choices"][0]["index"]] += e["choices"][0]["delta"].get("content", "")
        distinct = len(set(alone)) == 3
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=10) as r:
            fast = json.loads(r.read())["fast_path"]
        print(f"n 3: whole equal to seeds 7..9 alone: {got == alone}, streamed equal: {streamed == alone}, "
              f"three different replies: {distinct}, fast_path: {fast}")
        ok &= got == alone and streamed == alone and distinct and fast
    finally:
        server.terminate()
        server.wait(timeout=60)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
