#!/usr/bin/env bash
# The device benches of bench/speed/ (vit_e2e, timm_peer, fp8_pairs, multi_gpu; written for issue 21) on GPU machines,
# as back-to-back device calls (the machine keeps /tmp and ignored folders only while calls follow within ≈ 30 s).
# One call a step:
#
#   bash bench/device/speed_calls.sh receive   # once a part but the last, carrying .dali/part-0N, .dali/SHA256 and .whl_min
#                                          #   (the omegaconf wheel: mkdir .whl_min && cp .whl/omegaconf-*.whl .whl_min/); parts of
#                                          #   PART_MB=33 (6 parts) leave room for the checkout (≈ 30 MiB in disk blocks, which the
#                                          #   device's 64 MiB counts).  RUN=cpu in the first also runs
#                                          #   bench/speed/vit_e2e.py --pipelines cpu (≈ 5 min)
#   bash bench/device/speed_calls.sh dali      # carrying the last part, .dali/SHA256, .whl, .whl_fp8 (torchao), .data/textmix3,
#                                          #   bench/speed/.timm: unpacks DALI, pytest -m gpu tests/data/test_dali.py tests/data/test_device_pipeline.py, vit_e2e --pipelines dali
#   bash bench/device/speed_calls.sh peer      # nothing to carry: timm_peer --pipelines cpu dali (timm's train.py beside both)
#   bash bench/device/speed_calls.sh scale     # a 4-GPU machine, after the receive calls, carrying the last part, .dali/SHA256,
#                                          #   .whl, .whl_fp8, .data/textmix3: three lanes at once, each on its own GPUs and cores:
#                                          #   ViT-S DDP on 2 GPUs against 1 with DALI (GPUs 0-1, cores 0-31, 2 repeats); the gap
#                                          #   between DALI runs and the model alone, one recipe part off a row (GPU 2, cores
#                                          #   32-47); llama_1b fp8 pairs, seed 2 and a rowwise pair (GPU 3, cores 48-63)
#   bash bench/device/speed_calls.sh pair      # a 2-GPU machine, after the receive calls, carrying the last part, .dali/SHA256,
#                                          #   .whl_min, .data/textmix3: DDP on 2 GPUs against 1 for vit_small (DALI) and
#                                          #   llama_130m, one machine, one call (≈ 400 s)
#   bash bench/device/speed_calls.sh profile   # after `dali` on the same machine, carrying .whl_min: vit_e2e of pre with DALI under
#                                          #   Lightning's simple profiler and under torch.profiler with its timeline (beside its JSON)
#   bash bench/device/speed_calls.sh regress   # after the receive calls (parts 00-04), carrying .dali/part-05,
#                                          #   .dali/SHA256, .whl_min and .data/base (an older tree: mkdir -p .data/base && git archive
#                                          #   BASE mixbench tasks configs pyproject.toml <its bench/*.py> | tar x -C .data/base):
#                                          #   the checkout's DALI GPU tests (≈ 40 s), then vit_e2e of pre with DALI at BASE and at
#                                          #   this checkout, in rounds base/new, new/base, each invocation with its own model alone
#                                          #   (≈ 80-150 s each)
#   bash bench/device/speed_calls.sh variants  # after the receive calls, carrying the last part, .dali/SHA256, .whl_min: vit_e2e
#                                          #   of pre with DALI at this checkout, one run a variant of VARIANTS (space-separated
#                                          #   comma lists; `default` = the recipe as is; default: default cuda_graph_step=false
#                                          #   ema.decay=null cuda_graph_step=false,ema.decay=null), which part of the step
#                                          #   keeps DALI from running ahead (≈ 80 s a variant)
#   bash bench/device/speed_calls.sh hybrids   # as `regress` (carrying .data/base): vit_e2e of pre with DALI on two mixed trees,
#                                          #   in the order A B B A — A: BASE with this checkout's DALI input
#                                          #   (mixbench/data/dali.py, device_pipeline.py), B: this checkout with BASE's — which side
#                                          #   of the tree a regression between them is in; TREES (default "a b b a") may also
#                                          #   name `new`, this checkout as it is, and `base`
#   bash bench/device/speed_calls.sh stash     # carrying .data/cifar, or .data/textmix3 (one a call: with the checkout both
#                                          #   exceed 64 MiB): kept in /tmp/speed_calls_data for the later calls on the machine
#   bash bench/device/speed_calls.sh capture   # a 2-GPU machine, after five receive calls and two stash calls, carrying the last
#                                          #   part, .dali/SHA256 and .whl: issue 34's ViT-S rows — the DALI GPU tests, then
#                                          #   step_capture.py vit_s (ViT-S DALI captured / not, the model alone) on GPU 0, cores
#                                          #   0-15 (CORES), the rest of the machine idle
#   bash bench/device/speed_calls.sh capture_proxy  # the next call, carrying .whl: vit_ti (CIFAR proxy before / GPU arrays /
#                                          #   captured), then llama_71m, on GPU 0, cores 0-15.  Both steps: REPEATS (default 2)
#                                          #   rounds, and the group JSONs so far merged into step_capture_2xh200.json.  Then
#                                          #   `pair` with PAIR_ONLY=vit_small (ViT-S on 2 GPUs against 1)
#   bash bench/device/speed_calls.sh fp8       # nothing to carry: fp8_pairs --resume for llama_350m then llama_1b, to the call's
#                                          #   limit; again until both JSONs hold 3 pairs
#
# Outputs: /tmp/speed_calls on the machine (kept across the calls), all of it as $OUT/speed_calls_<step>.tgz after each call.
# LIMIT_S (default 570): the seconds a call may use; a bench still running then is stopped (fp8_pairs keeps its pairs).
# CORES (e.g. 0-15): the `regress`, `profile`, `variants` and `hybrids` steps on those cores alone (taskset), as on a one-GPU machine of 16 cores
# when they run on a larger one (`capture`, `capture_proxy`: default 0-15); PAIR_ONLY (default "vit_small llama_130m"): the rows of the `pair` step.
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?"receive | dali | peer | scale | pair | profile | regress | variants | hybrids | stash | capture | capture_proxy | fp8"}
T0=$(date +%s)
W=/tmp/speed_calls
LIMIT_S=${LIMIT_S:-570}
mkdir -p "$W" "${OUT:-$W}"

