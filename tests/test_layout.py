"""The layout the docs draw is the one import-linter enforces, and no mixbench module imports itself through others."""

import re
import sys

import grimp
from _support.paths import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib


def contract_layers() -> list[str]:
    contracts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [" | ".join(sorted(part.strip() for part in layer.split("|"))) for layer in layers]


def drawn_layers() -> list[str]:
    """The layers of docs/layout.md's picture, top to bottom (a layer may continue on a line starting with ``|``)."""
    picture = re.search(
        r"## Packages and the imports they may make.*?```text\n(.*?)```", (REPO_ROOT / "docs" / "layout.md").read_text(), re.S
    )
    layers = []
    for line in picture.group(1).splitlines():
        name = line[:45].strip()
        if name.startswith("mixbench."):
            layers.append(name)
        elif name.startswith("|"):
            layers[-1] += " " + name
    return [" | ".join(sorted(part.strip() for part in layer.split("|"))) for layer in layers]


def test_docs_picture_is_the_contract():
    assert drawn_layers() == contract_layers()
    readme = re.search(r"## Layout.*?```text\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S).group(1)
    short = [" | ".join(sorted("mixbench." + p.strip() for p in layer.split("|"))) for layer in re.split(r"→", readme.replace("\n", " "))]
    assert short == contract_layers()


def test_no_import_cycles():
    """Strongly connected components of the module import graph (function-local imports included) are single modules."""
    graph = grimp.build_graph("mixbench")
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module):  # Tarjan
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert cycles == []


# the names a module could use to single out a model family: the registered families' and their models' kinds
FAMILY_WORDS = {"lm", "vision", "llama", "vit", "toyseq"}


def family_comparisons(source: str) -> list[str]:
    """``a == "llama"``-like comparisons in ``source``: a family's name as a string compared with anything, or
    anything whose expression mentions ``family`` compared with a string."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        strings = {o.value for o in operands if isinstance(o, ast.Constant) and isinstance(o.value, str)}
        strings |= {
            e.value for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set)) for e in o.elts if isinstance(e, ast.Constant)
        }
        mentions_family = any("family" in ast.unparse(o) for o in operands)
        if strings & FAMILY_WORDS or (mentions_family and strings):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_family_comparison_finder_sees_the_old_dyt_branch():
    assert family_comparisons('if family == "llama":\n    pass') == ["line 1: family == 'llama'"]
    assert family_comparisons('ok = cfg.task.family in ("lm",)') == ["line 1: cfg.task.family in ('lm',)"]
    assert family_comparisons("if width == 512:\n    pass") == []


def test_no_module_below_the_families_names_a_family():
    """The layers below ``mixbench.families`` get what they need of a family from its spec (e.g. DyT's
    :class:`~mixbench.layers.placements.ModelTraits`), never by comparing its name."""
    layers = contract_layers()
    below = [part.strip() for layer in layers[layers.index("mixbench.families") + 1 :] for part in layer.split("|")]
    offenders = {}
    for package in below:
        for path in (REPO_ROOT / package.replace(".", "/")).rglob("*.py"):
            if found := family_comparisons(path.read_text()):
                offenders[str(path.relative_to(REPO_ROOT))] = found
    assert below and "mixbench.layers" in below
    assert offenders == {}
