#!/usr/bin/env bash
# ab_prepare.sh REV — run here, before a same-run A/B on the GPU machine (scripts/gpu/ab_compare.sh): exports
# the source tree of revision REV (git archive, without docs/ and demo/) into the ignored folder .ab-base/,
# which the device call names in `carry` next to .gpu-deps and .gpu-shared. The GPU machine gets no .git, so
# the baseline has to travel as files.
set -euo pipefail
rev=${1:?usage: scripts/gpu/ab_prepare.sh REV (the baseline revision)}
sha=$(git rev-parse --verify "$rev^{commit}") || { echo "ab_prepare.sh: '$rev' is not a commit" >&2; exit 2; }
rm -rf .ab-base
mkdir .ab-base
git archive "$sha" | tar -x -C .ab-base --exclude=docs --exclude=demo
echo "$sha" >.ab-base/AB_REVISION
echo "baseline $sha in .ab-base ($(du -sh .ab-base | cut -f1)); carry [\".gpu-deps\", \".gpu-shared\", \".ab-base\"]"
