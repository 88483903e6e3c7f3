"""The declared arguments of a data module (``data.*``: names and defaults), which compose lays under
``configs/data/<choice>.yaml`` before the overrides: read from the class's source where it states them plainly, so
that a config error (an unknown key, an unknown norm) is reported without importing the data module, its Lightning
and its libraries; otherwise read from the imported class.  Both readings give the same mapping (tested for every
built-in loader)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect

from ..core.errors import ConfigError
from . import _DATAMODULES, get_datamodule_class

RUNNER_SET = ("self", "seed")  # arguments that are no ``data.*`` setting (``seed``: the runner sets it)


def data_arguments(loader_class) -> dict:
    """The declared arguments of a data module class with their defaults (``seed`` is set by the runner)."""
    params = inspect.signature(loader_class.__init__).parameters
    variadic = [p.name for p in params.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if variadic:
        raise ConfigError(f"data module {loader_class.__qualname__} takes *{variadic[0]}: declare every argument explicitly")
    return {name: (None if p.default is inspect.Parameter.empty else p.default) for name, p in params.items() if name not in RUNNER_SET}


def _constants(tree: ast.Module) -> dict[str, ast.expr]:
    """The module's names bound once in all its code, by a top-level ``NAME = <expression>``
    (``IMAGENET_MEAN = (0.485, 0.456, 0.406)``)."""
    stores: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
    return {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and stores[target.id] == 1
    }


def _literal(node: ast.expr, constants: dict[str, ast.expr]):
    """The value of a default: a literal, or a name of one of ``constants``; ValueError otherwise."""
    if isinstance(node, ast.Name):
        if node.id not in constants:
            raise ValueError(node.id)
        node = constants[node.id]
    return ast.literal_eval(node)


def _own_init(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The ``__init__`` that class ``name`` of this module runs: its own, else (one base, itself a class of this module)
    its base's; None where it is decorated, defined elsewhere or not plainly one."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    cls = classes.get(name)
    while cls is not None and not cls.decorator_list:
        inits = [node for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__init__"]
        if inits:
            return inits[0] if len(inits) == 1 and not inits[0].decorator_list else None
        if len(cls.bases) != 1 or not isinstance(cls.bases[0], ast.Name) or cls.keywords:
            return None
        cls = classes.get(cls.bases[0].id)
    return None


@functools.lru_cache(maxsize=64)  # a grid composes the same loader once a run: its source is read once
def declared_arguments(target: str) -> dict | None:
    """:func:`data_arguments` of the class at ``"module:attr"``, read from its source without importing it; None where
    the source does not state them plainly (the module is not a file found on the path, the class is decorated or
    inherits its ``__init__`` from another module, ``__init__`` takes ``*args``/``**kwargs``, or a default is neither
    a literal nor a module constant bound once to one)."""
    module, attr = target.split(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.has_location or not str(spec.origin).endswith(".py"):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    init = _own_init(tree, attr)
    if init is None or init.args.vararg is not None or init.args.kwarg is not None:
        return None
    args, constants = init.args, _constants(tree)
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    try:
        pairs = [(a.arg, None if d is None else _literal(d, constants)) for a, d in zip(positional, defaults)]
        pairs += [(a.arg, None if d is None else _literal(d, constants)) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    except ValueError:  # a default the module computes (a call, an imported name)
        return None
    return {name: default for name, default in pairs if name not in RUNNER_SET}


def datamodule_arguments(name: str) -> dict:
    """:func:`data_arguments` of data loader ``name`` (``data.loader``), read from its source where it can be
    (:func:`declared_arguments`), else from its imported class; a ConfigError for an unknown name."""
    if name in _DATAMODULES:
        declared = declared_arguments(_DATAMODULES[name])
        if declared is not None:
            return declared
    return data_arguments(get_datamodule_class(name))
