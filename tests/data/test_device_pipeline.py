"""The GPU-side image pipeline (data.pipeline=gpu) against timm's CPU recipe, run on the CPU."""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import auto_augment as aa
from timm.data import create_transform

from mixbench.data import ASSETS_DIR
from mixbench.data import device_pipeline as dp
from mixbench.data import randaugment as ra
from mixbench.data.folders import ImageFolderDataModule

FILL = (124, 116, 104)  # timm's img_mean for the ImageNet mean


@pytest.fixture(scope="module")
def photos():
    """Four real photos (embedded CIFAR-10), 64 px, as PIL images and as a uint8 batch."""
    x = np.load(ASSETS_DIR / "cifar10_embedded.npz")["train_x"][:4]
    images = [Image.fromarray(a).resize((64, 64), Image.BICUBIC) for a in x]
    return images, torch.stack([torch.from_numpy(np.array(i)).permute(2, 0, 1) for i in images])


PIXEL_OPS = [
    ("AutoContrast", aa.auto_contrast, None),
    ("Equalize", aa.equalize, None),
    ("Invert", aa.invert, None),
    ("PosterizeIncreasing", aa.posterize, 2),
    ("PosterizeIncreasing", aa.posterize, 0),
    ("SolarizeIncreasing", aa.solarize, 100),
    ("SolarizeAdd", aa.solarize_add, 80),
    ("ColorIncreasing", aa.color, 1.7),
    ("ColorIncreasing", aa.color, 0.2),
    ("ContrastIncreasing", aa.contrast, 1.8),
    ("ContrastIncreasing", aa.contrast, 0.3),
    ("BrightnessIncreasing", aa.brightness, 1.6),
    ("SharpnessIncreasing", aa.sharpness, 1.9),
    ("SharpnessIncreasing", aa.sharpness, 0.1),
]
GEOMETRIC_OPS = [
    ("Rotate", aa.rotate, 17.0),
    ("Rotate", aa.rotate, -25.0),
    ("ShearX", aa.shear_x, 0.25),
    ("ShearY", aa.shear_y, -0.2),
    ("TranslateXRel", aa.translate_x_rel, 0.3),
    ("TranslateYRel", aa.translate_y_rel, -0.4),
]


def _both(photos, name, timm_fn, arg):
    images, batch = photos
    args = () if arg is None else (arg,)
    ref = torch.stack(
        [torch.from_numpy(np.array(timm_fn(i, *args, fillcolor=FILL, resample=Image.BICUBIC))).permute(2, 0, 1) for i in images]
    )
    out = ra.apply_op(name, batch.clone(), torch.full((len(batch),), float(arg or 0)), torch.tensor(FILL, dtype=torch.float32))
    assert out.dtype == torch.uint8 and out.shape == batch.shape
    return (out.float() - ref.float()).abs()


@pytest.mark.parametrize("name,timm_fn,arg", PIXEL_OPS)
def test_pixel_ops_match_timm_pil_ops(photos, name, timm_fn, arg):
    assert _both(photos, name, timm_fn, arg).max() <= 1  # PIL rounding, at most one level


@pytest.mark.parametrize("name,timm_fn,arg", GEOMETRIC_OPS)
def test_geometric_ops_match_timm_pil_ops(photos, name, timm_fn, arg):
    diff = _both(photos, name, timm_fn, arg)  # bicubic kernels differ slightly; direction, centre and fill must agree
    assert diff.mean() < 1.0 and (diff > 8).float().mean() < 0.002


def test_per_image_arguments_are_applied_per_image(photos):
    _, batch = photos
    out = ra.apply_op("Rotate", batch.clone(), torch.tensor([0.0, 90.0, 0.0, -90.0]), torch.tensor(FILL, dtype=torch.float32))
    assert torch.equal(out[0], batch[0]) and torch.equal(out[2], batch[2])
    assert torch.equal(out[1], batch[1].rot90(1, dims=(1, 2))) and torch.equal(out[3], batch[3].rot90(-1, dims=(1, 2)))


