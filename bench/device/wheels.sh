#!/usr/bin/env bash
# Run HERE (a machine with pip access), in the repository root, before bench/grids/table2_proxy.sh on the GPU machine:
# puts lm-evaluation-harness and the mixbench dependencies the GPU image lacks into .whl/ (git-ignored through
# .git/info/exclude), as wheels for its Python 3.12.  Pure-Python packages published only as sources are built here.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
binary=(lm_eval==0.4.13 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 omegaconf==2.4.0 evaluate==0.4.6 more-itertools==11.2.1
        chardet==6.0.0.post1 pytablewriter==1.2.1 DataProperty==1.1.1 mbstrdecoder==1.1.5 pathvalidate==3.3.1 tabledata==1.3.5
        tcolorpy==0.1.7 typepy==1.3.5 nltk==3.10.4)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${binary[@]}"
python3 -m pip wheel -q --no-deps -w .whl rouge_score==0.1.2 sqlitedict==2.1.0 word2number==1.1
du -sh .whl && ls .whl
