#!/usr/bin/env bash
# One device lease (4 GPUs) for issue-free continuation of the lr_sensitivity grid (configs/grids/placements.yaml):
# a chain that runs as a daemon (setsid) from its own copy of the code in /tmp/mb, so that the checkout each later
# call copies over the repository cannot change the code under a running run.  Calls follow each other within ≈ 30 s:
#
#   bash bench/device/lr_sweep.sh start     # carrying .data/cifar and .whl: copies the code, the placements grid's
#                                           #   and results/proxy/lr_sensitivity's records into /tmp/mb/.grid, starts
#                                           #   the chain: ViT sweep (seed 0) → ViT at each best lr (seeds 0-2) →
#                                           #   [waits for the corpus] LLaMA-24 sweep (seed 0) → LLaMA at each best lr
#                                           #   (24 blocks seeds 0-2, 12 blocks at the 24-block best, seeds 0-2)
#   bash bench/device/lr_sweep.sh text      # carrying .data/textmix3: unpacks and tokenises the corpus for the chain
#   bash bench/device/lr_sweep.sh collect   # any time: the records finished so far, and the chain's log
#   bash bench/device/lr_sweep.sh watch     # the same every 60 s for WATCH_S seconds (keeps the machine held)
#
# Settings of `start` (the chain's): BLOCKS (default "vision lm"; "lm": the LLaMA blocks only), LM_JOBS (LLaMA runs at a
# time a GPU, default 3), FIRST and SETTLED (placements, space-separated: see chain below), PLAN (a file of `mixbench run`
# lines made ahead, in the git-ignored .plans/ (carried with the call): the `^mixbench` lines of `DRY_RUN=1 ...
# bench/grids/placements_proxy.sh` with results_dir=.grid (results/proxy/lr_sensitivity/README.md, Next runs); the LLaMA
# blocks run just these lines).
#
# Every call leaves $OUT/lr_sweep_<step>.tgz: the chain's logs and every record.json / config.yaml / metrics.csv the
# chain finished (newer than its start).  Runs still going when the machine goes back are lost (resume=auto in a later
# session starts them anew).
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?"start | text | collect | watch"}
source bench/device/carry.sh
MB=/tmp/mb
OUT=${OUT:-/tmp/lr_sweep_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0

chain() {  # the daemon: each block of the grid in turn, in /tmp/mb
    cd "$MB" || exit 2
    local gpus lm_jobs=${LM_JOBS:-3}
    gpus=$(nvidia-smi -L | wc -l)
    block() { echo "== $* at $(date +%T)"; env "$@" GRID=lr_sensitivity GPUS="$gpus" RESULTS=.grid OUT=/tmp/lr_sweep_logs \
        bash bench/grids/placements_proxy.sh; echo "== rc=$? at $(date +%T)"; }
    alternation() { echo "$*" | sed 's/ \+/|/g'; }  # "a b c" → "a|b|c", for a regular expression
    plan() { env DRY_RUN=1 "$@" GRID=lr_sensitivity RESULTS=.grid OUT=/tmp/lr_sweep_logs bash bench/grids/placements_proxy.sh | grep '^mixbench'; }
    if [[ ${BLOCKS:-vision lm} == *vision* ]]; then
        block FAMILIES=vision SEEDS=0, JOBS=4
        block FAMILIES=vision BEST_FROM=.grid SEEDS=0,1,2 JOBS=4
    fi
    until [ -e .data/textmix3/.tokenized ]; do sleep 5; done
    if [ -n "${PLAN:-}" ]; then  # a plan made ahead: its lines only, none planned here (planning holds the GPU idle ≈ 1 min)
        block FAMILIES=none PREPEND="$PLAN" JOBS="$lm_jobs"; echo "== chain done at $(date +%T)"; return
    fi
    # the LLaMA sweep nearest lrs first (3e-3, 3e-4, then 1e-3, 1e-2, 1e-4), so that a lease that ends early leaves
    # every placement with the lrs on both sides of the default; within an lr the placements of FIRST first (those
    # whose best may still move).  SETTLED: placements whose best lr the rest of the sweep cannot move (the lrs it
    # still lacks lie beyond one already worse than their best): their best-lr runs share the sweep's block, so that
    # its last runs do not leave lanes idle (24 blocks; their 12-block runs come with the next block)
    local first
    first=$(alternation "${FIRST:-}")
    plan FAMILIES=lm SEEDS=0, | awk -v first="^(${first:-@})$" '{o=9; f=1; for(i=1;i<=NF;i++) {
            if($i~/^optim.lr=/){split($i,a,"="); o=index("0.003 0.0003 0.001 0.01 0.0001", a[2])}
            if($i~/^norm=/){split($i,b,"="); if(b[2]~first) f=0}}
            print o"\t"f"\t"$0}' | sort -s -n -k1,1 -k2,2 | cut -f3- > /tmp/lr_sweep_logs/plan_lm_sweep.txt
    : > /tmp/lr_sweep_logs/plan_lm_settled.txt
    [ -z "${SETTLED:-}" ] || plan FAMILIES=lm BEST_FROM=.grid SEEDS=0,1,2 | grep -E " norm=($(alternation "$SETTLED")) .* model.num_layers=24 " \
        > /tmp/lr_sweep_logs/plan_lm_settled.txt
    block FAMILIES=none PREPEND=/tmp/lr_sweep_logs/plan_lm_sweep.txt APPEND=/tmp/lr_sweep_logs/plan_lm_settled.txt JOBS="$lm_jobs"
    block FAMILIES=lm BEST_FROM=.grid SEEDS=0,1,2 JOBS="$lm_jobs"
    echo "== chain done at $(date +%T)"
}

