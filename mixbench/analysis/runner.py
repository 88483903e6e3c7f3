"""``mixbench analyze grad-norm | angular | prune``: load a run (or build a model at initialization), measure,
and write ``<name>.json`` + ``<name>.png`` into the run folder (or ``--out``)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ..core.constants import ANGULAR_TOKENS
from ..core.errors import AnalysisMismatch
from ..core.families import get_family
from ..core.reading import read_json
from ..core.run_files import ANALYSIS_DIR
from ..core.storage import atomic_write_text, refuse_link, save_figure
from ..core.tasks import get_task
from ..training.builders import build_datamodule, build_lightning_module, build_run_model, model_options
from ..training.config import compose, load_run_config, norm_spec
from ..training.gradnorm import block_grad_norms
from ..training.precision import lightning_precision
from ..training.weights import load_weights
from .angular import angular_distance_matrix
from .prune import skip_block

log = logging.getLogger(__name__)


def analysis_device() -> torch.device:
    """The GPU when there is one: the analyses run full models over 256K tokens."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class Subject:
    """A model to analyze, with its config, data and a name for plots."""

    name: str
    cfg: DictConfig
    model: torch.nn.Module
    datamodule: object
    out_dir: Path
    recorded: float | None = None  # the run's own final value of the task's primary metric (its record.json), if any


def subject_from_run(run_dir: str | Path) -> Subject:
    """The trained model of a finished run (its ``config.yaml`` and ``model.safetensors``, or a legacy ``model.pt``)."""

    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    OmegaConf.update(cfg, "init_device", "cpu", force_add=True)  # the run's weights replace the initial ones, wherever drawn
    state, _, _ = load_weights(run_dir)
    datamodule = build_datamodule(cfg)
    model = _build(cfg, datamodule)
    model.load_state_dict(state)
    model = model.to(analysis_device()).eval()
    return Subject(norm_spec(cfg).label(), cfg, model, datamodule, run_dir / ANALYSIS_DIR, recorded_value(run_dir))


def recorded_value(run_dir: Path) -> float | None:
    """The primary metric's final value in ``run_dir/record.json`` (None where there is no such record or value)."""
    path = run_dir / "record.json"
    if not path.exists():
        return None
    try:
        value = read_json(path)["primary_metric"]["value"]  # a regular file, capped: a folder handed over is data
    except (OSError, ValueError, KeyError, TypeError):  # UnreadableFile is a ValueError
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def subject_at_init(args: list[str], out_dir: Path) -> Subject:
    cfg = compose(args)
    datamodule = build_datamodule(cfg)
    return Subject(norm_spec(cfg).label(), cfg, _build(cfg, datamodule).to(analysis_device()), datamodule, out_dir)


def _build(cfg: DictConfig, datamodule):
    return build_run_model(cfg, norm_spec(cfg), datamodule, model_options(cfg, datamodule))[0]


def grad_norm_profile(subject: Subject, num_batches: int = 8) -> dict:
    """Per-block gradient norms averaged over ``num_batches`` training batches (model in train mode)."""
    model = subject.model.train()
    sums = None
    batches = iter(subject.datamodule.train_dataloader())
    for _ in range(num_batches):
        model.zero_grad(set_to_none=True)
        batch = subject.datamodule.transfer_batch_to_device(next(batches), analysis_device(), 0)
        get_family(subject.cfg.task.family).analysis_loss(model, batch).backward()
        norms = block_grad_norms(model.blocks)
        sums = norms if sums is None else [{k: s[k] + n[k] for k in s} for s, n in zip(sums, norms)]
    model.zero_grad(set_to_none=True)
    return {
        "name": subject.name,
        "plan": list(model.plan),
        "batches": num_batches,
        "blocks": [{k: v / num_batches for k, v in s.items()} for s in sums],
    }


def training_grad_norms(run_dir: str | Path, steps: list[int]) -> dict:
    """Per-block gradient norms a run logged during training (``grad_norm_every_n_steps`` → ``gradnorm.json``) at the
    recorded steps nearest to ``steps`` (−1: the last one)."""
    run_dir = Path(run_dir)
    path = run_dir / "gradnorm.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; train with grad_norm_every_n_steps=N to record gradient norms")
    history = json.loads(path.read_text())["history"]
    cfg = load_run_config(run_dir)
    record = run_dir / "record.json"  # the dataset's resolved name (the config may leave it null)
    dataset = json.loads(record.read_text())["dataset"].get("name") if record.is_file() else cfg.data.get("name")
    recorded = [h["step"] for h in history]
    picked = []
    for want in steps:
        index = len(history) - 1 if want < 0 else min(range(len(history)), key=lambda i: abs(recorded[i] - want))
        picked.append({"requested": want, "step": recorded[index], "blocks": history[index]["blocks"]})
    return {"name": norm_spec(cfg).label(), "run": str(run_dir), "dataset": dataset, "profiles": picked}


def _token_batches(subject: Subject):
    inputs = get_family(subject.cfg.task.family).analysis_inputs
    for batch in subject.datamodule.val_dataloader():
        yield inputs(subject.datamodule.transfer_batch_to_device(batch, analysis_device(), 0))  # as in training (e.g. GPU augmentation)


def angular_profile(subject: Subject, token_budget: int = ANGULAR_TOKENS) -> dict:
    matrix, tokens = angular_distance_matrix(subject.model.eval(), _token_batches(subject), token_budget)
    return {
        "name": subject.name,
        "plan": list(subject.model.plan),
        "tokens": tokens,
        "token_budget": token_budget,
        "layout": "distance[n-1][l] = mean d(x^l, x^(l+n)); null where l+n > L",
        "distance": [[None if v != v else round(float(v), 6) for v in row] for row in matrix],
    }


