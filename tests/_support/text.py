"""C4-format text shards written for a test."""

import gzip
import json

from .paths import REPO_ROOT


def write_c4_shards(folder, split, docs_per_shard):
    """``folder/c4-<split>.<i>-of-<n>.json.gz``, one shard per list of documents, each a line of C4's JSON."""
    for i, docs in enumerate(docs_per_shard):
        with gzip.open(folder / f"c4-{split}.{i:05d}-of-{len(docs_per_shard):05d}.json.gz", "wt") as f:
            for j, text in enumerate(docs):
                f.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z", "url": f"https://example.org/{i}/{j}"}) + "\n")


def write_readme_shards(folder):
    """Two train shards and a validation shard of the README's paragraphs (the validation shard: every third one)."""
    text = (REPO_ROOT / "README.md").read_text().split("\n\n")
    write_c4_shards(folder, "train", [text[:20], text[20:]])
    write_c4_shards(folder, "validation", [text[::3]])
