"""Command line: ``mixbench run | table | list``."""

from __future__ import annotations

import argparse
import errno
import functools
import importlib
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.constants import ANGULAR_TOKENS, VERSION
from ..core.errors import INTERRUPTED_EXIT, RESUMABLE_EXIT, USER_ERRORS, ConfigError, DiskFull, one_line
from ..core.logs import configure_logging
from ..core.run_files import ANALYSIS_DIR
from ..core.storage import disk_full_under, save_figure
from ..core.text import printable
from .eval import add_eval_commands

log = logging.getLogger("mixbench")
LAUNCHERS = ("local", "slurm")  # --launcher: mixbench.grids.runner.run_many
# commands that build configs or models: the project's own code (placements, data loaders, families) is imported first
PLUGIN_COMMANDS = ("run", "reproduce", "search", "analyze", "eval", "export", "list")


def stops_resumably(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``command`` (one that runs a grid), whose exit status becomes 75, with that run's one line, when one of its runs
    stopped to be resumed (preempted, a full disk): the grid stops there, and the same command with --resume goes on."""

    @functools.wraps(command)
    def stopping(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except Exception as err:
            # the stop types are looked up only where a run was reached: a command stopped before (a config error)
            # never imports Lightning (mixbench.training.run's imports) for this
            running = sys.modules.get("mixbench.training.run")
            if running is None or not isinstance(err, running.RESUMABLE_STOPS):
                raise
            return running.report_stop(err)

    return stopping


@stops_resumably
def cmd_run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from ..data.sources import check_local_sources
    from ..training.config import compose, replay

    if args.multirun:
        if args.config or args.print_config:
            raise ConfigError("-m (a sweep) cannot be combined with --config or --print-config")
        from ..grids.sweep_args import expand_sweep

        argvs = expand_sweep(args.overrides)
        for argv in argvs:  # a configuration error or missing data in any run, before the runner (and Lightning) loads
            check_local_sources(compose(argv).data)
        from ..grids.runner import run_many, summarize

        outcomes = run_many(argvs, args.jobs, args.resume, args.launcher)
        return summarize(outcomes, "sweep")
    if args.jobs != 1 or args.resume or args.launcher != "local":
        raise ConfigError("--jobs, --resume and --launcher belong to sweeps (-m); a single run resumes with resume=auto")
    cfg = replay(args.config, args.overrides) if args.config else compose(args.overrides)
    if args.print_config:
        sys.stdout.write(OmegaConf.to_yaml(cfg))
        return 0
    check_local_sources(cfg.data)  # a missing data path named before the training stack (Lightning) loads
    from ..results.provenance import process_age_s
    from ..training.run import run_and_report

    return run_and_report(cfg, ["mixbench", *args.command_line], before_run_s=process_age_s())


def budget_fractions(text: str) -> list[float]:
    """``--at 0.25,0.5,1.0`` → [0.25, 0.5, 1.0] (each in (0, 1])."""
    try:
        fractions = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions such as 0.25,0.5,1.0, got {text!r}") from None
    if not fractions or any(not 0.0 < f <= 1.0 for f in fractions):
        raise argparse.ArgumentTypeError(f"budget fractions must be in (0, 1], got {text!r}")
    return fractions


def cmd_table(args: argparse.Namespace) -> int:
    from ..results.render import print_rich, render, tidy_csv
    from ..results.sources import records_of
    from ..results.table import aggregate, budget_views

    records, folders = records_of(args.results_dir)
    if args.best_over and (args.paper or args.format == "tidy"):
        raise ConfigError(
            f"--best-over picks one cell per norm and column; {'--paper' if args.paper else '--format tidy'} has no such cells "
            "(tidy lists every run: use --format csv, whose best_value column holds the chosen value)"
        )
    if args.paper:
        from ..grids.reproduce import paper_comparison, render_comparison

        text = render_comparison(args.paper, *paper_comparison(args.paper, records), fmt="csv" if args.format in ("csv", "tidy") else "md")
        if args.out:
            Path(args.out).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if not records:
        log.warning("no result records under %s; create some with `mixbench run task=...`", folders)
        return 0
    if args.at:
        records = budget_views(records, args.at)
    if args.format == "tidy":
        text = tidy_csv(records)
    else:
        table = aggregate(records, baseline=args.baseline, confidence=args.confidence, best_over=args.best_over)
        if args.format == "rich":
            from rich.console import Console

            console = Console(record=args.out is not None, width=args.width)
            print_rich(table, console)
            if args.out:
                Path(args.out).write_text(console.export_text())
            return 0
        text = render(table, args.format)
    text = printable(text)  # names from records: no terminal escapes (CSV cells: also no formulas, render._csv)
    if args.out:
        Path(args.out).write_text(text)
        log.info("wrote %s", args.out)
    else:
        sys.stdout.write(text)
    return 0


def seed_list(text: str) -> tuple[int, ...]:
    """``--seeds``: ``N`` → seeds 0..N-1; ``0,2`` → seeds 0 and 2; ``2,`` → seed 2 alone."""
    try:
        seeds = tuple(int(s) for s in text.split(",") if s) if "," in text else tuple(range(int(text)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes a count N or a comma-separated list of seeds, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds needs at least one seed, none negative; got {text!r}")
    return seeds


@stops_resumably
def cmd_reproduce(args: argparse.Namespace) -> int:
    from ..grids.paper import grid_scales
    from ..grids.reproduce import reproduce
    from ..grids.runner import summarize

    scale = args.scale or grid_scales(args.table)[0]
    if args.data_elsewhere and not args.dry_run:
        raise ConfigError("--data-elsewhere belongs to --dry-run (a plan made here for runs on another machine)")
    settings = (tuple(args.overrides), args.dry_run, args.jobs, args.resume, tuple(args.only), args.launcher, args.best_from)
    outcomes = reproduce(args.table, scale, args.seeds, *settings, analyze=args.analyze, data_elsewhere=args.data_elsewhere)
    if outcomes is None:  # --dry-run
        return 0
    status = summarize(outcomes, f"{args.table} ({scale} scale)")
    log.info("see `mixbench table%s`", f" --paper {args.table}" if scale == "paper" else "")
    return status


def cmd_search(args: argparse.Namespace) -> int:
    from ..grids.search import Settings, adopt_reused, confirmation_runs, optuna_module, search, split_confirmation

    optuna_module()  # one clear error when Optuna is missing, before anything is written
    modes = [m for m in ("confirm", "report") if getattr(args, m)]
    if len(modes) > 1 or (modes and (args.study or args.overrides)):
        raise ConfigError("give one of --study NAME [key=value ...] (search), --confirm NAME or --report NAME")
    if (args.reuse_from or args.reuse_only) and not args.confirm:
        raise ConfigError("--reuse-from and --reuse-only belong to --confirm NAME")
    if args.reuse_only and not args.reuse_from:
        raise ConfigError("--reuse-only copies the runs --reuse-from DIR finds: give --reuse-from DIR")
    if args.report:
        from ..grids.search_report import report

        sys.stdout.write(report(args.results_dir, args.report, args.confidence))
        return 0
    if args.confirm:
        from ..grids.runner import run_many, summarize

        argvs = confirmation_runs(args.results_dir, args.confirm, args.seeds)
        done, reused, todo = split_confirmation(args.results_dir, args.confirm, argvs, args.reuse_from)
        if args.dry_run:
            for i, record in done.items():
                sys.stdout.write(f"# done {Path(record['_path']).parent}: mixbench run {shlex.join(argvs[i])}\n")
            for i, record in reused.items():
                sys.stdout.write(f"# reuse {Path(record['_path']).parent} (same settings and seed): mixbench run {shlex.join(argvs[i])}\n")
            sys.stdout.write("".join("mixbench run " + shlex.join(argv) + "\n" for argv in todo))
            return 0
        adopt_reused(args.results_dir, args.confirm, list(reused.values()))
        if args.reuse_only:
            return 0
        return summarize(run_many(todo, args.jobs), f"confirmation of {args.confirm}")
    if not args.study:
        raise ConfigError("mixbench search needs --study NAME (or --confirm NAME / --report NAME)")
    kinds = tuple(k for k in (args.kinds or "").split(",") if k)
    lrs = tuple(float(lr) for lr in (args.lrs or "").split(",") if lr)
    settings = Settings(args.space, kinds, tuple(args.overrides), args.pruner, args.min_steps, args.reduction_factor, lrs)
    if args.dry_run:
        from ..grids.search import open_plan

        sys.stdout.write(open_plan(settings))
        return 0
    search(args.results_dir, args.study, settings, args.trials, args.max_trials)
    log.info("see mixbench search --report %s%s", args.study, f" --results-dir {args.results_dir}" if args.results_dir != "results" else "")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..analysis import plots, runner

    if args.run and args.compare:
        raise ConfigError("give either --run DIR or --compare DIR DIR ..., not both")
    if args.what == "training-grad-norm":  # what the runs logged while training; no model needed
        run_dirs = [args.run] if args.run else args.compare
        if not run_dirs:
            raise ConfigError("training-grad-norm reads runs' gradnorm.json: give --run DIR or --compare DIR DIR ...")
        runs = [runner.training_grad_norms(d, args.steps) for d in run_dirs]
        figure = plots.training_grad_norm_figure(runs, f"per-block gradient norm during training ({runs[0]['dataset']})")
        runner.write(Path(args.run) / ANALYSIS_DIR if args.run else Path(args.out), "training_grad_norm", runs, figure)
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
    runner.measure(args.what, subjects, out_dir, batches=args.batches, tokens=args.tokens, limit_val_batches=args.limit_val_batches)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    if args.baseline is not None and args.what != "ladder":
        raise ConfigError(f"--baseline belongs to mixbench plot ladder, not plot {args.what}")
    if args.what == "ladder":
        return plot_ladder(args)
    if args.what == "lr":
        return plot_lr(args)
    from ..results.curves import curves_figure

    if not args.compare:
        raise ConfigError("mixbench plot curves needs --compare RUN [RUN ...] (run folders)")
    out = Path(args.out or "results/analysis/curves.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(curves_figure(args.compare, args.metric), out, dpi=120)
    log.info("wrote %s", out)
    return 0


def plot_lr(args: argparse.Namespace) -> int:
    """``mixbench plot lr``: the metric against the learning rate, one PNG per table column."""
    from ..results.lr_curves import write_lr_figures
    from ..results.sources import records_of

    if args.compare:
        raise ConfigError("mixbench plot lr reads the records under --results-dir DIR; --compare belongs to plot curves")
    records, folders = records_of(args.results_dir)
    if not records:
        raise ConfigError(f"no result records under {folders}: nothing to plot")
    for path in write_lr_figures(records, args.out or "results/analysis/lr_curves.png", args.over, args.metric):
        log.info("wrote %s", path)
    return 0


def plot_ladder(args: argparse.Namespace) -> int:
    """``mixbench plot ladder``: per family, Δ and the best lr by model size, and their table."""
    from ..results.ladder_figures import KEY, write_ladder
    from ..results.sources import default_runs_dir, records_of

    for given, option in ((args.compare, "--compare belongs to plot curves"), (args.metric, "--metric belongs to plot lr")):
        if given:
            raise ConfigError(f"mixbench plot ladder tables each record's primary metric at its best {KEY}; {option}")
    if args.over != KEY:
        raise ConfigError(f"mixbench plot ladder picks each placement's best {KEY}; --over belongs to plot lr")
    records, folders = records_of(args.results_dir)
    if not records:
        raise ConfigError(f"no result records under {folders}: nothing to plot")
    first = (args.results_dir or [str(default_runs_dir())])[0]
    # --analyze writes <results_dir>/analysis: beside the default runs folder (<results_dir>/runs), not inside it
    analyses = Path(args.results_dir[0]) if args.results_dir else default_runs_dir().parent
    out = args.out or first
    for path in write_ladder(records, out, args.baseline or "pre", analysis_dir=analyses / ANALYSIS_DIR):
        log.info("wrote %s", path)
    return 0


def cmd_reclassify(args: argparse.Namespace) -> int:
    from ..training.status import reclassify_records

    changed, problems = reclassify_records(args.results_dir, dry_run=args.dry_run)
    for problem in problems:
        log.warning("left unreadable record untouched: %s", printable(problem))
    for path, old, new in changed:
        sys.stdout.write(printable(f"{old} -> {new}\t{path}") + "\n")
    log.info("%d record(s) %s", len(changed), "would change" if args.dry_run else "re-classified")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..core.configs import load_group
    from ..core.families import get_family, list_families
    from ..core.project import config_choices, project_roots
    from ..core.tasks import discover_tasks
    from ..data import list_datamodules
    from ..layers.placements import get_placement

    def table(title: str, headers: tuple[str, ...], rows: list[tuple[str, ...]], names: int) -> Table:
        """Light lines and no edge padding (80 columns hold the stock names); the first ``names`` columns hold names,
        never cut: they keep their full width, the others wrap."""
        shown = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for i, header in enumerate(headers):
            width = max(len(header), *(len(row[i]) for row in rows)) if rows else None
            shown.add_column(header, no_wrap=i < names, min_width=width if i < names else None)
        for row in rows:
            shown.add_row(*row)
        return shown

    console = Console()
    task_rows = [
        (t.name, t.family, t.model, t.data, f"{t.primary_metric.name} {'↑' if t.primary_metric.higher_is_better else '↓'}")
        for t in discover_tasks().values()
    ]
    console.print(table("tasks (task=...)", ("task", "family", "model", "data", "primary metric"), task_rows, names=4))
    norm_rows = []
    for choice in config_choices("norm"):
        settings = load_group("norm", choice)
        placement = settings.get("placement", "pre")
        kind = f" (kind={settings.kind})" if settings.get("kind") else ""
        norm_rows.append((choice, placement + kind, escape(get_placement(placement).summary)))
    console.print(table("norms (norm=...)", ("norm", "placement", "what it computes"), norm_rows, names=2))
    for name in list_families():
        family = get_family(name)
        console.print(f"[bold]models[/] of family [bold]{name}[/] ({family.description}): " + ", ".join(family.models))
    console.print("[bold]datasets[/] (data=...): " + ", ".join(config_choices("data")))
    console.print("[bold]data loaders[/] (data.loader=...): " + ", ".join(list_datamodules()))
    console.print("[dim]configs and tasks from: " + ", ".join(map(str, project_roots())) + "[/]")
    return 0


Raw = argparse.RawDescriptionHelpFormatter


class Parser(argparse.ArgumentParser):
    """An argument parser whose epilog may be a function, called when the help is shown: building the parser of every
    command imports nothing that a command's help needs (``mixbench --help`` answers at once)."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()


class LazyChoices(Sequence):
    """The choices of an option, the sequence ``"module:attr"``, imported when argparse first checks a value or shows the
    option's help.  Set them on the action after ``add_argument`` (which would otherwise list them at once)."""

    def __init__(self, target: str):
        self.target = target

    @functools.cached_property
    def values(self) -> tuple:
        module, attr = self.target.split(":")
        return tuple(getattr(importlib.import_module(module), attr))

    def __getitem__(self, index):
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)


