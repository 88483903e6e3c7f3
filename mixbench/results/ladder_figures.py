"""The size ladder's figures and table (``mixbench plot ladder``): the placements across model sizes, each at its own best
learning rate, one set per family (``lm``, ``vision``) of the records.

Every number is the tuned table's (:func:`~.table.aggregate` with ``best_over="optim.lr"``): a rung is one of its
columns, placed on the x axis by its model's parameter count (``model.num_params``); Δ and its Welch interval are the
cells' own, each placement at its best lr (:data:`~.sweep.RULE`) against the baseline at the baseline's.  Per family:

- ``ladder_delta_<family>.png``: Δ by size, a line per placement, the Welch interval as a band and error bar where both
  cells have ≥ 2 finished seeds, a hollow marker where the placement's cell has one, ``k/n stalled`` beside a cell
  whose seeds did not all finish, and an × on the *fails* strip (at the bad side) where no seed finished at any lr;
- ``ladder_best_lr_<family>.png``: each placement's best lr by size (a hollow star where it is not bracketed: no lr
  was tried on one side of it, e.g. a size where one lr ran), the lrs tried as dots (half-filled where some of
  their seeds did not finish), the lrs where no seed finished as hollow markers (▲ diverged, ○ stalled, × crashed), the
  rung's default lr as a grey bar;
- ``ladder_<family>.md``: the table of the two, with the size each placement *breaks at* (the smallest where it fails
  at every lr tried; with ? until those are ≥ 3 lrs spanning a decade) and the rungs where its best lr is below the
  rung's default (the task's ``optim.lr``).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from ..core.errors import ConfigError
from ..core.project import config_file
from ..core.settings import flat_settings
from ..core.storage import atomic_write_text, save_figure
from ..core.tasks import task_files_merged
from .equal_tokens import write_equal_tokens
from .lr_curves import EDGE_MARKERS, _slug
from .records import column_key
from .sweep import RULE, Sweep, failed_everywhere, value_text, with_setting
from .table import Table, aggregate

log = logging.getLogger(__name__)
KEY = "optim.lr"
SPREAD = 0.02  # decades between the x positions of neighbouring placements at one size (keeps their markers apart)


def task_default(task: str, key: str = KEY):
    """The value of ``key`` a run of ``task`` gets unless told otherwise: its recipe's (following ``base:``), else
    ``configs/defaults.yaml``'s; None where no task of that name is found.  Read from the YAML files alone (the task
    registry checks each task's family, which imports the model stack)."""
    tasks = task_files_merged()
    if task not in tasks:
        return None
    value = flat_settings(tasks[task].get("recipe") or {}).get(key)
    defaults = config_file("defaults.yaml")
    if value is None and defaults is not None:
        value = flat_settings(OmegaConf.to_container(OmegaConf.load(defaults), resolve=False)).get(key)
    return value


@dataclass
class Rung:
    """One column of the tuned table: a model size."""

    column: str
    params: int  # model.num_params, the most common among its records (placements add a few)
    label: str  # model name and size, e.g. ``llama_130m · 97.5M`` (and what sets it apart from a column of its size)
    default: float | None  # the task's default lr (:func:`task_default`)


@dataclass
class Ladder:
    """One family's rungs (by size) and rows, and the tuned table they come from."""

    family: str
    table: Table
    rungs: list[Rung]
    rows: list[str]

    def sweep(self, row: str, rung: Rung) -> Sweep | None:
        return self.table.sweeps.get((row, rung.column))

    def baseline(self, rung: Rung) -> str | None:
        return self.table.baseline_of.get(rung.column)

    def untuned(self, row: str | None, rung: Rung) -> bool:
        """Whether ``row`` has a best lr at ``rung`` that is an edge of its sweep (not :attr:`Sweep.bracketed`)."""
        sweep = self.sweep(row, rung) if row else None
        return sweep is not None and sweep.best is not None and not sweep.bracketed

    def untuned_text(self, row: str, rung: Rung, with_baseline: bool = True) -> str:
        """``lr not bracketed`` where ``row``'s best lr at ``rung`` is :meth:`untuned`, then (``with_baseline``) ``pre's
        lr not bracketed`` where its baseline's is; joined by ``; ``; blank where both are tuned."""
        base = self.baseline(rung)
        notes = ["lr not bracketed"] if self.untuned(row, rung) else []
        if with_baseline and base != row and self.untuned(base, rung):
            notes.append(f"{base}'s lr not bracketed")
        return "; ".join(notes)

    @property
    def higher_is_better(self) -> bool:
        return self.table.higher_is_better[self.rungs[0].column]

    @property
    def metric(self) -> str:
        return self.table.metric_of[self.rungs[0].column]


