"""Command line: ``mixbench run | table | list``."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .errors import ConfigError, MixbenchError

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
    records = reproduce(args.table, args.scale, seeds, tuple(args.overrides), args.dry_run, args.jobs)
    if records:
        counts = {s: sum(r["status"] == s for r in records) for s in ("completed", "diverged", "failed")}
        log.info("%s (%s scale): %s; see `mixbench table%s`", args.table, args.scale, counts, f" --paper {args.table}" if args.scale == "paper" else "")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from .analysis import plots, runner

    if args.run and args.compare:
        raise ConfigError("give either --run DIR or --compare DIR DIR ..., not both")
    if args.what == "training-grad-norm":  # what the runs logged while training; no model needed
        run_dirs = [args.run] if args.run else args.compare
        if not run_dirs:
            raise ConfigError("training-grad-norm reads runs' gradnorm.json: give --run DIR or --compare DIR DIR ...")
        runs = [runner.training_grad_norms(d, args.steps) for d in run_dirs]
        figure = plots.training_grad_norm_figure(runs, f"per-block gradient norm during training ({runs[0]['dataset']})")
        runner.write(Path(args.run) / "analysis" if args.run else Path(args.out), "training_grad_norm", runs, figure)
        return 0
    if args.run or args.compare:
        if args.overrides:
            raise ConfigError("key=value settings describe a model at initialization; with --run/--compare the runs' own configs are used")
        subjects = [runner.subject_from_run(d) for d in ([args.run] if args.run else args.compare)]
        out_dir = subjects[0].out_dir if args.run else Path(args.out)
    else:  # at initialization: task=... norm=a,b,c ...
        norms = next((a.split("=", 1)[1] for a in args.overrides if a.startswith("norm=")), "pre").split(",")
        rest = [a for a in args.overrides if not a.startswith("norm=")]
        subjects = [runner.subject_at_init([*rest, f"norm={n}"], Path(args.out)) for n in norms]
        out_dir = Path(args.out)
    data = runner.describe_data(subjects[0])
    if args.what == "grad-norm":
        profiles = [runner.grad_norm_profile(s, args.batches) for s in subjects]
        figure = plots.grad_norm_figure(profiles, f"per-block gradient norm, {args.batches} batches of {data['dataset']}")
    elif args.what == "angular":
        profiles = [runner.angular_profile(s, args.tokens) for s in subjects]
        figure = plots.angular_figure(profiles, f"angular distance between block inputs on {data['dataset']}")
    else:
        profiles = [runner.prune_profile(s, args.limit_val_batches) for s in subjects]
        figure = plots.prune_figure(profiles, f"performance drop of removing one block ({data['dataset']})")
    for profile in profiles:
        profile.update(data)
    runner.write(out_dir, args.what.replace("-", "_"), profiles, figure)
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
    rep.add_argument("--jobs", type=int, default=1, help="runs at a time, as subprocesses sharing the machine (small proxy runs on one GPU)")
    rep.set_defaults(func=cmd_reproduce)
    ana = sub.add_parser("analyze", help="per-block gradient norms, angular distance, layer-pruning drop",
                         description="mixbench analyze {grad-norm,angular,prune} (--run DIR | --compare DIR... | task=... norm=pre,post,mix ...); "
                                     "mixbench analyze training-grad-norm (--run DIR | --compare DIR...) [--steps 0 100 1000 -1]")
    ana.add_argument("what", choices=("grad-norm", "angular", "prune", "training-grad-norm"))
    ana.add_argument("overrides", nargs="*", metavar="key=value", help="a model at initialization: task=..., norm=a,b,c, ...")
    ana.add_argument("--run", help="a finished run folder (writes into <run>/analysis)")
    ana.add_argument("--compare", nargs="+", metavar="DIR", help="several run folders, overlaid in one figure")
    ana.add_argument("--out", default="results/analysis", help="output folder for --compare and initialization analyses")
    ana.add_argument("--batches", type=int, default=8, help="grad-norm: batches averaged")
    ana.add_argument("--steps", type=int, nargs="+", default=[0, 100, 1000, -1],
                     help="training-grad-norm: the logged steps to show (nearest recorded; -1 = last)")
    ana.add_argument("--tokens", type=int, default=262_144, help="angular: token budget (the paper: 256K)")
    ana.add_argument("--limit-val-batches", type=int, default=None, help="prune: evaluate on this many validation batches")
    ana.set_defaults(func=cmd_analyze)
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