def run_epilog() -> str:
    """The choices of every group, and examples (shown by ``mixbench run --help``)."""
    try:
        from ..core.families import list_models
        from ..core.project import config_choices
        from ..core.tasks import discover_tasks

        choices = (
            f"choices:\n  task:  {', '.join(discover_tasks())}\n  norm:  {', '.join(config_choices('norm'))}\n"
            f"  model: {', '.join(list_models())}\n  data:  {', '.join(config_choices('data'))}\n"
        )
    except Exception as err:  # help must still print when the project folder is broken
        choices = f"(choices unavailable: {err})\n"
    return (
        choices + "\nexamples:\n  mixbench run task=vit_small norm=mix norm.alpha=0.5 seed=1\n"
        "  mixbench run -m task=llama_lm norm=pre,post,mix seed=0,1,2 --jobs 3\n"
        "  mixbench run --config results/runs/.../config.yaml trainer.max_steps=500\n"
        "  mixbench run task=llama_lm run_dir=runs/a resume=auto      # continue after a crash\n"
        "  mixbench run -m task=vit_small seed=0,1,2 --launcher slurm slurm.partition=gpu slurm.gpus_per_node=1\n"
    )


def reproduce_epilog() -> str:
    try:
        from ..grids.paper import load_grids

        tables = ", ".join(load_grids())
    except Exception as err:  # help must still print when the project folder is broken
        tables = f"(unavailable: {err})"
    return (
        f"tables: {tables}\n\nexamples:\n  mixbench reproduce table1 --dry-run\n"
        "  mixbench reproduce table4 --scale proxy --seeds 3 --jobs 6 --resume data.path=cifar10_bigbench.npz\n"
        "  mixbench reproduce table1 --launcher slurm --resume slurm.partition=gpu slurm.gpus_per_node=8 trainer.devices=8\n"
    )