bench() {  # bench NAME COMMAND...: run it within what is left of LIMIT_S, log to $W/NAME.log, say how it ended
    local name=$1 left
    shift
    left=$((LIMIT_S - ($(date +%s) - T0)))
    [ "$left" -gt 30 ] || { echo "== $name: skipped, $left s left"; return 0; }
    echo "== $name (up to $left s) at $(($(date +%s) - T0)) s"
    timeout "$left" ${PIN:+taskset -c "$PIN"} "$@" > "$W/$name.log" 2>&1
    echo "== $name rc=$? at $(($(date +%s) - T0)) s"
    tail -15 "$W/$name.log"
}

tree_vit_e2e() {  # tree_vit_e2e TREE NAME: vit_e2e of pre with DALI on TREE — base (.data/base), new (this checkout),
    # a / b (the hybrids) — by that tree's own harness, which puts its tree first on the runs' PYTHONPATH; $W/NAME.json
    local folder harness=bench/speed/vit_e2e.py
    case $1 in
        base) folder=.data/base harness=bench/vit_e2e.py ;;
        a) folder=/tmp/hybrid_a harness=bench/vit_e2e.py ;;  # BASE's layout
        b) folder=/tmp/hybrid_b ;;
        new) folder=$PWD ;;
        *) echo "unknown tree $1: base | new | a | b"; return 2 ;;
    esac
    (cd "$folder" && bench "$2" python3 "$harness" --pipelines dali --norms pre --out "$W/$2.json")
}

