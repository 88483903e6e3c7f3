"""Where the built-in data modules find their local data, looked up (globs, files, folders) and never read — light:
no Lightning and no torch, so that ``mixbench run`` names a missing path before it loads the training stack
(:func:`check_local_sources`); the data modules' own constructors and ``check_sources`` use the same lookups."""

from __future__ import annotations

import glob
from pathlib import Path

from ..core.errors import ConfigError

EMBEDDED = "embedded"  # the data shipped in the package: nothing to look up
CIFAR_PATH_UNSET = "set data.path to a CIFAR-10 .npz (arrays x, y, classes), e.g. the official test set"
IMAGE_ROOT_UNSET = "set data.root to the dataset folder (ILSVRC train/ and val/ class folders, or HF imagenet-1k parquet files)"
TEXT_SOURCE_UNSET = "set data.path to a glob of local C4-format shards, or data.hub to stream a hub dataset"


def resolve_files(pattern: str) -> list[str]:
    files = sorted(glob.glob(str(Path(pattern).expanduser())))
    if not files:
        raise FileNotFoundError(
            f"no files match data path {pattern!r}; set data.path (and data.val_path) to a glob of C4-format "
            ".json.gz shards, e.g. data.path='/data/c4/en/c4-train.*.json.gz'"
        )
    return files


def validation_glob(train_glob: str) -> str:
    """C4 layout: ``c4-train.*`` → ``c4-validation.*`` next to it."""
    if "train" not in Path(train_glob).name:
        raise ConfigError(f"cannot derive a validation glob from {train_glob!r}; set data.val_path")
    head, name = str(Path(train_glob).parent), Path(train_glob).name
    return str(Path(head) / name.replace("train", "validation"))


def cifar_file(path: str) -> Path:
    """The CIFAR-10 ``.npz`` of ``data.path`` (not the embedded arrays), which must exist."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"data.path={path!r} does not exist; set it to a CIFAR-10 .npz with arrays x, y, classes")
    return file


def detect_layout(root: Path, train_dir: str, val_dir: str) -> str:
    """``folder`` (``train_dir/<class>/…`` and ``val_dir/<class>/…`` under ``root``) or ``parquet`` (HF imagenet-1k)."""
    if (root / train_dir).is_dir() and (root / val_dir).is_dir():
        return "folder"
    if glob.glob(str(root / "**" / "train-*.parquet"), recursive=True):
        return "parquet"
    raise FileNotFoundError(
        f"no image dataset under data.root={str(root)!r}: expected {train_dir}/<class>/*.JPEG and {val_dir}/<class>/*.JPEG "
        "folders, or the Hugging Face imagenet-1k parquet files (train-*.parquet, validation-*.parquet); "
        "set data.root=/path/to/imagenet"
    )


def _text(data) -> None:
    path = data.get("path")
    if path is None:
        if data.get("hub") is None:
            raise ConfigError(TEXT_SOURCE_UNSET)
    elif path != EMBEDDED:
        resolve_files(path)
        resolve_files(data.get("val_path") or validation_glob(path))


def _cifar(data) -> None:
    path = data.get("path")
    if path is None:
        raise ConfigError(CIFAR_PATH_UNSET)
    if path != EMBEDDED:
        cifar_file(path)


def _image_folder(data) -> None:
    if data.get("root") is None:
        raise ConfigError(IMAGE_ROOT_UNSET)
    detect_layout(Path(data["root"]).expanduser(), data.get("train_dir", "train"), data.get("val_dir", "val"))


LOOKUPS = {"text": _text, "cifar10": _cifar, "image_folder": _image_folder}  # by data.loader


def check_local_sources(data) -> None:
    """The lookups a built-in data module (``data.loader``) makes before it reads: a ``FileNotFoundError`` or
    ``ConfigError`` naming the setting.  Other loaders (a plugin's, SFT's and RLHF's) are checked by the run's
    preflight, which builds them."""
    lookup = LOOKUPS.get(data.get("loader"))
    if lookup is not None:
        lookup(data)
