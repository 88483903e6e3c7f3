"""Test helper: ``python kill_harness.py MOMENT STEP mixbench-run-args...`` runs ``mixbench run`` and SIGKILLs its own
process at MOMENT of optimizer step STEP: ``step`` (between forward and backward), ``validation`` (after the first
validation batch) or ``write`` (half-way through writing the checkpoint of that step).  ``MOMENT:SIGNAL`` (e.g.
``step:SIGTERM``) sends that signal instead of SIGKILL (see :mod:`faults`)."""

import sys

from faults import at_step, inject, send

from mixbench.cli.app import main

if __name__ == "__main__":
    moment, _, signame = sys.argv[1].partition(":")
    step, args = int(sys.argv[2]), sys.argv[3:]
    inject(moment, at_step(step), send(signame or "SIGKILL"))
    sys.exit(main(["run", *args]))