def test_rand_augment_takes_timms_ops_and_changes_about_the_expected_share(photos):
    rand_augment = ra.BatchRandAugment("rand-m9-mstd0.5-inc1", 64, (0.485, 0.456, 0.406))
    assert [op.name for op in rand_augment.ops] == list(aa._RAND_INCREASING_TRANSFORMS) and rand_augment.num_layers == 2
    _, batch = photos
    many = batch.repeat(64, 1, 1, 1)
    out = rand_augment(many.clone())
    unchanged = (out == many).flatten(1).all(1).float().mean()
    # each of 2 layers applies its op with p = 0.5: 1/4 untouched, plus ops that are no-ops at their level
    assert 0.15 < unchanged < 0.45


def _jpeg_bytes(image: Image.Image) -> torch.Tensor:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=95)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def test_eval_pipeline_matches_timm_eval_transform():
    x = np.load(ASSETS_DIR / "cifar10_embedded.npz")["val_x"][:6]
    photos = [Image.fromarray(a).resize((96 + 8 * i, 80), Image.BICUBIC) for i, a in enumerate(x)]  # different sizes
    encoded = [_jpeg_bytes(p) for p in photos]
    timm_eval = create_transform(64, is_training=False, interpolation="bicubic", crop_pct=0.875)
    ref = torch.stack([timm_eval(Image.open(io.BytesIO(e.numpy().tobytes())).convert("RGB")) for e in encoded])
    pipe = dp.DeviceImagePipeline(dp.CropGeometry(64))
    ours, labels = pipe(dp.EncodedImages.from_files(encoded, torch.arange(6), train=False), "cpu")  # nvjpeg: decoded by the pipeline
    assert ours.shape == ref.shape == (6, 3, 64, 64) and labels.tolist() == list(range(6))
    assert (ours - ref).abs().mean() < 0.02  # normalized units; PIL vs torch antialiased bicubic
    crop = dp.WorkerCrop(dp.CropGeometry(64), train=False)  # gpu: decoded and cropped by the workers
    cropped, _ = pipe(dp.CroppedImages(torch.stack([crop(e) for e in encoded]), torch.arange(6), train=False), "cpu")
    assert torch.equal(cropped, ours)


def test_train_pipeline_without_randomness_is_a_resize_and_normalize(photos):
    images, _ = photos
    encoded = [_jpeg_bytes(p) for p in images]
    plain = dp.DeviceImagePipeline(dp.CropGeometry(32, scale=(1.0, 1.0), ratio=(1.0, 1.0)), auto_augment=None, re_prob=0.0, hflip=0.0)
    ours, _ = plain(dp.EncodedImages.from_files(encoded, torch.zeros(4, dtype=torch.long), train=True), "cpu")
    timm_train = create_transform(
        32,
        is_training=True,
        auto_augment=None,
        re_prob=0.0,
        hflip=0.0,
        color_jitter=None,
        scale=(1.0, 1.0),
        ratio=(1.0, 1.0),
        interpolation="bicubic",
    )
    ref = torch.stack([timm_train(Image.open(io.BytesIO(e.numpy().tobytes())).convert("RGB")) for e in encoded])
    assert (ours - ref).abs().mean() < 0.02


def _train_batch(encoded, re_prob):
    import random

    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    return dp.DeviceImagePipeline(dp.CropGeometry(48), re_prob=re_prob)(
        dp.EncodedImages.from_files(encoded, torch.arange(len(encoded)), train=True), "cpu"
    )


def test_full_train_recipe_crops_augments_and_erases_one_box(photos):
    encoded = [_jpeg_bytes(p) for p in photos[0]] * 8
    plain, labels = _train_batch(encoded, re_prob=0.0)
    erased, _ = _train_batch(encoded, re_prob=1.0)
    assert plain.shape == erased.shape == (32, 3, 48, 48) and plain.dtype == torch.float32 and labels.tolist() == list(range(32))
    assert not torch.equal(plain[0], plain[4])  # the same photo is cropped / augmented differently
    # the same draws up to the erasing; then each image loses one box of 2 %–33 % of its area to N(0, 1) noise
    changed = (plain != erased).any(dim=1).flatten(1).float().mean(dim=1)
    assert ((changed > 0.01) & (changed < 0.34)).all()


