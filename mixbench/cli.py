"""Command line: ``mixbench run | table | list``."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .errors import MixbenchError

log = logging.getLogger("mixbench")
USER_ERRORS = (MixbenchError, FileNotFoundError)


def cmd_run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from .config import compose

    cfg = compose(args.overrides)
    if args.print_config:
        sys.stdout.write(OmegaConf.to_yaml(cfg))
        return 0
    from .train import run

    record = run(cfg)
    pm = record["primary_metric"]
    log.info("%s: %s = %s on %s (%s, %.0f s)", record["status"], pm["name"],
             f"{pm['value']:.4g}" if pm["value"] is not None else "n/a", record["dataset"].get("label", record["dataset"]["name"]),
             record["norm"]["label"], record["wall_time_s"])
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    from .results import aggregate, load_records, render, rich_table

    records, problems = load_records(args.results_dir)
    for problem in problems:
        log.warning("skipped unreadable record: %s", problem)
    if args.paper:
        from .reproduce import paper_comparison, render_comparison

        text = render_comparison(args.paper, *paper_comparison(args.paper, records), fmt="csv" if args.format == "csv" else "md")
        if args.out:
            Path(args.out).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if not records:
        log.warning("no result records under %s; create some with `mixbench run task=...`", args.results_dir)
        return 0
    table = aggregate(records)
    if args.format == "rich":
        from rich.console import Console

        console = Console(record=args.out is not None)
        console.print(rich_table(table))
        if args.out:
            Path(args.out).write_text(console.export_text())
        return 0
    text = render(table, args.format)
    if args.out:
        Path(args.out).write_text(text)
        log.info("wrote %s", args.out)
    else:
        sys.stdout.write(text)
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from .reproduce import reproduce

    seeds = tuple(range(args.seeds)) if args.seeds else (0,)
    records = reproduce(args.table, args.scale, seeds, tuple(args.overrides), args.dry_run)
    if records:
        counts = {s: sum(r["status"] == s for r in records) for s in ("completed", "diverged", "failed")}
        log.info("%s (%s scale): %s; see `mixbench table%s`", args.table, args.scale, counts, f" --paper {args.table}" if args.scale == "paper" else "")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .config import group_choices
    from .data import list_datamodules
    from .models import list_models, model_family
    from .project import project_root
    from .tasks import discover_tasks

    root = project_root()
    console = Console()
    tasks = Table(title="tasks (task=...)")
    for col in ("task", "family", "default model", "default data", "primary metric"):
        tasks.add_column(col, no_wrap=True)
    for t in discover_tasks(root).values():
        pm = t.primary_metric
        tasks.add_row(t.name, t.family, t.model, t.data, f"{pm.name} {'↑' if pm.higher_is_better else '↓'}")
    console.print(tasks)
    console.print("[bold]norms[/] (norm=...): " + ", ".join(group_choices("norm", root)))
    console.print("[bold]models[/] (model=...): " + ", ".join(f"{m} ({model_family(m)})" for m in list_models()))
    console.print("[bold]datasets[/] (data=...): " + ", ".join(group_choices("data", root)))
    console.print("[bold]data loaders[/] (data.loader=...): " + ", ".join(list_datamodules()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mixbench", description="Where should the normalization sit in a transformer block?")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train + evaluate one configuration, write one result record",
                         description="mixbench run task=NAME [norm=NAME] [model=NAME] [data=NAME] [key=value ...]")
    run.add_argument("overrides", nargs="*", metavar="key=value")
    run.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    run.set_defaults(func=cmd_run)
    table = sub.add_parser("table", help="aggregate all result records into a comparison table")
    table.add_argument("--results-dir", default="results")
    table.add_argument("--format", choices=("rich", "md", "csv", "latex"), default="rich")
    table.add_argument("--out", help="write the table to this file")
    table.add_argument("--paper", metavar="TABLE", help="compare paper-scale records with the paper's numbers of TABLE (e.g. table1)")
    table.set_defaults(func=cmd_table)
    rep = sub.add_parser("reproduce", help="run one of the paper's grids (table1, table4, table5, table6)",
                         description="mixbench reproduce TABLE [--scale paper|proxy] [--dry-run] [--seeds N] [key=value ...]")
    rep.add_argument("table")
    rep.add_argument("overrides", nargs="*", metavar="key=value", help="applied to every run, e.g. data.path=... results_dir=...")
    rep.add_argument("--scale", choices=("paper", "proxy"), default="paper")
    rep.add_argument("--seeds", type=int, default=1, help="run seeds 0..N-1")
    rep.add_argument("--dry-run", action="store_true", help="list the runs, run nothing")
    rep.set_defaults(func=cmd_reproduce)
    lst = sub.add_parser("list", help="show tasks, norms, models and datasets")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    from rich.logging import RichHandler

    logging.basicConfig(level=logging.INFO, format="%(message)s", datefmt="[%X]", handlers=[RichHandler(show_path=False)])
    logging.getLogger("lightning.pytorch").propagate = False  # Lightning prints its own messages
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)  # key=value overrides may follow --options
    if extra and (not hasattr(args, "overrides") or any("=" not in e for e in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    try:
        return args.func(args)
    except USER_ERRORS as err:
        log.error("%s", err)
        return 2


if __name__ == "__main__":
    sys.exit(main())
