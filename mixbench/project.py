"""Where the project's ``configs/`` and ``tasks/`` folders are."""
from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def project_root(root: str | Path | None = None) -> Path:
    """``root`` if given, else the current directory if it holds ``configs/defaults.yaml`` and ``tasks/``,
    else the checkout this package is installed from (editable install)."""
    candidates = [Path(root)] if root is not None else [Path.cwd(), PACKAGE_ROOT]
    for candidate in candidates:
        if (candidate / "configs" / "defaults.yaml").is_file() and (candidate / "tasks").is_dir():
            return candidate.resolve()
    raise FileNotFoundError(
        f"no mixbench project (configs/defaults.yaml and tasks/) found in {', '.join(map(str, candidates))}; "
        "run from the repository root or install it with `pip install -e .`"
    )
