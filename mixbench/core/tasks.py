"""Task plugins: ``tasks/<name>/task.yaml`` (declarative) and an optional sibling ``task.py`` (code).

Discovery only parses YAML, so listing tasks never imports a task's heavy code; ``task.py`` is
imported by path when that task is selected (it may register data loaders with
:func:`mixbench.data.register_datamodule`).

``task.yaml`` keys: ``name``, ``description``, ``family`` (a registered family: ``lm``, ``vision``, or one the
task's ``task.py`` registers with :func:`mixbench.families.register_family`), ``model`` (default
model), ``data`` (default ``configs/data/<choice>.yaml``), optional ``norm`` (default choice,
``pre``), ``metrics`` (list of ``{name, higher_is_better, primary?}``, exactly one primary) and
``recipe`` (config merged over ``configs/defaults.yaml``: optim, trainer, model, data settings).
``base: <task>`` inherits every key of another task (this file's keys win; ``recipe`` is merged key by key).

Tasks are looked up along the project search path (:func:`mixbench.core.project.project_roots`): a project's
task of the same name as a shipped one replaces it.  What a project's code registers (its tasks' ``task.py``, its
``plugins.py``) is known to every command run from it, whatever the task: :func:`load_project_plugins`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from .errors import ConfigError, did_you_mean
from .families import list_families
from .project import PLUGIN_MODULE, project_folder, project_roots


class TaskError(ConfigError):
    """A task name or task.yaml is invalid."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    higher_is_better: bool
    primary: bool = False


@dataclass(frozen=True)
class TaskSpec:
    name: str
    path: Path
    family: str
    model: str
    data: str
    description: str = ""
    norm: str = "pre"
    metrics: tuple[MetricSpec, ...] = ()
    recipe: dict = field(default_factory=dict)

    @property
    def primary_metric(self) -> MetricSpec:
        return next(m for m in self.metrics if m.primary)

    def load_plugin(self) -> None:
        """Import the task's ``task.py`` (if any) under the module name ``mixbench_tasks.<name>``."""
        _import_task_code(self.path, self.name)


def _import_task_code(folder: Path, name: str) -> None:
    """A task's ``task.py`` under ``mixbench_tasks.<name>``: one module name wherever it is imported from, so that the
    file runs (and registers what it registers) once."""
    _import_file(folder / "task.py", f"mixbench_tasks.{name}")


def _import_file(code: Path, module_name: str) -> None:
    """Import the Python file ``code`` as ``module_name``, once per process (nothing if the file does not exist)."""
    if not code.is_file() or module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, code)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)


def _parse_task(path: Path, raw: dict) -> TaskSpec:
    where = f"{path}"
    missing = [k for k in ("name", "family", "model", "data", "metrics") if k not in raw]
    if missing:
        raise TaskError(f"{where}: missing key(s) {missing}")
    if not (path.parent / "task.py").is_file():  # a task.py may register its family when the task runs
        if raw["family"] not in list_families():
            raise TaskError(f"{where}: family must be one of {list_families()} (or one its task.py registers), got {raw['family']!r}")
    metrics = []
    for m in raw["metrics"]:
        if not isinstance(m, dict) or "name" not in m or not isinstance(m.get("higher_is_better"), bool):
            raise TaskError(f"{where}: every metric needs a name and higher_is_better: true|false, got {m!r}")
        metrics.append(MetricSpec(m["name"], m["higher_is_better"], bool(m.get("primary", False))))
    if sum(m.primary for m in metrics) != 1:
        raise TaskError(f"{where}: exactly one metric must be marked primary: true")
    unknown = sorted(set(raw) - {"name", "family", "model", "data", "norm", "description", "metrics", "recipe"})
    if unknown:
        raise TaskError(f"{where}: unknown key(s) {unknown}")
    return TaskSpec(
        name=raw["name"],
        path=path.parent,
        family=raw["family"],
        model=raw["model"],
        data=raw["data"],
        description=raw.get("description", ""),
        norm=raw.get("norm", "pre"),
        metrics=tuple(metrics),
        recipe=raw.get("recipe") or {},
    )