def ladders(records: list[dict], baseline: str = "pre") -> dict[str, Ladder]:
    """Family → its :class:`Ladder`, from the tuned table of ``records`` over :data:`KEY`.  A column whose records hold
    no ``model.num_params``, or a family without the ``baseline`` row, is a :class:`ConfigError`."""
    records = with_setting(records, KEY)
    table = aggregate(records, baseline=baseline, best_over=KEY)
    params, names = {}, {}
    for r in records:
        model = r["model"] if isinstance(r["model"], dict) else {"name": str(r["model"])}
        names.setdefault(column_key(r), Counter())[model.get("name", "?")] += 1
        if isinstance(model.get("num_params"), int):
            params.setdefault(column_key(r), Counter())[model["num_params"]] += 1
    families: dict[str, list[str]] = {}
    for col in table.columns:
        if col not in params:
            raise ConfigError(
                f"column {col}: none of its records holds model.num_params (its model's size), so it has no place on the "
                "ladder; leave its records out of --results-dir"
            )
        families.setdefault(table.info[col].get("family") or table.info[col]["task"], []).append(col)
    result = {}
    for family, columns in families.items():
        size = {col: min(params[col].items(), key=lambda kv: (-kv[1], kv[0]))[0] for col in columns}
        columns = sorted(columns, key=lambda c: (size[c], c))
        rows = [row for row in table.rows if any((row, c) in table.cells for c in columns)]
        if not any(table.baseline_of.get(c) for c in columns):
            raise ConfigError(f"--baseline {baseline}: no {family} row is labelled so (rows: {', '.join(rows)}); give one of them")
        labels = _labels(table, columns, size, {c: names[c].most_common(1)[0][0] for c in columns})
        rungs = [Rung(c, size[c], labels[c], task_default(table.info[c]["task"])) for c in columns]
        result[family] = Ladder(family, table, rungs, rows)
    return result


def _labels(table: Table, columns: list[str], size: dict, name: dict) -> dict[str, str]:
    """``llama_130m · 97.5M``; where columns share a size, also what sets them apart (task, dataset, scale, recipe, budget)."""
    labels = {}
    for col in columns:
        same = [c for c in columns if size[c] == size[col]]
        parts = [f"{name[col]} · {_params_text(size[col])}"]
        if len(same) > 1:
            for key in ("task", "dataset", "scale", "recipe", "budget"):
                if len({str(table.info[c].get(key)) for c in same}) > 1 and table.info[col].get(key) is not None:
                    parts.append(str(table.info[col][key]))
        labels[col] = " · ".join(parts)
    return labels