def add_search_command(sub) -> None:
    srch = sub.add_parser(
        "search",
        help="search per-block norm plans (Optuna, multi-fidelity), confirm the best with fresh seeds",
        formatter_class=Raw,
        description="mixbench search --study NAME --space alpha|plan|blocks [--trials N] [key=value ...] | "
        "--confirm NAME [--seeds N] | --report NAME",
        epilog="examples:\n  mixbench search --study k24 --space alpha --trials 30 --min-steps 190 task=c4_llama_71m "
        "model.num_layers=24 ...\n"
        "  mixbench search --study tails --space plan --kinds sandwich,lns,peri --trials 40 --min-steps 190 ...\n"
        "  mixbench search --confirm k24 --seeds 3 --jobs 3\n  mixbench search --report k24\n"
        'Needs Optuna: pip install -e ".[search]"\n',
    )
    srch.add_argument("overrides", nargs="*", metavar="key=value", help="settings of every trial, as for mixbench run")
    srch.add_argument("--study", help="the study's name: <results-dir>/search/NAME/ (an existing study resumes)")
    space = srch.add_argument(
        "--space",
        default="alpha",
        help="alpha: Mix-LN's num_post k in 0..L; plan: k post, then pre, the last j of a --kinds kind; "
        "blocks: every per-block list over --kinds (small L)",
    )
    space.choices = LazyChoices("mixbench.grids.search_space:SPACES")
    srch.add_argument("--kinds", help="comma-separated block placements, e.g. sandwich,lns,peri (plan) or pre,post (blocks)")
    srch.add_argument("--trials", type=int, default=20, help="trials this process runs (default 20)")
    srch.add_argument(
        "--max-trials",
        type=int,
        help="stop once the study holds this many finished trials (all processes "
        "together; a re-run after an interruption tops the study up to it)",
    )
    pruner = srch.add_argument("--pruner", default="halving", help="successive halving (default), Hyperband or none")
    pruner.choices = LazyChoices("mixbench.grids.search_space:PRUNERS")
    srch.add_argument("--min-steps", type=int, help="the first rung in optimizer steps (e.g. the first validation step)")
    srch.add_argument("--reduction-factor", type=int, default=3, help="rungs grow and survivors shrink by this factor (default 3)")
    srch.add_argument(
        "--lrs",
        metavar="LR,LR,...",
        help="search optim.lr beside the plan over these values (e.g. 3e-4,1e-3,3e-3); --confirm then runs the best plan at "
        "its lr and pre / mix each at the study's best lr for its plan",
    )
    srch.add_argument("--confirm", metavar="NAME", help="re-run the study's best plan, pre and mix(α=0.25) with fresh seeds")
    srch.add_argument("--seeds", type=int, default=3, help="--confirm: seeds per arm, none of them the search seed (default 3)")
    srch.add_argument("--jobs", type=int, default=1, help="--confirm: runs at a time, as subprocesses")
    srch.add_argument(
        "--reuse-from",
        action="append",
        metavar="DIR",
        help="--confirm: take finished runs of the same settings and seed from DIR (e.g. results/proxy/placements) "
        "instead of running them again; copied into the study's confirm/reused/ (repeatable)",
    )
    srch.add_argument(
        "--reuse-only", action="store_true", help="--confirm --reuse-from: copy the reusable runs, run nothing (for launchers)"
    )
    srch.add_argument("--report", metavar="NAME", help="print the ranked plans and the confirmation table; write report.md and a plot")
    srch.add_argument("--confidence", type=float, default=0.95, help="--report: level of the Welch intervals")
    srch.add_argument("--results-dir", default="results", help="where studies live (<results-dir>/search/NAME)")
    srch.add_argument(
        "--dry-run", action="store_true", help="check the settings, list the space's plans / the confirmation runs, run nothing"
    )
    srch.set_defaults(func=cmd_search)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mixbench", description="Where should the normalization sit in a transformer block?")
    parser.add_argument("--version", action="version", version=f"mixbench {VERSION}")
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="a project folder whose configs/ and tasks/ override and extend the shipped ones, and whose code (its tasks' "
        "task.py, its plugins.py) registers placements for every command (default: the working directory when it has "
        "configs/, tasks/ or plugins.py)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="train + evaluate one configuration, write one result record",
        formatter_class=Raw,
        description="mixbench run task=NAME [norm=NAME] [model=NAME] [data=NAME] [key=value ...]",
        epilog=run_epilog,
    )
    run.add_argument("overrides", nargs="*", metavar="key=value")
    run.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    run.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="sweep: comma-separated values are axes of a product, e.g. norm=pre,post,mix seed=0,1,2",
    )
    run.add_argument("--jobs", type=int, default=1, help="-m: runs at a time, as subprocesses sharing the machine")
    run.add_argument("--resume", action="store_true", help="-m: skip finished runs, continue interrupted ones (resume=auto)")
    run.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="-m: local (this machine) or slurm (one SLURM job per run through submitit; settings: slurm.*)",
    )
    run.add_argument("--config", metavar="RUN/config.yaml", help="replay a run's resolved config (key=value overrides apply on top)")
    run.set_defaults(func=cmd_run)
    table = sub.add_parser(
        "table",
        help="aggregate all result records into a comparison table",
        formatter_class=Raw,
        epilog="examples:\n  mixbench table --results-dir results/proxy/placements --baseline pre\n"
        "  mixbench table --format csv > table.csv      # numbers only on stdout; logs go to stderr\n"
        "  mixbench table --results-dir results/proxy/lr_sensitivity --best-over optim.lr   # each norm at its best lr\n"
        "  mixbench table --paper table1                # ours next to the paper's numbers\n",
    )
    table.add_argument(
        "--results-dir",
        action="append",
        metavar="DIR",
        help="a folder whose records (record.json, at any depth) are tabled (default: results/runs, where mixbench run "
        "puts your runs; e.g. results/proxy/placements for a committed proxy grid); give it again to table several "
        "folders together, e.g. your runs beside the committed ones: each cell names its folders, each run counts once",
    )
    table.add_argument("--width", type=int, help="the terminal table's width in characters (default: the terminal's)")
    table.add_argument(
        "--format",
        choices=("rich", "md", "csv", "latex", "tidy"),
        default="rich",
        help="rich/md/latex: text cells with a legend; csv: one row per cell, numeric columns "
        "(mean, std, n, n_seeds, diverged, delta, ci_low, ci_high, significant, ...); tidy: one row per run and metric",
    )
    table.add_argument(
        "--baseline",
        default="pre",
        metavar="NORM",
        help="the row each cell is compared with (Δ and Welch's interval): its norm label, or the label "
        "without its parameters (mix → mix(α=0.25)); default: pre",
    )
    table.add_argument("--confidence", type=float, default=0.95, help="level of the Δ confidence intervals (default 0.95)")
    table.add_argument(
        "--at",
        type=budget_fractions,
        metavar="F,F,...",
        help="one column per budget fraction: the metric at these fractions of each run's training budget "
        "(validations inside fit, e.g. --at 0.25,0.5,1.0; 1 = the final validation)",
    )
    table.add_argument(
        "--best-over",
        metavar="KEY",
        help="a config key the runs vary, e.g. optim.lr: its values share a column and each norm is shown at its own best "
        "value (by the mean over finished seeds; ties: more finished seeds, then the smaller value), the value in the cell "
        "(@lr 3e-3), Δ against the baseline at its own best value, and the LR sensitivity S of Wortsman et al. 2023 on "
        "val/loss (docs/results.md); with --at, chosen per budget column",
    )
    table.add_argument("--out", help="write the table to this file")
    table.add_argument("--paper", metavar="TABLE", help="compare paper-scale records with the paper's numbers of TABLE (e.g. table1)")
    table.set_defaults(func=cmd_table)
    rep = sub.add_parser(
        "reproduce",
        help="run one of the paper's grids (table1-table6)",
        formatter_class=Raw,
        description="mixbench reproduce TABLE [--scale paper|proxy] [--dry-run] [--seeds N] [key=value ...]",
        epilog=reproduce_epilog,
    )
    rep.add_argument("table")
    rep.add_argument("overrides", nargs="*", metavar="key=value", help="applied to every run, e.g. data.path=... results_dir=...")
    rep.add_argument(
        "--scale", choices=("paper", "proxy"), help="paper or proxy (default: paper; proxy for grids that have only that scale)"
    )
    rep.add_argument(
        "--seeds",
        type=seed_list,
        default=(0,),
        metavar="N|S,S,...",
        help="N: run seeds 0..N-1; a comma-separated list: run those seeds (0,2: seeds 0 and 2; 2,: seed 2 alone)",
    )
    rep.add_argument(
        "--dry-run",
        action="store_true",
        help="list the runs (stdout), run nothing; then their count, GPU time and data (stderr): exit 2 naming data not here",
    )
    rep.add_argument(
        "--data-elsewhere",
        action="store_true",
        help="with --dry-run: the runs will read their data on another machine (a GPU lease): data missing here is a warning",
    )
    rep.add_argument(
        "--jobs", type=int, default=1, help="runs at a time, as subprocesses sharing the machine (small proxy runs on one GPU)"
    )
    rep.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run only the grid's runs with this argument (repeatable), e.g. --only model.num_layers=24",
    )
    rep.add_argument(
        "--resume",
        action="store_true",
        help="skip runs whose record is finished, continue interrupted ones from "
        "their newest checkpoint; the exit status is 1 if any run failed; with --dry-run: list only the runs still to train",
    )
    rep.add_argument(
        "--best-from",
        metavar="DIR",
        help="a grid that sweeps a setting (lr_sensitivity): run each placement at the value `mixbench table --best-over` picks "
        "from the runs in DIR (fewest stalled/diverged seeds, then the best mean; e.g. --best-from results/proxy/lr_sensitivity "
        "--seeds 0,1,2 --resume)",
    )
    rep.add_argument(
        "--analyze",
        action="store_true",
        help="a ladder grid (ladder): train its analysis section's placements again at each size's best lr with weights kept "
        "(into <results_dir>_analysis) and measure angular distance and layer-pruning ΔP side by side (<results_dir>/analysis/<task>/)",
    )
    rep.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="local (this machine) or slurm (one SLURM job per run through submitit; settings: slurm.*, e.g. slurm.partition=gpu)",
    )
    rep.set_defaults(func=cmd_reproduce)
    add_search_command(sub)
    ana = sub.add_parser(
        "analyze",
        help="per-block gradient norms, angular distance, layer-pruning drop",
        formatter_class=Raw,
        epilog="examples:\n  mixbench analyze grad-norm task=llama_lm model=llama_71m model.num_layers=24 norm=pre,post,mix\n"
        "  mixbench analyze angular --run results/runs/llama_lm/llama_tiny/mix_alpha=0.25/seed0-...\n"
        "  mixbench analyze prune --compare RUN_A RUN_B --out results/analysis\n",
        description="mixbench analyze {grad-norm,angular,prune} (--run DIR | --compare DIR... | task=... norm=pre,post,mix ...); "
        "mixbench analyze training-grad-norm (--run DIR | --compare DIR...) [--steps 0 100 1000 -1]",
    )
    ana.add_argument("what", choices=("grad-norm", "angular", "prune", "training-grad-norm"))
    ana.add_argument("overrides", nargs="*", metavar="key=value", help="a model at initialization: task=..., norm=a,b,c, ...")
    ana.add_argument("--run", help="a finished run folder (writes into <run>/analysis)")
    ana.add_argument("--compare", nargs="+", metavar="DIR", help="several run folders, overlaid in one figure")
    ana.add_argument("--out", default="results/analysis", help="output folder for --compare and initialization analyses")
    ana.add_argument("--batches", type=int, default=8, help="grad-norm: batches averaged")
    ana.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[0, 100, 1000, -1],
        help="training-grad-norm: the logged steps to show (nearest recorded; -1 = last)",
    )
    ana.add_argument("--tokens", type=int, default=ANGULAR_TOKENS, help="angular: token budget (the paper: 256K)")
    ana.add_argument("--limit-val-batches", type=int, default=None, help="prune: evaluate on this many validation batches")
    ana.set_defaults(func=cmd_analyze)
    plot = sub.add_parser(
        "plot",
        help="training and validation curves of several runs on one figure; the metric against the learning rate; the size ladder",
        formatter_class=Raw,
        description="mixbench plot curves --compare RUN [RUN ...] [--metric val/loss] [--out curves.png]\n"
        "mixbench plot lr [--results-dir DIR] [--over optim.lr] [--metric M] [--out lr_curves.png]\n"
        "mixbench plot ladder [--results-dir DIR ...] [--baseline pre] [--out FOLDER]\n\n"
        "lr: one PNG per column of `mixbench table --best-over optim.lr` (task · model · data): the metric against the lr\n"
        "(log axis), a line per placement at the mean over finished seeds, a band from the min to the max over seeds, a\n"
        "star at each placement's best lr, hollow markers at the bad edge of the axis where no seed finished (▲ diverged,\n"
        "○ stalled, × crashed).  --out DIR/lr_curves.png writes DIR/lr_curves_<slug>.png, the slug being the family (lm,\n"
        "vision) where it has one column, else the family and the model label (and more, as far as needed).\n\n"
        "ladder: per family (lm, vision), the columns of `mixbench table --best-over optim.lr` by model size\n"
        "(model.num_params, log axis): ladder_delta_<family>.png (Δ of the primary metric against --baseline, each\n"
        "placement at its own best lr, Welch band, hollow = 1 finished seed, × on the fails strip = no seed finished at\n"
        "any lr), ladder_best_lr_<family>.png (best lr by size, the lrs tried) and ladder_<family>.md (the table, with\n"
        "the size each placement breaks at), written to --out (default: the first --results-dir).",
        epilog="examples:\n  mixbench plot curves --compare results/runs/llama_lm/llama_tiny/*/seed0-* --out curves.png\n"
        "  mixbench plot lr --results-dir results/proxy/lr_sensitivity --out results/proxy/lr_sensitivity/lr_curves.png\n"
        "  mixbench plot ladder --results-dir results/proxy/ladder\n",
    )
    plot.add_argument("what", choices=("curves", "lr", "ladder"))
    plot.add_argument("--compare", nargs="+", metavar="RUN", help="curves: run folders (their logs/metrics.csv)")
    plot.add_argument(
        "--metric",
        default=None,
        help="curves: validation metric of the right panel; lr: the y axis (default: the runs' primary metric, e.g. val/ppl)",
    )
    plot.add_argument(
        "--results-dir",
        action="append",
        metavar="DIR",
        help="lr, ladder: a folder of records, at any depth (default: results/runs); again for several folders, read as one",
    )
    plot.add_argument(
        "--baseline",
        default=None,
        metavar="NORM",
        help="ladder: the row Δ is taken against, each at its own best lr (default: pre; as in mixbench table)",
    )
    plot.add_argument("--over", default="optim.lr", metavar="KEY", help="lr: the config key on the x axis (default optim.lr)")
    plot.add_argument(
        "--out",
        help="PNG file to write (curves, default results/analysis/curves.png); lr: the name each figure's slug is added "
        "to, FIG_<slug>.png (default results/analysis/lr_curves.png); ladder: the folder to write to (default: the "
        "first --results-dir)",
    )
    plot.set_defaults(func=cmd_plot)
    recl = sub.add_parser(
        "reclassify",
        help="re-derive the status of existing records under the current rules",
        formatter_class=Raw,
        description="mixbench reclassify [--results-dir DIR] [--dry-run]",
        epilog="example:\n  mixbench reclassify --results-dir results --dry-run   # e.g. runs recorded as diverged because they "
        "ended above the unigram floor become stalled or completed\n",
    )
    recl.add_argument("--results-dir", default="results")
    recl.add_argument("--dry-run", action="store_true", help="list the changes, write nothing")
    recl.set_defaults(func=cmd_reclassify)
    add_eval_commands(sub)
    from .status import add_status_command  # light: pure Python and rich

    add_status_command(sub)
    lst = sub.add_parser(
        "list",
        help="show tasks, norms, models and datasets",
        formatter_class=Raw,
        epilog="example:\n  mixbench --project my_project list    # shipped choices plus my_project's configs/ and tasks/\n",
    )
    lst.set_defaults(func=cmd_list)
    return parser


