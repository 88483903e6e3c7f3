"""Training and validation curves of several runs on one figure (``mixbench plot curves --compare RUN ...``).

Each run's ``logs/metrics.csv`` (the CSV logger is always on) gives the training loss per logged step and the
validation metrics; the curves are labelled by the run's norm placement (and seed).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from ..core.errors import ConfigError


def read_metrics(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(step, value), ...]}`` of a run's ``logs/metrics.csv``."""
    path = Path(run_dir) / "logs" / "metrics.csv"
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no logs/metrics.csv; give run folders made by mixbench run")
    series: dict[str, list[tuple[int, float]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(float(row.get("step") or 0))
            for key, value in row.items():
                if key in ("step", "epoch") or value in ("", None):
                    continue
                series.setdefault(key, []).append((step, float(value)))
    return series


def run_label(run_dir: Path) -> str:
    record = run_dir / "record.json"
    if record.is_file():
        data = json.loads(record.read_text())
        return f"{data['norm']['label']} seed {data['seed']}"
    return run_dir.name


def curves_figure(run_dirs: list[str | Path], validation_metric: str | None = None):
    """Two panels: ``train/loss`` and a validation metric (the runs' primary metric unless given) against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [Path(d) for d in run_dirs]
    if validation_metric is None:
        record = runs[0] / "record.json"
        validation_metric = json.loads(record.read_text())["primary_metric"]["name"] if record.is_file() else "val/loss"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for run in runs:
        series, label = read_metrics(run), run_label(run)
        for ax, metric in zip(axes, ("train/loss", validation_metric)):
            points = [(s, v) for s, v in series.get(metric, []) if math.isfinite(v)]
            if points:
                ax.plot(*zip(*points), marker="o" if metric != "train/loss" else None, markersize=3, label=label)
    for ax, metric in zip(axes, ("train/loss", validation_metric)):
        ax.set(xlabel="optimizer step", ylabel=metric, title=metric)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return fig
