"""RLHF grids (``kind: rlhf`` in ``configs/paper/mixln_iclr2025.yaml``; paper Table 3): pretrain → SFT → RM → ReMax.

Each (size task, norm, seed) is a chain of four training runs, each initialised from the one before:

1. ``pretrain``: the Table 1 run;
2. ``sft``: ``task=sft_commonsense init_from=<pretrain run>``;
3. ``rm``: ``task=rm_preferences init_from=<sft run>`` (the reward model);
4. ``rl``: ``task=rlhf_remax init_from=<sft run> rlhf.reward_model=<rm run>`` (its ``val/final_reward`` is the table's).

Finished stages are reused as in :mod:`mixbench.grids.downstream` (same task, seed, scale and settings; the
``init_from`` — and for ``rl`` the reward model — of this chain).  Command-line settings go to every stage;
``pretrain:`` / ``sft:`` / ``rm:`` / ``rl:`` prefixes send one to one stage (the three later stages each need their
data: ``sft:data.path=... rm:data.path=... rl:data.path=...``, e.g. the same commonsense files with the same
``data.stage_split``).
"""

from __future__ import annotations

import logging
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError
from ..results.records import load_records, model_label
from ..results.stats import mean_std, welch_interval
from ..results.table import Cell
from ..training.config import compose, norm_spec
from .downstream import _pretrain_record, _train, _variant, _view, as_primary, combos, emit, find_finished, follow_up, paper_rows
from .paper import grid

log = logging.getLogger(__name__)
STAGES = ("pretrain", "sft", "rm", "rl")
LATER = STAGES[1:]


@dataclass
class RLChain:
    """One (size, norm, seed) of an RLHF grid: each stage's arguments (without the runs it starts from)."""

    label: str
    argv: dict
    paper: float | None = None
    dirs: dict = field(default_factory=dict)


def stage_overrides(extra: tuple[str, ...]) -> tuple[list[str], dict[str, list[str]]]:
    """``(settings for every stage, {stage: its own settings})`` from ``stage:key=value`` prefixes."""
    common, own = [], {s: [] for s in STAGES}
    for arg in extra:
        stage, sep, rest = arg.partition(":")
        if sep and stage in own and "=" in rest:
            own[stage].append(rest)
        else:
            common.append(arg)
    return common, own


def chains(name: str, scale: str = "paper", seeds: tuple[int, ...] = (0,), extra: tuple[str, ...] = (), root=None) -> list[RLChain]:
    spec = grid(name, root)
    common, own = stage_overrides(extra)
    out = []
    for task, norm, overrides, scale_args, proxy, paper in combos(name, scale, root):
        for seed in seeds:
            pretrain = [f"task={task}", f"norm={norm}", *scale_args, *overrides, f"seed={seed}", *common, *own["pretrain"]]
            cfg = compose(pretrain, root)
            argv = {"pretrain": pretrain}
            for stage in LATER:
                argv[stage] = [*follow_up(spec["stages"][stage], pretrain, cfg), *proxy.get(f"{stage}_overrides", []), *common, *own[stage]]
            out.append(RLChain(f"{task}{_variant(scale_args)} · {norm_spec(cfg).label()} · seed {seed}", argv, paper))
    return out


def with_inits(chain: RLChain, dirs: dict) -> dict:
    """Each stage's arguments with the runs it starts from (``<stage run>`` placeholders where not made yet)."""
    ref = lambda stage: str(dirs[stage]) if dirs.get(stage) else f"<{stage} run>"  # noqa: E731
    return {
        "pretrain": chain.argv["pretrain"],
        "sft": [*chain.argv["sft"], f"init_from={ref('pretrain')}"],
        "rm": [*chain.argv["rm"], f"init_from={ref('sft')}"],
        "rl": [*chain.argv["rl"], f"init_from={ref('sft')}", f"rlhf.reward_model={ref('rm')}"],
    }


def _finished(stage: str, argv: list[str], dirs: dict, records: list[dict]) -> Path | None:
    """The finished run of a stage whose inputs exist (None when they do not yet)."""

    needs = {"pretrain": (), "sft": ("pretrain",), "rm": ("sft",), "rl": ("sft", "rm")}[stage]
    if any(dirs.get(n) is None for n in needs):
        return None
    return find_finished(records, compose(argv), dirs.get(needs[0]) if needs else None)


