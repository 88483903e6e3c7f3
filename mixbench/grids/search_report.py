"""``mixbench search --report STUDY``: the study's ranked plans, its confirmation table (Welch intervals of the best
plan against ``pre`` and ``mix``, from :func:`mixbench.results.aggregate`) and a plot of score against plan."""

from __future__ import annotations

import itertools
import logging
import os

from ..core.errors import ConfigError
from ..core.storage import atomic_write_text, save_figure
from ..core.tasks import get_task
from ..results.records import load_records, row_key
from ..results.render import render
from ..results.table import aggregate
from .search import best_trial, open_study, plan_label, study_dir

log = logging.getLogger(__name__)


def trial_rows(study, settings, space) -> list[dict]:
    """One row per trial, best first: completed trials by value, then pruned ones (by their last reported value),
    then the rest.  ``budget``: ``full``, ``pruned at step N``, ``repeat of trial N`` or the state."""
    sign = -1.0 if study.direction.name == "MAXIMIZE" else 1.0
    rows = []
    for t in study.get_trials(deepcopy=False):
        plan = space.plan_of(t.params) if t.params else None
        last = max(t.intermediate_values) if t.intermediate_values else None
        state = t.state.name.lower()
        if state == "complete" and t.value is not None and t.value == t.value:
            budget, value, rank = (f"repeat of trial {t.user_attrs['repeat_of']}" if "repeat_of" in t.user_attrs else "full"), t.value, 0
        elif state == "pruned":
            budget, value, rank = f"pruned at step {t.user_attrs.get('pruned_at_step', last)}", t.intermediate_values.get(last), 1
        else:
            budget, value, rank = t.user_attrs.get("status", state), None, 2
        rows.append(
            {
                "trial": t.number,
                "plan": plan_label(settings, space, plan) if plan else "?",
                "budget": budget,
                "value": value,
                "params": t.params,
                "_key": (rank, sign * value if value is not None else 0.0, t.number),
            }
        )
    return sorted(rows, key=lambda r: r["_key"])