def test_decode_batch_reads_jpeg_and_png():
    image = Image.fromarray(np.arange(3 * 20 * 30, dtype=np.uint8).reshape(20, 30, 3))
    png = io.BytesIO()
    image.save(png, format="PNG")
    decoded = dp.decode_batch([_jpeg_bytes(image), torch.frombuffer(bytearray(png.getvalue()), dtype=torch.uint8)], "cpu")
    assert [tuple(d.shape) for d in decoded] == [(3, 20, 30), (3, 20, 30)]
    assert torch.equal(decoded[1], torch.from_numpy(np.array(image)).permute(2, 0, 1))


def test_unknown_pipeline_is_one_clear_error(tmp_path):
    from mixbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="data.pipeline"):
        ImageFolderDataModule(root=str(tmp_path), pipeline="dali")


def test_rand_augment_ops_without_a_batched_version_are_one_clear_error():
    from mixbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="data.pipeline=cpu"):
        ra.BatchRandAugment("rand-m9-t3a", 64, (0.5, 0.5, 0.5))  # timm's '3a' set has Desaturate and GaussianBlur
    assert len(ra.BatchRandAugment("rand-m9", 64, (0.5, 0.5, 0.5)).ops) == 15  # the non-increasing set is covered


def test_erasing_draws_the_boxes_timm_erases_and_fills_only_them():
    import random

    from timm.data.random_erasing import RandomErasing

    images = torch.zeros(32, 3, 40, 48)
    random.seed(1)
    RandomErasing(0.5, mode="pixel", max_count=1, device="cpu")(images)
    random.seed(1)
    recipe = dp.RecipeDraws(None, hflip=0.0, re_prob=0.5, img_size=40)
    boxes = torch.tensor([dp.erase_box(recipe.eraser, 40, 48) for _ in range(32)])
    masks = torch.zeros(32, 40, 48, dtype=torch.bool)
    for mask, (top, left, h, w) in zip(masks, boxes.tolist()):
        mask[top : top + h, left : left + w] = True
    assert 5 < (boxes[:, 2] > 0).sum() < 27  # p = 0.5
    assert torch.equal(images.ne(0).any(dim=1), masks)  # timm's boxes, from the same `random` draws
    erased = dp.erase(torch.full((32, 3, 40, 48), 7.0), boxes)
    assert torch.equal(erased.ne(7.0).any(dim=1), masks)


def test_batched_erasing_boxes_have_timms_distribution():
    """``erase_boxes`` (all images' boxes in a few draws, for the DALI loader) against the per-image ``erase_box`` (timm's
    own draws): the same erase rate, box sizes and positions over 20,000 images; every box fits the image."""
    import random

    from timm.data.random_erasing import RandomErasing

    eraser = RandomErasing(0.5, mode="pixel", max_count=1, device="cpu")
    random.seed(0), torch.manual_seed(0)
    reference = torch.tensor([dp.erase_box(eraser, 40, 48) for _ in range(20_000)], dtype=torch.float64)
    batched = dp.erase_boxes(eraser, 20_000, 40, 48, np.random.default_rng(0))
    top, left, h, w = batched.T
    assert ((top + h <= 40) & (left + w <= 48) & (h < 40) & (w < 48) & (top >= 0) & (left >= 0)).all()
    ours, timms = batched[h > 0].double(), reference[reference[:, 2] > 0]
    assert abs(len(ours) - len(timms)) < 600 and abs(len(ours) / 20_000 - 0.5) < 0.015
    quantiles = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9], dtype=torch.float64)
    for column in range(4):  # top, left, h, w: quantiles within a pixel or two
        assert (ours[:, column].quantile(quantiles) - timms[:, column].quantile(quantiles)).abs().max() <= 2
    area = (ours[:, 2] * ours[:, 3]).mean() / (40 * 48)
    assert abs(area - (timms[:, 2] * timms[:, 3]).mean() / (40 * 48)) < 0.01