def _params_text(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


@dataclass(frozen=True)
class Break:
    """Where a placement breaks: the smallest rung where it trained at some lr and finished at none; ``settled`` once
    those failed lrs are ≥ 3 spanning a decade and the lowest of them was no longer improving when its runs ended (the
    ladder's rule to stop sweeping), else ``lrs`` tried so far."""

    rung: Rung
    settled: bool
    lrs: int
    lowest_improving: bool = False

    @property
    def text(self) -> str:
        if self.settled:
            return self.rung.label
        if self.lowest_improving:
            return f"{self.rung.label}? ({self.lrs} lrs tried; the lowest was still improving)"
        return f"{self.rung.label}? ({self.lrs} lr{'s' if self.lrs > 1 else ''} tried)"


def breaks_at(ladder: Ladder, row: str) -> Break | None:
    """The smallest rung where ``row`` trained at some lr (stalled or diverged) and finished at none (:class:`Break`)."""
    for rung in ladder.rungs:
        sweep = ladder.sweep(row, rung)
        if sweep is not None and sweep.best is None and sweep.trained:
            settled = failed_everywhere(sweep.cells) and not sweep.lowest_improving
            return Break(rung, settled, len(sweep.cells), sweep.lowest_improving)
    return None


def below_default(ladder: Ladder, row: str) -> list[tuple[Rung, float]]:
    """The rungs where ``row``'s best lr is below the rung's default lr, with that lr."""
    found = []
    for rung in ladder.rungs:
        sweep = ladder.sweep(row, rung)
        if sweep is not None and sweep.best is not None and rung.default is not None and sweep.best < rung.default:
            found.append((rung, sweep.best))
    return found


def cell_text(ladder: Ladder, row: str, rung: Rung, digits: int = 2) -> str:
    """``Δ −3.00 [−5.27, −0.73]* @lr 1e-3 (1/3 stalled; lr not bracketed)``; the baseline row's own value; ``3/3 lrs
    stalled`` where no seed finished at any lr; ``not run``."""
    sweep = ladder.sweep(row, rung)
    if sweep is None:
        return "not run"
    cell = sweep.cell
    if sweep.best is None or row == ladder.baseline(rung) or cell.delta is None:
        no_baseline = "no baseline" if sweep.best is not None and row != ladder.baseline(rung) else ""
        return sweep.summary(digits) + _notes(no_baseline, ladder.untuned_text(row, rung, with_baseline=False))
    base = ladder.table.cells[(ladder.baseline(rung), rung.column)]
    seeds = [f"n={cell.n}"] if cell.n < 2 else []
    seeds += [f"{ladder.baseline(rung)} n={base.n}"] if base.n < 2 else []
    text = cell.delta_text(digits) + (f" ({', '.join(seeds)})" if seeds else "") + f" @lr {value_text(sweep.best)}"
    return text + _notes(cell.ended_text(), ladder.untuned_text(row, rung))


def _notes(*notes: str) -> str:
    """`` (1/3 stalled; lr not bracketed)``: the notes that are not blank, in parentheses; blank where none is."""
    kept = [n for n in notes if n]
    return f" ({'; '.join(kept)})" if kept else ""


def markdown(ladder: Ladder) -> str:
    """The ladder's table: a row per placement, a column per size (:func:`cell_text`), then where it breaks and the lrs
    below the default it needs; the legend under it."""
    direction = "higher" if ladder.higher_is_better else "lower"
    bases = sorted({b for r in ladder.rungs if (b := ladder.baseline(r))})
    header = ["placement", *(f"{r.label} (default lr {value_text(r.default) if r.default else '?'})" for r in ladder.rungs)]
    lines = [
        f"## {ladder.family}: Δ {ladder.metric} ({direction} is better) against {', '.join(bases)}, each at its own best lr",
        "",
        "| " + " | ".join([*header, "breaks at", "best lr below the default"]) + " |",
        "|" + "---|" * (len(header) + 2),
    ]
    for row in ladder.rows:
        broken = breaks_at(ladder, row)
        needs = ", ".join(f"{value_text(lr)} at {rung.label}" for rung, lr in below_default(ladder, row))
        cells = [cell_text(ladder, row, rung) for rung in ladder.rungs]
        where = broken.text if broken else "—"
        name = row + (" (baseline)" if row in bases else "")
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("*", "\\*") for c in [name, *cells, where, needs or "—"]) + " |")
    confidence = f"{ladder.table.confidence * 100:g} %"
    lines += [
        "",
        f"Δ = mean − mean of the baseline row, each at its own best lr, picked as {RULE.replace('value', 'lr')}; "
        f"[low, high] = Welch's {confidence} interval (none where either cell has fewer than 2 finished seeds: n= says "
        "which), \\* = it excludes 0. k/n stalled (diverged, failed = crashed): seeds of the chosen cell that did not "
        "finish. The baseline row shows its own mean ± std. k/n lrs stalled: no seed finished at any lr tried. Breaks at: "
        "the smallest size where the placement trained at some lr and finished at none, with ? until those lrs are ≥ 3 "
        "spanning a decade (the sweep's rule). lr not bracketed: no lr that trained on one side of the best (or one lr "
        "tried), so its value is the best of a sweep not yet done, not a tuned one (pre's: the baseline's). Best lr "
        "below the default: the "
        "sizes where the placement's best lr is below the task's default lr (the column's header).",
        "",
    ]
    return "\n".join(lines)


def _x(rung: Rung, i: int, n: int) -> float:
    """The x position of the ``i``-th of ``n`` placements at ``rung``: its size, shifted by :data:`SPREAD` decades."""
    return rung.params * 10 ** ((i - (n - 1) / 2) * SPREAD)


