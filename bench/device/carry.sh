# Sourced (from the repository root) by the scripts that run on a GPU machine with what a device call carries there:
# use_wheels (wheels from .whl/ where a module is missing), unpack_textmix (the .json.xz text shards a call carries as
# the .json.gz the runs read), TEXTMIX and tokenize_text (the carried corpus's settings; its token cache built once),
# finished_run_files (what to bring back of a grid's runs) and gpu_count.  Users: bench/grids/*.sh and bench/device/*.sh.

use_wheels() {  # use_wheels MODULE ...: when a module is missing, install the wheels of WHEEL_DIRS (default .whl, from
    # bench/device/wheels.sh; the folders that exist) into /tmp/site, all in one pip call, and put it on PYTHONPATH
    local dir wheels=()
    for dir in ${WHEEL_DIRS:-.whl}; do [ -d "$dir" ] && wheels+=("$dir"/*.whl); done
    if [ ${#wheels[@]} -gt 0 ] && ! python3 -c "import $(IFS=,; echo "$*")" 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
}

gpu_count() {  # the machine's GPUs (nvidia-smi), at least 1
    local n
    n=$(nvidia-smi -L 2>/dev/null | wc -l)
    [ "$n" -ge 1 ] 2>/dev/null || n=1
    echo "$n"
}

unpack_textmix() {  # .data/textmix3/*.json.xz (xz keeps a device call under its 64 MiB) → the .json.gz the runs read
    local f
    [ "${DRY_RUN:-0}" = 1 ] && return 0   # a plan only: leave the checkout as small as the device call needs it
    for f in .data/textmix3/*.json.xz; do
        [ -e "$f" ] && [ ! -s "${f%.xz}.gz" ] && xz -dc "$f" | gzip -1 > "${f%.xz}.gz"
    done
    return 0
}

TEXTMIX=('data.path=.data/textmix3/pkgtext-train.*.json.gz' data.tokenizer=embedded model.vocab_size=8192)  # the carried shards

tokenize_text() {  # tokenize_text KEY=VALUE ...: the LLaMA-71M proxy's token cache of that corpus, built once before the
    # runs that share it (each would otherwise build the same cache)
    python3 -c "from mixbench.training.config import compose; from mixbench.training.run import build_datamodule; import sys; build_datamodule(compose(sys.argv[1:]))" \
        task=c4_llama_71m scale=proxy data.mode=pack data.max_val_tokens=1000000 "$@"
}

finished_run_files() {  # finished_run_files MARKER DIR: record.json, config.yaml and logs/metrics.csv of every run under
    # DIR whose record is newer than the file MARKER, one path a line (for tar -T -)
    local record folder
    find "$2" -name record.json -newer "$1" 2>/dev/null | while read -r record; do
        folder=$(dirname "$record")
        echo "$record"; echo "$folder/config.yaml"
        [ -f "$folder/logs/metrics.csv" ] && echo "$folder/logs/metrics.csv"
    done
    return 0
}
