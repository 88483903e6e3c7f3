#!/usr/bin/env bash
# Paper Table 3 at proxy scale: pretrain → SFT → reward model → ReMax for Pre-LN, Post-LN and Mix-LN, three seeds each
# (LLaMA-71M width, 24 blocks, vocab 8192; mixbench reproduce table3 --scale proxy).  The nine chains are spread over
# the machine's GPUs as PARTS says.
#
# Needs, in the repository root (all git-ignored):
#   .data/textmix3/pkgtext-train.0000{1,3,8}-of-00009.json.gz + pkgtext-validation.00000-of-00001.json.gz
#       (pretraining text: shards of ../shared/data/textmix, as bench/grids/table2_proxy.sh)
#   .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json
#       (the commonsense preference proxy: one permutation of the 17,754 records split 4,3,3 between SFT, RM and ReMax)
#   .whl/ from bench/device/wheels.sh when datasets / omegaconf are not installed there
# Copies, not links to ../shared: the device machine sees only the repository (carry .data and .whl).
# PARTS: "GPU:NORM:SEEDS ..." — one `mixbench reproduce table3` per item, CUDA_VISIBLE_DEVICES=GPU, chains of a part side
# by side on its GPU (default: the 9 chains dealt round-robin over the machine's GPUs, or over GPUS).  On one H200 the
# 9 chains took 951 s (results/proxy/table3/README.md); the reward models need ≈ 15 GB each (4 chains on an 80 GB card).
# The chains resume (finished stages are reused from $RESULTS), so a run cut by DEADLINE_S=N (stops the chains N seconds
# after the script starts, then writes the summary) can be completed by a second call on the same warm machine.
# Output: $OUT (default results/proxy/table3): table3_proxy.md (final reward and ReMax gain per placement with Welch
# intervals, and the reward models' held-out accuracy), the plan, the consoles, wall_time.txt and table3_proxy_runs.tgz (records, configs,
# logs; no weights).  DRY_RUN=1 checks the data and prints the plan only.  SMOKE=1: every stage for a few steps, one chain
# per placement side by side on GPU 0, on the embedded pretraining text, into $RESULTS-smoke and $OUT/smoke (about a
# minute; run it before the chains to check that every stage works on this machine).
set -euo pipefail
script_start=$(date +%s)
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/proxy/table3}
RESULTS=${RESULTS:-results/runs/table3_proxy}   # git-ignored and not carried: kept between calls on a warm device machine
SMOKE=${SMOKE:-0}
case $SMOKE in 0|1) ;; *) echo "SMOKE=$SMOKE: give 0 or 1"; exit 2;; esac
if [ "$SMOKE" = 1 ]; then RESULTS=$RESULTS-smoke OUT=$OUT/smoke PARTS=${PARTS:-"0:pre:0 0:post:0 0:mix:0"}; fi
mkdir -p "$OUT"
source bench/device/carry.sh
source bench/grids/chains.sh
PARTS=${PARTS:-$(default_parts "pre post mix" 0,1,2)}   # 9 chains over the GPUs, round-robin
unpack_textmix
use_wheels datasets omegaconf
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -c "import mixbench" || { echo "mixbench is not importable: pip install -e ."; exit 2; }
for f in .data/textmix3/pkgtext-validation.00000-of-00001.json.gz .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json; do
    [ -f "$f" ] || { echo "missing $f (see the header of $0)"; exit 2; }
done
PREFS=$(ls .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json | paste -sd, -)
PRETRAIN_DATA=(data.tokenizer=embedded model.vocab_size=8192 'data.path=.data/textmix3/pkgtext-train.*.json.gz')
ARGS=(results_dir="$RESULTS" data.tokenizer=embedded model.vocab_size=8192 trainer.enable_progress_bar=false
      "pretrain:data.path=.data/textmix3/pkgtext-train.*.json.gz" pretrain:compile=true pretrain:data.batch_size=64
      pretrain:data.num_workers=2)
for stage in sft rm rl; do ARGS+=("$stage:data.path=$PREFS" "$stage:data.stage_split=4,3,3"); done
[ "$SMOKE" = 0 ] || ARGS+=(trainer.max_steps=4 rl:trainer.max_steps=4 divergence.unigram_floor=false   # 4 steps cannot beat chance
                          pretrain:data.path=embedded pretrain:trainer.val_check_interval=2 pretrain:data.max_val_tokens=20000
                          sft:data.val_size=16 rm:data.val_size=16 rl:data.val_size=16)
ARGS+=(${EXTRA:-})
plan_parts table3
[ "${DRY_RUN:-0}" = 1 ] && exit 0
[ "$SMOKE" = 1 ] || tokenize_pretraining
status=0
run_parts table3 --resume || status=1
python3 -m mixbench.grids.rlhf --results-dir "$RESULTS" --scale proxy --out "$OUT/table3_proxy.md" || status=1
find "$RESULTS" \( -name record.json -o -name console.log -o -name config.yaml -o -name metrics.csv \) -print0 \
    | tar czf "$OUT/table3_proxy_runs.tgz" --null -T -
exit $status
