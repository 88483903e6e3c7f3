"""Error types for bad user input: the CLI prints their message (which names the fix) and exits 2."""


class MixbenchError(ValueError):
    """Base class of every user-facing error."""


class ConfigError(MixbenchError):
    """A command-line choice, override or setting is invalid."""


class CheckpointError(MixbenchError):
    """No usable checkpoint to resume from (every one in the run folder is damaged)."""
