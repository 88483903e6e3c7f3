#!/usr/bin/env bash
# The committed placement-search proxy studies (issue 24), run over a machine's GPUs by bench/grids/grid_lanes.py:
#   llama24_alpha  LLaMA-71M width at 24 blocks, the Table 1 proxy budget (760 steps) as the full rung: Mix-LN's k in 0..24
#   vit_plan       ViT-Ti on CIFAR-10 8k/2k (930 steps): k Post-LN blocks, then Pre-LN, the last j of hybrid or sandwich
# The recipes are the placements grid's (configs/grids/placements.yaml, via `mixbench reproduce placements --dry-run`).
# Successive halving with its first rung at 50 % of the budget (LLaMA 380 of 760 steps, ViT 464 of 930) and
# reduction factor 2: rungs 50 % and 100 %; a rung at 25 % would prune the plans that start slowly (Pre-LN's warm-up;
# results/proxy/placements/README.md).  Then each study's best plan, pre and mix(α=0.25) at the full budget with
# SEEDS confirmation seeds (never the search seed 0), and the reports.
#
# Needs the data of bench/grids/placements_proxy.sh (.data/textmix3, .data/cifar; see its header) and Optuna
# (pip install -e ".[search]"; a .whl/ folder with the optuna, sqlalchemy, alembic, colorlog, Mako wheels works offline).
# STUDIES: which studies (default both); TRIALS: finished trials per study (a re-run tops the studies up to it; runs of
# trials cut off by DEADLINE_S are not continued, their trials fail when the heartbeat stops; failed trials count);
# LANE_TRIALS: trials a search process runs at most (default TRIALS / (GPUs × JOBS), rounded up; 1 keeps a process that
# finished early from starting a trial the deadline would cut); JOBS: runs at a time a GPU (a LLaMA run at 24 blocks
# and batch 128 takes ≈ 18 GiB: at most 7 on a 140 GiB H200, 4 on an 80 GiB H100); PHASES: any of search confirm
# report (default all; a second device call can run "confirm report"); DEADLINE_S: stop what still runs after that
# many seconds, per phase; DRY_RUN=1: print the plan.  REUSE (default
# results/proxy/placements, the grid with the same recipes): confirmation runs whose settings and seed a finished run
# there has are copied from it (`mixbench search --confirm --reuse-from`) instead of run again; REUSE= turns that off.
# Output: $RESULTS/search/<study>/ (study.sqlite3, trials/, confirm/, report.md, score_vs_plan.png; RESULTS=.search is
# git-ignored, so a second device call on the warm machine continues it), $OUT/search_lanes.log and $OUT/search_runs.tgz
# (the studies, records, configs, metrics logs and reports; no weights).
set -uo pipefail
cd "$(dirname "$0")/../.."
RESULTS=${RESULTS:-.search}
OUT=${OUT:-$RESULTS}
STUDIES=${STUDIES:-"llama24_alpha vit_plan"}
TRIALS=${TRIALS:-24}
SEEDS=${SEEDS:-3}
REUSE=${REUSE-results/proxy/placements}   # finished runs of the confirmation's settings and seeds there are reused ("" = none)
JOBS=${JOBS:-3}
source bench/device/carry.sh
source bench/grids/chains.sh
GPUS=${GPUS:-$(gpu_count)}
mkdir -p "$OUT" "$RESULTS"
use_wheels optuna datasets omegaconf
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
COMMON=(save_weights=false compile=true trainer.enable_progress_bar=false)
TEXT=('data.path=.data/textmix3/pkgtext-train.*.json.gz' data.tokenizer=embedded model.vocab_size=8192 data.num_workers=2)
IMAGES=(data.path=.data/cifar/cifar10_bigbench.npz data.num_workers=3)
PHASES=${PHASES:-"search confirm report"}
if [[ $STUDIES == *llama* && $PHASES != report ]]; then  # the corpus tokenised once, before the lanes would each build the same cache
    unpack_textmix
    PRETRAIN_DATA=("${TEXT[@]:0:3}")
    [ "${DRY_RUN:-0}" = 1 ] || tokenize_pretraining || { echo "tokenising the corpus failed"; exit 2; }
