"""data.pipeline=dali: config, the one error when DALI is missing, the pipeline's settings and ops (through a recording
stand-in for nvidia.dali), and — on the GPU machine with DALI installed — DALI against timm's transforms."""

import json
import sys
import types

import pytest
import torch
from _support.bench import bench_module

from mixbench.core.errors import ConfigError
from mixbench.data.dali import INSTALL_HINT, dali_settings, parse_rand_augment
from mixbench.data.folders import ImageFolderDataModule
from mixbench.training.config import compose


@pytest.fixture(scope="module")
def jpeg_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs")
    bench_module("speed", "image_loader").write_jpegs(root, 40, 64)
    return root


def test_the_option_composes():
    cfg = compose(["task=in1k_vit_small", "data.pipeline=dali", "data.root=/data/imagenet"])
    assert cfg.data.pipeline == "dali"


def test_without_dali_one_error_names_the_install_command(monkeypatch, jpeg_root, tmp_path, caplog):
    from mixbench.cli.app import main

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import nvidia.dali raises ImportError
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[dali\]"'):
        ImageFolderDataModule(root=str(jpeg_root), pipeline="dali")
    args = ["run", "task=vit_tiny", "data=imagefolder", f"data.root={jpeg_root}", "data.pipeline=dali", f"results_dir={tmp_path}"]
    assert main(args) == 2
    assert INSTALL_HINT in caplog.text and not list(tmp_path.rglob("record.json"))


def test_rand_augment_specs():
    assert parse_rand_augment("rand-m9-mstd0.5-inc1") == {"n": 2, "m": 9, "mstd": 0.5, "inc": True}
    assert parse_rand_augment("rand-n3-m7") == {"n": 3, "m": 7, "mstd": 0.0, "inc": False}
    assert parse_rand_augment(None) is None
    with pytest.raises(ConfigError, match="RandAugment"):
        parse_rand_augment("v0")


class FakeDali:
    """A stand-in for nvidia.dali that records every op call (name, keyword arguments) a pipeline definition makes."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.built: dict = {}

    def op(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, kwargs))
            node = types.SimpleNamespace(gpu=lambda: "labels-on-gpu")
            return (node, node) if name == "readers.file" else node

        return call

    def modules(self) -> dict:
        fn = types.SimpleNamespace(
            readers=types.SimpleNamespace(file=self.op("readers.file")),
            decoders=types.SimpleNamespace(image_random_crop=self.op("decoders.image_random_crop"), image=self.op("decoders.image")),
            random=types.SimpleNamespace(coin_flip=self.op("random.coin_flip")),
            resize=self.op("resize"),
            flip=self.op("flip"),
            crop_mirror_normalize=self.op("crop_mirror_normalize"),
            cast=self.op("cast"),
        )
        dtypes = types.SimpleNamespace(RGB="RGB", FLOAT="FLOAT", INT64="INT64", INTERP_CUBIC="cubic", INTERP_LINEAR="linear")

        def pipeline_def(enable_conditionals=False):
            def wrap(definition):
                def make(**kwargs):
                    self.built = FakePipeline(enable_conditionals=enable_conditionals, **kwargs, outputs=definition())
                    return self.built

                return make

            return wrap

        dali = types.ModuleType("nvidia.dali")
        dali.fn, dali.types, dali.pipeline_def = fn, dtypes, pipeline_def
        rand_augment = types.ModuleType("nvidia.dali.auto_aug.rand_augment")
        record_rand_augment = self.op("rand_augment")

        def rand_augment_op(*args, **kwargs):  # DALI's own rule (auto_aug/core/_utils.py): relative shifts need shapes
            if kwargs.get("max_translate_rel") is not None and kwargs.get("shape") is None:
                raise Exception("The argument `max_translate_rel` cannot be used without image shapes.")
            return record_rand_augment(*args, **kwargs)

        rand_augment.rand_augment = rand_augment_op
        plugin = types.ModuleType("nvidia.dali.plugin.pytorch")
        plugin.DALIGenericIterator, plugin.LastBatchPolicy = FakeIterator, types.SimpleNamespace(DROP="drop", PARTIAL="partial")
        return {"nvidia.dali": dali, "nvidia.dali.auto_aug.rand_augment": rand_augment, "nvidia.dali.plugin.pytorch": plugin}


class FakePipeline(dict):
    def build(self):
        pass


class FakeIterator:
    """DALIGenericIterator's interface: a list with one dict of CUDA tensors a batch (here CPU tensors, 3 batches)."""

    def __init__(self, pipelines, names, **kwargs):
        self.kwargs = kwargs

    def __len__(self):
        return 3

    def __iter__(self):
        for _ in range(3):
            yield [{"images": torch.randn(4, 3, 8, 8), "labels": torch.randint(0, 2, (4, 1), dtype=torch.int32)}]


