"""data.pipeline=gpu for the CIFAR-10 arrays (mixbench/data/device_arrays.py): the batched crop/flip/normalize against
torchvision image by image, the draws' distribution and determinism, the order and exact resume, DDP shares, what crosses
to the device a step — on the CPU — and, on the GPU machine, no synchronising call and the same batches as the CPU."""

import json
from types import SimpleNamespace

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from mixbench.core.errors import ConfigError
from mixbench.data import device_arrays as da
from mixbench.data.images import CIFAR_MEAN, CIFAR_STD, CifarArrayDataModule
from mixbench.data.samplers import EpochShuffleSampler, EpochSpanningLoader

BATCH = 100  # the embedded arrays: 1,600 train images, 16 batches an epoch


def on_device(device: str, rank: int = 0, world: int = 1):
    """What the data module reads from Lightning's trainer: the root device, rank and world size."""
    return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)), global_rank=rank, world_size=world)


def cifar(pipeline: str = "gpu", device: str = "cpu", rank: int = 0, world: int = 1, **options) -> CifarArrayDataModule:
    dm = CifarArrayDataModule(batch_size=BATCH, eval_batch_size=150, pipeline=pipeline, **options)
    dm.setup()
    dm.trainer = on_device(device, rank, world)
    return dm


def reference_crop_flip(images: torch.Tensor, indices, top, left, flip) -> torch.Tensor:
    """torchvision RandomCrop(32, padding=4) + horizontal flip with the given parameters, image by image."""
    out = []
    for i, t, lft, f in zip(indices.tolist(), top.tolist(), left.tolist(), flip.tolist()):
        image = TF.crop(TF.pad(images[i], [4]), t, lft, 32, 32)
        out.append(TF.horizontal_flip(image) if f else image)
    return torch.stack(out)


@pytest.fixture(scope="module")
def embedded():
    dm = CifarArrayDataModule()
    dm.setup()
    return dm


@pytest.mark.parametrize("img_size", [32, 48])
def test_batched_crop_flip_normalize_equals_torchvision_image_by_image(embedded, img_size):
    """Same offsets and flips: the batch equals the per-image crop + flip, then the cpu pipeline's own resize / ToDtype /
    Normalize transform (the val transform of a module of that size), bit for bit."""
    images = embedded.train_set.images
    arrays = da.DeviceArrays(images, embedded.train_set.labels, "cpu", img_size, CIFAR_MEAN, CIFAR_STD, pad=4)
    indices = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:64]
    crops = da.CropFlipDraws(4, seed=1)(0, 0, 64)
    crops[:, :4] = torch.tensor([[0, 8, 0, 8], [0, 0, 8, 8], [1, 0, 1, 0]])  # the corners, with and without a flip
    expected = reference_crop_flip(images, indices, *crops)
    assert torch.equal(arrays.crop_flip(indices, *crops), expected)
    assert not torch.equal(arrays.crop_flip(indices, *crops[:2], 1 - crops[2]), expected)  # the flips are the drawn ones
    normalize = CifarArrayDataModule(img_size=img_size)
    normalize.setup()
    x, labels = arrays.batch(indices, crops)
    assert x.shape == (64, 3, img_size, img_size) and x.dtype == torch.float32
    assert torch.equal(x, torch.stack([normalize.val_set.transform(image) for image in expected]))
    assert torch.equal(labels, embedded.train_set.labels[indices])


def test_crop_offsets_span_0_to_8_uniformly_and_half_the_images_flip():
    draws = da.CropFlipDraws(4, seed=0)
    crops = torch.cat([draws(epoch, b, 256) for epoch in range(4) for b in range(25)], dim=1)  # 25,600 images
    for offsets in crops[:2]:
        counts = torch.bincount(offsets, minlength=9)
        assert len(counts) == 9 and torch.allclose(counts / crops.shape[1], torch.full((9,), 1 / 9), atol=0.008)
    assert set(crops[2].tolist()) == {0, 1} and abs(crops[2].float().mean() - 0.5) < 0.01