def ranked_text(rows: list[dict], metric: str) -> str:
    lines = [f"| rank | trial | plan | budget | {metric} |", "|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        value = f"{r['value']:.4g}" if r["value"] is not None else ""
        lines.append(f"| {i} | {r['trial']} | {r['plan']} | {r['budget']} | {value} |")
    return "\n".join(lines) + "\n"


def verdict(records: list[dict], best: str, baseline: str, confidence: float) -> str:
    """One sentence: whether the best plan beats ``baseline`` with the interval excluding 0."""
    table = aggregate(records, baseline=baseline, confidence=confidence)
    lines = []
    for col in table.columns:
        base = table.baseline_of.get(col)
        cell = table.cells.get((best, col))
        if base is None or cell is None:
            lines.append(f"- {best} vs {baseline}: no confirmation runs of both yet")
            continue
        d = cell.delta
        if d is None or d.low is None:
            lines.append(f"- {best} vs {base}: fewer than 2 finished seeds on one side, no interval")
            continue
        better = (d.diff > 0) == table.higher_is_better[col]
        interval = f"Δ {d.diff:+.4g} [{d.low:.4g}, {d.high:.4g}] ({confidence:.0%} Welch, n={cell.n} vs {table.cells[(base, col)].n})"
        if d.significant and better:
            lines.append(f"- {best} beats {base}: {interval}, the interval excludes 0")
        elif d.significant:
            lines.append(f"- {best} is worse than {base}: {interval}")
        else:
            lines.append(f"- {best} does NOT beat {base} with an interval excluding 0: {interval}")
    return "\n".join(lines)


def score_figure(rows: list[dict], space, records: list[dict], best: str | None, metric: str):
    """Final score of every full-budget trial against its plan (k = Post-LN blocks for ``alpha``), with the
    confirmation means ± std of the best plan and the baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["budget"] == "full"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if space.name == "alpha":
        xs = [r["params"]["num_post"] for r in done]
        ax.set_xlabel(f"k (leading Post-LN blocks of {space.num_layers})")
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        xs = list(range(len(done)))
        ax.set_xticks(xs, [r["plan"] for r in done], rotation=60, ha="right", fontsize=7)
        ax.set_xlabel("plan (full-budget trials, best first)")
    ax.scatter(xs, [r["value"] for r in done], label="search trials (search seed)", zorder=3)
    if records:
        table = aggregate(records, baseline=None)
        styles = itertools.cycle([("C1", "--"), ("C2", ":"), ("C3", "-."), ("C4", "--"), ("C5", ":")])
        for col in table.columns:
            for row in table.rows:
                cell = table.cells.get((row, col))
                if cell is None or cell.mean is None:
                    continue
                color, ls = ("black", "-") if row == best else next(styles)
                ax.axhline(cell.mean, ls=ls, lw=1, color=color, label=f"{row}: confirmation mean (n={cell.n})")
    ax.set_ylabel(metric)
    ax.legend(fontsize=7, loc="best", framealpha=0.9)
    fig.tight_layout()
    return fig


def baseline_label(records: list[dict], placement: str) -> str:
    """The table row of a baseline arm (``pre``; ``mix`` by α, not a searched ``mix(post=k)``)."""
    return next(
        (
            row_key(r)
            for r in records
            if isinstance(r["norm"], dict) and r["norm"].get("placement") == placement and r["norm"].get("num_post") is None
        ),
        placement,
    )


def _common_folder(paths: list[str]) -> str:
    """The folder the ``paths`` share, or all their parents when they share none (relative beside absolute paths)."""
    try:
        return os.path.commonpath(paths)
    except ValueError:
        return ", ".join(sorted({os.path.dirname(p) for p in paths}))


def report(results_dir, name: str, confidence: float = 0.95) -> str:
    """The report's markdown; also written to ``<study>/report.md`` with the plot ``<study>/score_vs_plan.png``."""
    study, settings, space, cfg = open_study(results_dir, name)
    folder = study_dir(results_dir, name)
    rows = trial_rows(study, settings, space)
    metric = get_task(cfg.task.name).primary_metric.name
    records, problems = load_records(folder / "confirm") if (folder / "confirm").is_dir() else ([], [])
    for problem in problems:
        log.warning("skipped unreadable record: %s", problem)
    counts = {s: sum(1 for r in rows if r["budget"].startswith(s)) for s in ("full", "pruned", "repeat")}
    text = [
        f"# Study {name}: {settings.space} space, {len(space.plans())} plans, {len(rows)} trials "
        f"({counts['full']} at the full budget, {counts['pruned']} pruned, {counts['repeat']} repeats), "
        f"{settings.pruner} pruner",
        "",
        f"Settings of every run: {' '.join(settings.overrides)}",
        "",
        "## Ranked plans (search seed; pruned trials by their value at the step they stopped)",
        "",
        ranked_text(rows, metric),
    ]
    best = None
    try:
        trial = best_trial(study)
        best = plan_label(settings, space, space.plan_of(trial.params))
    except ConfigError as err:  # no completed trial: the ranked plans are all there is
        text.append(f"No best plan yet: {err}")
    if records and best:
        text += ["## Confirmation (seeds the search never used, full budget)", ""]
        reused = [r["reused_from"] for r in records if r.get("reused_from")]
        if reused:
            text += [
                f"{len(reused)} of {len(records)} confirmation runs are earlier runs of the same settings and seeds, "
                f"reused from {_common_folder(reused)} (`--reuse-from`; `reused_from` in their records).",
                "",
            ]
        baselines = [baseline_label(records, placement) for placement in ("pre", "mix")]
        for baseline in baselines:
            text += [f"### against {baseline}", "", render(aggregate(records, baseline=baseline, confidence=confidence), "md")]
        text += [
            f"Best plan of the search: **{best}** (trial {trial.number}).",
            "",
            *(verdict(records, best, baseline, confidence) for baseline in baselines),
            "",
        ]
    elif best:
        text.append(f"No confirmation runs yet: mixbench search --confirm {name} --seeds 3")
    markdown = "\n".join(text) + "\n"
    atomic_write_text(folder / "report.md", markdown)
    figure = score_figure(rows, space, records, best, metric)
    save_figure(figure, folder / "score_vs_plan.png", dpi=120)
    log.info("wrote %s and %s", folder / "report.md", folder / "score_vs_plan.png")
    return markdown
