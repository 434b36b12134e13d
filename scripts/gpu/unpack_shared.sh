#!/usr/bin/env bash
# unpack_shared.sh — on the GPU machine: unpacks .gpu-shared/data.tar.xz (scripts/gpu/pack_shared.sh)
# into .gpu-shared/data once. Sourced or run by the GPU scripts; SPECPRESS_GPU_SHARED overrides the folder.
shared=${SPECPRESS_GPU_SHARED:-$(pwd)/.gpu-shared}
if [ -f "$shared/data.tar.xz" ] && [ ! -d "$shared/data" ]; then
  tar xJf "$shared/data.tar.xz" -C "$shared"
fi