def settings_of(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The command's key=value settings with the ``extra`` arguments argparse left, which must all be key=value: an
    unknown ``--option`` that names a setting fails with the ``key=value`` to write instead (one line, exit 2)."""
    options = [e for e in extra if e.startswith("-")]
    if options:
        from .flags import option_hint

        hint = option_hint(options[0], args.command_line, args.overrides)
        if hint:
            raise ConfigError(hint)
    if options or any("=" not in e for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return [*args.overrides, *extra]


def entry() -> None:
    """The ``mixbench`` program (and ``python -m mixbench.cli``): :func:`main`'s status as the exit status.  After a
    Ctrl-C stopped the command (130), a Ctrl-C pressed again while the process exits (finalizers, the data workers'
    shutdown) is ignored instead of printing a traceback from the middle of the exit."""
    status = main()
    if status == INTERRUPTED_EXIT:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)  # key=value overrides may follow --options
    args.command_line = list(argv if argv is not None else sys.argv[1:])
    if extra and not hasattr(args, "overrides"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        from ..core.project import select_project

        select_project(args.project)
        if extra:
            args.overrides = settings_of(parser, args, extra)
        if args.command in PLUGIN_COMMANDS:
            from ..core.tasks import load_project_plugins

            load_project_plugins()
        return args.func(args)
    except DiskFull as err:  # a full disk outside a run (eval, analyze, export): as a run's, resumable
        log.error("%s", one_line(err))
        return RESUMABLE_EXIT
    except USER_ERRORS as err:
        log.error("%s", one_line(err))
        return 2
    except OSError as err:  # a write the file system refuses: one line, not a traceback
        full = disk_full_under(err, Path(err.filename or "."))
        if full is not None:
            log.error("%s", one_line(full))
            return RESUMABLE_EXIT
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        log.error("cannot write %s (%s); run the command where it may write, or give it another output folder", err.filename, err.strerror)
        return 2
    except KeyboardInterrupt:  # a run stops on Ctrl-C at its step (exit 130 through stops_resumably): none had started
        starts_runs = args.command in ("run", "reproduce")
        log.error("interrupted (Ctrl-C)%s", " before any run started: nothing written" if starts_runs else "")
        return INTERRUPTED_EXIT
