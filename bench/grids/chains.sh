# Sourced (from the repository root, after bench/device/carry.sh) by the proxy chains of bench/grids/table2_proxy.sh and
# bench/grids/table3_proxy.sh: one `mixbench reproduce TABLE --scale proxy` per PARTS item ("GPU:NORM:SEEDS ..."), each on
# CUDA_VISIBLE_DEVICES=GPU with its chains side by side, from PARTS, ARGS (the reproduce settings), OUT, PRETRAIN_DATA,
# EXTRA_PRETRAIN, DEADLINE_S and script_start.  bench/grids/search_proxy.sh uses tokenize_pretraining (carry.sh's tokenize_text).

default_parts() {  # default_parts NORMS SEEDS: the chains (norm × seed) dealt round-robin over $GPUS (default: the machine's), as PARTS
    local gpus=${GPUS:-$(gpu_count)} n=0 norm seed gpu
    declare -A seeds_of=()
    for norm in $1; do
        for seed in ${2//,/ }; do
            gpu=$(( n % gpus )); n=$(( n + 1 ))
            seeds_of[$gpu:$norm]+="${seeds_of[$gpu:$norm]:+,}$seed"
        done
    done
    for gpu in $(seq 0 $(( gpus - 1 ))); do
        for norm in $1; do
            [ -z "${seeds_of[$gpu:$norm]:-}" ] || printf '%s ' "$gpu:$norm:${seeds_of[$gpu:$norm]}"
        done
    done
}

plan_parts() {  # plan_parts TABLE: the dry-run plan of every part into $OUT/TABLE_proxy_plan.txt, and on stdout
    local table=$1 part gpu norm seeds
    : > "$OUT/${table}_proxy_plan.txt"
    for part in $PARTS; do
        IFS=: read -r gpu norm seeds <<< "$part"
        echo "## GPU $gpu" >> "$OUT/${table}_proxy_plan.txt"
        python3 -m mixbench.cli reproduce "$table" --scale proxy --seeds "$seeds," --only "norm=$norm" --dry-run "${ARGS[@]}" \
            >> "$OUT/${table}_proxy_plan.txt"
    done
    cat "$OUT/${table}_proxy_plan.txt"
}

tokenize_pretraining() {  # the pretraining corpus once, before the chains would each build the same cache
    tokenize_text "${PRETRAIN_DATA[@]}" ${EXTRA_PRETRAIN:-}
}

run_parts() {  # run_parts TABLE [FLAG ...]: run every part, stop them at DEADLINE_S (if > 0), write wall_time.txt; 1 if any failed
    local table=$1 part gpu norm seeds n pid status=0 watchdog= start
    shift
    local pids=()
    start=$(date +%s)
    for part in $PARTS; do
        IFS=: read -r gpu norm seeds <<< "$part"
        n=$(tr ',' '\n' <<< "$seeds" | wc -l)
        CUDA_VISIBLE_DEVICES=$gpu setsid python3 -m mixbench.cli reproduce "$table" --scale proxy --seeds "$seeds," --only "norm=$norm" \
            --jobs "$n" "$@" "${ARGS[@]}" > "$OUT/console_${norm}_${seeds//,/}.txt" 2>&1 &
        pids+=($!)
    done
    if [ "${DEADLINE_S:-0}" -gt 0 ]; then   # stop the chains (each its own process group) in time to collect what finished
        ( sleep $(( DEADLINE_S - ($(date +%s) - script_start) )); echo "deadline of $DEADLINE_S s reached: the chains were stopped"
          for pid in "${pids[@]}"; do kill -TERM -- "-$pid"; done; sleep 10
          for pid in "${pids[@]}"; do kill -KILL -- "-$pid"; done ) < /dev/null > "$OUT/deadline.txt" 2>&1 &
        watchdog=$!
    fi
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    if [ -n "$watchdog" ]; then pkill -P "$watchdog" sleep; kill "$watchdog"; fi 2>/dev/null || true
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "no GPU")
    echo "wall time: $(( $(date +%s) - start )) s on $(nvidia-smi -L 2>/dev/null | wc -l) × ${gpu}; parts: $PARTS" | tee "$OUT/wall_time.txt"
    return $status
}