def test_draws_are_a_function_of_seed_epoch_rank_and_batch():
    first, again = da.CropFlipDraws(4, seed=3), da.CropFlipDraws(4, seed=3)
    assert torch.equal(first(2, 5, 256), again(2, 5, 256))
    first(0, 0, 256)  # what was drawn before does not matter
    assert torch.equal(first(2, 5, 256), again(2, 5, 256))
    for other in (da.CropFlipDraws(4, seed=4)(2, 5, 256), again(3, 5, 256), again(2, 6, 256), da.CropFlipDraws(4, 3, rank=1)(2, 5, 256)):
        assert not torch.equal(other, first(2, 5, 256))


def ordered_arrays(dm: CifarArrayDataModule) -> None:
    """Labels = sample indices, so a batch's labels say which samples it holds."""
    for dataset in (dm.train_set, dm.val_set):
        dataset.labels = torch.arange(len(dataset))


def expected_epoch(n: int, epoch: int, rank: int = 0, world: int = 1) -> list[list[int]]:
    sampler = EpochShuffleSampler(n, 0, rank, world)
    sampler.set_epoch(epoch)
    order = list(sampler)
    return [order[b * BATCH : (b + 1) * BATCH] for b in range(len(order) // BATCH)]


def test_epochs_are_the_cpu_pipelines_order_and_advance_with_or_without_set_epoch():
    dm = cifar()
    ordered_arrays(dm)
    loader = dm.train_dataloader()
    assert isinstance(loader, da.ArrayTrainLoader) and len(loader) == 16
    assert [labels.tolist() for _, labels in loader] == expected_epoch(1600, 0)
    assert [labels.tolist() for _, labels in loader] == expected_epoch(1600, 1)  # nobody set the epoch: the next one
    loader.sampler.set_epoch(4)  # as Lightning does at every epoch start
    batches = iter(loader)
    assert [next(batches)[1].tolist() for _ in range(2)] == expected_epoch(1600, 4)[:2]  # cut short
    loader.sampler.set_epoch(5)
    assert [labels.tolist() for _, labels in loader] == expected_epoch(1600, 5)


def test_lightning_trains_each_epoch_on_the_order(tmp_path):
    """Through a Trainer (which makes an iterator it never reads before the first epoch, and sets the epoch from the
    second on): three epochs, each the order's batches."""
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.head, self.seen = torch.nn.Linear(1, 1), []

        def training_step(self, batch, _):
            images, indices = batch
            assert images.shape == (BATCH, 3, 32, 32)
            self.seen.append(indices.tolist())
            return self.head(images[:, :1, 0, 0]).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = cifar()
    ordered_arrays(dm)
    dm.trainer = None  # Lightning attaches its own
    model = Recorder()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    assert model.seen == [batch for epoch in range(3) for batch in expected_epoch(1600, epoch)]
    assert dm.describe()["pipeline"] == "gpu"


def test_a_resumed_loader_continues_mid_epoch_exactly():
    full = cifar().train_dataloader()
    uninterrupted = [batch for _ in range(2) for batch in full]  # epochs 0 and 1
    resumed = cifar()
    resumed.load_state_dict({"epoch": 1, "consumed": 7 * BATCH, "seed": 0})  # what a checkpoint at step 23 saves
    loader = resumed.train_dataloader()
    loader.sampler.set_epoch(1)  # Lightning restores the epoch and sets it
    rest = list(loader)
    assert len(rest) == 9
    for (x, y), (x_full, y_full) in zip(rest, uninterrupted[16 + 7 :], strict=True):
        assert torch.equal(x, x_full) and torch.equal(y, y_full)
    assert torch.equal(next(iter(loader))[0], next(iter(full))[0])  # and epoch 2 follows on both


def test_ddp_ranks_read_disjoint_shares_with_their_own_draws():
    shares, draws = [], []
    for rank in range(2):
        dm = cifar(rank=rank, world=2)
        ordered_arrays(dm)
        loader = dm.train_dataloader()
        batches = list(loader)
        assert [y.tolist() for _, y in batches] == expected_epoch(1600, 0, rank, 2)
        shares.append({i for _, y in batches for i in y.tolist()})
        draws.append(loader.plan(0, 0, loader.sampler.order())[1:])  # the crops of each rank's first batch
        assert [y.tolist() for _, y in dm.val_dataloader()] == [list(range(rank, 400, 2))[:150], list(range(rank, 400, 2))[150:]]
    assert not shares[0] & shares[1] and len(shares[0]) == 800
    assert not torch.equal(*draws)  # not the same crops at the same positions on every rank


@pytest.mark.parametrize("img_size", [32, 40])
def test_val_batches_equal_the_cpu_pipelines(img_size):
    gpu, cpu = cifar(img_size=img_size), cifar("cpu", img_size=img_size)
    ours, theirs = list(gpu.val_dataloader()), list(cpu.val_dataloader())
    assert isinstance(gpu.val_dataloader(), da.ArrayEvalLoader) and len(ours) == len(theirs) == 3
    for (x, y), (x_cpu, y_cpu) in zip(ours, theirs):
        assert torch.equal(x, x_cpu) and torch.equal(y, y_cpu)


def test_train_batches_have_the_cpu_pipelines_statistics():
    """The same recipe, other draws: over an epoch the per-channel mean and std of the two pipelines' batches agree."""
    black = (-torch.tensor(CIFAR_MEAN) / torch.tensor(CIFAR_STD)).view(1, 3, 1, 1)  # a zero pixel normalized: the border
    stats = []
    for dm in (cifar(), cifar("cpu")):
        x = torch.cat([images for images, _ in dm.train_dataloader()])
        stats.append((x.mean(dim=(0, 2, 3)), x.std(dim=(0, 2, 3)), (x == black).all(dim=1).float().mean()))
    (mean, std, border), (cpu_mean, cpu_std, cpu_border) = stats
    assert 0.12 < border < 0.15  # E|offset - 4| = 20/9 rows and columns of 32 in the border: 13.4 % of the pixels
    assert abs(border - cpu_border) < 0.01 and torch.allclose(mean, cpu_mean, atol=0.03) and torch.allclose(std, cpu_std, atol=0.03)


def test_one_pinned_upload_a_step_carries_indices_and_draws(monkeypatch):
    """What crosses to the device a step: one (4, B) int64 tensor — indices, crop top, left, flip — through ``upload``
    (pinned, non-blocking on CUDA); no tensor is built on the device from host values."""
    dm = cifar()
    loader = dm.train_dataloader()
    batches = iter(loader)
    next(batches)
    uploads = []
    original_tensor = torch.tensor

    def recording_upload(tensor, device):
        uploads.append(tensor)
        return tensor.to(device)

    def host_only(*args, **kwargs):
        assert kwargs.get("device") is None, "a tensor built on the device from host values: a synchronising copy"
        return original_tensor(*args, **kwargs)

    monkeypatch.setattr(da, "upload", recording_upload)
    monkeypatch.setattr(torch, "tensor", host_only)
    for _ in range(3):
        next(batches)
    assert [(u.shape, u.dtype) for u in uploads] == [((4, BATCH), torch.int64)] * 3
    offsets = torch.cat([u[1:3] for u in uploads])
    assert 0 <= offsets.min() and offsets.max() <= 8 and set(torch.cat([u[3] for u in uploads]).tolist()) == {0, 1}


def test_without_augmentation_a_train_batch_is_its_images_normalized():
    dm = cifar(augment=False)
    images = dm.train_set.images.clone()
    ordered_arrays(dm)
    x, indices = next(iter(dm.train_dataloader()))
    assert torch.equal(x, torch.stack([dm.val_set.transform(images[i]) for i in indices]))


def test_the_switch_auto_cpu_gpu(caplog, embedded):
    with pytest.raises(ConfigError, match="data.pipeline='tpu'.*auto, cpu, gpu"):
        CifarArrayDataModule(pipeline="tpu")
    auto = cifar("auto")
    assert auto._on_gpu_pipeline(torch.device("cuda", 0)) and not auto._on_gpu_pipeline(torch.device("cpu"))
    assert isinstance(auto.train_dataloader(), EpochSpanningLoader) and auto.describe()["pipeline"] == "cpu"
    assert "augmentation_draws" not in auto.describe()
    forced = cifar("gpu")
    assert isinstance(forced.train_dataloader(), da.ArrayTrainLoader) and "data.pipeline=gpu on a cpu device" in caplog.text
    assert forced.describe()["pipeline"] == "gpu" and "other draws" in forced.describe()["augmentation_draws"]
    assert embedded.describe()["pipeline"] == "auto"  # before a loader is built


# ----------------------------------------------------------------------------------------------- on the GPU machine


@pytest.mark.gpu
def test_gpu_loaders_make_no_synchronising_torch_call():
    """Under torch's sync debug mode "error" any synchronising torch call raises: train batches across an epoch boundary
    and a validation pass come through without one, on the device."""
    dm = cifar("auto", "cuda")
    train, val = dm.train_dataloader(), dm.val_dataloader()
    batches = iter(train)
    next(batches)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        rest = list(batches) + [next(iter(train))]  # the end of epoch 0 and the start of epoch 1
        evaluated = list(val)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(rest) == 16 and len(evaluated) == 3
    assert all(x.is_cuda and y.is_cuda for x, y in rest + evaluated) and dm.describe()["pipeline"] == "gpu"


@pytest.mark.gpu
@pytest.mark.parametrize("img_size", [32, 48])
def test_cuda_batches_equal_the_cpu_devices(img_size):
    """The draws are made on the host, so a CUDA device and the CPU give the same batches: the same crops and flips, the
    same normalization; torchvision's bicubic resize differs between CUDA's float kernel and the CPU's uint8 one (on the
    CPU the two kernels differ by 0.2 grey levels on average, up to 14 at a few edge pixels)."""
    cuda, cpu = cifar(device="cuda", img_size=img_size), cifar(device="cpu", img_size=img_size)
    grey = (torch.tensor(CIFAR_STD) * 255).view(1, 3, 1, 1)  # a normalized difference × this = grey levels
    for (x, y), (x_cpu, y_cpu) in zip([b for _, b in zip(range(3), cuda.train_dataloader())], cpu.train_dataloader()):
        levels = (x.cpu() - x_cpu).abs() * grey
        assert torch.equal(y.cpu(), y_cpu)
        if img_size == 32:
            assert levels.max() < 1e-3
        else:
            assert levels.mean() < 0.5 and levels.max() <= 20


@pytest.mark.gpu
def test_a_cuda_run_trains_on_the_gpu_pipeline(tmp_path):
    from mixbench.cli.app import main

    # 20 steps may not beat chance: the learning check off (test_learning_check.py tests it)
    args = ["run", "task=vit_tiny", "trainer.max_steps=20", "trainer.max_epochs=null", "trainer.limit_val_batches=2",
            "trainer.enable_progress_bar=false", "divergence.unigram_floor=false", "save_weights=false",
            f"results_dir={tmp_path}"]  # fmt: skip
    assert main(args) == 0
    (record,) = [json.loads(p.read_text()) for p in tmp_path.rglob("record.json")]
    assert record["status"] == "completed" and record["steps"] == 20
    assert record["dataset"]["pipeline"] == "gpu" and record["dataset"]["exact_resume"] is True  # data.pipeline=auto on CUDA
