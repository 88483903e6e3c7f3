# Sourced (from the repository root) by the scripts that run on a GPU machine with what a device call carries there:
# use_wheels (wheels from .whl/ where a module is missing), unpack_textmix (the .json.xz text shards a call carries as
# the .json.gz the runs read) and gpu_count.  Users: bench/grids/*.sh and bench/device/speed_calls.sh.

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