def missing_data(chain: RLChain) -> list[str]:
    """The later stages whose data has no path."""
    return [s for s in LATER if not any(a.startswith("data.path=") for a in chain.argv[s])]


def plan(chain: RLChain, records: list[dict]) -> str:
    """The dry-run listing of one chain: each stage's command and whether it is reused."""
    dirs: dict = {}
    lines = [f"# {chain.label}"]
    for i, stage in enumerate(STAGES):
        argv = with_inits(chain, dirs)[stage]
        dirs[stage] = _finished(stage, argv, dirs, records)
        note = f"   # reuse {dirs[stage]}" if dirs[stage] else (f"   # after [{STAGES[i - 1]}]" if i else "")
        lines.append(f"[{stage}]{' ' * (9 - len(stage))}mixbench run {' '.join(shlex.quote(a) for a in argv)}{note}")
    if missing_data(chain):
        lines.append("           !! add the data of " + " ".join(f"{s}:data.path=..." for s in missing_data(chain)))
    return "\n".join(lines) + "\n"


def run_chain(chain: RLChain, records: list[dict], subprocesses: bool, resume: bool, outcomes: list, total: int) -> dict | None:
    """Run the stages of ``chain`` that are not finished yet; the ReMax record or None."""
    import json

    extra = ["resume=auto"] if resume else []
    for stage in STAGES:
        argv = with_inits(chain, chain.dirs)[stage]
        chain.dirs[stage] = _finished(stage, argv, chain.dirs, records) or _train([*argv, *extra], subprocesses, outcomes, total)
        if chain.dirs[stage] is None:
            return None
    return json.loads((chain.dirs["rl"] / "record.json").read_text())


def reproduce_rlhf(
    name: str,
    scale: str,
    seeds: tuple[int, ...],
    extra: tuple[str, ...],
    dry_run: bool,
    jobs: int = 1,
    resume: bool = False,
    only: tuple[str, ...] = (),
) -> list | None:
    """``mixbench reproduce <rlhf grid>``: list (``dry_run``) or run every chain (``jobs`` at a time, as subprocesses when
    more than one; ``only``: chains whose pretraining arguments include all these items); prints the table."""

    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    todo = [c for c in chains(name, scale, seeds, extra) if all(item in c.argv["pretrain"] for item in only)]
    if not todo:
        raise ConfigError(f"--only {' '.join(only)} matches no chain of {name}; see mixbench reproduce {name} --dry-run")
    results_dir = compose(todo[0].argv["pretrain"]).results_dir
    records = load_records(results_dir)[0] if Path(results_dir).is_dir() else []
    if dry_run:
        sys.stdout.write("".join(plan(c, records) for c in todo))
        return None
    missing = sorted({s for c in todo for s in missing_data(c)})
    if missing:
        raise ConfigError(
            "the RLHF stages need their data: add "
            + " ".join(f"{s}:data.path=..." for s in missing)
            + " (e.g. the commonsense train sets with data.stage_split=4,3,3 for each)"
        )
    outcomes: list = []
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda c: run_chain(c, records, jobs > 1, resume, outcomes, len(STAGES) * len(todo)), todo))
    sys.stdout.write(rlhf_table([r for r in done if r is not None], paper_numbers(name) if scale == "paper" else {}))
    return [o for o in outcomes if o is not None]


# --------------------------------------------------------------------------- tables


def paper_numbers(name: str, root=None) -> dict:
    """``{(model, norm label): paper value}`` of a grid's paper runs."""
    return {(model, label): run.paper for _, model, label, run, _ in paper_rows(name, "rl", [], root)}


def _reward_model_accuracy(records: list[dict], results_dir: Path | None) -> str:
    """Held-out pairwise accuracy (%) of the reward models the records optimised (each once), mean ± std over them."""
    import json

    values = []
    for source in dict.fromkeys((r.get("reward_model") or {}).get("source") for r in records):  # each reward model once
        path = _pretrain_record({"init_from": {"source": source}}, results_dir) if source else None
        if path is not None:
            value = json.loads(path.read_text()).get("metrics", {}).get("val/accuracy")
            if isinstance(value, (int, float)):
                values.append(value)
    mean, std = mean_std(values)
    return "–" if mean is None else f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else "") + f" (n={len(values)})"


