"""Exporting trained runs for other tools: ``mixbench export --format hf RUN`` (:mod:`mixbench.export.hf`)."""