def test_batched_erasing_boxes_make_no_torch_call_on_the_host():
    """The DALI loader draws a batch's boxes in the main process beside DALI's decoding threads, every step: by NumPy, in
    the calling thread.  A torch CPU op there (exp, sqrt) would start torch's OpenMP threads, which took DALI's cores on
    an H200 (docs/speed.md#dali-hand-over).  The recorder sees torch's ops: ``exp`` of a tensor is one."""
    from _support.torch_ops import TorchOps
    from timm.data.random_erasing import RandomErasing

    with TorchOps() as control:
        torch.full((256, 10), 0.5, dtype=torch.float64).exp()
    assert "aten.exp.default" in control.all
    eraser = RandomErasing(0.25, mode="pixel", max_count=1, device="cpu")
    with TorchOps() as recorder:
        boxes = dp.erase_boxes(eraser, 256, 224, 224, np.random.default_rng(0))
    # lift_fresh: torch.from_numpy's wrap of the finished array (no computation)
    assert set(recorder.all) <= {"aten.lift_fresh.default"} and boxes.shape == (256, 4) and boxes.dtype == torch.int64


def _rand_augment_image_by_image(rand_augment, images, fill):
    """The reference: timm's draw order (``np.random`` op choices, then per layer and image the op's own draws), each
    drawn op applied by name to its image alone."""
    choices = np.random.randint(len(rand_augment.ops), size=(len(images), rand_augment.num_layers))
    out = images.clone()
    for layer in range(rand_augment.num_layers):
        for i, k in enumerate(choices[:, layer]):
            op = rand_augment.ops[k]
            args = rand_augment._draw_args(op)
            if args is not None:
                out[i : i + 1] = ra.apply_op(op.name, out[i : i + 1], torch.tensor([float(args[0]) if args else 0.0]), fill)
    return out


def test_grouped_rand_augment_equals_applying_each_images_ops_alone(photos):
    import random

    rand_augment = ra.BatchRandAugment("rand-m9-mstd0.5-inc1", 64, (0.485, 0.456, 0.406))
    many = photos[1].repeat(8, 1, 1, 1)
    random.seed(0), np.random.seed(0)
    draws = rand_augment.draw(len(many))
    assert draws.counts.sum() > 0 and not draws.index.is_cuda
    grouped = rand_augment.apply(many.clone(), draws, rand_augment.fill)
    random.seed(0), np.random.seed(0)
    diff = (grouped.int() - _rand_augment_image_by_image(rand_augment, many, rand_augment.fill).int()).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 1e-4  # batched vs single-image matmul: last-bit differences


def test_rand_augment_draws_follow_timms_probabilities():
    rand_augment = ra.BatchRandAugment("rand-m9-mstd0.5-inc1", 64, (0.485, 0.456, 0.406))
    counts = sum(rand_augment.draw(256).counts for _ in range(20)).float()  # (layers, groups) over 5,120 images
    applied = counts.sum(dim=1) / 5120
    assert torch.allclose(applied, torch.full_like(applied, 0.5), atol=0.03)  # every op applies with p = 0.5
    share = counts.sum(dim=0) / counts.sum()
    expected = torch.tensor([rand_augment.group_of.count(g) / len(rand_augment.ops) for g in range(len(rand_augment.groups))])
    assert rand_augment.groups.count("affine") == 1 and torch.allclose(share, expected, atol=0.02)  # ops uniform; 5 of 15 affine


