#!/usr/bin/env bash
# One 4-GPU device lease for the captured step's measurements (bench/speed/step_capture.py, multi_gpu.py) and, on the
# GPUs they leave free, the learning-rate sweep (GRID=lr_sensitivity through bench/grids/placements_proxy.sh) as a
# daemon (setsid) that runs on across the calls until the machine goes back.  Calls follow each other within ≈ 30 s:
#
#   bash bench/device/capture_and_sweep.sh start     # carrying .data/cifar and .whl: the ViT sweep daemon on GPU 3
#                                                    #   (cores 48-63); GPU tests of the captured step and the GPU
#                                                    #   arrays on GPU 0; the ViT-Ti proxy rows on GPU 1
#   bash bench/device/capture_and_sweep.sh text      # carrying .data/textmix3: stops the sweep daemon, starts the LLaMA-71M
#                                                    #   proxy and LLaMA-130M rows detached on GPU 3
#   bash bench/device/capture_and_sweep.sh receive   # ×6, carrying .dali/part-0N and .dali/SHA256 (one part a call; with a
#                                                    #   20 MB checkout only 30 MiB parts fit: split -b 30M of the bundle)
#   bash bench/device/capture_and_sweep.sh dali      # carrying the last part and .dali/SHA256: ViT-S with DALI captured vs
#                                                    #   not beside the model alone, then the DALI GPU tests (GPU 2); ViT-S on
#                                                    #   2 GPUs against 1 (GPUs 0-1)
#   bash bench/device/capture_and_sweep.sh llama     # (the plan before `text`) LLaMA rows on GPUs 0-1, the DALI GPU tests
#                                                    #   on GPU 2, then the LLaMA sweep daemon on GPUs 0-2
#   bash bench/device/capture_and_sweep.sh collect   # the sweep's finished records so far
#
# Every call leaves $OUT/cs_<step>.tgz (logs, JSONs) and $OUT/sweep_records.tgz (every finished run's record.json,
# config.yaml and metrics.csv under .grid).  Machine-side state: /tmp/cs (logs, JSONs), .grid (the sweep's runs).
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?"start | text | receive | dali | llama | collect"}
W=/tmp/cs
mkdir -p "$W" "${OUT:-$W}"
T0=$(date +%s)
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}  # wheels a first call installed (never twice)
source bench/device/carry.sh
WHEEL_DIRS=.whl use_wheels omegaconf datasets
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0
[ ! -d .dali ] || bash bench/device/dali_bundle.sh receive

lane() {  # lane NAME CORES GPUS COMMAND...: one job on its own cores (and GPUS as CUDA_VISIBLE_DEVICES; '-': the job picks
    # its GPUs itself, as the benches' --gpu / --gpus do), its console in $W/NAME.log
    local name=$1 cores=$2 gpus=$3 left=$((${LIMIT_S:-570} - ($(date +%s) - T0)))
    shift 3
    echo "== $name on GPU(s) $gpus, cores $cores, at $(($(date +%s) - T0)) s, up to $left s"
    if [ "$gpus" = - ]; then timeout "$left" taskset -c "$cores" "$@"
    else CUDA_VISIBLE_DEVICES=$gpus timeout "$left" taskset -c "$cores" "$@"; fi > "$W/$name.log" 2>&1
    echo "== $name rc=$? at $(($(date +%s) - T0)) s"
    tail -12 "$W/$name.log"
}

sweep_daemon() {  # sweep_daemon FAMILY CORES GPUS JOBS: the lr sweep of one family, detached from this call
    local family=$1 cores=$2 gpus=$3 jobs=$4
    echo "== sweep daemon: $family on GPU(s) $gpus, cores $cores, $jobs a GPU"
    CUDA_VISIBLE_DEVICES=$gpus GRID=lr_sensitivity FAMILIES=$family SEEDS=0, JOBS=$jobs GPUS=$(tr ',' '\n' <<< "$gpus" | wc -l) \
        RESULTS=.grid OUT="$W/sweep_$family" setsid -f taskset -c "$cores" bash bench/grids/placements_proxy.sh \
        > "$W/sweep_$family.log" 2>&1 < /dev/null
}

