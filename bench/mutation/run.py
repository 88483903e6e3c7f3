"""Mutation testing with mutmut over the modules whose mistakes would change a number in a table.

Each target runs in a scratch copy of the checkout (``bench/mutation/.work/<label>/<target>``, git-ignored) whose
``pyproject.toml`` carries that target's ``[tool.mutmut]``: the files to mutate and only the test files that cover them,
so a target finishes on a small machine.  ``--names`` keeps the mutants of some functions only (LLaMA's forward).
Results: ``results/<label>.json`` (per target: killed, survived, no tests, timeout, the surviving mutants' names and
diffs) and ``results/<label>.md`` (the score table).  Not needed by ``.ci/run``: ``pip install -e ".[mutation]"``.

    python bench/mutation/run.py --label before                     # every target
    python bench/mutation/run.py --label before --targets stats sweep
    python bench/mutation/run.py --label before --show placements   # the survivors' diffs of that run of a target
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
RESULTS = HERE / "results"
COPY = ("mixbench", "tests", "configs", "tasks", "results/proxy", "docs", "README.md", "LICENSE")  # what the selected tests read
QUIET = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-W", "ignore"]


@dataclass(frozen=True)
class Target:
    name: str
    mutate: tuple[str, ...]  # globs of files (mutmut's only_mutate)
    tests: tuple[str, ...]  # test files (and -k expressions) that cover them
    names: tuple[str, ...] = ()  # mutant-name globs to run (all of the files' mutants when empty)
    pytest_args: tuple[str, ...] = field(default=())


PLACEMENT_TESTS = (
    "tests/layers/test_formulas.py",
    "tests/layers/test_formulas_beyond.py",
    "tests/layers/test_placement.py",
    "tests/models/test_models.py",
    "tests/layers/test_norm_spec_rules.py",
)
TARGETS = {
    t.name: t
    for t in (
        Target(  # the rules that compute (sub-layer formulas, plans, inits, α0): not labels, summaries or error texts
            "placements",
            ("mixbench/layers/placements.py",),
            PLACEMENT_TESTS,
            names=tuple(
                f"mixbench.layers.placements.*{f}*"
                for f in ("sublayer", "plan", "num_post_layers", "init_weights", "admin_omega_init", "alphas", "embed_gain", "build")
            ),
        ),
        Target("placement", ("mixbench/layers/placement.py",), PLACEMENT_TESTS),
        Target("residual", ("mixbench/layers/residual.py",), PLACEMENT_TESTS),
        Target("stats", ("mixbench/results/stats.py",), ("tests/results/test_stats.py",)),
        Target("sweep", ("mixbench/results/sweep.py",), ("tests/results/test_sweep.py", "tests/results/test_sweep_rules.py")),
        Target(
            "cell",
            ("mixbench/results/cell.py",),
            ("tests/results/test_results.py", "tests/results/test_stats.py", "tests/results/test_sweep_rules.py"),
        ),
        Target(
            "status",  # the status classification and the families' learning checks, on records (no training runs)
            ("mixbench/training/status.py",),
            ("tests/training/test_status_and_loggers.py", "tests/training/test_status_rules.py"),
            pytest_args=("-k", "classify or reclassify or rules or loss_gain or floor or trend or unfinished"),
        ),
        Target(
            "llama_forward",
            ("mixbench/models/llama.py",),
            (
                "tests/layers/test_formulas.py",
                "tests/layers/test_formulas_beyond.py",
                "tests/models/test_models.py",
                "tests/models/test_llama_forward_edges.py",
                # the masked forward and the KV cache that generation runs on (eval's generate protocol, RLHF)
                "tests/rlhf/test_rlhf.py::test_cached_and_uncached_generation_give_the_same_tokens",
                "tests/rlhf/test_rlhf.py::test_masked_forward_of_an_unpadded_row_is_the_training_forward",
                "tests/evaluation/test_eval.py::test_scorer_matches_full_logits_and_greedy",
            ),
            names=("mixbench.models.llama.*forward*", "mixbench.models.llama.*embed_tokens*", "mixbench.models.llama.*apply_rope*"),
        ),
        Target(  # the ladder's equal-token view (issue 49): token counts, the loss at a token count, Δ cells; not the figure
            "equal_tokens",
            ("mixbench/results/equal_tokens.py",),
            ("tests/results/test_equal_tokens.py", "tests/results/test_readme_numbers.py"),
            names=tuple(
                f"mixbench.results.equal_tokens.*{f}*"
                for f in (
                    "validation_tokens",
                    "final_tokens",
                    "loss_near",
                    "targets",
                    "equal_token_points",
                    "cell_text",
                    "signed",
                    "tokens_text",
                    "marked",
                    "markdown",
                )
            ),
        ),
        Target(  # the ladder's planner (issue 49): grid positions, budgets, and the rules that pick each round's runs
            "ladder_rules",
            ("mixbench/grids/ladder.py",),
            ("tests/grids/test_ladder.py",),
            names=tuple(
                f"mixbench.grids.ladder.*{f}*"
                for f in (
                    "lr_at",
                    "grid_index",
                    "grid_position",
                    "records_by_position",
                    "above",
                    "below",
                    "lm_budget",
                    "next_step",
                    "best_index",
                    "missing_seeds",
                    "within",
                )
            ),
        ),
        Target(  # a record's time_parts (issue 49 item 4): where a run's wall time goes
            "run_clock",
            ("mixbench/training/callbacks.py",),
            ("tests/training/test_run_clock.py", "tests/training/test_final_validation.py"),
            names=("mixbench.training.callbacks.*RunClock*",),
        ),
    )
}


def scratch(target: Target, label: str) -> Path:
    """A copy of what the target's tests read, with its mutmut settings in pyproject.toml (mutmut reads them from the
    working directory); an earlier copy is refreshed, its mutants/ folder (mutmut's cache) dropped."""
    folder = WORK / label / target.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name in COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "mutants"))
        elif source.exists():
            shutil.copy2(source, folder / name)
    settings = [
        "[tool.mutmut]",
        'source_paths = ["mixbench"]',
        f"also_copy = {json.dumps([name for name in COPY if name not in ('mixbench', 'tests')])}",  # into mutants/
        f"only_mutate = {json.dumps(list(target.mutate))}",
        f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
        f"pytest_add_cli_args = {json.dumps(QUIET + list(target.pytest_args))}",
        'process_isolation = "forkserver"',  # torch is not fork-safe once its threads have run
        "use_git_change_detection = false",
        "",
        "[tool.pytest.ini_options]",
        "addopts = \"-m 'not slow and not gpu'\"",
        'markers = ["slow: longer CPU tests", "gpu: needs a CUDA device"]',
    ]
    (folder / "pyproject.toml").write_text("\n".join(settings) + "\n")
    return folder


