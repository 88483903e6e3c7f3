"""The training loaders that span epochs (image folders, CIFAR-10 arrays): the same batches as a per-epoch order, no drained workers at an
epoch start, epochs cut short, exact mid-epoch resume through `mixbench run`, and the stall bench's measurement."""

import json
from pathlib import Path

import pytest
import torch
from _support.bench import bench_module
from torch.utils.data import DataLoader, Dataset

from mixbench.data.samplers import EpochShuffleSampler, EpochSpanningBatches, EpochSpanningLoader


class Indices(Dataset):
    def __len__(self):
        return 22

    def __getitem__(self, i):
        return i


def spanning(num_workers: int, batch_size: int = 4, rank: int = 0, world: int = 1, seed: int = 3):
    batches = EpochSpanningBatches(len(Indices()), batch_size, seed, rank, world)
    extra = {"persistent_workers": True, "prefetch_factor": 2} if num_workers else {}
    return EpochSpanningLoader(DataLoader(Indices(), batch_sampler=batches, num_workers=num_workers, **extra), batches), batches


def expected_epoch(epoch: int, batch_size: int = 4, rank: int = 0, world: int = 1, seed: int = 3) -> list[list[int]]:
    sampler = EpochShuffleSampler(22, seed, rank, world)
    sampler.set_epoch(epoch)
    order = list(sampler)
    return [order[b * batch_size : (b + 1) * batch_size] for b in range(len(order) // batch_size)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_each_iter_is_one_epoch_of_the_per_epoch_order(num_workers):
    loader, batches = spanning(num_workers)
    assert len(loader) == 5  # 22 // 4, the partial batch dropped
    for epoch in range(3):
        batches.set_epoch(epoch)  # as Lightning does at every epoch start
        assert [b.tolist() for b in loader] == expected_epoch(epoch)
    loader._iterator._shutdown_workers() if num_workers else None


def test_epochs_advance_without_set_epoch_and_ranks_are_disjoint():
    seen = []
    for rank in range(2):
        loader, _ = spanning(0, batch_size=2, rank=rank, world=2)
        first, second = [b.tolist() for b in loader], [b.tolist() for b in loader]
        assert first == expected_epoch(0, 2, rank, 2) and second == expected_epoch(1, 2, rank, 2)
        seen.append({i for b in first for i in b})
    assert not seen[0] & seen[1]


def test_an_epoch_cut_short_does_not_shift_the_next_one():
    loader, batches = spanning(2)
    it = iter(loader)
    assert [next(it).tolist() for _ in range(2)] == expected_epoch(0)[:2]  # e.g. limit_train_batches=2
    batches.set_epoch(1)
    assert [b.tolist() for b in loader] == expected_epoch(1)
    loader._iterator._shutdown_workers()


def test_a_resumed_loader_continues_mid_epoch():
    loader, batches = spanning(0)
    batches.start(2, 3)
    assert [b.tolist() for b in loader] == expected_epoch(2)[3:]
    assert [b.tolist() for b in loader] == expected_epoch(3)


def test_the_workers_prepare_the_next_epoch_before_it_starts():
    """While the last batch of epoch 0 is delivered, batches of epoch 1 have already been handed to the workers."""
    loader, batches = spanning(2)
    for _ in loader:
        pass
    assert any(epoch == 1 for epoch, _ in batches.tags) or loader._pending is not None
    loader._iterator._shutdown_workers()


@pytest.fixture(scope="module")
def jpeg_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs")
    bench_module("speed", "image_loader").write_jpegs(root, 64, 48)
    return root


TWO_EPOCHS_OF_A_TINY_VIT = [  # deterministic, checkpoints kept (resume tests pick one mid-epoch)
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "trainer.max_epochs=2",
    "trainer.max_steps=-1",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
    "trainer.deterministic=true",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "save_weights=false",
    "checkpoint.keep_last=null",
]


def image_run(root: Path, results: Path, *extra: str) -> list[str]:
    return [
        "run",
        "task=vit_tiny",
        "data=imagefolder",
        f"data.root={root}",
        "data.img_size=32",
        "data.batch_size=8",
        "data.eval_batch_size=20",
        "data.num_workers=1",
        "data.crop_pct=1.0",
        "data.auto_augment=null",
        "model.num_classes=null",
        "model.img_size=null",
        *TWO_EPOCHS_OF_A_TINY_VIT,
        "checkpoint.every_n_steps=4",
        f"results_dir={results}",
        *extra,
    ]


def test_resume_mid_epoch_through_mixbench_run_is_exact(tmp_path, jpeg_root):
    """8 steps an epoch, 2 epochs; resumed from step 12 (mid epoch 1) it ends at the uninterrupted run's weights."""
    from mixbench.cli.app import main

    assert main(image_run(jpeg_root, tmp_path / "full")) == 0
    (full,) = [json.loads(p.read_text()) for p in (tmp_path / "full").rglob("record.json")]
    assert full["steps"] == 16 and full["dataset"]["exact_resume"] is True
    (ckpt,) = Path(full["run_dir"]).glob("checkpoints/*step=12.ckpt")
    state = torch.load(ckpt, weights_only=False)["ImageFolderDataModule"]
    assert state == {"epoch": 1, "consumed": 32, "seed": 0}
    assert main(image_run(jpeg_root, tmp_path / "resumed", f"resume_from={ckpt}")) == 0
    (resumed,) = [json.loads(p.read_text()) for p in (tmp_path / "resumed").rglob("record.json")]
    assert resumed["steps"] == 16
    assert resumed["metrics"]["val/loss"] == full["metrics"]["val/loss"]  # exactly


def test_the_throughput_monitor_records_epoch_averages_with_the_stall_and_without_validation(monkeypatch):
    from types import SimpleNamespace

    from mixbench.training import callbacks

    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock.now)
    module = SimpleNamespace(log_dict=lambda metrics, **kw: None)
    trainer = SimpleNamespace(
        global_step=0,
        world_size=2,
        current_epoch=0,
        state=SimpleNamespace(fn="fit"),
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
    )
    monitor = callbacks.ThroughputMonitor(lambda batch: 10, flops_per_item=None, every_n_steps=100)
    monitor.on_train_start(trainer, module)
    for epoch in range(2):
        trainer.current_epoch = epoch
        clock.now += 3.0  # the stall at the epoch start
        for _ in range(4):
            clock.now += 1.0
            trainer.global_step += 1
            monitor.on_train_batch_end(trainer, module, None, None, 0)
        monitor.on_validation_start(trainer, module)
        clock.now += 5.0
        monitor.on_validation_end(trainer, module)
        monitor.on_train_epoch_end(trainer, module)
    assert [(e["steps"], e["items"], e["seconds"]) for e in monitor.epochs] == [(4, 80, 7.0), (4, 80, 7.0)]
    assert monitor.epochs[1]["items_per_sec"] == pytest.approx(80 / 7)


def cifar_run(results: Path, *extra: str) -> list[str]:
    return [
        "run",
        "task=vit_tiny",  # the embedded CIFAR-10 arrays: 1,600 train images, 16 steps an epoch at batch 100
        "data.batch_size=100",
        "data.eval_batch_size=400",
        "data.num_workers=0",
        *TWO_EPOCHS_OF_A_TINY_VIT,
        "checkpoint.every_n_steps=8",
        f"results_dir={results}",
        *extra,
    ]


@pytest.mark.parametrize("pipeline", ["cpu", "gpu"])  # gpu: the batched device pipeline, here on the CPU
def test_cifar_resume_mid_epoch_through_mixbench_run_is_exact(tmp_path, pipeline):
    """The CIFAR-10 array loaders: resumed from step 24 (mid epoch 1; crops and flips seeded per sample, or per batch for
    the gpu pipeline) it ends at the uninterrupted run's loss."""
    from mixbench.cli.app import main

    assert main(cifar_run(tmp_path / "full", f"data.pipeline={pipeline}")) == 0
    (full,) = [json.loads(p.read_text()) for p in (tmp_path / "full").rglob("record.json")]
    assert full["steps"] == 32 and full["dataset"]["exact_resume"] is True and full["dataset"]["pipeline"] == pipeline
    (ckpt,) = Path(full["run_dir"]).glob("checkpoints/*step=24.ckpt")
    assert torch.load(ckpt, weights_only=False)["CifarArrayDataModule"] == {"epoch": 1, "consumed": 800, "seed": 0}
    assert main(cifar_run(tmp_path / "resumed", f"data.pipeline={pipeline}", f"resume_from={ckpt}")) == 0
    (resumed,) = [json.loads(p.read_text()) for p in (tmp_path / "resumed").rglob("record.json")]
    assert resumed["steps"] == 32
    assert resumed["metrics"]["val/loss"] == full["metrics"]["val/loss"]  # exactly
