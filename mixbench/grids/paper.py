"""The grids a reproduction runs: the paper's (``configs/paper/mixln_iclr2025.yaml``, with its numbers) and the suite's
own (``configs/grids/*.yaml``)."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from ..core.errors import ConfigError
from ..core.project import config_choices, config_file

PAPER_FILE = ("paper", "mixln_iclr2025.yaml")  # under configs/ on the project search path


@dataclass(frozen=True)
class PaperRun:
    task: str
    norm: str
    overrides: tuple[str, ...]
    paper: float | None


def load_grids(root=None) -> dict:
    """The paper's grids, then the suite's own (``configs/grids/*.yaml``, e.g. ``placements``): a fresh copy of the
    files as they are now (parsed once per state of the files: every ``mixbench`` command line names the grids in
    ``reproduce``'s help)."""
    files = [config_file(*PAPER_FILE, root=root)] + [config_file("grids", f"{n}.yaml", root=root) for n in config_choices("grids", root)]
    return copy.deepcopy(_parsed_grids(tuple(_file_state(f) for f in files)))


def _file_state(path: Path) -> tuple[str, int, int]:
    """``path``, its mtime and its size (one ``stat``): what :func:`_parsed_grids` is cached by."""
    stat = path.stat()
    return str(path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=8)
def _parsed_grids(files: tuple[tuple[str, int, int], ...]) -> dict:
    """The grids of ``files`` (path, mtime, size: the key that makes an edited file parse again); a later file's grid
    replaces an earlier one of the same name."""
    grids = {}
    for path, _, _ in files:
        grids.update(OmegaConf.to_container(OmegaConf.load(path)))
    return grids


def grid(name: str, root=None) -> dict:
    grids = load_grids(root)
    if name not in grids:
        raise ConfigError(f"unknown paper table {name!r}; valid: {', '.join(grids)}")
    return grids[name]


def paper_runs(name: str, root=None) -> list[PaperRun]:
    """The grid's (task, norm) runs; an item ``{runs_of: OTHER}`` stands for every run of grid ``OTHER``."""
    runs = []
    for r in grid(name, root)["runs"]:
        if "runs_of" in r:
            runs += paper_runs(r["runs_of"], root)
        else:
            runs.append(PaperRun(r["task"], r["norm"], tuple(r.get("overrides", [])), r.get("paper")))
    return runs


def grid_scales(name: str, root=None) -> tuple[str, ...]:
    """The scales a grid can run at (``scales``; default paper and proxy), its default first."""
    return tuple(grid(name, root).get("scales", ("paper", "proxy")))
