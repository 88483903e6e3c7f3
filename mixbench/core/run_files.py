"""The names of the files a run writes into its folder, and of a grid's manifest beside the run folders, for the
readers that may not import the writers (``mixbench status`` reads them from the results layer, below
``mixbench.training`` and ``mixbench.grids``); ``tests/cli/test_status_command.py`` checks that they are the writers' names."""

from __future__ import annotations

import re

RECORD_FILE = "record.json"  # the run's result record (training/run.py), replaced atomically
CONFIG_FILE = "config.yaml"  # the composed config, written atomically as each attempt starts
LOCK_FILE, HOLDER_FILE = ".run.lock", ".run.holder"  # training/run_lock.py: the flock, and its holder's host / pid / since
CHECKPOINT_DIR = "checkpoints"  # training/checkpointing.py: epoch=E-step=S.ckpt and last.ckpt
CHECKPOINT_STEP = re.compile(r"step=(\d+)")  # the optimizer step in a checkpoint's name
METRICS_FILE = "logs/metrics.csv"  # Lightning's CSV logger (training/loggers.py), appended every 100 logged steps
ANALYSIS_DIR = "analysis"  # mixbench analyze's JSON + PNG in a run's folder; a ladder's in <results_dir>/analysis/<task>
CONSOLE_FILE = "console.log"  # a grid's run in a subprocess (grids/runner.py, --jobs N): its console output
GRIDS_DIR = ".grids"  # <results_dir>/runs/.grids/<utc time>-<pid>.json: a grid's manifest (grids/manifest.py)
# a manifest run's states: planned (no run folder yet), running, ended (its status beside it)
GRID_RUN_PLANNED, GRID_RUN_RUNNING, GRID_RUN_ENDED = "planned", "running", "ended"
