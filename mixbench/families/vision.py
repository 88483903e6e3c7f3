"""The ``vision`` family: timm Vision Transformers (:mod:`mixbench.models.vit`) on image classification data."""

from __future__ import annotations

import math
import re
from functools import partial

from ..core.errors import ConfigError
from ..core.families import Family, register_family
from ..core.traits import ModelTraits
from ..models.vit_config import VIT_PRESETS, vit_defaults

# torch, timm and the network are imported by the functions that use them: registering the family (`mixbench list`,
# `reclassify`) imports none of them


def lightning_module(cfg, model, datamodule):
    from omegaconf import OmegaConf

    from ..training.lit import ImageClassifierModule, OptimConfig  # Lightning loads when a run builds its module, not for `mixbench list`

    return ImageClassifierModule(
        model,
        OptimConfig.from_config(cfg.optim),
        num_classes=datamodule.num_classes,
        label_smoothing=cfg.loss.label_smoothing,
        mixup=OmegaConf.to_container(cfg.mixup),
        ema_decay=cfg.ema.decay,
    )


def options_from_data(cfg, options: dict, datamodule) -> dict:
    """Unset ``img_size`` / ``num_classes`` come from the data; set ones must fit it."""
    options = dict(options)
    for key, value in (("num_classes", datamodule.num_classes), ("img_size", datamodule.img_size)):
        if options[key] is None:
            options[key] = value
        elif options[key] != value:
            raise ConfigError(
                f"the data has {key}={value} but model.{key}={options[key]}; set model.{key}={value} (or null to take it from the data)"
            )
    return options


# A classifier "never beat chance" when its validation loss is within this fraction of ln C (the loss of the uniform
# prediction), or its top-1 within this many percentage points of chance (100 / C).  E.g. for CIFAR-10: val/loss ≥ 2.257
# or top-1 ≤ 11 %.  Both floors assume a class-balanced validation set (CIFAR splits, ImageNet val: 50 per class).
CHANCE_LOSS_MARGIN = 0.02
CHANCE_TOP1_MARGIN = 1.0


def chance_floor(num_classes: int) -> dict:
    """What a classifier that learned nothing scores on a balanced validation set of ``num_classes`` classes."""
    return {"val/loss": math.log(num_classes), "val/top1": 100.0 / num_classes}


def learning_floor(datamodule) -> dict:
    return chance_floor(datamodule.num_classes)


def record_num_classes(record: dict) -> int | None:
    """The class count of a record's model: its ``num_classes`` option, else — when that came from the data (the
    option is null) — the ``num_classes=N`` of the model's label (``vit_tiny[...,num_classes=10,...]``)."""
    model = record.get("model") or {}
    num_classes = (model.get("options") or {}).get("num_classes")
    if num_classes is None and (found := re.search(r"[\[,]num_classes=(\d+)[\],]", str(model.get("label", "")))):
        num_classes = int(found.group(1))
    return num_classes if isinstance(num_classes, int) and not isinstance(num_classes, bool) else None


def record_floor(record: dict) -> dict | None:
    """The chance floor of an older record (written before floors were stored), from its model's class count."""
    num_classes = record_num_classes(record)
    return chance_floor(num_classes) if num_classes is not None and num_classes > 1 else None


def never_beat_chance(metrics: dict, floor: dict) -> str | None:
    """A reason when the final validation loss is within :data:`CHANCE_LOSS_MARGIN` of ln C or the top-1 within
    :data:`CHANCE_TOP1_MARGIN` points of chance; None otherwise."""
    loss, top1 = metrics.get("val/loss"), metrics.get("val/top1")
    uniform, chance = floor["val/loss"], floor["val/top1"]
    problems = []
    if loss is not None and math.isfinite(loss) and loss >= (1 - CHANCE_LOSS_MARGIN) * uniform:
        problems.append(
            f"final val/loss {loss:.4f} ≥ {1 - CHANCE_LOSS_MARGIN:g} × ln C = {(1 - CHANCE_LOSS_MARGIN) * uniform:.4f} "
            f"(ln C = {uniform:.4f} is the uniform prediction)"
        )
    if top1 is not None and math.isfinite(top1) and top1 <= chance + CHANCE_TOP1_MARGIN:
        problems.append(f"final val/top1 {top1:.2f} % ≤ chance {chance:.2f} % + {CHANCE_TOP1_MARGIN:g}")
    return "never beat chance: " + " and ".join(problems) if problems else None


def analysis_loss(model, batch):
    import torch.nn.functional as F

    images, targets = batch
    return F.cross_entropy(model(images), targets)


# what the placements may need of a ViT: no token embeddings, DyT's α0 = 0.5 everywhere (the DyT ViT recipe)
VIT_TRAITS = ModelTraits()


def build(name: str, norm, **options):
    """:func:`mixbench.models.vit.build_vit` with the ViT traits."""
    from ..models.vit import build_vit

    return build_vit(name, norm, traits=VIT_TRAITS, **options)


VISION = register_family(
    Family(
        name="vision",
        description="timm Vision Transformers (ViT-Ti/S); metric: validation top-1",
        models={name: partial(vit_defaults, name) for name in VIT_PRESETS},
        build=build,
        lightning_module=lightning_module,
        options_from_data=options_from_data,
        items=lambda batch: len(batch[1]),
        item_name="images",
        analysis_loss=analysis_loss,
        analysis_inputs=lambda batch: (batch[0], None),
        learning_floor=learning_floor,
        learning_check=never_beat_chance,
        record_floor=record_floor,
        data_requires=("num_classes", "img_size"),
    )
)
