#!/usr/bin/env bash
# server_check.sh — `specpress serve` on the CUDA fast path (GPU machine, after gpu_build of specpress): serves a pair,
# checks that /props reports the fast path and that a greedy chat completion, whole and streamed, equals `specpress
# generate` with the same flags, and prints both tokens/s. generate runs with --logprobs 3 (its loop then reads the
# logits back every cycle, unpipelined): its text must still equal the server's pipelined reply, and its logprobs
# the server's for a request with logprobs, whole and streamed. Anthropic's /v1/messages must return the chat reply's
# text, whole and streamed (its text_delta events). /v1/completions with echo and max_tokens 0 scores the chat prompt +
# generate's output ids (the fast path's forward, the engine the server generates on): nothing generated, the first
# entry null, and the output's logprobs within 0.05 + 3% of generate's (the bound the fast path's logprobs test holds
# against the reference path); it prints the scoring time. lm-evaluation-harness's loglikelihood payload (echo,
# max_tokens 1) must give the same prompt entries (within that bound: its forward has one more row) and one token; its
# time is printed beside the scoring's and a one-token generation's. It prints the ready line with the time from launch
# to it, and the first request's wall beside the second's. The demo pair's head_dim (16) is not a fast-path
# width, so on the GPU machine give PAIR a pair that is, e.g. the random one `scripts/gpu/tools_check.py --work DIR`
# writes (DIR/target with the tokenizer files, DIR/draft). The capture-time kernel choices are pinned
# (SPECPRESS_WG16_AUTO=0, SPECPRESS_LT_TUNE=0) so that both processes run the same kernels bit for bit.
# Also runs on a CPU build: BIN=build/bin/specpress DEVICE=cpu DTYPE=f32 FAST=0. Exits non-zero on a mismatch.
# Env: PAIR (default demo), BIN (build-gpu/bin/specpress), DEVICE (cuda), DTYPE (bf16), FAST (1: require the fast
# path), N (128).
set -euo pipefail
BIN=${BIN:-build-gpu/bin/specpress}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bf16}
FAST=${FAST:-1}
N=${N:-128}
PAIR=${PAIR:-demo}
export SPECPRESS_WG16_AUTO=${SPECPRESS_WG16_AUTO:-0} SPECPRESS_LT_TUNE=${SPECPRESS_LT_TUNE:-0}
[ -d .gpu-shared/data ] && export SHARED=${SHARED:-.gpu-shared}
[ -f "$PAIR/target/tokenizer.json" ] || scripts/fetch_demo_tokenizer.sh "$PAIR/target" >&2
QUESTION="Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did she sell altogether?"
FLAGS=(-m "$PAIR/target" -md "$PAIR/draft" --device "$DEVICE" --dtype "$DTYPE")
tmp=$(mktemp -d)
"$BIN" generate "${FLAGS[@]}" -p "$QUESTION" --chat -n "$N" --json --logprobs 3 > "$tmp/generate.json" 2> "$tmp/generate.err"
log=$tmp/serve.err
t_launch=$(date +%s.%N)
"$BIN" serve "${FLAGS[@]}" --port 0 2> "$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 600); do grep -q " ready (" "$log" && break; kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }; sleep 0.1; done
ready_s=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$t_launch")
echo "server_check: ready $ready_s s after launch (polled every 0.1 s): $(grep " ready (" "$log")"
port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
python3 - "$port" "$QUESTION" "$N" "$FAST" "$tmp/generate.json" <<'PY'
import json, sys, time, urllib.request
port, question, n, fast, generated = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
base = f"http://127.0.0.1:{port}"
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read().decode()
props = json.loads(urllib.request.urlopen(base + "/props").read())
expected = json.load(open(generated))
body = {"messages": [{"role": "user", "content": question}], "max_tokens": n}
t0 = time.perf_counter()
post("/v1/chat/completions", body)  # first request: the engine's set-up (tuning, graph capture) unless the load did it
t_first = time.perf_counter() - t0
t0 = time.perf_counter()
whole = json.loads(post("/v1/chat/completions", body))
t_whole = time.perf_counter() - t0
events = [l[6:] for l in post("/v1/chat/completions", dict(body, stream=True)).split("\n\n") if l.startswith("data: ")]
streamed = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1] if e != "[DONE]")
text = whole["choices"][0]["message"]["content"]
t = whole["timings"]
print(f"server_check: build_info={props['build_info']}")
print(f"server_check: fast_path={props['fast_path']} text_equal={text == expected['text']} "
      f"stream_equal={streamed == text} tokens={whole['usage']['completion_tokens']} tau={t.get('tau', 0):.2f}")
print(f"server_check: server decode {t['predicted_per_second']:.1f} tokens/s, request wall {t_whole * 1e3:.1f} ms "
      f"(the first request's {t_first * 1e3:.1f} ms); "
      f"generate decode {expected['timings']['predicted_per_second']:.1f} tokens/s")
