#!/usr/bin/env bash
# The size ladder (`mixbench reproduce ladder`, configs/grids/ladder.yaml; GRID=ladder_tokens: every size at 25M tokens,
# configs/grids/ladder_tokens.yaml) on one GPU machine, over back-to-back device
# calls of one lease (a warm machine keeps /tmp between calls that follow within ≈ 30 s):
#
#   bash bench/device/ladder.sh start     # carrying .snap, .whl and .plans: copies the code to /tmp/mb, seeds the
#                                         #   ladder's results folder /tmp/mb/.ladder with its committed records
#                                         #   (results/proxy/ladder/runs; ViT-Ti from the lr_sensitivity grid where it has
#                                         #   none: the same configurations) and starts one chain a lane group (below)
#   bash bench/device/ladder.sh text      # carrying .data/textmix3: unpacks and tokenises the corpus once a vocabulary;
#                                         #   the LLaMA chains wait for it
#   bash bench/device/ladder.sh cifar     # carrying .data/cifar: the CIFAR-10 images the ViT chains wait for (three
#                                         #   calls: each stays under a call's 64 MiB)
#   bash bench/device/ladder.sh plan      # HERE, before the lease: round 1 of each rung from the committed records
#                                         #   (results/proxy/ladder/runs) into .plans/, which start carries along;
#                                         #   LAST="peri dyt" (here and at start) puts those placements' runs at the
#                                         #   end of every round's plan; SKIP="deepnorm" leaves them out of it
#   bash bench/device/ladder.sh collect   # any time: the records finished so far and the chains' logs
#   bash bench/device/ladder.sh watch     # collect every 60 s for WATCH_S seconds (default 540)
#   LANES=… bash bench/device/ladder.sh lanes   # more lanes on the running machine (e.g. small rungs in a lease's last
#                                         #   minutes, where the next 1B run would not finish)
#   STOP="c4_llama_1b" bash bench/device/ladder.sh stop   # those rungs' chains end now, with their runs (no record)
#
# A chain runs rounds for its rungs: `mixbench reproduce ladder --dry-run --only task=T` (the plan: each placement's
# next lrs and seeds from the records finished so far) → bench/grids/grid_lanes.py over its GPUs and cores → again,
# until the plan is empty; with GO_AFTER=FILE (at start) the chains also wait, after their data, for that file
# (bench/device/run_overhead.sh GO=FILE removes it when its bench starts and touches it when the bench is done).  ANALYSIS="RUNG_TASKS@GPU@CORES" (none by default) also starts `mixbench reproduce ladder
# --analyze` of those rungs on that GPU (Pre-LN and Mix-LN again at their best lr with weights kept, then angular
# distance and layer-pruning ΔP; the JSON and PNG files come back under .ladder/analysis/<task>/).  LANES (default for 4 GPUs below): "RUNG_TASKS@GPUS@CORES@JOBS;..." — the rungs run in order
# on those GPUs (comma-separated), pinned to those cores, JOBS runs a GPU (their memory adds up: on an 80 GB H100 two 250M
# runs, 34.9 + 32.1 GiB, and a 130M run, 12.1 GiB when it crashed, ran out; one 250M beside two smaller runs, ≈ 59 GiB, is the layout to try).  A plan takes a few seconds of the chain's own
# cores while its GPUs wait; the other chains go on meanwhile.
#
# Every call leaves $OUT/ladder_<step>.tgz: the chains' logs and plans, and every record.json / config.yaml /
# metrics.csv finished since the start.  Runs still going when the machine goes back are lost (resume=auto in a later
# lease starts them again from nothing: no checkpoints come back).
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?"start | text | cifar | plan | lanes | stop | collect | watch"}
source bench/device/carry.sh
MB=/tmp/mb
LOGS=/tmp/ladder_logs
OUT=${OUT:-/tmp/ladder_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0
DEFAULT_LANES="in1k_vit_tiny,in1k_vit_small,c4_llama_71m,c4_llama_130m,c4_llama_250m@0@0-15@3;c4_llama_1b@1,2,3@16-63@1"  # the 1B rung alone on three cards
GRID=${GRID:-ladder}   # or ladder_tokens (every size at 25M tokens); its records: results/proxy/$GRID, on the machine .$GRID
RESULTS=.$GRID
COMMON=(save_weights=false compile=true trainer.enable_progress_bar=false "results_dir=$RESULTS" resume=auto)
read -ra extra <<< "${EXTRA:-}"   # EXTRA="compile.scope=blocks final_validation=reuse_fit": settings that change no
COMMON+=("${extra[@]}")           # result (not a recipe's: mixbench/results/records.py NOT_RECIPE), here and at start
SETTINGS=("llama:${TEXTMIX[0]}" "llama:${TEXTMIX[1]}" "llama:${TEXTMIX[2]}" llama:data.num_workers=2
          vit:data.path=.data/cifar/cifar10_bigbench.npz vit:data.num_workers=3)
[ "$GRID" = ladder ] || SETTINGS=("${SETTINGS[@]:0:4}")  # ladder_tokens has no ViT family

plan_rung() {  # plan_rung TASK [CORES [ARG ...]]: the next round of one rung from the records in $RESULTS (stdout); a
    # missing data path fails it (exit 2) unless ARG is --data-elsewhere (step plan: made here, the data is the lease's);
    # ONLY="norm=post" (space-separated key=value) keeps the runs with those arguments too
    local task=$1 cores=${2:-0-$(($(nproc) - 1))} only=() item
    shift $(($# < 2 ? $# : 2))
    for item in ${ONLY:-}; do only+=(--only "$item"); done
    taskset -c "$cores" python3 -m mixbench.cli reproduce "$GRID" --dry-run "$@" --only "task=$task" "${only[@]}" "${SETTINGS[@]}" "${COMMON[@]}"
}

put_last() {  # put_last PLAN: the runs of the placements LAST (e.g. "peri dyt") moved to the end of the plan, so that
    # a lease cut short has run the others' first; those of the placements SKIP (e.g. "deepnorm") left out of it: a
    # lease whose time is for the other placements (their later rounds would otherwise wait for SKIP's runs)
    if [ -n "${SKIP:-}" ]; then
        grep -Ev "$(norms_pattern $SKIP)" "$1" > "$1.tmp"
        mv "$1.tmp" "$1"
    fi
    [ -n "${LAST:-}" ] || return 0
    local last
    last=$(norms_pattern $LAST)
    { grep -Ev "$last" "$1"; grep -E "$last" "$1"; } > "$1.tmp"
    mv "$1.tmp" "$1"
}

norms_pattern() {  # norms_pattern NORM ...: the extended regex of a plan line with one of these placements
    local pattern
    pattern=$(printf ' norm=%s |' "$@")
    echo "${pattern%|}"
}

seed_records() {  # seed_records DIR: the ladder's committed records (ViT-Ti from the lr_sensitivity grid where it has none)
    mkdir -p "$1/runs"
    [ -d "results/proxy/$GRID/runs" ] && cp -r "results/proxy/$GRID/runs/." "$1/runs/"
    if [ "$GRID" = ladder ] && [ ! -d "$1/runs/in1k_vit_tiny" ]; then
        for src in results/proxy/placements/runs results/proxy/lr_sensitivity/runs; do
            [ -d "$src/in1k_vit_tiny" ] && cp -r "$src/in1k_vit_tiny" "$1/runs/"
        done
    fi
    return 0
}

chain() {  # chain TASKS GPUS CORES JOBS: the ladder's rounds for the rungs TASKS (comma-separated), one rung after another
    local tasks=$1 gpus=$2 cores=$3 jobs=$4 task round n name
    cd "$MB" || exit 2
    for task in ${tasks//,/ }; do
        [[ $task == c4_llama* ]] && until [ -e .data/textmix3/.tokenized ]; do sleep 5; done
        [[ $task == in1k* ]] && until [ -e .data/cifar/.ready ]; do sleep 5; done
        # after the data: a bench that needs the GPU alone (run_overhead.sh GO=) removes the file when it starts
        [ -n "${GO_AFTER:-}" ] && until [ -e "$GO_AFTER" ]; do sleep 5; done
        name=${task#*_}; round=0
        while :; do
            round=$((round + 1))
            if [ "$round" = 1 ] && [ -f ".plans/${GRID}_$name.txt" ]; then  # made ahead on the CPU (step plan): no GPU waits for it
                cp ".plans/${GRID}_$name.txt" "$LOGS/plan_${name}_$round.txt"
            else
                plan_rung "$task" "$cores" > "$LOGS/plan_${name}_$round.txt" 2> "$LOGS/plan_${name}_$round.log" \
                    || { echo "== $task: planning failed: $(tail -1 "$LOGS/plan_${name}_$round.log")"; break; }
            fi
            put_last "$LOGS/plan_${name}_$round.txt"   # a plan made ahead without LAST too
            n=$(grep -c '^mixbench' "$LOGS/plan_${name}_$round.txt")
            echo "== $task round $round: $n run(s) at $(date +%T)"
            [ "$n" -gt 0 ] || break
            CUDA_VISIBLE_DEVICES=$gpus taskset -c "$cores" python3 bench/grids/grid_lanes.py "$LOGS/plan_${name}_$round.txt" \
                --gpus "$(echo "$gpus" | tr ',' '\n' | wc -l)" --jobs "$jobs" --logs "$LOGS/runs_${name}_$round" >> "$LOGS/lanes_$name.log" 2>&1
            # every run of the round crashed (out of memory, a bad setting): the next round would plan the same runs
            # again; the rung stops, as `mixbench reproduce` does, and the lane goes on to its next rung
            if [[ $(grep "run(s) ended" "$LOGS/lanes_$name.log" | tail -1) =~ \ ([0-9]+)\ run\(s\)\ ended\ \(([0-9]+)\ non-zero ]] \
                && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
                echo "== $task round $round: no run finished, the rung stops (runs_${name}_$round/ says why)"; break
            fi
        done
        echo "== $task done at $(date +%T)"
    done
}

analysis_chain() {  # analysis_chain TASKS GPU CORES: `reproduce ladder --analyze` of the rungs TASKS, one after another
    # (Pre-LN and Mix-LN again at the rung's best lr with weights kept, then angular distance and ΔP; .ladder/analysis/)
    local tasks=$1 gpu=$2 cores=$3 task
    cd "$MB" || exit 2
    until [ -e .data/textmix3/.tokenized ]; do sleep 5; done
    for task in ${tasks//,/ }; do
        echo "== analysis $task at $(date +%T)"
        CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cores" python3 -m mixbench.cli reproduce "$GRID" --analyze --only "task=$task" \
            "${SETTINGS[@]}" "${COMMON[@]}" || echo "== analysis $task failed"
    done
    echo "== analyses done at $(date +%T)"
}

start_lanes() {  # start_lanes "RUNG_TASKS@GPUS@CORES@JOBS;...": one chain a lane, each in its own session (stop)
    local lane tasks gpus cores jobs lanes
    export -f chain plan_rung put_last norms_pattern analysis_chain; export MB LOGS LAST SKIP GRID RESULTS ONLY GO_AFTER
    IFS=';' read -ra lanes <<< "$1"
    for lane in "${lanes[@]}"; do
        IFS='@' read -r tasks gpus cores jobs <<< "$lane"
        (source /tmp/ladder_env
         setsid -f bash -c "$(declare -p COMMON SETTINGS); chain $tasks $gpus $cores $jobs" > "$LOGS/chain_${tasks%%,*}.log" 2>&1 < /dev/null)
    done
}

stop_lanes() {  # stop_lanes TASK ...: the chains whose lane starts with one of these rungs end, with their runs (their
    # sessions: chain, grid_lanes, the runs); a run cut off leaves no record, and a later lease starts it again
    local task pid sid lanes runs run
    for task in "$@"; do
        for pid in $(pgrep -f "; chain $task[ ,]"); do
            sid=$(ps -o sid= -p "$pid" | tr -d ' ')
            runs=()  # grid_lanes starts each run in its own session: found before the chain's session ends
            for lanes in $(pgrep -s "$sid" -f grid_lanes.py); do runs+=($(pgrep -P "$lanes")); done
            kill -TERM -- "-$sid" 2>/dev/null && echo "stopped the chain of $task"
            for run in "${runs[@]}"; do kill -KILL -- "-$run" 2>/dev/null && echo "stopped its run $run"; done
        done
        echo "== $task stopped at $(date +%T)" >> "$LOGS/chain_$task.log"
    done
}

pack() {  # (written aside, then moved: a call cut off at its limit still brings back the last whole archive)
    { echo "${LOGS#/}"; (cd / && finished_run_files /tmp/mb/.started "tmp/mb/$RESULTS" && finished_run_files /tmp/mb/.started "tmp/mb/${RESULTS}_analysis" \
        && find "tmp/mb/$RESULTS/analysis" -mindepth 2 -maxdepth 2 \( -name '*.json' -o -name '*.png' \) 2>/dev/null); } | tar czf "$OUT/.ladder.tmp" -C / -T - 2>/dev/null
    mv "$OUT/.ladder.tmp" "$OUT/ladder_$STEP.tgz"
    echo "records finished since the start: $(find "$MB/$RESULTS" -name record.json -newer $MB/.started 2>/dev/null | wc -l)"
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
        seed_records "$MB/$RESULTS"
        [ -d .plans ] && cp -r .plans "$MB/"
        touch "$MB/.started"
        start_lanes "${LANES:-$DEFAULT_LANES}"
        if [ -n "${ANALYSIS:-}" ]; then  # "RUNG_TASKS@GPU@CORES": the layer analyses of those rungs on that GPU
            IFS='@' read -r tasks gpus cores <<< "$ANALYSIS"
            (source /tmp/ladder_env
             setsid -f bash -c "$(declare -p COMMON SETTINGS); analysis_chain $tasks $gpus $cores" > "$LOGS/chain_analysis.log" 2>&1 < /dev/null)
        fi
        sleep 40 ;;
    text)
        mkdir -p "$MB/.data/textmix3" && cp .data/textmix3/* "$MB/.data/textmix3/"
        (cd "$MB" && source /tmp/ladder_env && unpack_textmix \
            && tokenize_text "${TEXTMIX[@]}" data.num_workers=2 > "$LOGS/tokenize.log" 2>&1 \
            && touch .data/textmix3/.tokenized) || { echo "tokenising failed"; tail -5 "$LOGS/tokenize.log"; } ;;
    cifar)
        mkdir -p "$MB/.data/cifar" && cp .data/cifar/cifar10_bigbench.npz "$MB/.data/cifar/" && touch "$MB/.data/cifar/.ready" ;;
    plan)  # HERE, on the CPU before a lease: round 1 of every rung from the committed records, into .plans/ (carry it in
        # the snapshot or with the start call); the chains plan later rounds themselves
        rm -rf "$RESULTS" && seed_records "$RESULTS" && mkdir -p .plans
        export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
        for task in ${RUNGS:-in1k_vit_tiny in1k_vit_small c4_llama_71m c4_llama_130m c4_llama_250m c4_llama_1b}; do
            plan=".plans/${GRID}_${task#*_}.txt"
            plan_rung "$task" "0-$(($(nproc) - 1))" --data-elsewhere > "$plan" 2> ".plans/${GRID}_${task#*_}.log" \
                || { echo "planning $task failed"; exit 2; }
            put_last "$plan"
            echo "$task: $(grep -c '^mixbench' "$plan") run(s) planned"
        done
        rm -rf "$RESULTS"
        exit 0 ;;
    lanes)  # more lanes on a machine where start ran (LANES as at start; e.g. smaller rungs for a lease's last minutes)
        [ -f /tmp/ladder_env ] || { echo "start first"; exit 2; }
        start_lanes "${LANES:?"LANES=RUNG_TASKS@GPUS@CORES@JOBS;..."}"; sleep 20 ;;
    stop)   # STOP="c4_llama_1b ...": those lanes' chains end now, with the runs they have going
        read -ra stop <<< "${STOP:?"STOP=RUNG_TASK ..."}"; stop_lanes "${stop[@]}" ;;
    collect) ;;
    watch)
        end=$(($(date +%s) + ${WATCH_S:-540}))
        while [ "$(($(date +%s) + 60))" -le "$end" ]; do sleep 60; pack > /dev/null; done ;;  # ends by WATCH_S (+ one pack)
esac
pack
