#!/usr/bin/env bash
# train_larger.sh — issue 7/8 on the GPU machine in one device call: train a larger Qwen3 target
# (scripts/gpu/target-large-config.json: hidden 512, 8 layers, 103 M parameters of which 78 M are the
# tied Qwen3-vocabulary embedding) on GSM8K train chat (MIT), its DFlash draft on the target's own
# greedy answers, then `specpress bench` on every dataset (tau, speedup, histogram), the beacon
# compressor (train-compressor on the target's DFlash generations) and `bench --compress` for every
# training-free control and the beacon at the same policy. Logs and JSON reports go to $OUT.
# Expects build-gpu/bin/specpress (scripts/gpu/fast_checks.sh builds it) and .gpu-shared from
# scripts/gpu/pack_shared.sh (carry [".gpu-deps", ".gpu-shared"]).
# Env: LM_STEPS, LM_BATCH, DRAFT_STEPS, PROMPTS, COMP_STEPS, COMP_PROMPTS, BENCH_SAMPLES, COMP_BENCH_SAMPLES,
#      TOKENS, WINDOW, MERGE.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BIN=${BIN:-build-gpu/bin/specpress}
bash scripts/gpu/unpack_shared.sh
D=${SPECPRESS_GPU_SHARED:-.gpu-shared}/data
W=${WORK:-/tmp/larger}
LM_STEPS=${LM_STEPS:-1200}
LM_BATCH=${LM_BATCH:-32}
DRAFT_STEPS=${DRAFT_STEPS:-600}
PROMPTS=${PROMPTS:-400}
COMP_STEPS=${COMP_STEPS:-300}
COMP_PROMPTS=${COMP_PROMPTS:-96}
BENCH_SAMPLES=${BENCH_SAMPLES:-20}
COMP_BENCH_SAMPLES=${COMP_BENCH_SAMPLES:-10}
TOKENS=${TOKENS:-256}
WINDOW=${WINDOW:-32}
MERGE=${MERGE:-0}
export LD_LIBRARY_PATH=${SPECPRESS_GPU_DEPS:-$(pwd)/.gpu-deps}/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p "$W/tok"
cp "$D/qwen3-tokenizer/tokenizer.json" "$D/qwen3-tokenizer/tokenizer_config.json" "$W/tok/"
head -n "$PROMPTS" "$D/gsm8k_train.jsonl" > "$W/onpolicy.jsonl"
sed -n "$((PROMPTS + 1)),$((PROMPTS + COMP_PROMPTS))p" "$D/gsm8k_train.jsonl" > "$W/comp_prompts.jsonl"
head -n 8 "$D/gsm8k_test.jsonl" > "$W/eval.jsonl"
stage() { echo "== $1: $(( $(date +%s) - T0 )) s since start"; }
T0=$(date +%s)

stage train-lm
"$BIN" train-lm --config scripts/gpu/target-large-config.json --tokenizer "$W/tok" --data "$D/gsm8k_train_chat.jsonl" \
  --out "$W/target" --force --device cuda --steps "$LM_STEPS" --batch "$LM_BATCH" --seq-len 512 --lr 2e-3 --warmup 50 \
  --save-every 0 --seed 1 2>"$OUT/train_lm.log"; echo "train-lm exit $?"
grep -E "steps 1\.\.|loss" "$OUT/train_lm.log" | tail -2 | tr '\r' '\n' | tail -2

stage train-draft
"$BIN" train-draft --target "$W/target" --on-policy-prompts "$W/onpolicy.jsonl" --gen-tokens 200 \
  --eval-prompts "$W/eval.jsonl" --eval-every 0 --eval-samples 8 --eval-tokens 200 \
  --out "$W/draft" --force --device cuda --draft-layers 2 --block-size 16 --target-layer-ids 1,3,5,7 --steps "$DRAFT_STEPS" --batch 16 --seq-len 512 \
  --anchors 24 --lr 2e-3 --warmup 30 --save-every 0 --seed 2 2>"$OUT/train_draft.log"; echo "train-draft exit $?"
tr '\r' '\n' < "$OUT/train_draft.log" | grep -E "train-draft: (steps|final|[0-9]+ seq)|on-policy generation.*tokens generated" | tail -4

stage bench
for ds in gsm8k:gsm8k_test.jsonl math500:math500.jsonl humaneval:humaneval.jsonl mbpp:mbpp_sanitized_test.jsonl \
          mt-bench:mt_bench.jsonl alpaca:alpaca_first335.jsonl; do
  name=${ds%%:*}; file=${ds#*:}
  "$BIN" bench -m "$W/target" -md "$W/draft" --dataset "$name" --data "$D/$file" --max-samples "$BENCH_SAMPLES" \
    --max-new-tokens "$TOKENS" --device cuda --dtype bf16 --no-progress --json "$OUT/bench_$name.json" \
    >"$OUT/bench_$name.md" 2>"$OUT/bench_$name.err" || { echo "bench $name failed"; tail -3 "$OUT/bench_$name.err"; }
  grep -m1 -E "speedup" "$OUT/bench_$name.md" | sed "s/^/$name: /"
done

stage train-compressor
"$BIN" train-compressor --target "$W/target" --draft "$W/draft" --on-policy-prompts "$W/comp_prompts.jsonl" \
  --eval-prompts "$W/eval.jsonl" --gen-tokens "$TOKENS" --compress-window "$WINDOW" --compress-merge "$MERGE" --out "$W/beacon" --force \
  --device cuda --steps "$COMP_STEPS" --batch 8 --seq-len 512 --lr 1e-3 --warmup 20 --eval-every 0 --eval-samples 8 \
  --save-every 0 --seed 3 2>"$OUT/train_compressor.log"; echo "train-compressor exit $?"
tr '\r' '\n' < "$OUT/train_compressor.log" | grep -E "held-out|train-compressor: (steps|[0-9]+ traj)" | tail -4
cp "$W/beacon/compressor.json" "$OUT/" 2>/dev/null

stage bench-compress
for m in "$W/beacon" drop keep-last mean-merge top-attention window-only; do
  tag=$(basename "$m")
  "$BIN" bench -m "$W/target" -md "$W/draft" --dataset gsm8k --data "$D/gsm8k_test.jsonl" \
    --max-new-tokens "$TOKENS" --device cuda --dtype bf16 --no-progress --compress "$m" --compress-window "$WINDOW" --compress-merge "$MERGE" \
    --max-samples "$COMP_BENCH_SAMPLES" \
    --json "$OUT/compress_$tag.json" >"$OUT/compress_$tag.md" 2>"$OUT/compress_$tag.err" ||
    { echo "bench --compress $tag failed"; tail -3 "$OUT/compress_$tag.err"; }
  grep -m1 -E "^compression" "$OUT/compress_$tag.md"
done
stage done
