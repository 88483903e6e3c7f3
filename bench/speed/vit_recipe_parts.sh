#!/usr/bin/env bash
# What the ImageNet ViT-S recipe costs inside `mixbench run`: four short runs side by side on a 4-GPU machine, one a GPU
# with 16 cores each, on an ImageNet-style folder of JPEGs (bench/speed/image_loader.py's write_jpegs) through
# data.pipeline=gpu: the recipe, the recipe without EMA, without Mixup/CutMix, and at batch 256.  Writes
# $OUT_DIR/vit_recipe_parts.json (and .md, through harness.py) with each run's perf/items_per_sec windows (the trainer's
# own images/s).
#
#   OUT_DIR=/tmp/g bash bench/speed/vit_recipe_parts.sh      (needs 4 GPUs and 64 cores; ~2 minutes on 4x H100)
set -u
OUT_DIR=${OUT_DIR:-/tmp/vit_recipe_parts}
JPEGS=${JPEGS:-/tmp/jpegs}
HERE=$(cd "$(dirname "$0")" && pwd)   # bench/speed: image_loader.py and harness.py
mkdir -p "$OUT_DIR"
python3 -c "import sys; sys.path.insert(0, '$HERE'); from image_loader import write_jpegs; from pathlib import Path; write_jpegs(Path('$JPEGS'), 8192, 320)"
C=(task=in1k_vit_small norm=pre data=imagefolder "data.root=$JPEGS" data.pipeline=gpu data.overlap=true data.worker_nice=10 data.num_workers=14
   trainer.max_steps=160 trainer.log_every_n_steps=20 trainer.check_val_every_n_epoch=1000 trainer.limit_val_batches=2 save_weights=false
   divergence.unigram_floor=false trainer.enable_progress_bar=false compile=true)
run() { CUDA_VISIBLE_DEVICES=$1 timeout 300 taskset -c $2 python3 -m mixbench.cli run "${C[@]}" "results_dir=$OUT_DIR/$3" "${@:4}" > "$OUT_DIR/$3.txt" 2>&1; echo "$3 rc=$?"; }
run 0 0-15 recipe &
run 1 16-31 no_ema ema.decay=null &
run 2 32-47 no_mixup mixup.mixup_alpha=0 mixup.cutmix_alpha=0 &
run 3 48-63 batch256 data.batch_size=256 &
wait
python3 - "$OUT_DIR" "$HERE" "$JPEGS" <<'PY'
import csv, glob, json, statistics, sys
from pathlib import Path

out_dir = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from harness import markdown, write_result
changes = {"recipe": "", "no_ema": "ema.decay=null", "no_mixup": "mixup.mixup_alpha=0 mixup.cutmix_alpha=0", "batch256": "data.batch_size=256"}
rows = []
for name, change in changes.items():
    metrics = glob.glob(f"{out_dir}/{name}/**/metrics.csv", recursive=True)
    records = glob.glob(f"{out_dir}/{name}/**/record.json", recursive=True)
    if not (metrics and records):
        rows.append({"run": name, "change": change, "status": "no record"})
        continue
    record = json.load(open(records[0]))
    windows = [float(r["perf/items_per_sec"]) for r in csv.DictReader(open(metrics[0])) if r.get("perf/items_per_sec")]
    rows.append({"run": name, "change": change, "status": record["status"], "images_per_sec_windows": [round(w) for w in windows],
                 "median_after_first": round(statistics.median(windows[1:])) if len(windows) > 1 else None,
                 "git": record.get("git"), "versions": record.get("versions")})
    print(name, rows[-1].get("images_per_sec_windows"), rows[-1].get("median_after_first"), record["status"])
columns = [("run", "run"), ("change", "change"), ("status", "status"), ("images/s, median after the first window", "median_after_first")]
table = markdown(columns + [("windows", "images_per_sec_windows")], rows)
write_result(Path(out_dir) / "vit_recipe_parts.json", "vit_recipe_parts", {"jpegs": sys.argv[3], "changes": changes}, rows, table)
PY
