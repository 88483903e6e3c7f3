"""Every ``mixbench`` command the README and docs/ show parses, and every ``python -m mixbench...`` module they name
exists: a renamed option, subcommand or module fails here rather than in a reader's terminal."""

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from _support.paths import REPO_ROOT

from mixbench.cli.app import build_parser
from mixbench.grids.sweep_args import expand_sweep
from mixbench.training.config import compose

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"\.\.\.|[A-Z]{2,}|/path/|/data/|/shared/")  # RUN, SFT_RUN, DIR, ...: not a runnable value


def shell_lines(page: Path) -> list[str]:
    """The command lines of the page's ``bash`` blocks (continuations joined)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
        lines += block.replace("\\\n", " ").splitlines()
    return lines


def mixbench_commands(page: Path) -> list[list[str]]:
    """Each ``mixbench ...`` command (also after ``srun``, or ``-m mixbench.cli``) as its argument list."""
    commands = []
    for line in shell_lines(page):
        for part in re.split(r"&&|\|", line):
            words = shlex.split(part, comments=True)
            words = words[: words.index(">")] if ">" in words else words  # a redirection ends the arguments
            for i, word in enumerate(words):
                if word == "mixbench" or (word == "mixbench.cli" and i and words[i - 1] == "-m"):
                    commands.append([w for w in words[i + 1 :] if w != "..."])  # "...": more settings of the reader's
                    break
    return commands


COMMANDS = [(page.relative_to(REPO_ROOT).as_posix(), argv) for page in PAGES for argv in mixbench_commands(page)]


def test_the_pages_show_commands():
    assert len(COMMANDS) > 40 and {page for page, _ in COMMANDS} >= {"README.md", "docs/running.md", "docs/search.md"}


@pytest.mark.parametrize("page,argv", COMMANDS, ids=[f"{page}:{' '.join(argv)[:60]}" for page, argv in COMMANDS])
def test_command_parses(page, argv):
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)  # exits (SystemExit 2) on an unknown subcommand, option or choice
    assert all("=" in e for e in extra), f"{page}: unrecognized arguments {extra}"
    if args.command == "run" and not args.config and not any(PLACEHOLDER.search(a) for a in argv):
        overrides = [*args.overrides, *extra]
        for one in expand_sweep(overrides) if args.multirun else [overrides]:
            compose(one)  # like --print-config: every group choice and key exists


def test_python_modules_named_exist():
    for page in PAGES:
        for module in re.findall(r"python -m (mixbench[\w.]*)", page.read_text()):
            assert importlib.util.find_spec(module) is not None, f"{page.name}: python -m {module}"


def test_the_readme_states_the_quick_start_benchs_last_result():
    """The README's quick-start time is what ``bench/quickstart/quickstart.py`` measured last (its committed JSON)."""
    import json

    result = REPO_ROOT / "bench" / "quickstart" / "results" / "quickstart.json"
    if not result.is_file():
        pytest.skip("no quick-start measurement committed yet: python bench/quickstart/quickstart.py")
    measured = json.loads(result.read_text())
    minutes, cores = round(measured["median_wall_s"] / 60), measured["machine"]["cores_usable"]
    assert f"about {minutes} minutes on {cores} idle CPU cores" in " ".join((REPO_ROOT / "README.md").read_text().split())


TEST_REFERENCE = re.compile(r"(tests/)?((?:[a-z0-9_]+/)*test_[a-z0-9_]+\.py)(?:::(test_[A-Za-z0-9_]+)(…)?)?")
REFERRING = [*PAGES, REPO_ROOT / ".ci" / "run", REPO_ROOT / "bench" / "README.md", REPO_ROOT / "bench" / "mutation" / "run.py"]


def test_every_test_the_docs_name_exists_where_they_say():
    """``tests/cli/test_cli.py::test_print_config_and_list``, ``e2e/test_crash_safety.py::test_ctrl_c…`` (in a table of
    tests, a path under ``tests/``): the module is there and holds a test of that name (``…``: one that starts so) — a
    guarantee of docs/operations.md keeps naming the test that keeps it when tests move or are renamed."""
    missing = []
    for page in REFERRING:
        for match in TEST_REFERENCE.finditer(page.read_text()):
            rooted, path, name, prefix = match.groups()
            module = (REPO_ROOT if rooted else REPO_ROOT / "tests") / (("tests/" if rooted else "") + path)
            text = module.read_text() if module.is_file() else None
            if text is None:
                missing.append(f"{page.name}: {match.group(0)} (no such file)")
            elif name and not re.search(rf"^def {name}" + ("" if prefix else r"\("), text, re.M):
                missing.append(f"{page.name}: {match.group(0)} (no such test)")
    assert missing == []
