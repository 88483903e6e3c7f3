"""The test suite's own layout, so that a newcomer finds the tests of a module where the module is:

* ``tests/<package>/`` holds the tests of ``mixbench/<package>/`` (one folder per subpackage, no deeper); the end-to-end
  tests (processes killed, chaos, clusters, full disks, a wheel, the network) are in ``tests/e2e/`` and the tests of
  the scripts under ``bench/`` in ``tests/bench/`` (marker ``bench``); at the top only the tests of the repository as a
  whole (its docs, its import layers, this layout);
* what several test modules share lives in ``tests/_support/`` (helpers, data files, the toy plugin project), and no
  test module imports another or ``conftest`` — so a module that skips itself (an importorskip at module level) never
  takes unrelated tests with it, and each runs alone;
* a test module finds the repository through ``_support.paths`` (never from its own ``__file__``, which moves with it),
  and only ``_support/bench.py`` puts a ``bench/`` folder on ``sys.path``."""

import ast
from pathlib import Path

import pytest
from _support.paths import REPO_ROOT, SUPPORT, TESTS

PACKAGES = sorted(p.parent.name for p in (REPO_ROOT / "mixbench").glob("*/__init__.py") if not p.parent.name.startswith("_"))
FOLDERS = {*PACKAGES, "e2e", "bench"}
TOP = {"test_docs.py", "test_layout.py", "test_suite_layout.py"}  # the repository as a whole
TEST_MODULES = sorted(p for p in TESTS.rglob("test_*.py") if SUPPORT not in p.parents)


def where(path: Path) -> str:
    return path.relative_to(TESTS).as_posix()


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_layout_rule_sees_the_packages_and_every_test_module():
    assert {"layers", "models", "results", "training", "data", "grids"} <= set(PACKAGES)
    assert len(TEST_MODULES) > 70


def test_every_test_module_lives_in_the_folder_of_its_package_or_in_e2e_or_bench():
    misplaced = [
        where(path)
        for path in TEST_MODULES
        if not (path.parent == TESTS and path.name in TOP or path.parent.parent == TESTS and path.parent.name in FOLDERS)
    ]
    assert misplaced == []


def test_every_folder_of_tests_mirrors_a_package_or_is_e2e_bench_or_support():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - FOLDERS == {"_support"}


def test_only_conftest_and_test_modules_outside_support():
    others = [where(p) for p in TESTS.rglob("*.py") if SUPPORT not in p.parents and p not in TEST_MODULES and p != TESTS / "conftest.py"]
    assert others == []


def test_no_test_module_imports_another_or_conftest():
    offenders = {}
    for path in [*TEST_MODULES, *SUPPORT.glob("*.py")]:
        found = sorted(
            name
            for name in imported_modules(path)
            if any(part.startswith("test_") or part == "conftest" for part in name.split(".")) or name.split(".")[0] == "tests"
        )
        if found:
            offenders[where(path)] = found
    assert offenders == {}


def test_support_imports_no_test_folder():
    """``_support`` stands alone: its modules import each other and mixbench, never a test folder's module."""
    offenders = {where(p): sorted(n for n in imported_modules(p) if n.split(".")[0] in FOLDERS) for p in SUPPORT.glob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_test_modules_find_the_repository_through_support_paths_and_bench_through_support_bench():
    offenders = {}
    for path in TEST_MODULES:
        found = []
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.Name) and node.id == "__file__":
                found.append(f"line {node.lineno}: __file__")
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"line {node.lineno}: sys.path")
        if found:
            offenders[where(path)] = found
    assert offenders == {}
    bench_paths = [where(p) for p in SUPPORT.glob("*.py") if p.name != "bench.py" and '"bench"' in p.read_text()]
    assert bench_paths == []


@pytest.mark.parametrize("folder", ["bench", "layers"])
def test_the_bench_marker_is_on_the_tests_of_bench_and_only_there(folder, request):
    """tests/conftest.py marks the items under tests/bench/ (``-m bench`` selects them; the default run keeps them)."""
    items = [item for item in request.session.items if TESTS / folder in item.path.parents]
    if not items:
        pytest.skip(f"tests/{folder}/ not collected in this session")
    marked = {item.get_closest_marker("bench") is not None for item in items}
    assert marked == {folder == "bench"}
