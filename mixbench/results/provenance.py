"""What a result was produced with: package versions, git commit and source digest, hardware (and its peak GPU
memory, its process's age).

The source digest names the code itself: a copy of the checkout whose ``.git`` is stale (a GPU machine that receives
the working tree but not the history) still records what ran, and ``python -m mixbench.results.provenance which-commit DIGEST``
finds the commits whose files hash the same.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ..core.project import PACKAGE_ROOT

PACKAGES = ("mixbench", "torch", "torchvision", "lightning", "timm", "torchmetrics", "datasets", "tokenizers", "omegaconf", "numpy")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


SOURCE_DIRS = ("mixbench", "configs", "tasks")  # what decides a result: the code, the configs, the task recipes
SOURCE_SUFFIXES = (".py", ".yaml")


def _git(root: Path, *args: str, text: bool = True, stdin: bytes | None = None):
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=text, input=stdin, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() if text else out.stdout) if out.returncode == 0 else None


def _digest(files: list[tuple[str, bytes]]) -> str:
    """sha256 over (path, sha256 of content) of ``files`` in path order; 16 hex digits."""
    h = hashlib.sha256()
    for path, data in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _is_source(path: str) -> bool:
    return path.endswith(SOURCE_SUFFIXES) and "__pycache__" not in path


def source_digest(root: Path = PACKAGE_ROOT) -> str | None:
    """The digest of the ``.py`` and ``.yaml`` files under ``mixbench/``, ``configs/`` and ``tasks/`` of ``root`` as
    they are on disk (None when there are none)."""
    files = [
        (p.relative_to(root).as_posix(), p.read_bytes())
        for d in SOURCE_DIRS
        if (root / d).is_dir()
        for p in (root / d).rglob("*")
        if p.is_file() and _is_source(p.relative_to(root).as_posix())
    ]
    return _digest(files) if files else None


def digest_at(commit: str, root: Path = PACKAGE_ROOT) -> str | None:
    """:func:`source_digest` of the files as committed in ``commit``."""
    listing = _git(root, "ls-tree", "-r", "-z", commit, "--", *SOURCE_DIRS)
    if not listing:
        return None
    entries = [line.split("\t", 1) for line in listing.split("\0") if line]
    blobs = [(meta.split()[2], path) for meta, path in entries if meta.split()[1] == "blob" and _is_source(path)]
    raw = _git(root, "cat-file", "--batch", text=False, stdin="".join(f"{sha}\n" for sha, _ in blobs).encode())
    files, pos = [], 0
    for _, path in blobs:  # each answer: "<sha> blob <size>\n<content>\n"
        header_end = raw.index(b"\n", pos)
        size = int(raw[pos:header_end].split()[2])
        files.append((path, raw[header_end + 1 : header_end + 1 + size]))
        pos = header_end + 1 + size + 1
    return _digest(files)


def which_commits(digest: str, root: Path = PACKAGE_ROOT, max_count: int = 200) -> list[str]:
    """The commits among the last ``max_count`` whose source files give ``digest``, newest first."""
    commits = (_git(root, "rev-list", f"--max-count={max_count}", "HEAD") or "").split()
    return [c for c in commits if digest_at(c, root) == digest]


def git_commit() -> dict:
    """HEAD of the checkout mixbench runs from, whether tracked files had uncommitted changes, and the digest of the
    source as it is on disk (:func:`source_digest`: it names the code even where HEAD is stale)."""
    commit = _git(PACKAGE_ROOT, "rev-parse", "HEAD")
    dirty = _git(PACKAGE_ROOT, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None, "source_digest": source_digest()}


def hardware() -> dict:
    import torch

    info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "gpus": [],
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda_version"] = torch.version.cuda
    return info


def reset_peak_gpu_memory() -> None:
    """Start :func:`peak_gpu_memory`'s count again (at a run's start): nothing to do without CUDA or before it was used."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def peak_gpu_memory() -> dict | None:
    """The most GPU memory this process's tensors held (``allocated``) and its caching allocator kept (``reserved``) on
    the current device since :func:`reset_peak_gpu_memory` (or the process's start), in GiB; None without CUDA (or
    before CUDA was used)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return {
        "allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
    }


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: ``/proc/self/stat``'s start time against ``/proc/uptime``, to 10 ms);
    None where there is no ``/proc``."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_ticks = int(after_name[19])  # field 22, starttime, in clock ticks after boot
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime_s - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m mixbench.results.provenance which-commit DIGEST``: the commits whose source matches a record's digest."""
    parser = argparse.ArgumentParser(prog="python -m mixbench.results.provenance", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    find = sub.add_parser("which-commit", help="commits whose mixbench/, configs/, tasks/ files give DIGEST")
    find.add_argument("digest", help="a record's git.source_digest")
    find.add_argument("--max-count", type=int, default=200, help="how many commits back from HEAD to look")
    sub.add_parser("digest", help="the digest of the source on disk")
    args = parser.parse_args(argv)
    if args.command == "digest":
        sys.stdout.write(f"{source_digest()}\n")
        return 0
    found = which_commits(args.digest, max_count=args.max_count)
    sys.stdout.write(("\n".join(found) if found else f"no commit among the last {args.max_count} has source digest {args.digest}") + "\n")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
