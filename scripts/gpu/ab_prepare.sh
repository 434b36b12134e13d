#!/usr/bin/env bash
# ab_prepare.sh REV [DIR] — run here, before a same-run A/B on the GPU machine (scripts/gpu/ab_compare.sh,
# scripts/gpu/env_ab.sh): exports the source tree of revision REV (git archive, without docs/ and demo/) into the
# ignored folder DIR (default .ab-base; another must be named .ab-<name>, for env_ab.sh's TREE=DIR settings),
# which the device call names in `carry` next to .gpu-deps and .gpu-shared. The GPU machine gets no .git, so
# the baseline has to travel as files.
set -euo pipefail
rev=${1:?usage: scripts/gpu/ab_prepare.sh REV [DIR] (the revision to export; DIR: .ab-base or .ab-<name>)}
dir=${2:-.ab-base}
[[ "$dir" =~ ^\.ab-[A-Za-z0-9_.-]+$ ]] ||
  { echo "ab_prepare.sh: DIR '$dir' must be .ab-<name> in the repository root (letters, digits, '_', '.', '-')," \
    "which git ignores" >&2; exit 2; }
sha=$(git rev-parse --verify "$rev^{commit}") || { echo "ab_prepare.sh: '$rev' is not a commit" >&2; exit 2; }
rm -rf "$dir"
mkdir "$dir"
git archive "$sha" | tar -x -C "$dir" --exclude=docs --exclude=demo
echo "$sha" >"$dir/AB_REVISION"
echo "revision $sha in $dir ($(du -sh "$dir" | cut -f1)); carry [\".gpu-deps\", \".gpu-shared\", \"$dir\"]"
