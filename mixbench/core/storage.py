"""Writing run files safely: atomically (a temporary file beside the target, fsynced, then renamed into place: a reader,
or a resume after a crash, sees the old file or the new one, never part of one), never through a symbolic link
(:class:`LinkRefused`: a folder handed over may hold one that points outside it), and a full disk reported as
:class:`DiskFull`, one line naming the folder and the bytes the write needed."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import DiskFull, LinkRefused

TMP_MARK = ".tmp-"  # in the name of a temporary file: ``<name>.tmp-<pid>-<random>``
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(folder: Path) -> int | None:
    """Free bytes on the file system of ``folder`` (or of its nearest existing parent); None if unknown."""
    for place in (Path(folder), *Path(folder).parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(place).free
    return None


def error_chain(err: BaseException | None) -> Iterator[BaseException]:
    """``err``, then the errors it was raised from (each one's cause, else its context), each once."""
    seen = set()
    while err is not None and id(err) not in seen:
        yield err
        seen.add(id(err))
        err = err.__cause__ or err.__context__


def _no_space_errno(err: BaseException | None) -> bool:
    """Whether ``err`` or an error it was raised from is an ENOSPC / EDQUOT ``OSError``."""
    return any(isinstance(link, OSError) and link.errno in NO_SPACE for link in error_chain(err))


def _count(size: Callable[[], int]) -> int | None:
    try:
        return int(size())
    except Exception:  # the size cannot be worked out (the same error again): unknown
        return None


def disk_full(err: BaseException, path: Path, size: Callable[[], int] | None = None) -> DiskFull | None:
    """The :class:`DiskFull` that ``err``, raised while writing ``path``, amounts to — an ENOSPC / EDQUOT error, or a
    writer whose error carries no errno (safetensors) where the file's ``size()`` exceeds the free space — else None."""
    if not isinstance(err, Exception) or isinstance(err, DiskFull):
        return None
    folder = Path(path).parent
    needed = _count(size) if size is not None else None
    free = free_bytes(folder)
    if not _no_space_errno(err) and (needed is None or free is None or needed <= free):
        return None
    need = f"{path.name} needs {needed:,} bytes" if needed is not None else f"writing {path.name} failed"
    have = f"{free:,} bytes are free" if free is not None else "the free space is unknown"
    return DiskFull(
        f"no space left on the device of {folder}: {need}, {have}; free space there, then run the same command "
        "again with resume=auto (a grid: --resume) to continue"
    )


def disk_full_under(err: BaseException, folder: Path) -> DiskFull | None:
    """:func:`disk_full` for an error of a write mixbench did not make itself (a logger's file, a cache): the file is the
    error's own (or ``folder``) and the bytes it needed are unknown."""
    earlier = next((link for link in error_chain(err) if isinstance(link, DiskFull)), None)
    if earlier is not None:  # the error itself, or an earlier DiskFull it replaced (e.g. in a logger's cleanup)
        return earlier
    if not _no_space_errno(err):
        return None
    filename = getattr(err, "filename", None)
    return disk_full(err, Path(filename) if filename else Path(folder) / "a file")


def refuse_link(path: str | Path) -> Path:
    """``path``, unless it is a symbolic link: :class:`LinkRefused` (one line naming it and its target)."""
    path = Path(path)
    if path.is_symlink():
        raise LinkRefused(
            f"{path} is a symbolic link (to {os.readlink(path)}): mixbench writes no file through a link, which would "
            "change a file outside its folder; remove the link, then run the command again"
        )
    return path


@contextlib.contextmanager
def replacing(path: str | Path, size: Callable[[], int] | None = None) -> Iterator[Path]:
    """``with replacing(path) as tmp:`` write ``tmp`` (beside ``path``), which then replaces ``path``.  On any error
    the temporary file is removed and ``path`` is left as it was; lack of space raises :class:`DiskFull` with the
    bytes ``size()`` says the file needs; ``path`` a symbolic link: :class:`LinkRefused`, before anything is written."""
    path = refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(3)}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        full = disk_full(err, path, size)
        if full is not None:
            raise full from None
        raise


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to the disk (for a file a library wrote and closed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None], size: Callable[[], int] | None = None) -> Path:
    """Write ``path`` through ``write(file)`` atomically (see :func:`replacing`); ``size()``: the bytes it needs."""
    path = Path(path)
    with replacing(path, size) as tmp, open(tmp, "xb") as f:  # x: a new file (O_EXCL), never a link's target
        write(f)
        f.flush()
        os.fsync(f.fileno())
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`replacing`)."""
    data = text.encode("utf-8")
    return atomic_write(path, lambda f: f.write(data), size=lambda: len(data))


def save_figure(figure, path: str | Path, **kwargs) -> Path:
    """``figure.savefig(path, **kwargs)`` atomically, never through a link (see :func:`replacing`)."""
    path = Path(path)
    with replacing(path) as tmp:
        figure.savefig(tmp, format=path.suffix.lstrip(".") or "png", **kwargs)
    return path


def open_append(path: str | Path):
    """``path`` opened to append text (a console log), refusing a symbolic link (:class:`LinkRefused`)."""
    path = refuse_link(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            refuse_link(path)  # made a link since: the same one line
        raise
    return open(fd, "a")


@contextlib.contextmanager
def replacing_folder(path: str | Path) -> Iterator[Path]:
    """``with replacing_folder(out) as tmp:`` fill the new folder ``tmp`` (beside ``out``), which then takes the place
    of ``out`` (absent, or an empty folder).  On any error ``tmp`` is removed, so no half-written folder is left to
    block a retry; lack of space raises :class:`DiskFull`; ``out`` a symbolic link: :class:`LinkRefused`."""
    path = refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(3)}")
    tmp.mkdir()
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        full = disk_full(err, path)
        if full is not None:
            raise full from None
        raise
