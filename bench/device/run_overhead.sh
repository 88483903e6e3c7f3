#!/usr/bin/env bash
# On a GPU machine after `bench/device/ladder.sh start` (its code in /tmp/mb, its corpus tokenised there): waits for the
# ladder chains to end (at most WAIT_S seconds, default 0 = no wait), collects their records as ladder.sh does, then runs
# bench/speed/run_overhead.py (the 1B ladder run's time outside its steady steps, before and after: compile.scope,
# final_validation, init_device) on GPU 0, its JSON and table into $OUT (or BENCH_OUT: e.g. /tmp/ladder_logs, which
# ladder.sh's archives carry back when the bench runs in the background over several calls); GO=FILE is removed first and
# touched at the end (ladder.sh GO_AFTER).  STEPS (default 120) steps a variant; VARIANTS (default model,cuda_init).
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -n "${GO:-}" ] && rm -f "$GO"  # the chains wait again (a bench run before, e.g. one that failed, left it behind); start
# this bench before anything lets them go (the text step), or they may have passed the file already
end=$(($(date +%s) + ${WAIT_S:-0}))
while [ "$(date +%s)" -lt "$end" ] && ! grep -qs "done at" /tmp/ladder_logs/chain_*.log; do sleep 10; done
tail -q -n 2 /tmp/ladder_logs/chain_*.log 2>/dev/null
GRID=${GRID:-ladder} bash bench/device/ladder.sh collect | tail -3
source /tmp/ladder_env
cd /tmp/mb || exit 2
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
busy=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
[ "$busy" -eq 0 ] || echo "WARNING: $busy other process(es) on the GPU: these are shared-card numbers (and may run out of memory)"
python3 bench/speed/run_overhead.py --text '.data/textmix3/pkgtext-train.*.json.gz' --steps "${STEPS:-120}" \
    --variants "${VARIANTS:-model,cuda_init}" --out "${BENCH_OUT:-$OUT}/run_overhead_1b.json"
[ -n "${GO:-}" ] && touch "$GO"  # the ladder chains started with GO_AFTER=$GO go on now
