"""Test helper: ``python tests/_support/kill_harness.py MOMENT STEP mixbench-run-args...`` runs ``mixbench run`` and SIGKILLs its own
process at MOMENT of optimizer step STEP: ``step`` (between forward and backward), ``validation`` (after the first
validation batch) or ``write`` (half-way through writing the checkpoint of that step).  ``MOMENT:SIGNAL`` (e.g.
``step:SIGTERM``) sends that signal instead of SIGKILL (see :mod:`faults`)."""

import sys
from pathlib import Path

if not __package__:  # run as a script: the test suite's folder on sys.path, as pytest's ``pythonpath`` puts it, in place
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # of this one's (whose cuda.py would hide torch's ``cuda``)

from _support.faults import at_step, inject, send  # noqa: E402 (after the script's sys.path)
from mixbench.cli.app import main  # noqa: E402

if __name__ == "__main__":
    moment, _, signame = sys.argv[1].partition(":")
    step, args = int(sys.argv[2]), sys.argv[3:]
    inject(moment, at_step(step), send(signame or "SIGKILL"))
    sys.exit(main(["run", *args]))