def run_target(target: Target, children: int, label: str) -> dict:
    folder = scratch(target, label)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutants/ must come first on sys.path
    env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    started = time.time()
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *target.names]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    (folder / "mutmut-run.log").write_text(done.stdout + done.stderr)
    listing = [sys.executable, "-m", "mutmut", "results", "--all", "true"]
    results = subprocess.run(listing, cwd=folder, env=env, capture_output=True, text=True)
    statuses: dict[str, str] = {}
    for line in results.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("mixbench."):
            statuses[name] = status
    if target.names:
        from fnmatch import fnmatch

        statuses = {n: s for n, s in statuses.items() if any(fnmatch(n, g) for g in target.names)}
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    tested = counts.get("killed", 0) + counts.get("survived", 0) + counts.get("timeout", 0)
    survivors = sorted(n for n, s in statuses.items() if s == "survived")
    return {
        "target": target.name,
        "files": list(target.mutate),
        "tests": list(target.tests) + list(target.pytest_args),
        "names": list(target.names),
        "mutants": len(statuses),
        "counts": counts,
        "score": round((counts.get("killed", 0) + counts.get("timeout", 0)) / tested, 4) if tested else None,
        "survived": survivors,
        "seconds": round(time.time() - started, 1),
        "returncode": done.returncode,
    }


def show(name: str, label: str) -> None:
    """The diffs of the surviving mutants of target ``name`` in the run ``label``."""
    folder = WORK / label / name
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    report = json.loads((RESULTS / f"{label}.json").read_text())
    for mutant in next(t for t in report["targets"] if t["target"] == name)["survived"]:
        print(subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], cwd=folder, env=env, capture_output=True, text=True).stdout)


def table(report: dict) -> str:
    lines = [
        f"# Mutation score — {report['label']} (mutmut {report['mutmut']}, commit {report['commit']}, {report['machine']})",
        "",
        "| target | files | tests | mutants | killed | survived | no tests | timeout | score | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in report["targets"]:
        c = t["counts"]
        score = f"{100 * t['score']:.1f} %" if t["score"] is not None else "–"
        lines.append(
            f"| {t['target']} | {', '.join(t['files'])} | {' '.join(Path(x).name for x in t['tests'])} | {t['mutants']} | "
            f"{c.get('killed', 0)} | {c.get('survived', 0)} | {c.get('no tests', 0)} | {c.get('timeout', 0)} | {score} | {t['seconds']} |"
        )
    lines += ["", "Score = (killed + timeout) / (killed + survived + timeout); mutants no selected test reaches are listed apart."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="last", help="results/<label>.json and .md")
    parser.add_argument("--targets", nargs="*", choices=sorted(TARGETS), help="default: every target")
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (mutmut --max-children)")
    parser.add_argument("--show", metavar="TARGET", help="print the surviving mutants' diffs of TARGET's last run")
    args = parser.parse_args(argv)
    if args.show:
        return show(args.show, args.label)
    from importlib.metadata import version

    RESULTS.mkdir(exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    report = {"label": args.label, "mutmut": version("mutmut"), "commit": commit, "machine": f"{os.cpu_count()} CPU cores", "targets": []}
    earlier = RESULTS / f"{args.label}.json"
    if earlier.exists():  # a run of some targets adds to (or replaces) theirs in the label's report
        report["targets"] = json.loads(earlier.read_text())["targets"]
    for name in args.targets or list(TARGETS):
        result = run_target(TARGETS[name], args.children, args.label)
        report["targets"] = [t for t in report["targets"] if t["target"] != name] + [result]
        print(f"{name}: {result['counts']} score {result['score']} ({result['seconds']} s)", flush=True)
        (RESULTS / f"{args.label}.json").write_text(json.dumps(report, indent=1) + "\n")
        (RESULTS / f"{args.label}.md").write_text(table(report))


if __name__ == "__main__":
    main()
