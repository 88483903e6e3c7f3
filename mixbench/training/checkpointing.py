"""Crash-safe checkpoints: atomic writes, a bounded number kept, RNG state saved, and the newest complete one found.

* :class:`AtomicCheckpointIO` (a Lightning ``CheckpointIO`` plugin) writes ``<name>.ckpt`` as a temporary file in
  the same folder, fsyncs it and renames it into place, so a kill during a write leaves only a ``.tmp-`` file that
  :func:`newest_checkpoint` never picks (and removes); a full disk stops the run with one line
  (:class:`mixbench.core.errors.DiskFull`).
* :func:`checkpoint_callback`: Lightning's ``ModelCheckpoint`` every N optimizer steps, keeping the newest
  ``keep_last`` (ranked by step) plus ``last.ckpt``.
* :func:`newest_checkpoint` checks each candidate's zip structure (its directory, and each member where the directory
  says; not the data's CRCs, which would read the whole file once more) before picking it: a truncated or damaged file
  is skipped with a warning naming it; if every one is damaged it raises
  :class:`mixbench.core.errors.CheckpointError` naming them.  The one it picks must load through the restricted
  unpickler (:mod:`mixbench.training.trusted`), else :class:`mixbench.core.errors.UntrustedFile`; so does every
  checkpoint Lightning reads to resume (:meth:`AtomicCheckpointIO.load_checkpoint`).
* Paths in a checkpoint are data too: :class:`StepCheckpoint` restores its state (the paths of earlier checkpoints,
  which Lightning removes as it saves newer ones) only from a checkpoint of its own run folder, and only when every
  path it names lies inside that folder; :meth:`AtomicCheckpointIO.remove_checkpoint` removes nothing outside it.
* :class:`RNGStateCallback` stores the Python / NumPy / torch (and CUDA) generator states in each checkpoint and
  restores them when training resumes — with the model, optimizer, schedule, loop and data position that
  Lightning and the data modules already save, a resumed run continues exactly.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..core.errors import CheckpointError, ConfigError
from ..core.run_files import CHECKPOINT_DIR, CHECKPOINT_STEP
from ..core.storage import TMP_MARK, atomic_write
from .trusted import check_trusted, load_trusted, restricted

log = logging.getLogger(__name__)


def _write(checkpoint: dict, file) -> None:
    torch.save(checkpoint, file)


class _ByteCounter:
    """A write-only file that keeps nothing but the number of bytes written to it."""

    def __init__(self):
        self.bytes = 0

    def write(self, data) -> int:
        self.bytes += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def checkpoint_bytes(checkpoint: dict) -> int:
    """The size of ``checkpoint`` as a file (serialized again, into a counter: nothing is held in memory)."""
    counter = _ByteCounter()
    torch.save(checkpoint, counter)
    return counter.bytes


def inside(path: str, folder: Path) -> bool:
    """Whether ``path`` is a plain local path (no ``scheme://``) that lies inside ``folder`` once resolved."""
    if not isinstance(path, str) or "://" in path or "::" in path:
        return False
    return Path(folder).resolve() in Path(path).resolve().parents


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose writes are atomic (:func:`mixbench.core.storage.atomic_write`): a write that fails
    — a kill, a full disk (:class:`mixbench.core.errors.DiskFull`, naming the bytes it needed) — leaves no checkpoint
    a resume could pick, and the older ones as they were.  ``root``: the run folder; it removes only files inside it."""

    def __init__(self, root: Path | None = None):
        super().__init__()
        self.root = root

    def remove_checkpoint(self, path) -> None:
        """Remove the checkpoint file ``path`` — a plain file inside ``root``, never a folder; anything else is kept,
        with a warning."""
        path = str(path)
        if self.root is None or not inside(path, self.root) or Path(path).is_dir() or Path(path).is_symlink():
            log.warning("not removing %s: only checkpoint files inside the run folder %s are removed", path, self.root)
            return
        Path(path).unlink(missing_ok=True)

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        atomic_write(path, lambda f: _write(checkpoint, f), size=lambda: checkpoint_bytes(checkpoint))

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict:
        """Lightning's read of a checkpoint to resume: always through the restricted unpickler, whatever
        ``weights_only`` Lightning passes (a file that needs another type: :class:`UntrustedFile`)."""
        with restricted(path, f"the checkpoint {path}"):
            return super().load_checkpoint(path, map_location, weights_only=True)


class StepCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` (every N steps, plus ``last.ckpt``) that keeps only the newest ``keep_last`` step
    checkpoints in its folder — counted on the folder, so checkpoints from before a resume are pruned too."""

    def __init__(self, keep_last: int | None = None, **kwargs):
        super().__init__(save_top_k=-1, **kwargs)
        self.keep_last = keep_last
        self.own_checkpoint = True  # whether the checkpoint the run resumes from is one of this folder's own

    PATH_KEYS = ("dirpath", "best_model_path", "kth_best_model_path", "last_model_path")

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the state only from a checkpoint of this run's own folder whose every path lies inside the run
        folder; otherwise keep a fresh state (one warning) — those paths are what Lightning removes later."""
        if not self.own_checkpoint:
            log.info("resume: the checkpoint's own checkpoint paths are not restored (it was not written in %s)", self.dirpath)
            return
        run_folder = Path(self.dirpath).parent
        best = state_dict.get("best_k_models")
        paths = [state_dict.get(key) for key in self.PATH_KEYS] + (list(best) if isinstance(best, dict) else [best])
        outside = [str(p) for p in paths if p not in (None, "") and not inside(p, run_folder)]
        if outside or "best_model_path" not in state_dict or "best_model_score" not in state_dict:
            log.warning(
                "resume: the checkpoint's state of %s names %s, outside the run folder %s: that state is dropped",
                type(self).__name__,
                ", ".join(outside) or "no paths it needs",
                run_folder,
            )
            return
        super().load_state_dict(state_dict)

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        if self.keep_last is None or not trainer.is_global_zero:
            return
        steps = sorted((p for p in Path(self.dirpath).glob("*.ckpt") if CHECKPOINT_STEP.search(p.name)), key=checkpoint_step)
        for old in steps[: max(0, len(steps) - self.keep_last)]:
            old.unlink(missing_ok=True)


def checkpoint_callback(run_dir: Path, every_n_steps: int, keep_last: int | None, resume: str | None = None) -> ModelCheckpoint:
    """Checkpoints ``epoch=E-step=S.ckpt`` every ``every_n_steps`` optimizer steps, the newest ``keep_last`` kept
    (None: all), and ``last.ckpt``.  ``resume``: the checkpoint the run resumes from (its state is restored only if it
    lies in ``run_dir``'s checkpoint folder)."""
    if keep_last is not None and keep_last < 1:
        raise ConfigError(f"checkpoint.keep_last must be a positive integer or null (keep all), got {keep_last}")
    callback = StepCheckpoint(keep_last, dirpath=run_dir / CHECKPOINT_DIR, every_n_train_steps=every_n_steps, save_last=True)
    callback.own_checkpoint = resume is None or Path(resume).resolve().parent == (run_dir / CHECKPOINT_DIR).resolve()
    return callback


def checkpoint_step(path: Path) -> int:
    """The optimizer step of a checkpoint: from its name (``step=S``), else from its content (``last.ckpt``)."""
    match = CHECKPOINT_STEP.search(path.name)
    if match:
        return int(match.group(1))
    checkpoint = load_trusted(path, f"the checkpoint {path}", mmap=True)
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(
            f"{path} is not a Lightning checkpoint (no global_step); remove it to resume from the step checkpoints, or set "
            "resume_from= to a checkpoint a run wrote"
        )
    return step


LOCAL_HEADER = b"PK\x03\x04"  # the signature each member's local header starts with


def checkpoint_problem(path: Path, read_data: bool = False) -> str | None:
    """Why ``path`` is not a complete checkpoint, or None: unreadable, not a zip archive (a truncated file has lost its
    central directory at the end), or a member whose local header or data does not lie where the directory says —
    without reading the data (a 1B checkpoint is ~15 GB): checkpoints are renamed into place only after a whole,
    fsynced write.  ``read_data=True`` also checks every member's bytes against its CRC (a bad disk)."""
    try:
        with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
            size = raw.seek(0, 2)
            for member in archive.infolist():
                raw.seek(member.header_offset)
                if raw.read(4) != LOCAL_HEADER or member.header_offset + 30 + member.compress_size > size:
                    return f"{member.filename} is not where its directory says (the file is cut or overwritten)"
            bad = archive.testzip() if read_data else None
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        return str(err) or type(err).__name__
    return f"{bad} fails its checksum" if bad else None


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The intact checkpoint of ``run_dir`` with the most steps (leftover temporary files of an interrupted write are
    removed, damaged checkpoints skipped with a warning); None if there is none, :class:`CheckpointError` if every
    checkpoint there is damaged, :class:`mixbench.core.errors.UntrustedFile` if the one picked would need a type outside the allowlist."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return None
    for leftover in folder.glob(f"*{TMP_MARK}*"):
        if leftover.is_dir() or leftover.is_symlink():  # not a file this code wrote: left alone
            log.warning("ignoring %s: named like a checkpoint write that did not finish, but not a file", leftover.name)
            continue
        log.warning("removing %s: a checkpoint write that did not finish", leftover.name)
        leftover.unlink(missing_ok=True)
    damaged = []

    def intact(path: Path) -> bool:
        if (problem := checkpoint_problem(path)) is None:
            return True
        log.warning("skipping damaged checkpoint %s (%s)", path, problem)
        damaged.append(path)
        return False

    last = folder / "last.ckpt"
    last_step = checkpoint_step(last) if last.is_file() and intact(last) else None
    by_step = sorted((p for p in folder.glob("*.ckpt") if CHECKPOINT_STEP.search(p.name)), key=checkpoint_step, reverse=True)
    stepped = next((p for p in by_step if (last_step is None or checkpoint_step(p) >= last_step) and intact(p)), None)
    if stepped is not None or last_step is not None:
        return check_trusted(stepped or last, f"resume=auto: the checkpoint {stepped or last}")
    if damaged:
        raise CheckpointError(
            f"every checkpoint in {folder} is damaged ({', '.join(p.name for p in damaged)}); "
            "remove them to start the run over, or set resume_from= to an intact checkpoint"
        )
    return None


class RNGStateCallback(Callback):
    """Saves the random generators' states in every checkpoint and restores them when training resumes."""

    def __init__(self):
        self._restored: dict | None = None

    def state_dict(self) -> dict:
        """Lightning's collected generator states, NumPy's key array as a list (checkpoints load with weights_only)."""
        from lightning.fabric.utilities.seed import _collect_rng_states

        states = _collect_rng_states(include_cuda=torch.cuda.is_available())
        name, keys, *rest = states["numpy"]
        states["numpy"] = (name, keys.tolist(), *rest)
        return states

    def load_state_dict(self, state_dict: dict) -> None:
        import numpy as np

        name, keys, *rest = state_dict["numpy"]
        self._restored = {**state_dict, "numpy": (name, np.asarray(keys, dtype=np.uint32), *rest)}

    def on_train_start(self, trainer, pl_module) -> None:
        if self._restored is not None:
            from lightning.fabric.utilities.seed import _set_rng_states

            _set_rng_states(self._restored)
            self._restored = None
