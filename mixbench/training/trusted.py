"""Reading the pickled files a user hands in without running any of them.

A ``.ckpt`` or ``.pt`` is a pickle, and unpickling calls whatever function the file names (``os.system``,
``Path.touch``).  Every such file mixbench reads — ``init_from=`` (a ``.ckpt``, a ``.pt``, a run folder's legacy
``model.pt``), ``rlhf.reward_model=``, ``resume_from=`` and ``resume=auto`` (the checks before a run starts and Lightning's own read,
:class:`mixbench.training.checkpointing.AtomicCheckpointIO`), and the models of ``mixbench export``, ``eval`` and
``analyze`` — goes through torch's restricted unpickler (``torch.load(weights_only=True)``), which builds tensors,
containers and plain values and refuses every other global before calling it.

Beyond those, :data:`TRUSTED_GLOBALS` lists the types mixbench's own checkpoints hold.  It is empty: a checkpoint holds
the model, optimizer and schedule states, Lightning's loop counters, the data position (ints), the generators' states
(NumPy's key array stored as a list), the divergence monitor's and validation history's numbers and ReMax's initial
reward — all tensors and plain values (so were the checkpoints of LM pretraining, ViT, SFT, reward-model and ReMax
runs when this was written; ``tests/training/test_trusted_loading.py`` checks an LM's and a ViT's).  A new state should store
plain values too; a type that cannot be avoided is named here.

A file that needs anything else raises :class:`mixbench.core.errors.UntrustedFile` naming the file and the refused
globals (one line, exit 2); nothing of it has run.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..core.errors import UntrustedFile

TRUSTED_GLOBALS: tuple = ()  # types allowed beyond torch's weights_only defaults: none (see the module doc)


def refused_globals(path: str | Path) -> list[str]:
    """The globals in ``path``'s pickle that neither torch's defaults nor :data:`TRUSTED_GLOBALS` allow, found by reading
    its opcodes (nothing is called); empty for a file that is not a ``torch.save`` zip archive."""
    try:
        with torch.serialization.safe_globals(list(TRUSTED_GLOBALS)):
            return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except (ValueError, RuntimeError, OSError, zipfile.BadZipFile):
        return []


def _refusal(err: pickle.UnpicklingError, path: str | Path) -> str:
    names = refused_globals(path) or sorted(set(re.findall(r"GLOBAL (\S+)", str(err))))
    if names:
        return f"it needs {', '.join(names)}, which mixbench's own checkpoints never hold"
    lines = [line.strip() for line in str(err).splitlines() if "nsupported" in line]
    return lines[0] if lines else "torch's restricted loader refuses its pickle"


@contextmanager
def restricted(path: str | Path, label: str | None = None) -> Iterator[None]:
    """Inside: ``torch.load(..., weights_only=True)`` allows :data:`TRUSTED_GLOBALS` too, and a refusal is raised as
    :class:`UntrustedFile` naming ``label`` (default: the path) and the refused globals."""
    try:
        with torch.serialization.safe_globals(list(TRUSTED_GLOBALS)):
            yield
    except pickle.UnpicklingError as err:
        raise UntrustedFile(
            f"{label or path} was refused: {_refusal(err, path)} (unpickling it could run code); nothing of it was run — "
            "load only checkpoints and weights mixbench wrote"
        ) from None


def load_trusted(path: str | Path, label: str | None = None, mmap: bool = False):
    """``torch.load`` of ``path`` (a file mixbench did not necessarily write) on the CPU through the restricted
    unpickler; ``mmap``: tensors stay on disk until used (a ``torch.save`` zip archive; others are read)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{label or path}: no such file")
    with restricted(path, label):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))


def check_trusted(path: str | Path, label: str | None = None) -> Path:
    """Refuse ``path`` (:class:`UntrustedFile`) unless it loads through the restricted unpickler (memory-mapped: no
    tensor is read); returns it.  Made before a file goes to a reader that does not restrict unpickling (Lightning's
    FSDP strategy reads a full checkpoint with a plain unpickler) and before a run writes anything."""
    load_trusted(path, label, mmap=True)
    return Path(path).expanduser()
