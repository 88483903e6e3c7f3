"""Copy the mixbench modules a model needs into flat files that transformers' remote-code loader can import.

transformers copies the file named in ``auto_map`` and, recursively, every file it imports relatively
(``from .x import y``) into one flat folder, and refuses files importing packages that are not installed.  So, starting
from an entry module (``mixbench.models.llama``), :func:`module_closure` follows every mixbench-internal import (relative
or absolute, at any depth of the code) and :func:`bundle_sources` gives each module as ``mb_<dotted path>.py``
(``mixbench.layers.norm`` → ``mb_layers_norm.py``, the package ``mixbench.layers`` → ``mb_layers.py``) with only its
import statements rewritten (``from ..layers import X`` → ``from .mb_layers import X``; a name a lazy package imports on
first use, ``from mixbench import register_placement``, from the module that defines it).  The model code itself is
copied verbatim, so every placement — including ones added later — exports without any hand-written copy.  A project's
placement module is rewritten the same way (:func:`rewrite_module` with its ``source``; :mod:`mixbench.export.plugins`).

Imports of other packages inside functions (e.g. timm, used only for ViTs) are wrapped in ``try: … except ImportError:
raise`` — same behaviour, but not a load-time requirement for transformers; a module-level import of a package other
than the standard library and torch cannot be exported and fails here, naming it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

from ..core.constants import VERSION
from ..core.errors import MixbenchError

ROOT = "mixbench"
ALLOWED_TOP_LEVEL = {"torch", "__future__"}


class BundleError(MixbenchError):
    """A module cannot be bundled for export."""


class ForeignImport(BundleError):
    """``module`` imports ``package`` (neither the standard library, torch nor mixbench) at module level."""

    def __init__(self, module: str, package: str):
        super().__init__(
            f"{module} imports {package} at module level: an exported model would need it installed; "
            "import it inside the function that uses it"
        )
        self.module, self.package = module, package


def flat_name(module: str) -> str:
    """``mixbench.layers.norm`` → ``mb_layers_norm``."""
    parts = module.split(".")
    if parts[0] != ROOT:
        raise BundleError(f"{module} is not a mixbench module")
    return "mb_" + ("_".join(parts[1:]) or "root")


def _source(module: str) -> tuple[Path, bool]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise BundleError(f"cannot find the source of {module}")
    return Path(spec.origin), spec.submodule_search_locations is not None


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    """The absolute module a ``from`` import refers to (None for other packages)."""
    if node.level == 0:
        return node.module if node.module and node.module.split(".")[0] == ROOT else None
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _internal_targets(
    module: str, source: tuple[Path, bool] | None = None
) -> tuple[ast.Module, str, bool, list[tuple[ast.ImportFrom, str]]]:
    """``module``'s syntax tree, text, whether it is a package, and its ``from`` imports of mixbench modules with their
    absolute targets; ``source`` (file, is a package) for a module :func:`importlib.util.find_spec` cannot find."""
    path, is_package = source or _source(module)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == ROOT for a in node.names):
            raise BundleError(f"{module}: `import {ROOT}...` cannot be bundled; use `from ... import ...`")
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, is_package, node)
            if target is not None and target.split(".")[0] != ROOT:
                raise BundleError(f"{module} imports {target} relatively: only mixbench's own modules can be bundled with it")
            if target is not None:
                found.append((node, target))
    return tree, text, is_package, found


def module_closure(*entries: str) -> list[str]:
    """``entries`` and every mixbench module they need (through imports anywhere in the code), in discovery order."""
    for entry in entries:
        if entry.split(".")[0] != ROOT:
            raise BundleError(f"{entry} is not a mixbench module")
    seen, queue = [], list(entries)
    while queue:
        module = queue.pop(0)
        if module in seen:
            continue
        seen.append(module)
        queue += mixbench_imports(module)
    return seen


def mixbench_imports(module: str, source: tuple[Path, bool] | None = None) -> list[str]:
    """The mixbench modules ``module`` imports itself, submodules named in a ``from`` import included (``source`` as
    for :func:`_internal_targets`)."""
    needed = []
    for node, target in _internal_targets(module, source)[3]:
        for home, aliases in _homes(node, target).items():
            needed += [home, *(f"{home}.{a.name}" for a in aliases if _is_module(f"{home}.{a.name}"))]
    return list(dict.fromkeys(needed))


@functools.cache
def _lazy_names(package: str) -> dict[str, str]:
    """name → absolute module for a package that imports its names on first use (``__getattr__, __dir__ =
    lazy_attributes(__name__, TABLE)``, :mod:`mixbench.core.lazy`); empty for any other module."""
    path, is_package = _source(package)
    if not is_package:
        return {}
    body = ast.parse(path.read_text(encoding="utf-8")).body
    tables = {
        n.targets[0].id: n.value for n in body if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    for node in body:
        call = node.value if isinstance(node, ast.Assign) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "lazy_attributes" and len(call.args) == 2:
            table = tables.get(call.args[1].id) if isinstance(call.args[1], ast.Name) else call.args[1]
            if table is None:
                raise BundleError(f"{package}: the table of names given to lazy_attributes must be a dict assigned in the module")
            table = ast.literal_eval(table)
            return {name: importlib.util.resolve_name(home, package) for name, home in table.items()}
    return {}


def _homes(node: ast.ImportFrom, target: str) -> dict[str, list[ast.alias]]:
    """The names of ``from <target> import ...`` by the module to import each from: ``target``, or, for a name a lazy
    package (``mixbench``'s ``register_placement``) imports on first use, the module that defines it."""
    lazy = _lazy_names(target)
    homes: dict[str, list[ast.alias]] = {}
    for alias in node.names:
        homes.setdefault(lazy.get(alias.name, target), []).append(alias)
    return homes


def _line_offsets(text: str) -> list[int]:
    offsets, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        offsets.append(total)
    return offsets


def _rewrite_import(node: ast.ImportFrom, target: str) -> str:
    """``from .<flat> import a as b, ...`` (submodules as ``from . import <flat> as name``), one statement a line: each
    name from its home (:func:`_homes`)."""
    parts = []
    for home, aliases in _homes(node, target).items():
        modules = [a for a in aliases if _is_module(f"{home}.{a.name}")]
        names = [a for a in aliases if a not in modules]
        if names:
            parts.append(f"from .{flat_name(home)} import " + ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names))
        parts += [f"from . import {flat_name(f'{home}.{a.name}')} as {a.asname or a.name}" for a in modules]
    return ("\n" + " " * node.col_offset).join(parts)


