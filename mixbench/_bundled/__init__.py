"""In a built wheel this package holds the shipped ``configs/`` and ``tasks/`` (see ``mixbench.core.project``)."""
