"""The ``vision`` family: timm Vision Transformers (:mod:`mixbench.models.vit`) on image classification data."""
from __future__ import annotations

from functools import partial

import torch.nn.functional as F

from ..errors import ConfigError
from ..models.vit import VIT_PRESETS, build_vit, vit_defaults
from . import Family, register_family


def lightning_module(cfg, model, datamodule):
    from omegaconf import OmegaConf

    from ..lit import ImageClassifierModule, OptimConfig

    return ImageClassifierModule(model, OptimConfig.from_config(cfg.optim), num_classes=datamodule.num_classes,
                                 label_smoothing=cfg.loss.label_smoothing, mixup=OmegaConf.to_container(cfg.mixup), ema_decay=cfg.ema.decay)


def options_from_data(cfg, options: dict, datamodule) -> dict:
    """Unset ``img_size`` / ``num_classes`` come from the data; set ones must fit it."""
    options = dict(options)
    for key, value in (("num_classes", datamodule.num_classes), ("img_size", datamodule.img_size)):
        if options[key] is None:
            options[key] = value
        elif options[key] != value:
            raise ConfigError(f"the data has {key}={value} but model.{key}={options[key]}; set model.{key}={value} "
                              f"(or null to take it from the data)")
    return options


def analysis_loss(model, batch):
    images, targets = batch
    return F.cross_entropy(model(images), targets)


VISION = register_family(Family(
    name="vision",
    description="timm Vision Transformers (ViT-Ti/S); metric: validation top-1",
    models={name: partial(vit_defaults, name) for name in VIT_PRESETS},
    build=build_vit,
    lightning_module=lightning_module,
    options_from_data=options_from_data,
    items=lambda batch: len(batch[1]),
    item_name="images",
    analysis_loss=analysis_loss,
    analysis_inputs=lambda batch: (batch[0], None),
    data_requires=("num_classes", "img_size"),
))
