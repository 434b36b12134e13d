#!/usr/bin/env bash
# train_demo.sh — retrains the bundled demo pair from scratch with specpress's own trainers, on CPU by
# default: a small Qwen3 target (train-lm, demo/target-train-config.json) on GSM8K train (MIT) as
# Qwen3-chat conversations, then its DFlash draft (train-draft) on the target's own greedy answers to
# GSM8K train questions (on-policy), evaluated on GSM8K test prompts, then the beacon KV compressor
# (train-compressor) on the pair's DFlash answers to GSM8K train questions 61-200 (among the draft's
# on-policy prompts; the compressor learns the target's cache, not the draft). Installs the result into
# demo/target, demo/draft (bf16 safetensors; tokenizer.json comes from scripts/fetch_demo_tokenizer.sh)
# and demo/beacon.
# Resumable: rerunning after a kill continues the three trainings from their last checkpoints.
# Usage: scripts/train_demo.sh   (BIN, SHARED, WORK, DEVICE, LM_STEPS, DRAFT_STEPS, PROMPTS, BEACON_PROMPTS,
# BEACON_STEPS override the defaults; relative paths are taken from the directory it is run in)
set -euo pipefail
here=$(pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
BIN=${BIN:+$(abs "$BIN")}
SHARED=${SHARED:+$(abs "$SHARED")}
WORK=${WORK:+$(abs "$WORK")}
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin/specpress}
SHARED=${SHARED:-../shared}
WORK=${WORK:-build/demo-train}
DEVICE=${DEVICE:-cpu}
LM_STEPS=${LM_STEPS:-500}
DRAFT_STEPS=${DRAFT_STEPS:-300}
PROMPTS=${PROMPTS:-300}
BEACON_PROMPTS=${BEACON_PROMPTS:-140}
BEACON_STEPS=${BEACON_STEPS:-150}
case $BEACON_PROMPTS in
  '' | *[!0-9]*) echo "train_demo: BEACON_PROMPTS must be 1..140, got '$BEACON_PROMPTS'" >&2; exit 1 ;;
esac
[ "$BEACON_PROMPTS" -ge 1 ] && [ "$BEACON_PROMPTS" -le 140 ] ||
  { echo "train_demo: BEACON_PROMPTS must be 1..140 (GSM8K train questions 61-200), got $BEACON_PROMPTS" >&2; exit 1; }
[ -x "$BIN" ] || { echo "train_demo: $BIN not built; run scripts/setup.sh first" >&2; exit 1; }
command -v jq >/dev/null || { echo "train_demo: jq not found (apt-get install jq)" >&2; exit 1; }
for f in qwen3-tokenizer/tokenizer_config.json gsm8k_train.jsonl gsm8k_test.jsonl; do
  [ -f "$SHARED/data/$f" ] ||
    { echo "train_demo: $SHARED/data/$f not found (set SHARED to the shared folder)" >&2; exit 1; }
done
mkdir -p "$WORK/tokenizer"
SHARED=$SHARED scripts/fetch_demo_tokenizer.sh "$WORK/tokenizer"
# -f: the shared files are read-only, and so is a copy of one made by an earlier (killed) run
cp -f "$SHARED/data/qwen3-tokenizer/tokenizer_config.json" "$WORK/tokenizer/"

# GSM8K train as chat: the DFlash gsm8k prompt format (turns[0]) answered by the reference solution.
jq -c '{messages: [{role: "user", content: .turns[0]}, {role: "assistant", content: .source.answer}]}' \
  "$SHARED/data/gsm8k_train.jsonl" > "$WORK/gsm8k_train_chat.jsonl"
head -n "$PROMPTS" "$SHARED/data/gsm8k_train.jsonl" > "$WORK/onpolicy_prompts.jsonl"
head -n 8 "$SHARED/data/gsm8k_test.jsonl" > "$WORK/eval_prompts.jsonl"
sed -n "61,$((60 + BEACON_PROMPTS))p" "$SHARED/data/gsm8k_train.jsonl" > "$WORK/beacon_prompts.jsonl"
head -n 10 "$SHARED/data/gsm8k_test.jsonl" > "$WORK/beacon_eval.jsonl"

time "$BIN" train-lm --config demo/target-train-config.json --tokenizer "$WORK/tokenizer" \
  --data "$WORK/gsm8k_train_chat.jsonl" --out "$WORK/target" --resume --device "$DEVICE" \
  --steps "$LM_STEPS" --batch 8 --seq-len 256 --lr 3e-3 --warmup 30 --save-every 50 --seed 1

time "$BIN" train-draft --target "$WORK/target" --on-policy-prompts "$WORK/onpolicy_prompts.jsonl" --gen-tokens 160 \
  --eval-prompts "$WORK/eval_prompts.jsonl" --eval-every 100 --eval-samples 8 --eval-tokens 128 \
  --out "$WORK/draft" --resume --device "$DEVICE" --draft-layers 2 --block-size 16 --target-layer-ids 0,1,2,3 \
  --steps "$DRAFT_STEPS" --batch 4 --seq-len 320 --anchors 16 --lr 3e-3 --warmup 20 --save-every 50 --seed 2

for pair in target draft; do
  mkdir -p "demo/$pair"
  cp -f "$WORK/$pair/config.json" "$WORK/$pair/model.safetensors" "demo/$pair/"
done
cp -f "$WORK/target/generation_config.json" "$WORK/target/tokenizer_config.json" demo/target/
SHARED=$SHARED scripts/fetch_demo_tokenizer.sh demo/target

time "$BIN" train-compressor --target demo/target --draft demo/draft --on-policy-prompts "$WORK/beacon_prompts.jsonl" \
  --eval-prompts "$WORK/beacon_eval.jsonl" --gen-tokens 200 --compress-window 32 --compress-merge 8 --width 128 \
  --out "$WORK/beacon" --resume --device "$DEVICE" --steps "$BEACON_STEPS" --batch 4 --seq-len 320 --lr 1e-3 \
  --warmup 10 --eval-every 50 --eval-samples 10 --save-every 50
mkdir -p demo/beacon
cp -f "$WORK/beacon/compressor.json" "$WORK/beacon/compressor.safetensors" demo/beacon/
echo "train_demo: installed demo/target, demo/draft and demo/beacon" >&2