def _inherit(raw: dict, by_name: dict[str, tuple[Path, dict]], path: Path, seen: tuple[str, ...] = ()) -> dict:
    """Resolve ``base: <task>``: the base task's keys, overridden by this file's keys."""
    base = raw.get("base")
    if base is None:
        return raw
    if base not in by_name or base in seen:
        raise TaskError(f"{path}: base task {base!r} " + ("is circular" if base in seen else "does not exist"))
    parent = _inherit(by_name[base][1], by_name, by_name[base][0], (*seen, raw["name"]))
    merged = {**{k: v for k, v in parent.items() if k != "base"}, **{k: v for k, v in raw.items() if k != "base"}}
    if "recipe" in raw and "recipe" in parent:  # recipes merge key by key
        merged["recipe"] = OmegaConf.to_container(OmegaConf.merge(parent["recipe"], raw["recipe"]))
    return merged


def discover_tasks(root: str | Path | None = None) -> dict[str, TaskSpec]:
    """All tasks along the project search path, by name (YAML only; no task code is imported).  Parsed once per
    version of the task files (composing a grid's configs asks for the tasks once per run)."""
    return dict(_discover(_task_files(root)))


def task_files_merged(root: str | Path | None = None) -> dict[str, dict]:
    """Every task's YAML along the project search path by name, ``base:`` resolved, without checking its family (which
    imports the model stack): what a reader of records needs of a task, e.g. its recipe's lr."""
    return {name: raw for name, (_, raw) in _merged(_task_files(root)).items()}


def _task_files(root) -> tuple[tuple[tuple[str, int, int], ...], ...]:
    """Per project folder, its task files (path, mtime, size): the key the parsed tasks are cached by."""
    return tuple(
        tuple((str(path), path.stat().st_mtime_ns, path.stat().st_size) for path in sorted((base / "tasks").glob("*/task.yaml")))
        for base in reversed(project_roots(root))  # shipped first; a project's task of the same name replaces it
    )


@functools.lru_cache(maxsize=32)
def _discover(folders: tuple[tuple[tuple[str, int, int], ...], ...]) -> dict[str, TaskSpec]:
    """:func:`discover_tasks` of the task files ``folders`` (per project folder: path, mtime, size)."""
    return {name: _parse_task(path, raw) for name, (path, raw) in _merged(folders).items()}


@functools.lru_cache(maxsize=32)
def _merged(folders: tuple[tuple[tuple[str, int, int], ...], ...]) -> dict[str, tuple[Path, dict]]:
    """The task files ``folders`` read, by name: (path, the task with ``base:`` resolved)."""
    by_name: dict[str, tuple[Path, dict]] = {}
    for files in folders:
        in_this_folder: dict[str, Path] = {}
        for name, _, _ in files:
            path = Path(name)
            raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            if not isinstance(raw, dict) or "name" not in raw:
                raise TaskError(f"{path}: a task file needs at least a name")
            if raw["name"] in in_this_folder:
                raise TaskError(f"task name {raw['name']!r} is declared twice: {in_this_folder[raw['name']]} and {path}")
            in_this_folder[raw["name"]] = path
            by_name[raw["name"]] = (path, raw)
    return {name: (path, _inherit(raw, by_name, path)) for name, (path, raw) in by_name.items()}


def get_task(name: str, root: str | Path | None = None) -> TaskSpec:
    tasks = discover_tasks(root)
    if name not in tasks:
        raise TaskError(f"unknown task {name!r}{did_you_mean(name, tasks)} Valid: {', '.join(tasks)}")
    return tasks[name]


def load_project_plugins(root: str | Path | None = None) -> Path | None:
    """Import the code of the project folder in use — the ``task.py`` of each of its tasks, then its ``plugins.py`` —
    so that the placements, data loaders and families it registers are known whatever task a command runs (each file
    once per process).  The shipped tasks' code is not imported.  Returns the project folder (None: there is none)."""
    project = project_folder(root)
    if project is None:
        return None
    for name, (path, _) in _merged(_task_files(root)).items():  # the files, not yet checked: the code may register
        if path.parent.parent == project / "tasks":  # the family or data loader a task names
            _import_task_code(path.parent, name)
    plugins = project / PLUGIN_MODULE
    _import_file(plugins, "mixbench_project_plugins_" + hashlib.sha1(str(plugins).encode()).hexdigest()[:12])
    return project


def plugin_sources(project: Path | None) -> str:
    """Where :func:`load_project_plugins` looked, for an error message about a name nothing registered."""
    if project is None:
        return (
            "mixbench's own registrations only: no project folder (a folder with configs/, tasks/ or "
            f"{PLUGIN_MODULE}: run from it or give mixbench --project DIR)"
        )
    return f"mixbench's own registrations and those of project {project} (tasks/*/task.py, {PLUGIN_MODULE})"
