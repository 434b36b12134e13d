#!/usr/bin/env bash
# tokenizer_vs_hf.sh — encode the same offline corpus single-threaded with specpress's tokenizer and
# with Hugging Face's (npm `tokenizers`, the official Node binding), print MB/s and tokens/s side by
# side and check the ids are identical over the whole corpus. Exit status 1 if any ids differ.
#
#   bench/tokenizer_vs_hf.sh [BUILD_DIR] [REPEAT]     (defaults: build-tok, 3)
#   EXHAUSTIVE=1 bench/tokenizer_vs_hf.sh ...          also compare every Unicode code point (~2 min)
#
# Corpus: ../shared/data/gsm8k_train.jsonl (question + "\n" + worked answer, one document per
# record) plus every /usr/lib/python3.11/**/*.py that is valid UTF-8 (one document per file).
# Before it, a synthetic Unicode stress corpus is compared for exactness only (see
# tokenizer_corpora.py). Needs cmake, a C++ toolchain, python3, node + npm (installs tokenizers into
# bench/.node once).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-$ROOT/build-tok}"
REPEAT="${2:-3}"
SHARED="$ROOT/../shared"
TOKENIZER_DIR="$SHARED/data/qwen3-tokenizer"
GSM8K="$SHARED/data/gsm8k_train.jsonl"
PYLIB="/usr/lib/python3.11"
NODE_DIR="$ROOT/bench/.node"
HF_VERSION="0.23.2"
WORK="$BUILD_DIR/tokenizer-bench"

for f in "$TOKENIZER_DIR/tokenizer.json" "$GSM8K"; do
  [[ -f "$f" ]] || { echo "missing $f (the project's ../shared data)" >&2; exit 2; }
done
[[ -d "$PYLIB" ]] || { echo "missing $PYLIB (Python standard library sources)" >&2; exit 2; }

# 1. Build the benchmark (configure/refresh first; 2 cores here, so -j2).
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target tokenizer_bench -j2 >/dev/null
BENCH="$(find "$BUILD_DIR" -name tokenizer_bench -type f -perm -u+x | head -n1)"

# 2. Hugging Face tokenizers for Node, pinned, in an ignored folder.
if [[ ! -d "$NODE_DIR/node_modules/tokenizers" ]]; then
  mkdir -p "$NODE_DIR"
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --silent "tokenizers@$HF_VERSION" >/dev/null
fi

# 3. Corpora.
mkdir -p "$WORK"
python3 "$ROOT/bench/tokenizer_corpora.py" real "$GSM8K" "$PYLIB" "$WORK/corpus.jsonl"
python3 "$ROOT/bench/tokenizer_corpora.py" stress "$WORK/stress.jsonl"
[[ "${EXHAUSTIVE:-0}" == 1 ]] && python3 "$ROOT/bench/tokenizer_corpora.py" exhaustive "$WORK/exhaustive.jsonl"

# 4. Run both, single-threaded.
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false UV_THREADPOOL_SIZE=1
STATUS=0
run_hf() {  # corpus repeat ids_out
  node "$ROOT/bench/hf_tokenizer_bench.js" "$NODE_DIR/node_modules" "$TOKENIZER_DIR/tokenizer.json" "$1" "$2" "$3"
}
check_only() {  # name: exactness only, one pass each
  run_hf "$WORK/$1.jsonl" 1 "$WORK/hf_$1_ids.bin" >/dev/null
  local out
  set +e
  out="$("$BENCH" -m "$TOKENIZER_DIR" --corpus "$WORK/$1.jsonl" --repeat 1 --check-ids "$WORK/hf_$1_ids.bin")"
  [[ $? -eq 0 ]] || STATUS=1
  set -e
  echo "$out" | grep -E "MISMATCH|IDS IDENTICAL|^  " | sed "s/^/$1 corpus: /"
}
check_only stress
[[ "${EXHAUSTIVE:-0}" == 1 ]] && check_only exhaustive

HF_OUT="$(run_hf "$WORK/corpus.jsonl" "$REPEAT" "$WORK/hf_ids.bin")"
echo "$HF_OUT"
set +e
SP_OUT="$("$BENCH" -m "$TOKENIZER_DIR" --corpus "$WORK/corpus.jsonl" --repeat "$REPEAT" --check-ids "$WORK/hf_ids.bin")"
[[ $? -eq 0 ]] || STATUS=1
set -e
echo "$SP_OUT"

# 5. Side by side.
python3 - "$HF_OUT" "$SP_OUT" "$HF_VERSION" <<'PY'
import sys
hf, sp, version = sys.argv[1:4]
def result(text, who):
    for line in text.splitlines():
        p = line.split()
        if p[:2] == ["RESULT", who]:
            return float(p[2]), float(p[4])
    sys.exit(f"no RESULT line for {who}")
hf_mb, hf_tok = result(hf, "hf")
sp_mb, sp_tok = result(sp, "specpress")
print()
print(f"{'':24}{'MB/s':>10}{'tokens/s':>14}")
print(f"{'HF tokenizers ' + version:24}{hf_mb:>10.2f}{hf_tok:>14,.0f}")
print(f"{'specpress':24}{sp_mb:>10.2f}{sp_tok:>14,.0f}")
print(f"{'ratio':24}{sp_mb / hf_mb:>9.2f}x")
PY
exit $STATUS