fi

recipe() {  # the placements grid's proxy recipe of one cell, without its norm and seed
    python3 -m mixbench.cli reproduce placements --scale proxy --seeds 1 --dry-run --only norm=pre "$@" 2>/dev/null \
        | grep '^mixbench run' | head -1 | sed -e 's/^mixbench run //' -e 's/ norm=pre / /' -e 's/ seed=0 / /' -e 's/ seed=0$//'
}

study_args() {  # mixbench search arguments of one study
    case $1 in
        llama24_alpha) echo "--space alpha --min-steps 380 $(recipe --only task=c4_llama_71m --only model.num_layers=24)";;
        vit_plan) echo "--space plan --kinds hybrid,sandwich --min-steps 464 $(recipe --only task=in1k_vit_tiny)";;
        *) echo "unknown study $1" >&2; return 2;;
    esac
}

data_args() { case $1 in llama*) printf '%q ' "${TEXT[@]}";; vit*) printf '%q ' "${IMAGES[@]}";; esac; }

lanes=$((GPUS * JOBS))
plan=$RESULTS/search_plan.txt
: > "$plan"
for study in $STUDIES; do
    args=$(study_args "$study") || exit 2
    per_lane=${LANE_TRIALS:-$(( (TRIALS + lanes - 1) / lanes ))}
    for _ in $(seq "$lanes"); do  # every lane a process of the same study: they share its SQLite storage
        echo "mixbench search --study $study --results-dir $RESULTS --trials $per_lane --max-trials $TRIALS --pruner halving --reduction-factor 2 $args $(data_args "$study")${COMMON[*]}" >> "$plan"
    done
done
echo "$(grep -c . "$plan") search processes planned ($TRIALS trials a study, $lanes lanes: $GPUS GPU(s) × $JOBS)"
check=$(head -1 "$plan" | sed 's/^mixbench search /search --dry-run /')
eval python3 -m mixbench.cli "$check" > /dev/null || { echo "the search settings do not compose"; exit 2; }
[ "${DRY_RUN:-0}" = 1 ] && { cat "$plan"; exit 0; }
[[ $PHASES != *search* ]] || python3 bench/grids/grid_lanes.py "$plan" --gpus "$GPUS" --jobs "$JOBS" --deadline "${DEADLINE_S:-0}" --logs "$RESULTS/logs" 2>&1 | tee "$OUT/search_lanes.log"
confirm=$RESULTS/confirm_plan.txt
: > "$confirm"
for study in $STUDIES; do
    [[ $PHASES == *confirm* ]] || continue
    if [ -n "$REUSE" ]; then  # the confirmation runs the earlier runs of $REUSE already are: copied, not run again
        [ -d "$REUSE" ] || { echo "REUSE=$REUSE: no such folder (REUSE= runs every confirmation run)"; exit 2; }
        python3 -m mixbench.cli search --confirm "$study" --seeds "$SEEDS" --results-dir "$RESULTS" --reuse-from "$REUSE" --reuse-only \
            || exit 2
    fi
    python3 -m mixbench.cli search --confirm "$study" --seeds "$SEEDS" --dry-run --results-dir "$RESULTS" ${REUSE:+--reuse-from "$REUSE"} \
        >> "$confirm" || { echo "the confirmation of $study could not be planned"; exit 2; }
done
[ ! -s "$confirm" ] || python3 bench/grids/grid_lanes.py "$confirm" --gpus "$GPUS" --jobs "$JOBS" --deadline "${DEADLINE_S:-0}" --logs "$RESULTS/logs" 2>&1 | tee -a "$OUT/search_lanes.log"
for study in $STUDIES; do
    [[ $PHASES != *report* ]] || python3 -m mixbench.cli search --report "$study" --results-dir "$RESULTS" > /dev/null
done
echo "$GPUS × $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" >> "$OUT/search_lanes.log"
find "$RESULTS" \( -name record.json -o -name config.yaml -o -name metrics.csv -o -name study.sqlite3 -o -name report.md \
    -o -name score_vs_plan.png -o -name '*plan.txt' \) -print0 | tar czf "$OUT/search_runs.tgz" --null -T -
