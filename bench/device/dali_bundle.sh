#!/usr/bin/env bash
# NVIDIA DALI (data.pipeline=dali, the [dali] extra) for a device machine that reaches no package index: the ≈ 260 MB of
# wheels (nvidia-dali-cuda130 and its dependencies, docs/imagenet.md#dali-pipeline) installed here for the device's
# Python into one folder, packed with xz (≈ 196 MB) and split into parts that each fit a device call beside the
# checkout (64 MiB in all), then joined, checked and unpacked there.
#
#   bash bench/device/dali_bundle.sh pack                  # here, with the package registry: .dali/part-00 ... + .dali/SHA256
#   bash bench/device/dali_bundle.sh receive               # on the device, once a call, carrying .dali/part-NN and .dali/SHA256:
#                                                   #   keeps the part in /tmp/dali_parts (calls back to back, ≤ 30 s apart)
#   source bench/device/dali_bundle.sh env                 # on the device, once every part is there: unpacks into
#                                                   #   /tmp/dali_site (checked against SHA256), sets PYTHONPATH and
#                                                   #   LD_LIBRARY_PATH (nvidia/nvimgcodec, nvidia/cu13/lib), imports DALI
# Settings: PY (the device's Python, default 3.12), PART_MB (default 33: a part beside a ≈ 30 MiB checkout), DALI (the requirement, default that of the extra),
# DALI_BUNDLE / DALI_PARTS / DALI_SITE (the folders below).
# One `pip install --target` of every wheel into a fresh folder: a second install into the same folder would skip the
# shared nvidia/ namespace folder, and the decoder then fails to dlopen libnvimgcodec.so.  numpy, packaging, pyyaml,
# typing_extensions and wheel are left out: the device's environment has them, and a second numpy would shadow torch's.
[[ "${BASH_SOURCE[0]}" != "$0" ]] || set -uo pipefail   # run, not sourced: the caller's shell keeps its options
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) # no cd: a sourcing shell stays where it is
BUNDLE=${DALI_BUNDLE:-$REPO/.dali}       # the parts, here and in the device's checkout
PARTS_DIR=${DALI_PARTS:-/tmp/dali_parts}  # where the device keeps them between calls
SITE=${DALI_SITE:-/tmp/dali_site}         # the unpacked install

pack() {
    local py=${PY:-3.12} dali=${DALI:-nvidia-dali-cuda130>=2.4,<3} work
    work=$(mktemp -d)
    python3 -m pip download -q --only-binary=:all: --python-version "$py" --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
        -d "$work/wheels" "$dali" || return 1
    rm -f "$work"/wheels/{numpy,packaging,pyyaml,PyYAML,typing_extensions,wheel}-*.whl
    python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version "$py" --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
        --target "$work/site" "$work"/wheels/*.whl || return 1
    rm -rf "$BUNDLE" && mkdir -p "$BUNDLE" || return 1
    tar -C "$work/site" -cf - . | xz -T0 -6 | split -b "${PART_MB:-33}M" -d -a 2 - "$BUNDLE/part-"
    (cd "$BUNDLE" && cat part-* | sha256sum | cut -d' ' -f1 > SHA256)
    ls "$work/wheels" > "$BUNDLE/WHEELS"
    rm -rf "$work"
    echo "$(ls "$BUNDLE"/part-* | wc -l) parts in $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)); carry .dali/part-NN and .dali/SHA256, one part a call"
}

receive() {
    mkdir -p "$PARTS_DIR"
    local part found=0
    for part in "$BUNDLE"/part-*; do
        [ -e "$part" ] || continue
        cp "$part" "$PARTS_DIR/" && found=1
    done
    [ -f "$BUNDLE/SHA256" ] && cp "$BUNDLE/SHA256" "$PARTS_DIR/"
    [ "$found" = 1 ] || { echo "no $BUNDLE/part-* in this call: carry one (bash bench/device/dali_bundle.sh pack makes them)"; return 2; }
    echo "parts here: $(cd "$PARTS_DIR" && ls part-* | tr '\n' ' ')"
}

unpack_env() {
    [ -f "$PARTS_DIR/SHA256" ] || { echo "no SHA256 in $PARTS_DIR: carry .dali/SHA256 with a part"; return 2; }
    if [ "$(cat "$SITE/.complete" 2>/dev/null)" != "$(cat "$PARTS_DIR/SHA256")" ]; then  # not this bundle unpacked yet
        local sum
        sum=$(cat "$PARTS_DIR"/part-* | sha256sum | cut -d' ' -f1)
        [ "$sum" = "$(cat "$PARTS_DIR/SHA256")" ] || {
            echo "the parts in $PARTS_DIR ($(cd "$PARTS_DIR" && ls part-* | tr '\n' ' ')) do not match SHA256: a part is missing, cut or left from another bundle"
            return 2
        }
        rm -rf "$SITE" && mkdir -p "$SITE"
        cat "$PARTS_DIR"/part-* | xz -dc | tar -C "$SITE" -xf - && cp "$PARTS_DIR/SHA256" "$SITE/.complete"
    fi
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    export LD_LIBRARY_PATH=$SITE/nvidia/nvimgcodec:$SITE/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    python3 -c "import nvidia.dali as d; print('DALI', d.__version__)"
}

case "${1:-}" in
    pack) pack ;;
    receive) receive ;;
    env) unpack_env ;;
    *) echo "usage: bash bench/device/dali_bundle.sh pack | receive; source bench/device/dali_bundle.sh env"; false ;;
esac
