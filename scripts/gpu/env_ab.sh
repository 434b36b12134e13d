#!/usr/bin/env bash
# env_ab.sh — a same-binary A/B of environment switches on the GPU machine: builds fast_perf and test_gpu once,
# runs the GPU tests under each non-baseline setting (TESTS=1), then times the steps with
# `fast_perf --modes default` under every setting, ROUNDS times in alternation (A B C A B C ...), so that an
# experiment behind an environment variable is measured against its baseline minutes apart in one call; each run
# prints its table's rows and which products the capture-time choice kept (SPECPRESS_WG16_AUTO). The
# tenth pass ran this by hand four times (docs/PERF.md). Logs and JSON: $OUT/env_<label>_r<round>.{log,json},
# $OUT/env_tests_<label>.log.
# Env: SETTINGS (required): settings separated by ';', each LABEL or LABEL:VAR=VALUE[,VAR=VALUE...]; a label
#        alone is the baseline (no extra variables); values without spaces or ';', and a comma that is not
#        followed by VAR= stays in the value. Example:
#        SETTINGS='main;stage1:SPECPRESS_GEMV_STAGE=1;stage2:SPECPRESS_GEMV_STAGE=2;sa:SPECPRESS_LC_SKIP=silu_mul,argmax'
#      SHAPES (4B,8B), CONTEXT (fast_perf's --context; unset: its 512), ROUNDS (2), REF_ITERS (1),
#      SPLIT (0; 1: fast_perf --split 1, so each run also times the issue's split of the steps, the draft's context
#        injection in the draft graph, and prints its line; a BASE revision without the flag runs without it),
#      TESTS (1: run test_gpu under each setting with variables),
#      GTEST_FILTER (Kernels.*:FastPathGolden.*), FAST_PERF / TEST_GPU (binaries; set both with SKIP_BUILD=1 to
#      use existing ones), BASE (a label: also build fast_perf from .ab-base/, made here by
#      scripts/gpu/ab_prepare.sh REV and carried, and time it first in every round under that label, so that one
#      call compares another revision with this tree's settings; no tests run for it), BASE_FAST_PERF (that
#      revision's binary, already built: then .ab-base/ is not built).
#      A setting may also name a tree with TREE=DIR among its words (DIR: an exported revision, made here by
#      scripts/gpu/ab_prepare.sh REV DIR, DIR = .ab-<name>, and carried): that setting's fast_perf (and test_gpu,
#      when TESTS=1) are built from DIR into DIR/build-gpu (with SKIP_BUILD=1, taken from there), so that one
#      call times several revisions in alternation: SETTINGS='main;rownorm:TREE=.ab-rownorm;silu:TREE=.ab-silu'.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -n "${SETTINGS:-}" ] || { echo "env_ab.sh: SETTINGS is empty: expected 'LABEL[:VAR=VALUE,...];...'" >&2; exit 2; }
fast_perf=${FAST_PERF:-build-gpu/bin/fast_perf}
test_gpu=${TEST_GPU:-build-gpu/bin/test_gpu}
base=${BASE:-}
if [ -n "$base" ]; then
  [[ "$base" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "env_ab.sh: BASE: label '$base' must be letters, digits, '_', '.' or '-'" >&2; exit 2; }
  [ -f .ab-base/AB_REVISION ] || [ -n "${BASE_FAST_PERF:-}" ] ||
    { echo "env_ab.sh: BASE=$base but no .ab-base/AB_REVISION: run scripts/gpu/ab_prepare.sh REV first and carry .ab-base" >&2; exit 2; }
fi
# Parse the settings into labels and their variable lists (VAR=VALUE words).
labels=()
declare -A vars tree
IFS=';' read -r -a items <<<"$SETTINGS"
for item in "${items[@]}"; do
  [ -n "$item" ] || continue
  label=${item%%:*}
  assignments=""
  [ "$item" != "$label" ] && assignments=${item#*:}
  if ! [[ "$label" =~ ^[A-Za-z0-9_.-]+$ ]]; then
    echo "env_ab.sh: SETTINGS: label '$label' must be letters, digits, '_', '.' or '-'" >&2
    exit 2
  fi
  words=()
  if [ -n "$assignments" ]; then
    IFS=',' read -r -a parts <<<"$assignments"
    for p in "${parts[@]}"; do  # a comma not followed by VAR= is part of the value (SPECPRESS_LC_SKIP=silu_mul,argmax)
      if [ "${#words[@]}" -eq 0 ] || [[ "$p" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
        words+=("$p")
      else
        words[-1]+=",$p"
      fi
    done
    for w in "${words[@]}"; do
      [[ "$w" =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] ||
        { echo "env_ab.sh: SETTINGS: '$w' in '$item' is not VAR=VALUE" >&2; exit 2; }
    done
  fi
  [ -z "${vars[$label]+set}" ] || { echo "env_ab.sh: SETTINGS: label '$label' appears twice" >&2; exit 2; }
  env_words=()  # the words but TREE=DIR, which names the setting's tree instead of a variable
  for w in "${words[@]}"; do
    if [[ "$w" == TREE=* ]]; then
      dir=${w#TREE=}
      [ -z "${tree[$label]+set}" ] || { echo "env_ab.sh: SETTINGS: '$item' names TREE twice" >&2; exit 2; }
      [ -f "$dir/CMakeLists.txt" ] ||
        { echo "env_ab.sh: SETTINGS: TREE=$dir in '$item' is not a source tree (no $dir/CMakeLists.txt):" \
          "run scripts/gpu/ab_prepare.sh REV $dir first and carry $dir" >&2; exit 2; }
      tree[$label]=$dir
    else
      env_words+=("$w")
    fi
  done
  labels+=("$label")
  vars[$label]="${env_words[*]:-}"
done
[ "${#labels[@]}" -ge 1 ] || { echo "env_ab.sh: SETTINGS has no setting" >&2; exit 2; }
declare -A binary tests
for label in "${labels[@]}"; do
  binary[$label]=$fast_perf
  tests[$label]=$test_gpu
  if [ -n "${tree[$label]+set}" ]; then
    binary[$label]=${tree[$label]}/build-gpu/bin/fast_perf
    tests[$label]=${tree[$label]}/build-gpu/bin/test_gpu
  fi
done
if [ -n "$base" ]; then
  [ -z "${vars[$base]+set}" ] || { echo "env_ab.sh: BASE label '$base' is also in SETTINGS" >&2; exit 2; }
  labels=("$base" "${labels[@]}")
  vars[$base]=""
  binary[$base]=${BASE_FAST_PERF:-.ab-base/build-gpu/bin/fast_perf}
fi

# Build (the settings above are checked first, so that a typo fails at once): this tree, BASE's, each TREE.
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  source scripts/gpu/gpu_env.sh
  gpu_build . build-gpu /tmp/env_ab fast_perf test_gpu || exit 1
  if [ -n "$base" ] && [ -z "${BASE_FAST_PERF:-}" ]; then
    echo "$base = $(cat .ab-base/AB_REVISION) (.ab-base)"
    gpu_build .ab-base .ab-base/build-gpu /tmp/env_ab_base fast_perf || exit 1
  fi
  for label in "${labels[@]}"; do
    [ -n "${tree[$label]+set}" ] || continue
    dir=${tree[$label]}
    echo "$label = $(cat "$dir/AB_REVISION" 2>/dev/null || echo "the tree in $dir") ($dir)"
    targets=(fast_perf)
    [ "${TESTS:-1}" = 1 ] && targets+=(test_gpu)
    gpu_build "$dir" "$dir/build-gpu" "/tmp/env_ab_$label" "${targets[@]}" || exit 1
  done
fi
for label in "${labels[@]}"; do
  [ -x "${binary[$label]}" ] || { echo "env_ab.sh: no fast_perf for '$label' at ${binary[$label]}" >&2; exit 2; }
  [ "${TESTS:-1}" != 1 ] || [ -z "${tree[$label]+set}" ] || [ -x "${tests[$label]}" ] ||
    { echo "env_ab.sh: no test_gpu for '$label' at ${tests[$label]} (TESTS=1)" >&2; exit 2; }
done

status=0
if [ "${TESTS:-1}" = 1 ]; then
  for label in "${labels[@]}"; do
    # the baseline (and BASE) ran the tests elsewhere; a setting with a tree of its own runs that tree's tests
    [ -n "${vars[$label]}" ] || [ -n "${tree[$label]+set}" ] || continue
    # shellcheck disable=SC2086  # the variable list is split into VAR=VALUE words on purpose
    env ${vars[$label]} "${tests[$label]}" --gtest_filter="${GTEST_FILTER:-Kernels.*:FastPathGolden.*}" \
      >"$OUT/env_tests_$label.log" 2>&1
    rc=$?
    echo "tests under $label (${vars[$label]}): exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/env_tests_$label.log" | tr '\n' ' ')"
    [ $rc = 0 ] || status=1
  done
fi
for round in $(seq 1 "${ROUNDS:-2}"); do
  for label in "${labels[@]}"; do
    log="$OUT/env_${label}_r$round"
    note=${vars[$label]:-baseline}
    [ -n "${tree[$label]+set}" ] && note="${tree[$label]}${vars[$label]:+, ${vars[$label]}}"
    [ "$label" = "$base" ] && note=".ab-base, timed first in every round"
    echo "== $label ($note), round $round"
    # a revision (BASE's or a TREE's) older than fast_perf's --modes flag runs every mode, and one older than
    # --split runs without it
    src=.
    [ "$label" = "$base" ] && src=.ab-base
    [ -n "${tree[$label]+set}" ] && src=${tree[$label]}
    modes=(--modes default)
    [ -f "$src/bench/fast_perf.cpp" ] && ! grep -q -- '"--modes"' "$src/bench/fast_perf.cpp" && modes=()
    if [ "${SPLIT:-0}" = 1 ] && [ ${#modes[@]} -gt 0 ] && { [ "$src" = . ] ||
      grep -q -- '"--split"' "$src/bench/fast_perf.cpp" 2>/dev/null; }; then
      modes+=(--split 1)
    fi
    # shellcheck disable=SC2086  # the variable list is split into VAR=VALUE words on purpose
    if ! env ${vars[$label]} "${binary[$label]}" --shapes "${SHAPES:-4B,8B}" "${modes[@]}" --ref-iters "${REF_ITERS:-1}" \
      ${CONTEXT:+--context "$CONTEXT"} --json "$log.json" >"$log.log" 2>&1; then
      echo "fast_perf failed under $label:"
      tail -5 "$log.log"
      status=1
      continue
    fi
    # the table's rows, and which products the capture-time choice kept (SPECPRESS_WG16_AUTO), in a short form
    grep -E "^device|^decode \(|^verify|^draft|^DFlash|^GEMV: M=1|multi-row products chosen at capture|^the issue's split" \
      "$log.log" |
      sed -E 's/^(Qwen3-[^:]*): multi-row products chosen at capture.* replay ([0-9.]+) ms with cuBLASLt, ([0-9.]+) ms with the wgmma kernel.*: kept (.*)$/\1 capture-time choice: replay cuBLASLt \2 ms, wgmma \3 ms: kept \4/' |
      sed -E "s/^the issue's split of the steps .* ms: decode ([0-9.]+), verify \(the target's own forward\) ([0-9.]+) \(([0-9.]+)x decode[^)]*\), draft ([0-9.]+) \(([0-9.]+)x\), cycle ([0-9.]+) \(([0-9.]+)x[^)]*\)$/issue's split: decode \1, verify \2 (\3x), draft \4, cycle \6 (\7x)/" |
      cut -c1-110
  done
done
exit $status