pack() {  # (written aside, then moved: a call cut off at its limit still brings back the last whole archive)
    { echo tmp/lr_sweep_logs; echo tmp/mb/.grid/plan.txt; (cd / && finished_run_files /tmp/mb/.started tmp/mb/.grid); } \
        | tar czf "$OUT/.lr_sweep.tmp" -C / -T - 2>/dev/null
    mv "$OUT/.lr_sweep.tmp" "$OUT/lr_sweep_$STEP.tgz"
    echo "records finished since the start: $(find $MB/.grid -name record.json -newer $MB/.started 2>/dev/null | wc -l)"
    grep -h "^== \|--resume" /tmp/lr_sweep_logs/chain.log 2>/dev/null | tail -8
    tail -3 /tmp/lr_sweep_logs/lanes.log 2>/dev/null
    return 0  # a report: a log not written yet is no failure (`start && text` in one call goes on)
}

case $STEP in
    start)
        nvidia-smi -L
        python3 -c "import torch, lightning, timm; print('torch', torch.__version__, 'lightning', lightning.__version__, 'timm', timm.__version__)"
        mkdir -p "$MB" /tmp/lr_sweep_logs
        cp -a . "$MB/"
        (cd "$MB" && use_wheels omegaconf datasets && echo "export PYTHONPATH=${PYTHONPATH:-}" > /tmp/lr_sweep_env)
        mkdir -p "$MB/.grid/runs"
        for src in results/proxy/placements/runs results/proxy/lr_sensitivity/runs; do cp -r "$src"/. "$MB/.grid/runs/"; done
        touch "$MB/.started"
        export -f chain; export MB BLOCKS LM_JOBS FIRST SETTLED PLAN
        (source /tmp/lr_sweep_env; setsid -f bash -c chain > /tmp/lr_sweep_logs/chain.log 2>&1 < /dev/null)
        sleep 45 ;;
    text)
        mkdir -p "$MB/.data/textmix3" && cp .data/textmix3/* "$MB/.data/textmix3/"
        (cd "$MB" && source /tmp/lr_sweep_env && unpack_textmix \
            && export PYTHONPATH=$MB${PYTHONPATH:+:$PYTHONPATH} \
            && tokenize_text "${TEXTMIX[@]}" data.num_workers=2 > /tmp/lr_sweep_logs/tokenize.log 2>&1 \
            && touch .data/textmix3/.tokenized) || { echo "tokenising failed"; tail -5 /tmp/lr_sweep_logs/tokenize.log; } ;;
    collect) ;;
    watch)  # collect every 60 s until the call's limit (WATCH_S, default 540 s) or the chain's end
        end=$(($(date +%s) + ${WATCH_S:-540}))
        while [ "$(date +%s)" -lt "$end" ] && ! grep -q "chain done" /tmp/lr_sweep_logs/chain.log; do sleep 60; pack > /dev/null; done ;;
esac
pack