[ ! -d .dali ] || bash bench/device/dali_bundle.sh receive
STASH=/tmp/speed_calls_data  # data an earlier call carried (`stash`), put back where the benches read it
for kept in "$STASH"/*; do
    [ -e "$kept" ] && [ ! -e ".data/${kept##*/}" ] && mkdir -p .data && ln -sfn "$kept" ".data/${kept##*/}"
done
source bench/device/carry.sh
if [ -d .whl ]; then  # the full wheel set (datasets, optuna, omegaconf) and torchao, once carried
    WHEEL_DIRS=".whl .whl_fp8" use_wheels omegaconf datasets torchao
else                  # the receive calls: room for the omegaconf wheel alone
    WHEEL_DIRS=.whl_min use_wheels omegaconf
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0
case $STEP in  # the steps that read images through DALI: unpack it (once a machine) and put it on the paths
    dali | peer | scale | pair | profile | regress | variants | hybrids | capture) source bench/device/dali_bundle.sh env || { echo "DALI could not be set up"; exit 1; } ;;
esac
case $STEP in
    profile | regress | variants | hybrids) PIN=${CORES:-} ;;
    capture | capture_proxy) PIN=${CORES:-0-15} ;;  # GPU 0's lane
    *) PIN= ;;
esac
case $STEP in
    receive)
        [ "${RUN:-}" != cpu ] || bench vit_e2e_cpu python3 bench/speed/vit_e2e.py --pipelines cpu --out "$W/vit_e2e_cpu.json" ;;
    dali)
        bench dali_gpu_tests python3 -m pytest -q -m gpu tests/data/test_dali.py tests/data/test_device_pipeline.py -p no:cacheprovider
        bench vit_e2e_dali python3 bench/speed/vit_e2e.py --pipelines dali --out "$W/vit_e2e_dali.json" ;;
    peer)
        bench timm_peer python3 bench/speed/timm_peer.py --pipelines cpu dali --out "$W/timm_peer.json" ;;
    scale)
        unpack_textmix
        bench multi_gpu_dali taskset -c 0-31 python3 bench/speed/multi_gpu.py --gpus 0,1 --only vit_small --vit-pipeline dali \
            --repeats 2 --budget $((LIMIT_S - 60)) --out "$W/multi_gpu_dali.json" &
        bench vit_e2e_attribution taskset -c 32-47 python3 bench/speed/vit_e2e.py --gpu 2 --pipelines dali --norms pre \
            --variants '' data.auto_augment=null compile.mode=reduce-overhead ema.decay=null mixup.mixup_alpha=0,mixup.cutmix_alpha=0 \
            --out "$W/vit_e2e_attribution.json" &
        (
            text='.data/textmix3/pkgtext-train.*.json.gz'
            bench fp8_pairs_llama_1b_seed2 taskset -c 48-63 python3 bench/speed/fp8_pairs.py --gpu 3 --models llama_1b --seeds 2 \
                --text "$text" --out "$W/fp8_pairs_llama_1b_seed2.json"
            bench fp8_pairs_llama_1b_rowwise taskset -c 48-63 python3 bench/speed/fp8_pairs.py --gpu 3 --models llama_1b --seeds 0 \
                --recipe rowwise --text "$text" --out "$W/fp8_pairs_llama_1b_rowwise.json"
        ) &
        wait ;;
    pair)
        unpack_textmix
        bench multi_gpu_pair python3 bench/speed/multi_gpu.py --gpus 0,1 --only ${PAIR_ONLY:-vit_small llama_130m} --vit-pipeline dali \
            --vit-steps 80 --vit-log-every 20 --vit-images 21000 --budget $((LIMIT_S - 30)) \
            --text '.data/textmix3/pkgtext-train.*.json.gz' --out "$W/multi_gpu_pair.json" ;;
    profile)
        bench vit_e2e_profile python3 bench/speed/vit_e2e.py --pipelines dali --norms pre \
            --variants profiler.kind=simple profiler.kind=pytorch,profiler.trace=true --out "$W/vit_e2e_profile.json" ;;
    regress)
        [ -f .data/base/bench/vit_e2e.py ] || { echo "carry .data/base (see the header)"; exit 2; }
        bench dali_gpu_tests python3 -m pytest -q -m gpu tests/data/test_dali.py -p no:cacheprovider  # the checkout's hand-over first
        for round in 1 2; do
            order="base new"; [ "$round" = 2 ] && order="new base"
            for tree in $order; do tree_vit_e2e "$tree" "regress_${tree}_$round"; done
        done ;;
    variants)
        variants=()
        for v in ${VARIANTS:-default cuda_graph_step=false ema.decay=null cuda_graph_step=false,ema.decay=null}; do
            [ "$v" = default ] && v=""
            variants+=("$v")
        done
        bench vit_e2e_variants python3 bench/speed/vit_e2e.py --pipelines dali --norms pre --variants "${variants[@]}" \
            --out "$W/vit_e2e_variants.json" ;;
    hybrids)
        [ -f .data/base/bench/vit_e2e.py ] || { echo "carry .data/base (see the header)"; exit 2; }
        input=(mixbench/data/dali.py mixbench/data/device_pipeline.py)
        rm -rf /tmp/hybrid_a /tmp/hybrid_b && cp -r .data/base /tmp/hybrid_a && mkdir /tmp/hybrid_b
        cp -r mixbench tasks configs pyproject.toml bench /tmp/hybrid_b/
        for f in "${input[@]}"; do cp "$f" "/tmp/hybrid_a/$f"; cp ".data/base/$f" "/tmp/hybrid_b/$f"; done
        k=0
        for tree in ${TREES:-a b b a}; do
            k=$((k + 1))
            tree_vit_e2e "$tree" "hybrid_${tree}_$k"
        done ;;
    stash)
        mkdir -p "$STASH"
        for data in .data/cifar .data/textmix3; do
            [ -d "$data" ] && [ ! -L "$data" ] && rm -rf "${STASH:?}/${data##*/}" && cp -r "$data" "$STASH/" && echo "stashed $data"
        done ;;
    capture | capture_proxy)
        unpack_textmix
        repeats=${REPEATS:-2}
        groups=(vit_ti llama_71m)
        if [ "$STEP" = capture ]; then
            groups=(vit_s)
            bench capture_dali_tests python3 -m pytest -q -m gpu tests/data/test_dali.py -p no:cacheprovider
        fi
        for g in "${groups[@]}"; do  # DALI's threads for vit_s; the proxy grid's 3 loader workers for vit_ti's "before" row
            workers=14; [ "$g" = vit_ti ] && workers=3
            bench "capture_$g" python3 bench/speed/step_capture.py --group "$g" --gpu 0 --workers "$workers" \
                --repeats "$repeats" --out "$W/step_capture_$g.json"
        done
        parts=(); for g in vit_s vit_ti llama_71m; do [ -f "$W/step_capture_$g.json" ] && parts+=("$W/step_capture_$g.json"); done
        [ ${#parts[@]} -eq 0 ] || python3 bench/speed/step_capture.py --merge "$W/step_capture_2xh200.json" "${parts[@]}" ;;
    fp8)
        unpack_textmix
        for model in llama_350m llama_1b; do
            bench "fp8_pairs_$model" python3 bench/speed/fp8_pairs.py --models "$model" --resume \
                --text '.data/textmix3/pkgtext-train.*.json.gz' --out "$W/fp8_pairs_$model.json"
        done ;;
    *) echo "unknown step $STEP: receive | dali | peer | scale | pair | profile | regress | variants | hybrids | stash | capture | capture_proxy | fp8"; exit 2 ;;
esac
nvidia-smi --query-gpu=name --format=csv,noheader > "$W/card.txt" 2>/dev/null
tar czf "${OUT:-$W}/speed_calls_$STEP.tgz" -C "$W" .
echo "call total $(($(date +%s) - T0)) s"
