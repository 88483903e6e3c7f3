"""The test suite's own layout: no test module imports another (what two need lives in tests/_support/), so a module
that skips itself (an importorskip at module level) never takes unrelated tests with it, and each runs alone."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_module_imports_another_or_conftest():
    offenders = {
        path.name: sorted(name for name in imported_modules(path) if name.startswith("test_") or name == "conftest")
        for path in sorted([*TESTS.glob("test_*.py"), *(TESTS / "_support").glob("*.py")])
    }
    assert {name: found for name, found in offenders.items() if found} == {}