# logprobs: OpenAI's content list, whole and streamed, against generate's entries (the same kernels)
lp_body = dict(body, logprobs=True, top_logprobs=3)
content = json.loads(post("/v1/chat/completions", lp_body))["choices"][0]["logprobs"]["content"]
lp_events = [json.loads(l[6:]) for l in post("/v1/chat/completions", dict(lp_body, stream=True)).split("\n\n")
             if l.startswith("data: ") and l != "data: [DONE]"]
streamed_lp = [e for ev in lp_events if ev["choices"] and ev["choices"][0]["logprobs"]
               for e in ev["choices"][0]["logprobs"]["content"]]
ref = expected["logprobs"]
lp_equal = len(content) == len(ref) and all(
    c["token"] == r["token"] and abs(c["logprob"] - r["logprob"]) < 1e-6 and
    [t["token"] for t in c["top_logprobs"]] == [t["token"] for t in r["top_logprobs"]] for c, r in zip(content, ref))
greedy_top = all(c["top_logprobs"][0]["logprob"] == c["logprob"] for c in content)
print(f"server_check: logprobs {len(content)} entries, equal to generate's={lp_equal}, "
      f"streamed equal={streamed_lp == content}, chosen is the likeliest={greedy_top}, "
      f"first {[(c['token'], round(c['logprob'], 4)) for c in content[:3]]}")
# Anthropic's Messages API: the same generation in its message object and event stream
message = json.loads(post("/v1/messages", body))
message_text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
deltas = [json.loads(f.split("\ndata: ", 1)[1]) for f in post("/v1/messages", dict(body, stream=True)).split("\n\n")
          if f.startswith("event: content_block_delta")]
message_streamed = "".join(d["delta"].get("text", "") for d in deltas)
print(f"server_check: messages text_equal={message_text == text} stream_equal={message_streamed == text} "
      f"stop_reason={message['stop_reason']} output_tokens={message['usage']['output_tokens']}")
# echo: the prompt + generate's output scored by the server's forward, nothing generated
prompt = json.loads(post("/apply-template", {"messages": body["messages"]}))["prompt"]
ids = json.loads(post("/tokenize", {"content": prompt}))["tokens"] + expected["output_ids"]
t0 = time.perf_counter()
scored = json.loads(post("/v1/completions", {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1}))
t_score = time.perf_counter() - t0
cols = scored["choices"][0]["logprobs"]
tail = cols["token_logprobs"][len(ids) - len(ref):]
worst = max(abs(a - r["logprob"]) - 0.03 * abs(r["logprob"]) for a, r in zip(tail, ref))
max_abs = max(abs(a - r["logprob"]) for a, r in zip(tail, ref))
echo_ok = (scored["usage"]["completion_tokens"] == 0 and len(cols["tokens"]) == len(ids) and
           cols["token_logprobs"][0] is None and len(tail) == len(ref) and worst <= 0.05)
print(f"server_check: echo {len(ids)} tokens scored in {t_score * 1e3:.1f} ms (request wall), "
      f"output logprobs within 0.05 + 3% of generate's={worst <= 0.05} (largest difference {max_abs:.4f}), "
      f"ok={echo_ok}")
# lm-evaluation-harness's loglikelihood payload (max_tokens 1): the same entries as the scoring above, one more token;
# timed (best of 3) beside the scoring alone and a one-token generation without echo
harness_body = {"model": "target", "prompt": [ids], "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234,
                "echo": True}
def best_wall(request):
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        reply = json.loads(post("/v1/completions", request))
        walls.append(time.perf_counter() - t0)
    return reply, min(walls) * 1e3
harness, t_harness = best_wall(harness_body)
_, t_score = best_wall({"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1})
one, t_one = best_wall({"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 1})
h = harness["choices"][0]["logprobs"]
# the same forward with one more row (the token's): in bf16 its matmuls have another shape, so the entries
# may differ in their last bits; the bound is the echo check's
pairs = list(zip(h["token_logprobs"][1:len(ids)], cols["token_logprobs"][1:]))
entries_equal = (len(h["token_logprobs"]) == len(ids) + 1 and h["token_logprobs"][0] is None and
                 len(pairs) == len(ids) - 1 and all(abs(a - b) <= 0.05 + 0.03 * abs(b) for a, b in pairs))
entries_diff = max(abs(a - b) for a, b in pairs)
harness_ok = entries_equal and harness["usage"]["completion_tokens"] == 1
print(f"server_check: lm-eval payload (echo, max_tokens 1) {t_harness:.1f} ms, scoring alone (max_tokens 0) "
      f"{t_score:.1f} ms, one-token generation {t_one:.1f} ms (request walls, best of 3); prompt entries within "
      f"0.05 + 3% of the scoring's={entries_equal} (largest difference {entries_diff:.2e}), "
      f"its token {h['tokens'][-1]!r} "
      f"(the generation's {one['choices'][0]['text']!r}), ok={harness_ok}")
ok = (text == expected["text"] and streamed == text and (props["fast_path"] or not fast) and lp_equal and
      streamed_lp == content and greedy_top and message_text == text and message_streamed == text and
      props["build_info"].startswith("specpress ") and ("CUDA build" in props["build_info"] or not fast) and echo_ok and
      harness_ok)
sys.exit(0 if ok else 1)
PY
