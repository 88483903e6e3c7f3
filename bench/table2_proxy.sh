#!/usr/bin/env bash
# Paper Table 2 at proxy scale on one GPU: pretrain → SFT → lm-evaluation-harness for Post-LN, DeepNorm, Pre-LN and Mix-LN
# (LLaMA-71M width, 24 blocks, vocab 8192), the four chains side by side on the GPU (--jobs 4).
#
# Needs, in the repository root (all git-ignored):
#   .data/textmix/pkgtext-train.0000{2,4,5,6,7,8}-of-00009.json.gz + pkgtext-validation.00000-of-00001.json.gz   (pretraining text)
#   .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json   (fine-tuning: the real train sets in LLM-Adapters format)
#   .data/commonsense/{boolq,ARC-Easy,piqa,openbookqa,winogrande}/test.json  (evaluation: the real test sets)
#   .whl/ from bench/table2_proxy_wheels.sh when lm_eval / datasets / omegaconf are not installed there
# MMLU (the 273 genuine dev questions) and HellaSwag (format sample, not HellaSwag) come from the embedded sample.
# Output: $OUT (default results/proxy/table2): table2_proxy.md and table2_proxy_runs.tgz (records, eval summaries, logs).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/proxy/table2}
RESULTS=${RESULTS:-.data/table2_results}
JOBS=${JOBS:-4}
mkdir -p "$OUT"
if [ -d .whl ] && ! python3 -c "import lm_eval, datasets, omegaconf" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "import lm_eval, mixbench" || { echo "lm_eval or mixbench is not importable: pip install -e '.[eval]' (or bring .whl/)"; exit 2; }
for f in .data/textmix/pkgtext-validation.00000-of-00001.json.gz .data/commonsense/boolq/train.json .data/commonsense/piqa/test.json; do
    [ -f "$f" ] || { echo "missing $f (see the header of $0)"; exit 2; }
done
SFT_DATA=$(ls .data/commonsense/{boolq,ARC-Easy,ARC-Challenge,openbookqa}/train.json | paste -sd, -)
ARGS=(results_dir="$RESULTS" data.tokenizer=embedded model.vocab_size=8192 trainer.enable_progress_bar=false
      "pretrain:data.path=.data/textmix/pkgtext-train.*.json.gz"
      "sft:data.path=$SFT_DATA"
      "eval:data=.data/commonsense,embedded")
python3 -m mixbench.cli reproduce table2 --scale proxy --dry-run "${ARGS[@]}" | tee "$OUT/table2_proxy_plan.txt"
[ "${DRY_RUN:-0}" = 1 ] && exit 0   # DRY_RUN=1: check the data and the plan only
# tokenize the pretraining corpus once, before four runs would each build the same cache
python3 -c "from mixbench.config import compose; from mixbench.train import build_datamodule; import sys; build_datamodule(compose(sys.argv[1:]))" \
    task=c4_llama_71m scale=proxy data.mode=pack data.tokenizer=embedded model.vocab_size=8192 'data.path=.data/textmix/pkgtext-train.*.json.gz' \
    data.max_val_tokens=1000000
start=$(date +%s)
python3 -m mixbench.cli reproduce table2 --scale proxy --jobs "$JOBS" "${ARGS[@]}" 2>&1 | tee "$OUT/table2_proxy_console.txt"
echo "wall time: $(( $(date +%s) - start )) s on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$OUT/table2_proxy_console.txt"
python3 -m mixbench.reproduce_downstream --results-dir "$RESULTS" --scale proxy --out "$OUT/table2_proxy.md"
find "$RESULTS" \( -name record.json -o -name harness.json -o -name console.log -o -name config.yaml \) -print0 \
    | tar czf "$OUT/table2_proxy_runs.tgz" --null -T -