def setup_module_with_fake(monkeypatch, jpeg_root, **options) -> tuple[ImageFolderDataModule, FakeDali]:
    fake = FakeDali()
    for name, module in fake.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    dm = ImageFolderDataModule(root=str(jpeg_root), pipeline="dali", batch_size=8, eval_batch_size=10, num_workers=3, seed=5, **options)
    dm.setup()
    return dm, fake


def test_train_pipeline_is_built_with_the_recipe_and_this_ranks_shard(monkeypatch, jpeg_root):
    from mixbench.data.dali import build_pipeline

    dm, fake = setup_module_with_fake(monkeypatch, jpeg_root)
    settings = dali_settings(dm, list(dm.train_set.samples), train=True, rank=1, world=2, device_id=1)
    assert settings.files == tuple(p for p, _ in dm.train_set.samples) and len(settings.files) == 40
    assert (settings.shard_id, settings.num_shards, settings.device_id, settings.batch_size) == (1, 2, 1, 8)
    assert settings.rand_augment == {"n": 2, "m": 9, "mstd": 0.5, "inc": True} and settings.resize_shorter == 256
    built = build_pipeline(settings)
    assert built["enable_conditionals"] and (built["batch_size"], built["device_id"], built["num_threads"]) == (8, 1, 3)
    calls = dict(fake.calls)
    assert [name for name, _ in fake.calls] == [
        "readers.file",
        "decoders.image_random_crop",
        "resize",
        "random.coin_flip",
        "flip",
        "rand_augment",
        "crop_mirror_normalize",
    ]
    reader = calls["readers.file"]
    assert (reader["shard_id"], reader["num_shards"], reader["shuffle_after_epoch"]) == (1, 2, True)
    assert calls["decoders.image_random_crop"]["device"] == "mixed"
    assert calls["decoders.image_random_crop"]["random_area"] == [0.08, 1.0]
    assert calls["resize"]["size"] == [224, 224] and calls["resize"]["interp_type"] == "cubic"
    assert calls["random.coin_flip"]["probability"] == 0.5
    assert (calls["rand_augment"]["n"], calls["rand_augment"]["m"], calls["rand_augment"]["monotonic_mag"]) == (2, 9, True)
    assert (calls["rand_augment"]["shape"], calls["rand_augment"]["max_translate_rel"]) == ((224, 224), 0.45)  # timm: 45 %
    assert calls["rand_augment"]["interp_type"] == "linear"  # DALI's warp_affine takes nearest or linear only
    assert calls["crop_mirror_normalize"]["mean"] == pytest.approx([0.485 * 255, 0.456 * 255, 0.406 * 255])
    assert "cast" not in calls  # the labels leave DALI as the reader's int32: no CPU operator after the reader


def test_eval_pipeline_resizes_and_center_crops(monkeypatch, jpeg_root):
    from mixbench.data.dali import build_pipeline

    dm, fake = setup_module_with_fake(monkeypatch, jpeg_root, auto_augment=None, crop_pct=0.9)
    settings = dali_settings(dm, list(dm.val_set.samples), train=False, rank=0, world=1, device_id=0)
    build_pipeline(settings)
    calls = dict(fake.calls)
    assert "rand_augment" not in calls and calls["readers.file"]["shuffle_after_epoch"] is False
    assert calls["resize"]["resize_shorter"] == 248  # floor(224 / 0.9)
    assert calls["crop_mirror_normalize"]["crop"] == [224, 224]
    assert dm.describe()["exact_resume"] is False and "restarts" in dm.describe()["resume_note"]


