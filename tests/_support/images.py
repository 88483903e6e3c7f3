"""Image folders written for a test."""

import numpy as np
from PIL import Image


def make_folder(root, classes=("cat", "dog", "eel"), per_class=4, size=40):
    """``root/{train,val}/<class>/<i>.JPEG``: ``per_class`` random ``size``-px pictures a class (seeded)."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(root / split / c / f"{i}.JPEG")
    return root
