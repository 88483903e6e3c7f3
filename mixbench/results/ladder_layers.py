"""The ladder's layer analyses side by side across model sizes (``mixbench plot ladder``, where
``<results_dir>/analysis/<task>/`` holds the ``angular.json`` and ``prune.json`` of ``mixbench reproduce ladder
--analyze``).

For each size and placement, with L blocks and h = ⌊L/2⌋:

- the first block's step d(x⁰, x¹) (angular distance, Eq. 8);
- the mean step d(x^ℓ, x^(ℓ+1)) over the early blocks 1 ≤ ℓ < h and over the deeper half h ≤ ℓ < L — small: deep
  blocks that change the representation little (the paper's redundant deep layers, Figs. 2 and 5);
- the mean ΔP(ℓ) (Eq. 9) over the deeper half, the last block aside, as a share of the whole model's metric — small:
  blocks that can be removed at little cost; the last block's and the first block's ΔP beside it.

Written as ``ladder_layers.md`` (the table) and ``ladder_layers.png`` (the two deeper-half measures by size, a line per
placement).  One analysed run a (size, placement): no seeds, no interval.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.storage import atomic_write_text, save_figure

ANGULAR, PRUNE = "angular.json", "prune.json"


@dataclass(frozen=True)
class LayerSummary:
    """What the analyses of one (size, placement) say, from its ``angular.json`` (and ``prune.json`` where measured)."""

    task: str
    name: str
    blocks: int
    first_step: float
    early_step: float | None
    deep_step: float
    metric: float | None = None  # the whole model's primary metric (prune.json's "original")
    deep_drop_share: float | None = None  # mean ΔP over the deeper half, last block aside, / metric
    last_drop: float | None = None
    first_drop: float | None = None


def summarize(task: str, angular: dict, prune: dict | None) -> LayerSummary:
    """One placement's :class:`LayerSummary` from its entries of ``angular.json`` and ``prune.json``."""
    steps = [float(v) for v in angular["distance"][0] if v is not None]  # n = 1: d(x^ℓ, x^(ℓ+1)), ℓ = 0 … L−1
    blocks, half = len(steps), len(steps) // 2
    if blocks < 2:
        raise ConfigError(f"{task} {angular.get('name')}: angular.json has {blocks} block step(s); the summary needs ≥ 2")
    early = steps[1:half]
    summary = dict(task=task, name=angular["name"], blocks=blocks, first_step=steps[0], deep_step=statistics.fmean(steps[half:]))
    summary["early_step"] = statistics.fmean(early) if early else None
    if prune is not None:
        drops, metric = [float(d) for d in prune["delta"]], float(prune["original"])
        deep = drops[half:-1]
        summary.update(metric=metric, last_drop=drops[-1], first_drop=drops[0])
        summary["deep_drop_share"] = statistics.fmean(deep) / metric if deep and metric else None
    return LayerSummary(**summary)


def read_summaries(analysis_dir: str | Path) -> list[LayerSummary]:
    """Every (size, placement) under ``analysis_dir`` (one folder a task holding ``angular.json``, maybe ``prune.json``),
    tasks in name order, placements in the files' order."""
    found = []
    for folder in sorted(p for p in Path(analysis_dir).iterdir() if (p / ANGULAR).is_file()):
        angular = _entries(folder / ANGULAR)
        prune = {e["name"]: e for e in _entries(folder / PRUNE)} if (folder / PRUNE).is_file() else {}
        found += [summarize(folder.name, entry, prune.get(entry["name"])) for entry in angular]
    return found


def _entries(path: Path) -> list[dict]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable analysis file ({err}); make it again with mixbench reproduce ladder --analyze") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
        raise ConfigError(f"{path}: expected a list of per-placement entries, as mixbench analyze writes")
    return entries


def _number(value: float | None, digits: int = 3, percent: bool = False) -> str:
    if value is None:
        return "—"
    return f"{100 * value:.1f} %" if percent else f"{value:,.{digits}f}"


def markdown(rows: list[LayerSummary], label_of: dict[str, str]) -> str:
    """The table of :func:`read_summaries`' rows; ``label_of``: a task's column label (its model and size)."""
    lines = [
        "## Layer analyses by size: angular step between consecutive block inputs and layer-pruning ΔP",
        "",
        "| size | placement | blocks | first step d(x⁰, x¹) | early steps (mean) | deeper-half steps (mean) | metric "
        "| deeper-half ΔP (mean, share) | ΔP last block | ΔP block 0 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = _number(r.deep_drop_share, percent=True)
        cells = [label_of.get(r.task, r.task), r.name, str(r.blocks), _number(r.first_step), _number(r.early_step), _number(r.deep_step)]
        cells += [_number(r.metric, 2), share, _number(r.last_drop, 2), _number(r.first_drop, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Steps: mean d(x^ℓ, x^(ℓ+1)) = arccos(cos)/π between block inputs (Eq. 8); early: 1 ≤ ℓ < ⌊L/2⌋, deeper half: "
        "ℓ ≥ ⌊L/2⌋. ΔP (Eq. 9): the metric with one block skipped minus the whole model's; the deeper-half mean leaves "
        "the last block out and is given as a share of the metric; — where ΔP was not measured. One run a cell: no "
        "seeds, no interval.",
        "",
    ]
    return "\n".join(lines)


def figure(rows: list[LayerSummary], size_of: dict[str, float]):
    """The deeper-half angular step and ΔP share by size (log parameters where ``size_of`` knows the task), a line per
    placement."""
    import matplotlib.pyplot as plt

    tasks = sorted({r.task for r in rows}, key=lambda t: (size_of.get(t, float("inf")), t))
    x = {t: size_of.get(t, i + 1) for i, t in enumerate(tasks)}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    panels = ((axes[0], "deep_step", "mean angular step, deeper half"), (axes[1], "deep_drop_share", "mean ΔP share, deeper half (%)"))
    for ax, field, title in panels:
        for name in dict.fromkeys(r.name for r in rows):
            points = sorted((x[r.task], getattr(r, field)) for r in rows if r.name == name and getattr(r, field) is not None)
            if points:
                scale = 100 if field == "deep_drop_share" else 1
                ax.plot([p[0] for p in points], [scale * p[1] for p in points], "o-", label=name)
        ax.set_title(title)
        ax.set_xscale("log" if all(t in size_of for t in tasks) else "linear")
        ax.set_xlabel("parameters" if all(t in size_of for t in tasks) else "size (order)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("layer redundancy by model size (one run a point)")
    fig.tight_layout()
    return fig


def write_layers(analysis_dir: str | Path, out: str | Path, label_of: dict[str, str], size_of: dict[str, float]) -> list[Path]:
    """``ladder_layers.md`` and ``.png`` in ``out`` from the analyses under ``analysis_dir``; the paths (none where
    there is nothing to summarize)."""
    import matplotlib.pyplot as plt

    rows = read_summaries(analysis_dir) if Path(analysis_dir).is_dir() else []
    rows.sort(key=lambda r: (size_of.get(r.task, float("inf")), r.task))  # smallest size first; placements keep their order
    if not rows:
        return []
    out = Path(out)
    table, png = out / "ladder_layers.md", out / "ladder_layers.png"
    atomic_write_text(table, markdown(rows, label_of))
    fig = figure(rows, size_of)
    save_figure(fig, png, dpi=120)
    plt.close(fig)
    return [table, png]