def _gain_view(record: dict) -> dict | None:
    """``record`` seen through its ReMax gain, ``final_reward − initial_reward``: the same reward model scores the same
    held-out prompts before and after ReMax, so the reward model's offset (which differs from chain to chain) cancels."""
    metrics = record.get("metrics", {})
    final, initial = metrics.get("val/final_reward"), metrics.get("val/initial_reward")
    return None if final is None or initial is None else as_primary(record, "val/remax_gain", final - initial)


def _delta(cell: Cell, base: Cell | None) -> str:
    """``cell − base``: the difference of means and its 95 % Welch interval ("–" without 2 values a side)."""
    if base is None or base is cell or len(cell.values) < 2 or len(base.values) < 2:
        return "–"
    i = welch_interval(cell.values, base.values)
    return f"{i.diff:+.3f} [{i.low:+.3f}, {i.high:+.3f}]".replace("-", "−")  # the minus sign of mixbench table


def rlhf_table(records: list[dict], paper: dict, baseline: str = "pre", results_dir: Path | None = None) -> str:
    """A Markdown table of ReMax records: per model label · norm · scale the final reward (mean ± std over seeds) and the
    95 % Welch interval of its difference from the ``baseline`` placement; the same reward before ReMax (the SFT
    policy); the ReMax gain (final − before, within each chain) and its interval against the baseline's gain; the reward
    models' held-out accuracy; and the paper's number where ``paper`` has one (``{(model, norm label): value}``, paper
    scale only).  Each chain trains its own reward model, whose offset moves both rewards: the gain is free of it."""

    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((model_label(r), r["norm"]["label"], r["scale"]), []).append(r)
    cells = {key: Cell.from_records(recs) for key, recs in groups.items()}
    gains = {key: Cell.from_records([v for r in recs if (v := _gain_view(r)) is not None]) for key, recs in groups.items()}
    lines = [
        f"| model · norm · scale | final reward | Δ vs {baseline} (95 % Welch CI) | reward before ReMax | "
        f"ReMax gain (final − before) | gain Δ vs {baseline} (95 % Welch CI) | RM held-out accuracy (%) | paper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, cell in cells.items():
        model, norm, scale = key
        base = next((k for k in cells if k[0] == model and k[2] == scale and k[1].startswith(baseline)), None)
        value = paper.get((groups[key][0]["model"]["name"], norm)) if scale == "paper" else None
        initial = Cell.from_records([v for r in groups[key] if (v := _view(r, "val/initial_reward", 1.0)) is not None])
        lines.append(
            f"| {model} · {norm} · {scale} | {cell.summary(3) or '–'} | {_delta(cell, cells.get(base))} | "
            f"{initial.summary(3) or '–'} | {gains[key].summary(3) or '–'} | {_delta(gains[key], gains.get(base))} | "
            f"{_reward_model_accuracy(groups[key], results_dir)} | {value if value is not None else '–'} |"
        )
    return "\n".join(lines) + "\n"


def paper_comparison(name: str, records: list[dict], root=None) -> tuple[list[str], list[str], dict]:
    """``mixbench table --paper <rlhf grid>``: rows ``<model> · <norm>``, one column (final reward), cells (ours, paper)."""

    rows = paper_rows(name, "rl", records, root)
    return (
        [row for row, *_ in rows],
        ["final reward"],
        {(row, "final reward"): (Cell.from_records(matching), run.paper) for row, _, _, run, matching in rows},
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m mixbench.grids.rlhf --results-dir DIR [--grid table3] [--scale proxy] [--out FILE]``: the table."""
    import argparse

    parser = argparse.ArgumentParser(description="RLHF results (ReMax records) as a Markdown table")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--grid", default="table3")
    parser.add_argument("--scale", default=None, help="only records of this scale (paper, proxy, embedded)")
    parser.add_argument("--baseline", default="pre")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    spec = grid(args.grid)
    records = [
        r
        for r in load_records(args.results_dir)[0]
        if r["task"] == spec["stages"]["rl"]["task"] and (args.scale is None or r["scale"] == args.scale)
    ]
    text = f"{spec['title']}: ours, val/final_reward (mean ± std over seeds)\n\n" + rlhf_table(
        records, paper_numbers(args.grid), args.baseline, Path(args.results_dir)
    )
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
