#!/usr/bin/env bash
# pack_deps.sh — on this (Debian) machine: unpacks the Debian packages the CUDA build needs into .gpu-deps, to be
# carried to the GPU machine (which reaches no package registry), with ../shared/tools/gpu-deps.sh. Its default list
# plus the headers cpp-httplib's Debian build declares its classes with (OpenSSL, zlib, Brotli) and Brotli's
# libraries, so that the CUDA build's `specpress serve` (-DSPECPRESS_SERVER=AUTO) links where the machine has
# OpenSSL's and zlib's libraries (not carried: they would shadow the ones the machine's Python uses).
# Usage: scripts/gpu/pack_deps.sh [OUT]   (default .gpu-deps; replaces it)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.gpu-deps}
SHARED=${SHARED:-../shared}
PKGS="nlohmann-json3-dev libfmt-dev libfmt9 libcli11-dev libcpp-httplib-dev libpcre2-dev libpcre2-8-0 \
libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libcpp-httplib0.11 libutf8proc-dev libutf8proc2 libgtest-dev googletest \
libbenchmark-dev libbenchmark1debian libssl-dev zlib1g-dev libbrotli-dev libbrotli1"
rm -rf "$OUT"
PKGS=$PKGS bash "$SHARED/tools/gpu-deps.sh" "$OUT"
# the device tool carries 64 MiB in all, tracked files included: the added libraries' static archives are never
# linked (the build links their shared ones)
rm -f "$OUT"/usr/lib/x86_64-linux-gnu/{libssl,libcrypto,libz,libbrotlicommon,libbrotlidec,libbrotlienc}.a
# nor are the packages' documentation and googletest's sources (the build links libgtest-dev's libraries)
rm -rf "$OUT"/usr/share/doc "$OUT"/usr/share/man "$OUT"/usr/src
du -sh "$OUT" | cut -f1 | sed "s|^|$OUT without static archives: |"