PRUNE_MATCH_REL = 0.01  # the unpruned model's value within 1 % of what the run recorded, or the analysis stops


class Evaluator:
    """The task's primary metric of ``subject`` on its validation data, as often as asked, through one Lightning
    ``Trainer`` and LightningModule at the run's precision (``bf16-mixed`` on a GPU, as the run validated; fp32 on the
    CPU) and on the validation batches the run used (its ``trainer.limit_val_batches`` unless ``limit_val_batches``):
    ΔP evaluates the model once per block."""

    def __init__(self, subject: Subject, limit_val_batches=None):
        import lightning as L

        cfg = subject.cfg
        accelerator = analysis_device().type
        self.subject, self.metric = subject, get_task(cfg.task.name).primary_metric.name
        self.precision = lightning_precision(cfg.trainer.get("precision"), "gpu" if accelerator == "cuda" else "cpu")
        self.module = build_lightning_module(cfg, subject.model, subject.datamodule)
        self.trainer = L.Trainer(
            accelerator="auto",
            devices=1,
            precision=self.precision,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            limit_val_batches=cfg.trainer.get("limit_val_batches") if limit_val_batches is None else limit_val_batches,
            use_distributed_sampler=get_family(cfg.task.family).distributed_sampler,
        )

    def __call__(self) -> float:
        metrics = self.trainer.validate(self.module, datamodule=self.subject.datamodule, verbose=False)[0]
        return float(metrics[self.metric])


def evaluate(subject: Subject, limit_val_batches=None) -> float:
    """The task's primary metric on the validation data (one evaluation; :class:`Evaluator` for many)."""
    return Evaluator(subject, limit_val_batches)()


def prune_profile(subject: Subject, limit_val_batches=None) -> dict:
    """ΔP(l) = P with block l skipped − P of the whole model, for every block l, at the run's precision.  Where the
    run recorded its final value (``subject.recorded``) and its own validation batches are used, the unpruned value must
    match it within :data:`PRUNE_MATCH_REL` (relative), or :class:`AnalysisMismatch` says both."""
    evaluate_now = Evaluator(subject, limit_val_batches)
    original = evaluate_now()
    check = None
    if subject.recorded is not None and limit_val_batches is None:
        rel = abs(original - subject.recorded) / max(abs(subject.recorded), 1e-12)
        check = {"recorded": subject.recorded, "relative_difference": rel, "tolerance": PRUNE_MATCH_REL}
        if rel > PRUNE_MATCH_REL:
            raise AnalysisMismatch(
                f"{subject.name}: the unpruned model evaluates to {evaluate_now.metric}={original:.6g} at {evaluate_now.precision}, "
                f"but the run recorded {subject.recorded:.6g} ({rel:.2%} apart, more than {PRUNE_MATCH_REL:.0%}): the weights, "
                "data or precision differ from the run's; ΔP against this value would not be the run's"
            )
        log.info(
            "%s: unpruned %s=%.6g, the run recorded %.6g (%.3f%% apart)",
            subject.name,
            evaluate_now.metric,
            original,
            subject.recorded,
            100 * rel,
        )
    deltas = []
    for index in range(len(subject.model.blocks)):
        with skip_block(subject.model, index):
            deltas.append(evaluate_now() - original)

    metric = get_task(subject.cfg.task.name).primary_metric
    return {
        "name": subject.name,
        "plan": list(subject.model.plan),
        "metric": metric.name,
        "higher_is_better": metric.higher_is_better,
        "precision": evaluate_now.precision,
        "original": original,
        "original_check": check,
        "delta": deltas,
    }


def describe_data(subject: Subject) -> dict:
    info = subject.datamodule.describe()
    return {"dataset": info.get("name"), "dataset_label": info.get("label")}


def measure(what: str, subjects: list[Subject], out_dir: Path, batches: int = 8, tokens: int = ANGULAR_TOKENS, limit_val_batches=None):
    """One analysis (``grad-norm``, ``angular`` or ``prune``) of ``subjects`` side by side, written as
    ``<out_dir>/<what>.json`` + ``.png`` (the paths returned)."""
    from . import plots

    data = describe_data(subjects[0])
    if what == "grad-norm":
        profiles = [grad_norm_profile(s, batches) for s in subjects]
        figure = plots.grad_norm_figure(profiles, f"per-block gradient norm, {batches} batches of {data['dataset']}")
    elif what == "angular":
        profiles = [angular_profile(s, tokens) for s in subjects]
        figure = plots.angular_figure(profiles, f"angular distance between block inputs on {data['dataset']}")
    elif what == "prune":
        profiles = [prune_profile(s, limit_val_batches) for s in subjects]
        figure = plots.prune_figure(profiles, f"performance drop of removing one block ({data['dataset']})")
    else:
        raise ValueError(f"no analysis {what!r}: grad-norm, angular or prune")
    for profile in profiles:
        profile.update(data)
    return write(out_dir, what.replace("-", "_"), profiles, figure)


def write(out_dir: Path, name: str, results: list[dict], figure) -> tuple[Path, Path]:
    refuse_link(out_dir).mkdir(parents=True, exist_ok=True)  # analysis/ planted as a link: nothing written through it
    json_path, png_path = out_dir / f"{name}.json", out_dir / f"{name}.png"
    refuse_link(png_path)  # both refused before either is written
    atomic_write_text(json_path, json.dumps(results, indent=1))
    save_figure(figure, png_path, dpi=120, bbox_inches="tight")
    log.info("wrote %s and %s", json_path, png_path)
    return json_path, png_path
