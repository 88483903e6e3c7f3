"""What a result was produced with: package versions, git commit, hardware."""
from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

from .project import PACKAGE_ROOT

PACKAGES = ("mixbench", "torch", "torchvision", "lightning", "timm", "torchmetrics", "datasets", "tokenizers", "omegaconf", "numpy")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> dict:
    """HEAD of the checkout mixbench runs from, and whether tracked files had uncommitted changes."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def hardware() -> dict:
    import torch

    info = {"platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(), "gpus": []}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda_version"] = torch.version.cuda
    return info
