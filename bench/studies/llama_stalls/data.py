"""The token arrays that bench/studies/llama_stalls/cpu.py and bench/studies/llama_stalls/probe.py train on (docs/llama_stalls.md): a
textmix train shard and the validation shard, tokenised with the embedded 8,192-token BPE, documents joined with id 0,
the first 6,000,000 / 200,000 tokens saved as int16 ``train.npy`` / ``val.npy`` in ``--out`` (the defaults give, byte
for byte, the arrays the study used).

    PYTHONPATH=. python bench/studies/llama_stalls/data.py --out .data/llama_stalls \\
        --train ../shared/data/textmix/pkgtext-train.00001-of-00009.json.gz \\
        --val ../shared/data/textmix/pkgtext-validation.00000-of-00001.json.gz
"""

import argparse
import logging
from pathlib import Path

import numpy as np

from mixbench.data.tokens import TokenizerSpec, iter_texts

log = logging.getLogger("llama_stalls_data")


def token_array(files: list[str], max_tokens: int | None) -> np.ndarray:
    """The documents of ``files`` (C4-format JSON lines) as one int16 array of embedded-BPE ids, each followed by id 0."""
    tokenizer = TokenizerSpec("embedded").load()
    ids: list[int] = []
    for text in iter_texts({"files": files}):
        ids += tokenizer.encode(text).ids + [0]
        if max_tokens is not None and len(ids) >= max_tokens:
            return np.asarray(ids[:max_tokens], dtype=np.int16)
    return np.asarray(ids, dtype=np.int16)  # the vocabulary (8,192) fits int16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", required=True, help="training shard(s), C4-format .json(.gz)")
    parser.add_argument("--val", nargs="+", required=True, help="validation shard(s)")
    parser.add_argument("--out", default=".data/llama_stalls", help="folder for train.npy and val.npy")
    parser.add_argument("--train-tokens", type=int, default=6_000_000, help="keep the first N training tokens (0: all)")
    parser.add_argument("--val-tokens", type=int, default=200_000, help="keep the first N validation tokens (0: all)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, files, limit in (("train", args.train, args.train_tokens), ("val", args.val, args.val_tokens)):
        for f in files:
            if not Path(f).is_file():
                raise SystemExit(f"no such file: {f} (give the textmix shards, e.g. ../shared/data/textmix/...)")
        array = token_array(files, limit or None)
        np.save(out / f"{name}.npy", array)
        log.info("%s: %d tokens → %s", name, len(array), out / f"{name}.npy")


if __name__ == "__main__":
    main()
