"""A toy third model family, registered from a task plugin: is token 0 in the upper half of the vocabulary?

Everything the core needs comes from the registrations below — no core file knows this family."""

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from mixbench.core.families import Family, register_family
from mixbench.data import register_datamodule
from mixbench.layers import PlacedResidual, init_placements_, norm_factory
from mixbench.training.lit import OptimConfig
from mixbench.training.lit.base import OptimizedModule


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.proj(F.scaled_dot_product_attention(q, k, v))


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(PlacedResidual, nn.Module):
    def __init__(self, dim, spec, depth, num_layers, make_norm):
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = make_norm(dim), Attention(dim), make_norm(dim), MLP(dim)
        self.setup_placement(spec, depth, num_layers, dim, make_norm)

    def forward(self, x):
        return self.placed_forward(x, self.attn, self.mlp)


class ToyClassifier(nn.Module):
    def __init__(self, spec, vocab_size=16, dim=16, num_layers=2, num_classes=2):
        super().__init__()
        make_norm = norm_factory(spec.kind or "layernorm", eps=spec.eps or 1e-6)
        self.norm_spec, self.plan = spec, spec.plan(num_layers)
        self.embed = nn.Embedding(vocab_size, dim)
        self.pos = nn.Parameter(torch.randn(8, dim) * 0.1)
        self.blocks = nn.ModuleList(Block(dim, spec, i, num_layers, make_norm) for i in range(num_layers))
        self.norm, self.head = make_norm(dim), nn.Linear(dim, num_classes)
        init_placements_(self.blocks)

    def forward(self, ids):
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class ToyData(L.LightningDataModule):
    def __init__(self, n_train: int = 256, n_val: int = 64, seq_len: int = 8, vocab_size: int = 16, batch_size: int = 32, seed: int = 0):
        super().__init__()
        self.n_train, self.n_val, self.seq_len, self.vocab_size, self.batch_size, self.seed = (
            n_train,
            n_val,
            seq_len,
            vocab_size,
            batch_size,
            seed,
        )

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(self.seed)
        ids = torch.randint(0, self.vocab_size, (self.n_train + self.n_val, self.seq_len), generator=g)
        labels = (ids[:, 0] >= self.vocab_size // 2).long()
        self.train_set = TensorDataset(ids[: self.n_train], labels[: self.n_train])
        self.val_set = TensorDataset(ids[self.n_train :], labels[self.n_train :])
        self.num_classes = 2

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def describe(self):
        return {"name": "toyseq", "label": f"synthetic token sequences ({self.n_train} train / {self.n_val} val)"}


class ToyModule(OptimizedModule):
    def training_step(self, batch, batch_idx):
        ids, labels = batch
        loss = F.cross_entropy(self.model(ids), labels)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        ids, labels = batch
        logits = self.model(ids)
        self.log("val/loss", F.cross_entropy(logits, labels))
        self.log("val/acc", 100.0 * (logits.argmax(-1) == labels).float().mean())


def options_from_data(cfg, options, datamodule):
    return {**options, "num_classes": datamodule.num_classes, "vocab_size": datamodule.vocab_size}


register_datamodule("toyseq", f"{__name__}:ToyData")
register_family(
    Family(
        name="toyseq",
        description="toy sequence classifier (a plugin family)",
        models={"toy_tiny": lambda: {"vocab_size": 16, "dim": 16, "num_layers": 2, "num_classes": 2}},
        build=lambda name, spec, **options: ToyClassifier(spec, **options),
        lightning_module=lambda cfg, model, datamodule: ToyModule(model, OptimConfig.from_config(cfg.optim)),
        options_from_data=options_from_data,
        items=lambda batch: batch[0].numel(),
        item_name="tokens",
        analysis_loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        analysis_inputs=lambda batch: (batch[0], None),
        data_requires=("num_classes", "vocab_size"),
    )
)