pack_outputs() {  # (dali_bundle.sh, sourced for DALI's paths, has a pack of its own)
    tar czf "${OUT:-$W}/cs_$STEP.tgz" -C "$W" --exclude='*.tgz' . 2>/dev/null
    finished_run_files "$W/.started" .grid | tar czf "${OUT:-$W}/sweep_records.tgz" -T - 2>/dev/null
    echo "records finished in .grid since the start: $(find .grid -name record.json -newer "$W/.started" 2>/dev/null | wc -l); $(($(date +%s) - T0)) s"
}

case $STEP in
    start)
        nvidia-smi -L
        python3 -c "import torch, lightning, timm; print('torch', torch.__version__, 'lightning', lightning.__version__, 'timm', timm.__version__)"
        mkdir -p .grid/runs && cp -r results/proxy/placements/runs/in1k_vit_tiny results/proxy/placements/runs/c4_llama_71m .grid/runs/
        touch "$W/.started"  # records newer than this are the sweep's own
        sweep_daemon vision 48-63 3 4
        lane gpu_tests 0-15 0 python3 -m pytest -q -m gpu tests/training/test_step_graph.py tests/data/test_device_arrays.py tests/data/test_device_pipeline.py \
            -p no:cacheprovider -s &
        lane vit_ti 16-31 - python3 bench/speed/step_capture.py --group vit_ti --gpu 1 --workers 3 --out "$W/step_capture_vit_ti.json" &
        wait ;;
    text)  # the LLaMA rows as a detached job on GPU 3 (the ViT sweep daemon stopped: its finished records are kept)
        pkill -f '[g]rid_lanes.py'; pkill -f 'bench/grids/[p]lacements'; pkill -f '[m]ixbench.cli run'
        unpack_textmix
        CUDA_VISIBLE_DEVICES=3 setsid -f taskset -c 48-63 bash -c "python3 bench/speed/step_capture.py --group llama_71m --gpu 3 \
            --out $W/step_capture_llama_71m.json > $W/llama_71m.log 2>&1; python3 bench/speed/step_capture.py --group llama_130m \
            --gpu 3 --repeats 2 --out $W/step_capture_llama_130m.json > $W/llama_130m.log 2>&1" < /dev/null > /dev/null 2>&1 ;;
    receive) ;;
    dali)
        source bench/device/dali_bundle.sh env || { echo "DALI could not be set up"; pack_outputs; exit 1; }
        (lane vit_s 32-47 - python3 bench/speed/step_capture.py --group vit_s --gpu 2 --workers 14 --repeats "${REPEATS:-3}" \
            --out "$W/step_capture_vit_s.json"
         lane dali_tests 32-47 2 python3 -m pytest -q -m gpu tests/data/test_dali.py -p no:cacheprovider) &
        lane multi_gpu_vit_s 0-31 - python3 bench/speed/multi_gpu.py --gpus 0,1 --only vit_small --vit-pipeline dali \
            --budget 480 --out "$W/multi_gpu_vit_s.json" &
        wait ;;
    llama)
        source bench/device/dali_bundle.sh env || echo "DALI could not be set up: its GPU tests skip"
        unpack_textmix
        lane llama_71m 0-15 - python3 bench/speed/step_capture.py --group llama_71m --gpu 0 --out "$W/step_capture_llama_71m.json" &
        lane llama_130m 16-31 - python3 bench/speed/step_capture.py --group llama_130m --gpu 1 --out "$W/step_capture_llama_130m.json" &
        lane dali_tests 32-47 2 python3 -m pytest -q -m gpu tests/data/test_dali.py -p no:cacheprovider &
        wait
        sweep_daemon lm 0-47 0,1,2 3 ;;
    collect) ;;
esac
pack_outputs