def _third_party(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        tops = {a.name.split(".")[0] for a in node.names}
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        tops = {node.module.split(".")[0]}
    else:
        return None
    foreign = sorted(t for t in tops if t not in ALLOWED_TOP_LEVEL and t not in sys.stdlib_module_names and t != ROOT)
    return foreign[0] if foreign else None


def rewrite_module(module: str, source: tuple[Path, bool] | None = None) -> str:
    """The source of ``module`` with its internal imports pointing at the flat files (see the module doc); ``source``
    as for :func:`_internal_targets`."""
    tree, text, _, found = _internal_targets(module, source)
    internal = {id(node): target for node, target in found}
    offsets = _line_offsets(text)
    edits = []
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        if id(node) in internal:
            edits.append((start, end, _rewrite_import(node, internal[id(node)])))
        elif (package := _third_party(node)) is not None:
            if id(node) in top_level:
                raise ForeignImport(module, package)
            indent = " " * node.col_offset
            statement = text[start:end]
            edits.append(
                (
                    start,
                    end,
                    f"try:  # needed only on a code path the exported model does not take\n"
                    f"{indent}    {statement}\n{indent}except ImportError:\n{indent}    raise",
                )
            )
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def bundle_sources(*entries: str) -> dict[str, str]:
    """The flat copies of the closure of ``entries``: file name → text (checked, nothing written)."""
    return {
        flat_name(module) + ".py": f"# Generated by `mixbench export` from {module} (mixbench {VERSION}); do not edit.\n"
        + rewrite_module(module)
        for module in module_closure(*entries)
    }