def _size_axis(ax, ladder: Ladder) -> None:
    from matplotlib.ticker import NullLocator

    sizes = [r.params for r in ladder.rungs]
    ax.set_xscale("log")
    ax.set_xticks(sizes, [r.label.replace(" · ", "\n") for r in ladder.rungs], minor=False, fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(min(sizes) / 10**0.2, max(sizes) * 10**0.2)


def _colors(ladder: Ladder) -> dict[str, object]:
    import matplotlib.pyplot as plt

    palette = plt.get_cmap("tab10")
    others = [row for row in ladder.rows if row not in {ladder.baseline(r) for r in ladder.rungs}]
    return {row: palette(i % 10) for i, row in enumerate(others)}


def delta_figure(ladder: Ladder):
    """Δ against the baseline by size (:mod:`module docs <.ladder_figures>`): the main axis and the fails strip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    hib = ladder.higher_is_better
    ratios = [6, 1] if hib else [1, 6]  # the fails strip at the bad side: Δ < 0 where higher is better
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=ratios, layout="constrained")
    ax, strip = (axes[0], axes[1]) if hib else (axes[1], axes[0])
    colors = _colors(ladder)
    ax.axhline(0.0, color="black", linewidth=1)
    fails, spans = [], []
    for i, (row, color) in enumerate(colors.items()):
        xs, ys, lows, highs = [], [], [], []
        for rung in ladder.rungs:
            sweep, x = ladder.sweep(row, rung), _x(rung, i, len(colors))
            if sweep is not None and sweep.best is None:
                fails.append((row, x, sweep.summary()))
            cell = sweep.cell if sweep is not None else None
            d = cell.delta if cell is not None else None
            xs.append(x)
            ys.append(d.diff if d else float("nan"))
            lows.append(d.low if d and d.low is not None else float("nan"))
            highs.append(d.high if d and d.high is not None else float("nan"))
            if d is None:
                continue
            spans += [d.diff] + ([d.low, d.high] if d.low is not None else [])
            if d.low is not None:
                ax.errorbar([x], [d.diff], yerr=[[d.diff - d.low], [d.high - d.diff]], color=color, capsize=3, linewidth=1)
            face = color if cell.n >= 2 else "none"
            ax.plot([x], [d.diff], marker="o", markersize=6, color=color, markerfacecolor=face, linestyle="")
            if ended := cell.ended_text():
                ax.annotate(ended, (x, d.diff), xytext=(5, 4), textcoords="offset points", fontsize=7, color=color)
        ax.plot(xs, ys, color=color, linewidth=1.5, label=row)
        ax.fill_between(xs, lows, highs, color=color, alpha=0.15, linewidth=0)
    bases = sorted({b for r in ladder.rungs if (b := ladder.baseline(r))})
    ax.set_ylabel(f"Δ {ladder.metric} vs {', '.join(bases)} ({'higher' if hib else 'lower'} is better)")
    _delta_scale(ax, spans)
    ax.grid(alpha=0.3)
    _fails_strip(strip, fails, colors)
    _size_axis(axes[1], ladder)  # the lower axis shows the shared x axis's labels
    axes[1].set_xlabel("model size (parameters, log scale)")
    handles = [*ax.get_legend_handles_labels()[0]]
    handles += [
        plt.Line2D([], [], color="black", label=f"{', '.join(bases)} (baseline, Δ = 0)"),
        plt.Line2D([], [], marker="o", linestyle="", color="gray", label="≥ 2 finished seeds"),
        plt.Line2D([], [], marker="o", linestyle="", color="gray", markerfacecolor="none", label="1 finished seed: no interval"),
        Patch(color="gray", alpha=0.3, label=f"Welch {ladder.table.confidence * 100:g} % interval"),
        plt.Line2D([], [], marker="x", linestyle="", color="gray", label="no seed finished at any lr"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(f"{ladder.family}: Δ {ladder.metric} against {', '.join(bases)}, each placement at its own best lr", fontsize=10)
    return fig


def _delta_scale(ax, values: list[float]) -> None:
    """A symmetric log y axis where the Δs span more than 10× their median size (one size's Δs would flatten the
    others'), linear within the median's power of ten."""
    sizes = [abs(v) for v in values if v]
    if sizes and max(sizes) > 10 * statistics.median(sizes):
        ax.set_yscale("symlog", linthresh=10 ** math.floor(math.log10(statistics.median(sizes))))
        ax.set_ylabel(ax.get_ylabel() + ", symlog")


def _fails_strip(strip, fails: list[tuple[str, float, str]], colors: dict) -> None:
    """An × per (placement, size) where no seed finished at any lr, one line of the strip per placement, labelled."""
    lines = list(dict.fromkeys(row for row, _, _ in fails))
    for row, x, text in fails:
        y = lines.index(row)
        strip.plot([x], [y], marker="x", markersize=8, color=colors[row], linestyle="")
        strip.annotate(f"{row}: {text}", (x, y), xytext=(6, -3), textcoords="offset points", fontsize=7, color=colors[row])
    strip.set_ylim(-0.8, max(len(lines), 1) - 0.2)
    strip.set_yticks([])
    strip.set_ylabel("fails", fontsize=8)
    if not fails:
        strip.text(0.5, 0.5, "none fails at every lr", transform=strip.transAxes, ha="center", va="center", fontsize=7)


def lr_figure(ladder: Ladder):
    """Each placement's best lr by size, the lrs tried, those where no seed finished, and the rungs' default lrs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    rows = ladder.rows
    colors = {**{row: "black" for row in rows}, **_colors(ladder)}
    ended_seen = set()
    for i, row in enumerate(rows):
        xs, best = [], []
        for rung in ladder.rungs:
            sweep, x = ladder.sweep(row, rung), _x(rung, i, len(rows))
            xs.append(x)
            best.append(float(sweep.best) if sweep is not None and sweep.best is not None else float("nan"))
            for value in sweep.cells if sweep is not None else ():
                ended = sweep.outcome(value)
                if ended == "completed" and sweep.cells[value].ended_text():  # some seeds finished, others did not
                    ended_seen.add("some")
                    ax.plot([x], [float(value)], marker="o", markersize=5, fillstyle="bottom", color=colors[row], linestyle="")
                elif ended == "completed":
                    ax.plot([x], [float(value)], marker=".", markersize=4, color=colors[row], linestyle="")
                else:
                    ended_seen.add(ended)
                    ax.plot([x], [float(value)], marker=EDGE_MARKERS[ended], markerfacecolor="none", color=colors[row], linestyle="")
        ax.plot(xs, best, marker="*", markersize=10, color=colors[row], label=row)
        for rung, x, y in zip(ladder.rungs, xs, best):  # a best lr with no lr tried on one side of it: not tuned yet
            if ladder.untuned(row, rung):
                ended_seen.add("untuned")
                ax.plot([x], [y], marker="*", markersize=10, markerfacecolor="white", color=colors[row], linestyle="")
    for rung in ladder.rungs:  # under the points, as wide as the placements' spread
        if rung.default is not None:
            ends = [_x(rung, -1, len(rows)), _x(rung, len(rows), len(rows))]
            ax.plot(ends, [rung.default] * 2, color="gray", linewidth=6, alpha=0.3, zorder=0, solid_capstyle="butt")
    ax.set_yscale("log")
    ax.set_ylabel(f"best {KEY} (log scale)")
    ax.grid(alpha=0.3)
    _size_axis(ax, ladder)
    ax.set_xlabel("model size (parameters, log scale)")
    handles = [*ax.get_legend_handles_labels()[0]]
    handles.append(plt.Line2D([], [], marker=".", linestyle="", color="gray", label="an lr tried"))
    if "some" in ended_seen:
        handles.append(plt.Line2D([], [], marker="o", fillstyle="bottom", linestyle="", color="gray", label="some seeds did not finish"))
    if "untuned" in ended_seen:
        handles.append(
            plt.Line2D(
                [],
                [],
                marker="*",
                markersize=10,
                markerfacecolor="white",
                linestyle="",
                color="gray",
                label="best of the lrs tried, not bracketed",
            )
        )
    handles.append(plt.Line2D([], [], color="gray", linewidth=6, alpha=0.3, label="the task's default lr"))
    handles += [
        plt.Line2D([], [], marker=m, linestyle="", markerfacecolor="none", color="gray", label=f"no seed finished: {o}")
        for o, m in EDGE_MARKERS.items()
        if o in ended_seen
    ]
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"{ladder.family}: each placement's best lr by size (★; the table's rule), the lrs tried", fontsize=10)
    return fig


def write_ladder(records: list[dict], out: str | Path, baseline: str = "pre", analysis_dir: str | Path | None = None) -> list[Path]:
    """The figures and table of each family's ladder, written to the folder ``out``; with ``analysis_dir`` (the
    ladder's ``analysis/`` folder, where it exists) also the layer analyses by size (:mod:`.ladder_layers`); the paths
    written."""
    import matplotlib.pyplot as plt

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; plot ladder writes its figures and tables to a folder, e.g. --out {out.parent}")
    out.mkdir(parents=True, exist_ok=True)
    paths, label_of, size_of = [], {}, {}
    for family, ladder in ladders(records, baseline).items():
        for rung in ladder.rungs:
            task = ladder.table.info[rung.column]["task"]
            label_of[task], size_of[task] = rung.label, rung.params
        name = _slug([family])
        table = out / f"ladder_{name}.md"
        atomic_write_text(table, markdown(ladder))
        paths.append(table)
        for stem, draw in (("ladder_delta", delta_figure), ("ladder_best_lr", lr_figure)):
            fig = draw(ladder)
            save_figure(fig, out / f"{stem}_{name}.png", dpi=120)
            plt.close(fig)
            paths.append(out / f"{stem}_{name}.png")
        paths += write_equal_tokens(ladder, records, out, name, KEY)  # the same records at equal tokens, where they count tokens
    if analysis_dir is not None:
        from .ladder_layers import write_layers

        paths += write_layers(analysis_dir, out, label_of, size_of)
    return paths
