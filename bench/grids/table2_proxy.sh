#!/usr/bin/env bash
# Paper Table 2 at proxy scale: pretrain → SFT → lm-evaluation-harness for Pre-LN, Post-LN and Mix-LN, three seeds each
# (LLaMA-71M width, 24 blocks, vocab 8192).  The nine chains are spread over the machine's GPUs as PARTS says.
#
# Needs, in the repository root (all git-ignored):
#   .data/textmix3/pkgtext-train.0000{1,3,8}-of-00009.json.gz + pkgtext-validation.00000-of-00001.json.gz
#       (pretraining text: shards of ../shared/data/textmix, 26.6M tokens; 760 steps read 24.9M of them)
#   .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json + commonsense170k_like.json
#       (fine-tuning: the real train sets in LLM-Adapters format and the mc-registry's Commonsense170K-format items)
#   .data/commonsense/{boolq,ARC-Easy,piqa,openbookqa,winogrande}/test.json   (evaluation: the real test sets)
#   .whl/ from bench/device/wheels.sh when lm_eval / datasets / omegaconf are not installed there
# MMLU (the 273 genuine dev questions) and HellaSwag (a format sample, not HellaSwag) come from the embedded sample.
# PARTS: "GPU:NORM:SEEDS ..." — one `mixbench reproduce table2` per item, CUDA_VISIBLE_DEVICES=GPU, chains of a part
# side by side on its GPU.  Timing seen on 4× H100 (2026-11-26) with 3 chains a GPU: pretraining 234-250 s, SFT 93-97 s,
# evaluation 36-47 s, a whole chain 444 s, plus ~70 s of tokenising and planning first: on the device tool (10 minutes a
# call, nothing kept once the machine goes back) run PARTS="0:pre:0,1,2 1:post:0,1,2 2:mix:0,1,2" with DEADLINE_S=540.
# Output: $OUT (default results/proxy/table2): table2_proxy.md, the consoles, and
# table2_proxy_runs.tgz (records, eval summaries, configs, logs; no weights).  DEADLINE_S=N stops the chains N seconds
# after the script starts and still writes the summary of what finished (a device call has a hard limit).
set -euo pipefail
script_start=$(date +%s)
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/proxy/table2}
RESULTS=${RESULTS:-.data/table2_results}
PARTS=${PARTS:-"0:pre:0,1,2 0:mix:0,1 1:post:0,1,2 1:mix:2"}
mkdir -p "$OUT"
source bench/device/carry.sh
source bench/grids/chains.sh
unpack_textmix
use_wheels lm_eval datasets omegaconf
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -c "import lm_eval, mixbench" || { echo "lm_eval or mixbench is not importable: pip install -e '.[eval]' (or bring .whl/)"; exit 2; }
for f in .data/textmix3/pkgtext-validation.00000-of-00001.json.gz .data/commonsense/boolq/train.json .data/commonsense/piqa/test.json; do
    [ -f "$f" ] || { echo "missing $f (see the header of $0)"; exit 2; }
done
SFT_DATA=$(ls .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json .data/commonsense/commonsense170k_like.json | paste -sd, -)
PRETRAIN_DATA=(data.tokenizer=embedded model.vocab_size=8192 'data.path=.data/textmix3/pkgtext-train.*.json.gz')
ARGS=(results_dir="$RESULTS" data.tokenizer=embedded model.vocab_size=8192 trainer.enable_progress_bar=false
      "pretrain:data.path=.data/textmix3/pkgtext-train.*.json.gz" pretrain:compile=true pretrain:data.batch_size=64
      pretrain:data.num_workers=2 "sft:data.path=$SFT_DATA" "eval:data=.data/commonsense,embedded" ${EXTRA:-})
plan_parts table2
[ "${DRY_RUN:-0}" = 1 ] && exit 0   # DRY_RUN=1: check the data and the plan only
tokenize_pretraining
status=0
run_parts table2 || status=1
python3 -m mixbench.grids.downstream --results-dir "$RESULTS" --scale proxy --out "$OUT/table2_proxy.md" || status=1
find "$RESULTS" \( -name record.json -o -name harness.json -o -name console.log -o -name config.yaml -o -name metrics.csv \) -print0 \
    | tar czf "$OUT/table2_proxy_runs.tgz" --null -T -
exit $status
