"""Error types for bad user input: the CLI prints their message (which names the fix) and exits 2."""

import difflib


class MixbenchError(ValueError):
    """Base class of every user-facing error."""


class ConfigError(MixbenchError):
    """A command-line choice, override or setting is invalid."""


class CheckpointError(MixbenchError):
    """No usable checkpoint to resume from (every one in the run folder is damaged)."""


class UntrustedFile(MixbenchError):
    """A checkpoint or weights file handed in would need a type outside the allowlist to load (a pickle can run code):
    refused before any of it runs (:mod:`mixbench.training.trusted`)."""


class AnalysisMismatch(MixbenchError):
    """An analysed model does not reproduce the value its run recorded (e.g. ΔP's unpruned model): the weights, data
    or precision differ from the run's (:mod:`mixbench.analysis.runner`)."""


class LinkRefused(MixbenchError):
    """A file mixbench would write is a symbolic link (planted in a folder handed over): writing through it would
    change a file outside that folder (:func:`mixbench.core.storage.refuse_link`)."""


class DiskFull(MixbenchError):
    """A write failed for lack of space (:mod:`mixbench.core.storage`): the run stops with :data:`RESUMABLE_EXIT`, and
    once space is freed ``resume=auto`` continues it."""


RESUMABLE_EXIT = 75  # sysexits' EX_TEMPFAIL: stopped (preempted, disk full); the same command with resume=auto continues
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a Ctrl-C: stopped by Ctrl-C; resume=auto continues a run


USER_ERRORS = (MixbenchError, FileNotFoundError)  # what the CLI reports as one line and exit status 2


def one_line(err: BaseException) -> str:
    """An exception's message on one line (of an error re-raised from a DataLoader worker: the original message)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if any(line.startswith("Original Traceback") for line in lines):
        lines = [lines[-1].split(": ", 1)[-1]]
    return "; ".join(lines) or type(err).__name__


def did_you_mean(word, options) -> str:
    """`` — did you mean 'x'?`` for the closest of ``options`` to ``word`` (empty when none is close): the hint of every
    "unknown name" error."""
    hint = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" — did you mean {hint[0]!r}?" if hint else ""
