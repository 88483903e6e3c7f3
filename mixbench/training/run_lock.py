"""One writer per run folder: an OS file lock (``filelock``) held for the whole run.

The lock is ``<run>/.run.lock``, taken with ``flock``: the kernel drops it when its process ends, however it ends, so
there are no stale locks.  The holder's host and pid go into ``<run>/.run.holder`` (a separate file: opening the lock
file truncates it) so that a second process on the same folder can name them.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from ..core.errors import MixbenchError
from ..core.reading import UnreadableFile, read_json
from ..core.run_files import HOLDER_FILE, LOCK_FILE
from ..core.storage import atomic_write_text, refuse_link
from ..core.text import printable


class RunFolderBusy(MixbenchError):
    """Another process holds the run folder's lock."""


def holder(run_dir: Path) -> str:
    """``host H, pid P (since T)`` of the process holding ``run_dir``'s lock, as it recorded itself."""
    try:
        who = read_json(Path(run_dir) / HOLDER_FILE)
        return printable(f"host {who['host']}, pid {who['pid']} (since {who['since']})")
    except (UnreadableFile, KeyError, TypeError):
        return "a process that has not recorded itself yet"


class RunLock:
    """Context manager: hold ``run_dir``'s lock or raise :class:`RunFolderBusy` at once (never wait)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._lock = FileLock(self.run_dir / LOCK_FILE)

    def __enter__(self) -> RunLock:
        refuse_link(self.run_dir / LOCK_FILE)  # opening the lock file truncates it: never through a planted link
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise RunFolderBusy(
                f"{self.run_dir} is in use by {holder(self.run_dir)}; wait for that run to end, or choose another run_dir"
            ) from None
        except OSError as err:  # e.g. a finished run on a read-only mount, met by resume=auto
            raise RunFolderBusy(
                f"cannot lock the run folder {self.run_dir} ({err.strerror or err}); run it where it may be written"
            ) from None
        who = {"host": socket.gethostname(), "pid": os.getpid(), "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        try:
            atomic_write_text(self.run_dir / HOLDER_FILE, json.dumps(who) + "\n")  # replaced, never written through a link
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        (self.run_dir / HOLDER_FILE).unlink(missing_ok=True)
        self._lock.release()
