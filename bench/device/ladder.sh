#!/usr/bin/env bash
# The size ladder (`mixbench reproduce ladder`, configs/grids/ladder.yaml) on one GPU machine, over back-to-back device
# calls of one lease (a warm machine keeps /tmp between calls that follow within ≈ 30 s):
#
#   bash bench/device/ladder.sh start     # carrying .snap and .whl: copies the code to /tmp/mb, seeds the ladder's
#                                         #   results folder /tmp/mb/.ladder with the committed ViT-Ti records of the
#                                         #   lr_sensitivity and placements grids (the ladder's ViT-Ti runs are the same
#                                         #   configurations) and starts one chain a lane group (below)
#   bash bench/device/ladder.sh text      # carrying .data/textmix3: unpacks and tokenises the corpus once a vocabulary;
#                                         #   the LLaMA chains wait for it
#   bash bench/device/ladder.sh cifar     # carrying .data/cifar: the CIFAR-10 images the ViT chains wait for (three
#                                         #   calls: each stays under a call's 64 MiB)
#   bash bench/device/ladder.sh collect   # any time: the records finished so far and the chains' logs
#   bash bench/device/ladder.sh watch     # collect every 60 s for WATCH_S seconds (default 540)
#
# A chain runs rounds for its rungs: `mixbench reproduce ladder --dry-run --only task=T` (the plan: each placement's
# next lrs and seeds from the records finished so far) → bench/grids/grid_lanes.py over its GPUs and cores → again,
# until the plan is empty.  LANES (default for 4 GPUs below): "RUNG_TASKS@GPUS@CORES@JOBS;..." — the rungs run in order
# on those GPUs (comma-separated), pinned to those cores, JOBS runs a GPU.  A plan takes a few seconds of the chain's own
# cores while its GPUs wait; the other chains go on meanwhile.
#
# Every call leaves $OUT/ladder_<step>.tgz: the chains' logs and plans, and every record.json / config.yaml /
# metrics.csv finished since the start.  Runs still going when the machine goes back are lost (resume=auto in a later
# lease starts them again from nothing: no checkpoints come back).
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?"start | text | collect | watch"}
source bench/device/carry.sh
MB=/tmp/mb
LOGS=/tmp/ladder_logs
OUT=${OUT:-/tmp/ladder_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0
DEFAULT_LANES="in1k_vit_small,in1k_vit_tiny,c4_llama_71m@0@0-15@4;c4_llama_130m@1@16-31@3;c4_llama_250m@2,3@32-63@2"
COMMON=(save_weights=false compile=true trainer.enable_progress_bar=false results_dir=.ladder resume=auto)
SETTINGS=("llama:${TEXTMIX[0]}" "llama:${TEXTMIX[1]}" "llama:${TEXTMIX[2]}" llama:data.num_workers=2
          vit:data.path=.data/cifar/cifar10_bigbench.npz vit:data.num_workers=3)

chain() {  # chain TASKS GPUS CORES JOBS: the ladder's rounds for the rungs TASKS (comma-separated), one rung after another
    local tasks=$1 gpus=$2 cores=$3 jobs=$4 task round n name
    cd "$MB" || exit 2
    for task in ${tasks//,/ }; do
        [[ $task == c4_llama* ]] && until [ -e .data/textmix3/.tokenized ]; do sleep 5; done
        [[ $task == in1k* ]] && until [ -e .data/cifar/.ready ]; do sleep 5; done
        name=${task#*_}; round=0
        while :; do
            round=$((round + 1))
            taskset -c "$cores" python3 -m mixbench.cli reproduce ladder --dry-run --only "task=$task" "${SETTINGS[@]}" "${COMMON[@]}" \
                > "$LOGS/plan_${name}_$round.txt" 2> "$LOGS/plan_${name}_$round.log" || { echo "== $task: planning failed"; break; }
            n=$(grep -c '^mixbench' "$LOGS/plan_${name}_$round.txt")
            echo "== $task round $round: $n run(s) at $(date +%T)"
            [ "$n" -gt 0 ] || break
            CUDA_VISIBLE_DEVICES=$gpus taskset -c "$cores" python3 bench/grids/grid_lanes.py "$LOGS/plan_${name}_$round.txt" \
                --gpus "$(echo "$gpus" | tr ',' '\n' | wc -l)" --jobs "$jobs" --logs "$LOGS/runs_${name}_$round" >> "$LOGS/lanes_$name.log" 2>&1
        done
        echo "== $task done at $(date +%T)"
    done
}

pack() {  # (written aside, then moved: a call cut off at its limit still brings back the last whole archive)
    { echo "${LOGS#/}"; (cd / && finished_run_files /tmp/mb/.started tmp/mb/.ladder); } | tar czf "$OUT/.ladder.tmp" -C / -T - 2>/dev/null
    mv "$OUT/.ladder.tmp" "$OUT/ladder_$STEP.tgz"
    echo "records finished since the start: $(find $MB/.ladder -name record.json -newer $MB/.started 2>/dev/null | wc -l)"
    tail -q -n 3 "$LOGS"/chain_*.log 2>/dev/null
    return 0
}

case $STEP in
    start)
        nvidia-smi -L
        python3 -c "import torch, lightning, timm; print('torch', torch.__version__, 'lightning', lightning.__version__, 'timm', timm.__version__)"
        mkdir -p "$MB" "$LOGS"
        if [ -d "${SNAPSHOT:-.snap}" ]; then  # a snapshot of the code made ahead (git archive; see bench/README.md): the tree
            cp -a "${SNAPSHOT:-.snap}"/. "$MB/"   # a call carries may hold edits in progress
            mkdir -p "$MB/.whl" && cp -a "${WHEELS:-.whl}"/. "$MB/.whl/"
        else
            cp -a . "$MB/"
        fi
        (cd "$MB" && use_wheels omegaconf datasets && echo "export PYTHONPATH=$MB${PYTHONPATH:+:$PYTHONPATH}" > /tmp/ladder_env)
        mkdir -p "$MB/.ladder/runs"
        for src in results/proxy/placements/runs results/proxy/lr_sensitivity/runs; do
            [ -d "$src/in1k_vit_tiny" ] && cp -r "$src/in1k_vit_tiny" "$MB/.ladder/runs/"
        done
        touch "$MB/.started"
        export -f chain; export MB LOGS
        IFS=';' read -ra lanes <<< "${LANES:-$DEFAULT_LANES}"
        for lane in "${lanes[@]}"; do
            IFS='@' read -r tasks gpus cores jobs <<< "$lane"
            (source /tmp/ladder_env
             setsid -f bash -c "$(declare -p COMMON SETTINGS); chain $tasks $gpus $cores $jobs" > "$LOGS/chain_${tasks%%,*}.log" 2>&1 < /dev/null)
        done
        sleep 40 ;;
    text)
        mkdir -p "$MB/.data/textmix3" && cp .data/textmix3/* "$MB/.data/textmix3/"
        (cd "$MB" && source /tmp/ladder_env && unpack_textmix \
            && tokenize_text "${TEXTMIX[@]}" data.num_workers=2 > "$LOGS/tokenize.log" 2>&1 \
            && touch .data/textmix3/.tokenized) || { echo "tokenising failed"; tail -5 "$LOGS/tokenize.log"; } ;;
    cifar)
        mkdir -p "$MB/.data/cifar" && cp .data/cifar/cifar10_bigbench.npz "$MB/.data/cifar/" && touch "$MB/.data/cifar/.ready" ;;
    collect) ;;
    watch)
        end=$(($(date +%s) + ${WATCH_S:-540}))
        while [ "$(date +%s)" -lt "$end" ]; do sleep 60; pack > /dev/null; done ;;
esac
pack
