set -u
source scripts/gpu/gpu_env.sh
t0=$(date +%s)
gpu_build . build-gpu /tmp/b fast_perf || exit 1
echo "build $(( $(date +%s) - t0 )) s"
timeout 60 ./build-gpu/bin/fast_perf --shapes 4B --modes default --ref-iters 1 --json $OUT/p.json > $OUT/p.log 2>&1; echo "fast_perf rc=$?"
grep -o "the LM heads with their argmax on it (SPECPRESS_WG16_HEAD_ARGMAX): [a-z]*" $OUT/p.log; grep -o '"wg16_head_argmax":[a-z]*' $OUT/p.json
grep -E "^decode \(|^verify|^draft step|^DFlash|capture-time" $OUT/p.log
echo "total $(( $(date +%s) - t0 )) s"
