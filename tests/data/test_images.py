"""Folder-per-class and ImageNet-layout image data through the same pipeline."""

import json
import subprocess
import sys

import numpy as np
import pytest
from _support.images import make_folder
from _support.paths import REPO_ROOT
from PIL import Image

from mixbench.cli.app import main
from mixbench.data.folders import ImageFolderDataModule


def test_folder_classes_are_sorted_names_and_transforms_follow_the_recipe(tmp_path):
    dm = ImageFolderDataModule(root=str(make_folder(tmp_path, classes=("n02", "n01", "n03"))), img_size=32, batch_size=4, num_workers=0)
    dm.setup()
    assert dm.classes == ["n01", "n02", "n03"] and dm.num_classes == 3 and dm.layout == "folder"
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, 32, 32)
    # the recipe's settings, not only its transforms' names (timm's reprs carry them)
    normalize = "Normalize(mean=tensor([0.4850, 0.4560, 0.4060]), std=tensor([0.2290, 0.2240, 0.2250]))"
    train = [line.strip() for line in repr(dm.train_set.transform).splitlines()[1:-1]]
    ops, train = [line for line in train if line.startswith("AugmentOp(")], [line for line in train if not line.startswith("AugmentOp(")]
    assert train == [
        "RandomResizedCropAndInterpolation(size=(32, 32), scale=(0.08, 1.0), ratio=(0.75, 1.3333), interpolation=bicubic)",
        "RandomHorizontalFlip(p=0.5)",
        "RandAugment(n=2, ops=",  # rand-m9-mstd0.5-inc1: 2 ops a picture, magnitude 9 ± 0.5, the increasing variants
        "MaybeToTensor()",
        normalize,
        "RandomErasing(p=0.25, mode=pixel, count=(1, 1))",
    ]
    assert len(ops) == 15 and all(", p=0.5, m=9, mstd=0.5)" in op for op in ops) and "AugmentOp(name=SolarizeIncreasing" in " ".join(ops)
    val = [line.strip() for line in repr(dm.val_set.transform).splitlines()[1:-1]]
    assert val == [  # resize 32/0.875 then center crop 32, bicubic
        "Resize(size=36, interpolation=bicubic, max_size=None, antialias=True)",
        "CenterCrop(size=(32, 32))",
        "MaybeToTensor()",
        normalize,
    ]


@pytest.mark.parametrize("pipeline", ["cpu", "gpu", "nvjpeg"])
def test_hf_parquet_layout(tmp_path, pipeline):
    import io

    from datasets import Dataset, Features, Value
    from datasets import Image as HFImage

    buf = io.BytesIO()
    Image.fromarray(np.zeros((40, 40, 3), dtype=np.uint8)).save(buf, format="JPEG")
    feats = Features({"image": HFImage(), "label": Value("int64")})
    for split in ("train", "validation"):
        Dataset.from_dict({"image": [{"bytes": buf.getvalue(), "path": None}] * 4, "label": [0, 1, 2, 1]}, features=feats).to_parquet(
            str(tmp_path / "data" / f"{split}-00000-of-00001.parquet")
        )
    dm = ImageFolderDataModule(root=str(tmp_path), img_size=32, batch_size=2, num_workers=0, pipeline=pipeline)
    dm.setup()
    assert dm.layout == "parquet" and dm.num_classes == 3 and len(dm.val_set) == 4
    images, labels = dm.transfer_batch_to_device(next(iter(dm.val_dataloader())), "cpu", 0)
    assert images.shape == (2, 3, 32, 32) and labels.tolist() == [0, 1]


def test_missing_imagenet_says_what_to_set(tmp_path, caplog):
    assert main(["run", "task=vit_small", "data=imagenet", f"results_dir={tmp_path}"]) == 2
    assert "set data.root" in caplog.text
    caplog.clear()
    assert main(["run", "task=vit_small", "data=imagenet", f"data.root={tmp_path / 'nothing'}", f"results_dir={tmp_path}"]) == 2
    assert "set data.root=/path/to/imagenet" in caplog.text


@pytest.mark.parametrize(
    "pipeline", ["cpu", "gpu", "nvjpeg"]
)  # gpu / nvjpeg: recipe finished in transfer_batch_to_device (here on the CPU)
def test_vit_small_mix_on_an_image_folder(tmp_path, pipeline):
    root = make_folder(tmp_path / "folder")
    args = [
        "run",
        "task=vit_small",
        "norm=mix",
        "data=imagefolder",
        f"data.root={root}",
        f"data.pipeline={pipeline}",
        "data.img_size=32",
        "data.num_workers=0",
        "data.batch_size=4",
        "data.eval_batch_size=6",
        "trainer.max_steps=2",
        "model.num_layers=4",
        "model.hidden_size=32",
        "model.num_heads=2",
        "mixup.mixup_alpha=0.8",
        "mixup.cutmix_alpha=1.0",
        "loss.label_smoothing=0.1",
        "ema.decay=0.9",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        f"results_dir={tmp_path / 'results'}",
    ]
    assert main(args) == 0
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("record.json")]
    assert rec["status"] == "completed" and rec["dataset"]["name"] == "folder" and rec["dataset"]["num_classes"] == 3
    assert rec["dataset"]["pipeline"] == pipeline
    assert rec["model"]["options"]["num_classes"] is None and rec["norm"]["plan"] == ["post", "pre", "pre", "pre"]
    assert {"val/top1", "val/top5", "val_ema/top1", "val_ema/loss"} <= set(rec["metrics"])
    assert rec["metrics"]["val/top1"] != rec["metrics"]["val_ema/top1"] or rec["metrics"]["val/loss"] != rec["metrics"]["val_ema/loss"]


def test_randaugment_posterize_to_zero_bits_works_with_the_installed_pillow():
    """timm's rand-m9-mstd0.5-inc1 can draw posterize with 0 bits kept; Pillow 13 raises on it (hence pillow<13)."""
    from timm.data.auto_augment import posterize

    image = Image.fromarray(np.full((8, 8, 3), 200, dtype=np.uint8))
    assert np.asarray(posterize(image, 0)).max() == 0


def test_ddp_trains_a_vit_with_its_ema(tmp_path):
    """The EMA copy is a submodule of the LightningModule but never gets gradients: DDP must not see it as a set of
    unused trainable parameters (it stopped every 2-GPU ViT run of the recipe, which keeps an EMA)."""
    from _support.runs import TINY_VIT

    cmd = [
        sys.executable,
        "-m",
        "mixbench.cli",
        "run",
        "task=vit_tiny",
        "ema.decay=0.99",
        "trainer.devices=2",
        "trainer.strategy=ddp",
        "trainer.accelerator=cpu",
        "data.batch_size=4",
        "save_weights=false",
        f"results_dir={tmp_path}",
        *TINY_VIT,
    ]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = [json.loads(p.read_text()) for p in tmp_path.rglob("record.json")]
    assert record["status"] == "completed" and record["effective"]["world_size"] == 2 and "val_ema/top1" in record["metrics"]