def test_device_half_is_deterministic_given_the_workers_draws(tmp_path):
    from _support.images import make_folder

    dm = ImageFolderDataModule(root=str(make_folder(tmp_path)), img_size=32, batch_size=6, num_workers=0, pipeline="gpu")
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch.draws, dp.TrainDraws) and batch.draws.erase.shape == (6, 4) and batch.draws.erase.dtype == torch.int64
    outputs = []
    for _ in range(2):
        torch.manual_seed(0)  # the erasing noise
        outputs.append(dm.transfer_batch_to_device(batch, torch.device("cpu"), 0)[0])
    assert torch.equal(*outputs)
    assert dm.val_dataloader().collate_fn(list(zip([torch.zeros(3, 32, 32, dtype=torch.uint8)] * 2, [0, 1]))).draws is None


def test_worker_nice_lowers_the_workers_priority(tmp_path):
    import os

    from _support.images import make_folder

    from mixbench.core.errors import ConfigError

    dm = ImageFolderDataModule(root=str(make_folder(tmp_path)), img_size=32, batch_size=2, num_workers=1, worker_nice=3)
    dm.setup()
    init = dm.train_dataloader().loader.worker_init_fn  # the DataLoader inside the epoch-spanning loader
    loader = torch.utils.data.DataLoader(range(1), num_workers=1, worker_init_fn=init, collate_fn=lambda _: os.nice(0))
    assert next(iter(loader)) == os.nice(0) + 3
    with pytest.raises(ConfigError, match="worker_nice"):
        ImageFolderDataModule(root=str(tmp_path), worker_nice=-1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_side_stream_gives_the_same_batch_as_the_current_stream(photos):
    encoded = [_jpeg_bytes(p) for p in photos[0]] * 16
    crop = dp.WorkerCrop(dp.CropGeometry(48), train=True)
    recipe = dp.DeviceImagePipeline(dp.CropGeometry(48), re_prob=0.5)
    batch = dp.CroppedImages(torch.stack([crop(e) for e in encoded]), torch.arange(64), True, recipe.draw(64)).pin_memory()
    outputs = []
    for overlap in (False, True):
        pipe = dp.DeviceImagePipeline(dp.CropGeometry(48), re_prob=0.5, overlap=overlap)
        busy = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):  # the current stream is busy while the side stream works
            busy = busy @ busy / 64
        torch.manual_seed(0)
        images, labels = pipe(batch, "cuda")
        outputs.append((images.sum(dim=(1, 2, 3)).cpu(), labels.cpu()))  # read on the current stream
    assert torch.equal(outputs[0][1], outputs[1][1]) and torch.allclose(outputs[0][0], outputs[1][0])


def test_the_batched_affine_op_builds_no_tensor_from_host_values(photos, monkeypatch):
    """On a GPU ``torch.tensor(values, device=...)`` is a pageable copy that waits for the running step; the batch path
    of the affine ops must not make one (the CPU stand-in: such a call fails here)."""
    _, batch = photos
    matrix = torch.tensor([[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]] * len(batch)).view(-1, 2, 3)
    fill = torch.tensor(FILL, dtype=torch.float32)
    original = torch.tensor

    def host_only(*args, **kwargs):
        assert kwargs.get("device") is None, "a tensor built from host values on the device: a synchronising copy"
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", host_only)
    assert torch.equal(ra.affine(batch.clone(), matrix, fill), batch)  # the identity matrix keeps every pixel


@pytest.mark.gpu
def test_batched_rand_augment_makes_no_synchronising_torch_call(photos):
    """Under torch's sync debug mode "error" any synchronising torch call raises: RandAugment's device half on a batch
    whose draws were uploaded from pinned memory runs without one."""
    _, batch = photos
    augment = ra.BatchRandAugment("rand-m9-mstd0.5-inc1", batch.shape[-1], (0.485, 0.456, 0.406))
    draws = augment.draw(len(batch))
    device = torch.device("cuda")
    on_device = ra.RandAugmentDraws(dp.upload(draws.index, device), dp.upload(draws.params, device), draws.counts)
    images, fill = batch.to(device), augment.fill.to(device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = augment.apply(images, on_device, fill)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.shape == batch.shape and out.is_cuda