# ----------------------------------------------------------------------------------------------- on the GPU machine


def dali_loader_on_gpu(dm, train: bool):
    from mixbench.data.dali import DaliLoader

    samples = list((dm.train_set if train else dm.val_set).samples)
    return DaliLoader(dali_settings(dm, samples, train, 0, 1, 0), dm.aug["re_prob"] if train else 0.0)


@pytest.mark.gpu
def test_dali_eval_matches_timms_eval_transform(jpeg_root):
    """Deterministic ops: resize the short side (cubic, antialiased) → center crop → normalize, DALI (GPU decode) against
    timm's eval transform (PIL) image by image: mean absolute difference below 0.06 in normalized units (JPEG decoders
    and cubic filters differ by a few grey levels)."""
    pytest.importorskip("nvidia.dali", reason=INSTALL_HINT)
    from PIL import Image

    dm = ImageFolderDataModule(root=str(jpeg_root), pipeline="dali", eval_batch_size=10, img_size=224, auto_augment=None)
    dm.setup()
    _, timm_eval = ImageFolderDataModule(root=str(jpeg_root), img_size=224).transforms()
    images, labels = next(iter(dali_loader_on_gpu(dm, train=False)))
    for i, (path, label) in enumerate(list(dm.val_set.samples)[:10]):
        reference = timm_eval(Image.open(path).convert("RGB"))
        assert int(labels[i]) == label
        assert (images[i].cpu() - reference).abs().mean() < 0.06


@pytest.mark.gpu
def test_dali_train_batches_have_the_recipes_statistics(jpeg_root):
    """Random ops: a DALI train batch and a timm train batch of the same folder agree in shape, value range and per-channel
    mean / std within 0.25 (RandAugment, erasing and crops are random, so only the statistics can be compared)."""
    pytest.importorskip("nvidia.dali", reason=INSTALL_HINT)
    dm = ImageFolderDataModule(root=str(jpeg_root), pipeline="dali", batch_size=32)
    dm.setup()
    images, labels = next(iter(dali_loader_on_gpu(dm, train=True)))
    assert images.shape == (32, 3, 224, 224) and images.is_cuda and labels.shape == (32,)
    cpu = ImageFolderDataModule(root=str(jpeg_root), batch_size=32, num_workers=0)
    cpu.setup()
    reference = torch.stack([cpu.train_set[i][0] for i in range(32)])
    for stat in (lambda x: x.mean(dim=(0, 2, 3)), lambda x: x.std(dim=(0, 2, 3))):
        assert (stat(images.float().cpu()) - stat(reference)).abs().max() < 0.25


@pytest.mark.gpu
def test_a_dali_run_records_that_resume_is_not_exact(jpeg_root, tmp_path):
    pytest.importorskip("nvidia.dali", reason=INSTALL_HINT)
    from mixbench.cli.app import main

    args = [
        "run",
        "task=vit_tiny",
        "data=imagefolder",
        f"data.root={jpeg_root}",
        "data.pipeline=dali",
        "data.batch_size=8",
        "model.num_classes=null",
        "model.img_size=null",
        "trainer.max_steps=6",
        "trainer.max_epochs=null",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        "save_weights=false",
        f"results_dir={tmp_path}",
    ]
    assert main(args) == 0
    (record,) = [json.loads(p.read_text()) for p in tmp_path.rglob("record.json")]
    assert record["status"] == "completed" and record["steps"] == 6
    assert record["dataset"]["pipeline"] == "dali" and record["dataset"]["exact_resume"] is False


@pytest.mark.parametrize("train", [True, False])
def test_lightning_checks_a_dali_loader_like_a_dataloader_without_sampler(monkeypatch, jpeg_root, train):
    """Lightning's check for shuffled eval loaders (run on every non-train loader) reads ``sampler`` and
    ``batch_sampler``: the DALI loader has both, None, so it is taken as not shuffled instead of raising."""
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled

    from mixbench.data.dali import DaliLoader

    dm, _ = setup_module_with_fake(monkeypatch, jpeg_root)
    samples = list((dm.train_set if train else dm.val_set).samples)
    loader = DaliLoader(dali_settings(dm, samples, train=train, rank=0, world=1, device_id=0), 0.25 if train else 0.0)
    assert _is_dataloader_shuffled(loader) is False and loader.iterator.kwargs["last_batch_policy"] == ("drop" if train else "partial")


