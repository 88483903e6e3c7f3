#!/usr/bin/env bash
# GRID=lr_sensitivity: the same placements at half-decade learning rates (LLaMA 24 blocks, ViT-Ti; one seed), and with
# BEST_FROM=DIR each placement at its best lr there (`reproduce --best-from`; LLaMA 12 blocks too), SEEDS=0,1,2.
# The placements grid at proxy scale (configs/grids/placements.yaml): every placement × LLaMA-71M width at 24 and 12
# blocks (760 steps, 24.9M tokens of textmix) and × ViT-Ti on CIFAR-10 8k/2k (30 epochs), SEEDS seeds, spread over the
# machine's GPUs by bench/grids/grid_lanes.py (JOBS runs at a time a GPU, each on its own cores).
#
# Needs, in the repository root (git-ignored; a device call carries them):
#   .data/textmix3/pkgtext-train.0000{1,3,8}-of-00009.json.{gz,xz} + pkgtext-validation.00000-of-00001.json.gz
#       (shards of ../shared/data/textmix, 26.6M tokens; xz-compressed copies are unpacked first: they keep a device
#       call under its 64 MiB)
#   .data/cifar/cifar10_bigbench.npz   (../shared/data/cifar10-test: the official CIFAR-10 test set)
#   .whl/ with the datasets / omegaconf wheels where those are not installed (bench/device/wheels.sh)
# PREPEND / APPEND: files of extra `mixbench run` lines run before / after the grid (diagnoses, ablations).
# The plan leaves out runs already finished in $RESULTS (`reproduce --dry-run --resume`; PREPEND / APPEND lines are kept).
# Order: the non-LLaMA lines first (VISION_JOBS a GPU, default JOBS) while the corpus tokenises, then the LLaMA lines.
# DEADLINE_S: stop what still runs that many seconds after this script started — unpacking and tokenising included, so
# a device call's limit holds (runs use resume=auto: the next call continues them).  Leave ~45 s of the call's limit
# after it: stopped runs get 30 s to checkpoint (grid_lanes.py --grace), then the records are packed.
# Output: $OUT/placements_runs.tgz (records, configs, metrics logs; no weights) and $OUT/lanes.log.
set -uo pipefail
script_start=$(date +%s)
cd "$(dirname "$0")/../.."
RESULTS=${RESULTS:-.grid}
GRID=${GRID:-placements}
OUT=${OUT:-results/proxy/$GRID}
BEST=(${BEST_FROM:+--best-from "$BEST_FROM"})
SEEDS=${SEEDS:-0,1,2}
JOBS=${JOBS:-3}
ONLY=${ONLY:-}
FAMILIES=${FAMILIES:-"lm vision"}   # which blocks of the grid: lm (LLaMA) and/or vision (ViT); none: PREPEND/APPEND only
source bench/device/carry.sh
GPUS=${GPUS:-$(gpu_count)}
mkdir -p "$OUT" "$RESULTS"
use_wheels datasets omegaconf
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
unpack_textmix
extras=$(cat ${PREPEND:-} ${APPEND:-} 2>/dev/null)
if [[ $FAMILIES == *lm* || $extras == *task=c4_llama* ]]; then  # each family's data, where the plan needs it
    [ -f .data/textmix3/pkgtext-validation.00000-of-00001.json.gz ] || { echo "missing .data/textmix3 (see the header of $0)"; exit 2; }
fi
if [[ $FAMILIES == *vision* || $extras == *task=in1k* ]]; then
    [ -f .data/cifar/cifar10_bigbench.npz ] || { echo "missing .data/cifar (see the header of $0)"; exit 2; }
fi
COMMON=(save_weights=false compile=true trainer.enable_progress_bar=false "results_dir=$RESULTS" resume=auto)
TEXT=("${TEXTMIX[@]}" data.num_workers=2)
IMAGES=(data.path=.data/cifar/cifar10_bigbench.npz data.num_workers=3)
plan=$RESULTS/plan.txt
{ [ -z "${PREPEND:-}" ] || cat "$PREPEND"
  [[ $FAMILIES != *lm* ]] || python3 -m mixbench.cli reproduce "$GRID" --scale proxy --seeds "$SEEDS" --dry-run --resume "${BEST[@]}" \
      --only task=c4_llama_71m $ONLY "${TEXT[@]}" "${COMMON[@]}"
  [[ $FAMILIES != *vision* ]] || python3 -m mixbench.cli reproduce "$GRID" --scale proxy --seeds "$SEEDS" --dry-run --resume "${BEST[@]}" \
      --only task=in1k_vit_tiny $ONLY "${IMAGES[@]}" "${COMMON[@]}"
  [ -z "${APPEND:-}" ] || cat "$APPEND"
} > "$plan" || { echo "could not plan the grid"; exit 2; }
echo "$(grep -c "^mixbench" "$plan") runs planned on $GPUS GPU(s), $JOBS a GPU"
[ "${DRY_RUN:-0}" = 1 ] && { cat "$plan"; exit 0; }
# LLaMA runs wait for the corpus to be tokenised once (a cache the runs share); the plan's other runs (ViT) go first,
# while it tokenises in the background (VISION_JOBS of them a GPU)
grep 'task=c4_llama' "$plan" > "$RESULTS/plan_lm.txt"
grep -v 'task=c4_llama' "$plan" > "$RESULTS/plan_other.txt"
tokenizer_pid=
[ -s "$RESULTS/plan_lm.txt" ] && { tokenize_text "${TEXT[@]}" > "$RESULTS/tokenize.log" 2>&1 & tokenizer_pid=$!; }
left() {  # what is left of DEADLINE_S (grid_lanes counts from its own start; 0: no deadline)
    [ "${DEADLINE_S:-0}" -gt 0 ] || { echo 0; return; }
    local s=$(( DEADLINE_S - ($(date +%s) - script_start) )); [ "$s" -lt 1 ] && s=1; echo "$s"
}
status=0
: > "$OUT/lanes.log"
if [ -s "$RESULTS/plan_other.txt" ]; then
    python3 bench/grids/grid_lanes.py "$RESULTS/plan_other.txt" --gpus "$GPUS" --jobs "${VISION_JOBS:-$JOBS}" --deadline "$(left)" \
        --logs "$RESULTS/logs/other" 2>&1 | tee -a "$OUT/lanes.log"
    status=${PIPESTATUS[0]}
fi
if [ -n "$tokenizer_pid" ]; then
    wait "$tokenizer_pid" || { echo "tokenising the corpus failed: $RESULTS/tokenize.log"; tail -5 "$RESULTS/tokenize.log"; status=2; }
    python3 bench/grids/grid_lanes.py "$RESULTS/plan_lm.txt" --gpus "$GPUS" --jobs "$JOBS" --deadline "$(left)" \
        --logs "$RESULTS/logs/lm" 2>&1 | tee -a "$OUT/lanes.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "$GPUS × $gpu" >> "$OUT/lanes.log"
find "$RESULTS" \( -name record.json -o -name config.yaml -o -name metrics.csv -o -name 'run*.log' \) -print0 \
    | tar czf "$OUT/${GRID}_runs.tgz" --null -T -
exit "$status"
