"""Where the ``configs/`` and ``tasks/`` folders are: a search path of project folders.

The shipped configs and tasks are package data (``mixbench._bundled``, found through
``importlib.resources``; in an editable install, the checkout's own ``configs/`` and ``tasks/``).  A
project folder — ``--project DIR``, else the working directory when it has ``configs/`` or ``tasks/`` —
comes first: its files override shipped ones of the same name and its tasks, norms and datasets extend
them.  Its code — every ``tasks/<name>/task.py`` and an optional ``plugins.py`` at its top — may register placements,
data loaders and families for every command run from it (:func:`mixbench.core.tasks.load_project_plugins`).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout (mixbench/core/project.py → ../..)
PLUGIN_MODULE = "plugins.py"  # a project's own plugin module, beside its configs/ and tasks/
_selected: Path | None = None  # set by `mixbench --project DIR`


def bundled_root() -> Path:
    """The folder holding the shipped ``configs/`` and ``tasks/``."""
    for candidate in (Path(str(importlib.resources.files("mixbench._bundled"))), PACKAGE_ROOT):
        if (candidate / "configs" / "defaults.yaml").is_file() and (candidate / "tasks").is_dir():
            return candidate
    raise FileNotFoundError("the shipped configs/ and tasks/ are missing from this mixbench installation; reinstall it")


def select_project(path: str | Path | None) -> None:
    """Make ``path`` the project folder of this process (``mixbench --project DIR``)."""
    global _selected
    if path is not None and not Path(path).is_dir():
        raise FileNotFoundError(f"--project {path}: no such folder")
    _selected = Path(path).resolve() if path is not None else None


def _is_project(path: Path) -> bool:
    return (path / "configs").is_dir() or (path / "tasks").is_dir() or (path / PLUGIN_MODULE).is_file()


def project_roots(root: str | Path | None = None) -> list[Path]:
    """Folders searched for configs and tasks, first match wins: ``root`` (or the selected project, or the working
    directory if it is a project), then the shipped ones."""
    bundled = bundled_root()
    if root is not None:
        first = Path(root).resolve()
        if not first.is_dir():
            raise FileNotFoundError(f"project folder {root} does not exist")
    else:
        first = _selected or (Path.cwd().resolve() if _is_project(Path.cwd()) else None)
    return [first, bundled] if first is not None and first != bundled else [bundled]


def project_folder(root: str | Path | None = None) -> Path | None:
    """The project folder in use (``root``, the selected project or the working directory), None when there is none
    beyond the shipped configs and tasks."""
    roots = project_roots(root)
    return roots[0] if len(roots) > 1 else None


def config_file(*parts: str, root: str | Path | None = None) -> Path | None:
    """``configs/<parts>`` from the first project folder that has it (None if none does)."""
    for base in project_roots(root):
        path = base.joinpath("configs", *parts)
        if path.is_file():
            return path
    return None


def config_choices(group: str, root: str | Path | None = None) -> list[str]:
    """Names of ``configs/<group>/*.yaml`` over the whole search path."""
    return sorted({p.stem for base in project_roots(root) for p in (base / "configs" / group).glob("*.yaml")})


def runs_root(results_dir: str | Path | None = None) -> Path:
    """Where ``mixbench run`` puts its run folders: ``<results_dir>/runs`` (by default the ``results_dir`` of the
    project's ``configs/defaults.yaml``, ``results``), the folder ``mixbench table`` and ``status`` read unless told
    another.  Light: reading commands call it without the training stack."""
    if results_dir is None:
        from omegaconf import OmegaConf

        path = config_file("defaults.yaml")
        results_dir = OmegaConf.load(path).results_dir if path else "results"
    return Path(results_dir) / "runs"