def test_lightning_fits_and_validates_on_dali_loaders(monkeypatch, jpeg_root, tmp_path):
    """The Lightning side of the DALI path without a GPU: a Trainer fits and validates a small model on two DaliLoaders
    (the fake iterator's batches), so what Lightning asks of a loader (len, sampler checks, iteration) is there."""
    import lightning as L

    from mixbench.data.dali import DaliLoader

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(3 * 8 * 8, 2)
            self.seen = {"train": 0, "val": 0}

        def step(self, batch, split):
            images, labels = batch
            assert images.shape == (4, 3, 8, 8) and labels.dtype == torch.long and labels.shape == (4,)
            self.seen[split] += 1
            return torch.nn.functional.cross_entropy(self.head(images.flatten(1)), labels)

        def training_step(self, batch, _):
            return self.step(batch, "train")

        def validation_step(self, batch, _):
            self.log("val/loss", self.step(batch, "val"))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm, _ = setup_module_with_fake(monkeypatch, jpeg_root)
    train = DaliLoader(dali_settings(dm, list(dm.train_set.samples), train=True, rank=0, world=1, device_id=0), 0.0)
    val = DaliLoader(dali_settings(dm, list(dm.val_set.samples), train=False, rank=0, world=1, device_id=0), 0.0)
    model = Tiny()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    assert model.seen == {"train": 6, "val": 6} and trainer.global_step == 6


def test_erasing_boxes_reach_the_device_through_a_pinned_upload(monkeypatch, jpeg_root):
    """The boxes of random erasing are drawn on the host each batch, all at once (no Python loop per image), and go to the
    device as one (n, 4) tensor through ``upload`` (pinned memory, a copy queued behind the running step), never a
    pageable copy, which would make the host wait for the GPU every step; the masks are made from them after the upload."""
    import mixbench.data.device_pipeline as device_pipeline
    from mixbench.data.dali import DaliLoader

    uploads = []

    def recording_upload(tensor, device):
        uploads.append(tensor)
        return tensor.to(device)

    monkeypatch.setattr(device_pipeline, "upload", recording_upload)
    dm, _ = setup_module_with_fake(monkeypatch, jpeg_root)
    monkeypatch.setattr(device_pipeline, "erase_box", None)  # the per-image draw is not used
    loader = DaliLoader(dali_settings(dm, list(dm.train_set.samples), train=True, rank=0, world=1, device_id=0), 1.0)
    loader.iterator = [[{"images": torch.zeros(4, 3, 8, 8), "labels": torch.arange(4, dtype=torch.int32).view(4, 1)}]]  # the reader's int32
    images, labels = next(iter(loader))
    (boxes,) = uploads
    assert boxes.dtype == torch.int64 and boxes.shape == (4, 4) and labels.tolist() == [0, 1, 2, 3]
    masks = device_pipeline.box_masks(boxes, 8, 8)
    erased = masks[:, :8, None] & masks[:, None, 8:]
    assert erased.any(dim=(1, 2)).all()  # re_prob 1: every image loses a box, to noise, and nothing else
    assert torch.equal(images.ne(0).all(dim=1), erased) and torch.equal(images.ne(0).any(dim=1), erased)


