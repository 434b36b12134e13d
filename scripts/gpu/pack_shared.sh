#!/usr/bin/env bash
# pack_shared.sh — builds .gpu-shared, the slice of ../shared that GPU-machine calls carry (the device
# tool carries at most 64 MiB in all, tracked files and .gpu-deps included): the golden fixtures as they
# are, and the data the GPU scripts read packed as data.tar.xz (the Qwen3 tokenizer files and its golden
# vectors, GSM8K test and the first 1,200 GSM8K train records, GSM8K train as Qwen3 chat for train-lm, the
# other benchmark sets). The GPU scripts unpack it with scripts/gpu/unpack_shared.sh. About 10 MB.
# Usage: scripts/gpu/pack_shared.sh [SHARED=../shared] [OUT=.gpu-shared]
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARED=${1:-../shared}
OUT=${2:-.gpu-shared}
command -v jq >/dev/null || { echo "pack_shared: jq not found (apt-get install jq)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data/qwen3-tokenizer"
cp "$SHARED"/data/qwen3-tokenizer/{tokenizer.json,tokenizer_config.json,chat_template.jinja,generation_config.json} \
  "$SHARED"/data/qwen3-tokenizer/{config_Qwen3-4B.json,config_Qwen3-8B.json,golden_encode.jsonl,golden_decode.jsonl} \
  "$tmp/data/qwen3-tokenizer/"
cp "$SHARED"/data/{gsm8k_test.jsonl,math500.jsonl,humaneval.jsonl,mbpp_sanitized_test.jsonl,mt_bench.jsonl,alpaca_first335.jsonl,dflash_subsets.json} \
  "$tmp/data/"
head -n 1200 "$SHARED/data/gsm8k_train.jsonl" > "$tmp/data/gsm8k_train.jsonl"
jq -c '{messages: [{role: "user", content: .turns[0]}, {role: "assistant", content: .source.answer}]}' \
  "$SHARED/data/gsm8k_train.jsonl" > "$tmp/data/gsm8k_train_chat.jsonl"
rm -rf "$OUT"
mkdir -p "$OUT"
cp -r "$SHARED/golden" "$OUT/golden"
chmod -R u+w "$OUT"
tar cJf "$OUT/data.tar.xz" -C "$tmp" data
du -sh "$OUT"