@pytest.mark.parametrize("re_prob", [0.0, 1.0])
def test_the_batch_handed_on_holds_no_dali_buffer(monkeypatch, jpeg_root, re_prob):
    """DALI hands its outputs over by DLPack without a copy; Lightning keeps a batch through its step and prefetches the
    next, so a yielded tensor that points into DALI's buffers keeps them from DALI's next iterations.  Images and labels
    come out as tensors of their own (with erasing and without), with DALI's values."""
    from mixbench.data.dali import DaliLoader

    dm, _ = setup_module_with_fake(monkeypatch, jpeg_root)
    loader = DaliLoader(dali_settings(dm, list(dm.train_set.samples), train=True, rank=0, world=1, device_id=0), re_prob)
    dali_images, dali_labels = torch.randn(4, 3, 8, 8), torch.arange(4, dtype=torch.int32).view(4, 1)  # the reader's int32
    loader.iterator = [[{"images": dali_images, "labels": dali_labels}]]
    images, labels = next(iter(loader))
    assert images.untyped_storage().data_ptr() != dali_images.untyped_storage().data_ptr()
    assert labels.untyped_storage().data_ptr() != dali_labels.untyped_storage().data_ptr()
    assert labels.tolist() == [0, 1, 2, 3] and (re_prob > 0 or torch.equal(images, dali_images))


@pytest.mark.parametrize("re_prob", [0.0, 1.0])
def test_no_dali_output_outlives_the_hand_over(monkeypatch, jpeg_root, re_prob):
    """While Lightning runs its step on a batch, the loader's generator waits at its yield: nothing of DALI's outputs
    may stay referenced there (the batch handed on is the loader's own tensors)."""
    import gc
    import weakref

    from mixbench.data.dali import DaliLoader

    dm, _ = setup_module_with_fake(monkeypatch, jpeg_root)
    loader = DaliLoader(dali_settings(dm, list(dm.train_set.samples), train=True, rank=0, world=1, device_id=0), re_prob)
    outputs = []

    def dali_batch():  # a fresh output dict, referenced by nothing but the caller
        batch = [{"images": torch.randn(4, 3, 8, 8), "labels": torch.arange(4, dtype=torch.int32).view(4, 1)}]
        outputs.extend(weakref.ref(t) for t in batch[0].values())
        return batch

    loader.iterator = (dali_batch() for _ in range(2))
    batches = iter(loader)
    images, labels = next(batches)
    gc.collect()
    assert [ref() for ref in outputs] == [None, None] and labels.dtype == torch.int64 and images.shape == (4, 3, 8, 8)


def test_the_hand_over_computes_nothing_on_the_host(monkeypatch, jpeg_root):
    """DALI's decoding threads share the host with the training process: a torch op on a CPU tensor there, every step,
    can start torch's OpenMP threads on their cores (docs/speed.md#dali-hand-over).  With DALI's outputs on the meta
    device as a stand-in for the GPU, the only torch ops on CPU tensors in a batch's hand-over are the wrap of the
    NumPy boxes and their upload; the recorder sees a CPU op where there is one."""
    from _support.torch_ops import TorchOps

    from mixbench.data.dali import DaliLoader

    with TorchOps() as control:
        torch.full((4,), 0.5).exp()
    assert control.on_cpu == ["aten.exp.default"]
    dm, _ = setup_module_with_fake(monkeypatch, jpeg_root)
    loader = DaliLoader(dali_settings(dm, list(dm.train_set.samples), train=True, rank=0, world=1, device_id=0), 1.0)
    meta = {"images": torch.empty(4, 3, 8, 8, device="meta"), "labels": torch.empty(4, 1, dtype=torch.int32, device="meta")}
    loader.iterator = [[meta]]
    with TorchOps() as recorder:
        images, labels = next(iter(loader))
    assert set(recorder.on_cpu) <= {"aten.lift_fresh.default", "aten._to_copy.default"}, recorder.on_cpu
    assert images.device.type == "meta" and labels.dtype == torch.int64


@pytest.mark.gpu
def test_dali_train_batches_make_no_synchronising_torch_call(jpeg_root):
    """Under torch's sync debug mode "error" any synchronising torch call raises: after the first, three train batches
    with erasing (re_prob 1) come through without one."""
    pytest.importorskip("nvidia.dali", reason=INSTALL_HINT)
    dm = ImageFolderDataModule(root=str(jpeg_root), pipeline="dali", batch_size=8, re_prob=1.0)
    dm.setup()
    batches = iter(dali_loader_on_gpu(dm, train=True))
    next(batches)  # the first batch sets the iterator up
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            images, labels = next(batches)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert images.is_cuda and labels.is_cuda
