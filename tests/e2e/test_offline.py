"""README: "Nothing is downloaded at run time by default".  conftest.py and .ci/run set ``HF_*_OFFLINE``, so every other
test runs with the hub switched off; this one runs the default tasks without them, in a fresh interpreter (the hub
libraries read those variables when imported) whose internet sockets refuse to connect and log every attempt."""

import json
import os
import subprocess
import sys

from _support.paths import REPO_ROOT

# the child: every AF_INET / AF_INET6 connect (and name lookup) is refused and written to ATTEMPTS, then the two runs
CHILD = """
import socket, sys, traceback
from pathlib import Path

attempts = Path(sys.argv[1])


def refuse(what):
    with attempts.open("a") as f:
        f.write(what + "\\n" + "".join(traceback.format_stack()))  # who tried: the failure shows it
    raise OSError(f"network blocked by the test: {what}")


real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex


def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        refuse(f"connect {address!r}")
    return real_connect(self, address)


def connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        refuse(f"connect_ex {address!r}")
    return real_connect_ex(self, address)


socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
socket.getaddrinfo = lambda host, *a, **k: refuse(f"getaddrinfo {host!r}")

from mixbench.cli.app import main

for args in sys.argv[2:]:
    code = main(args.split())
    if code != 0:
        sys.exit(code)
"""

# 2 steps: too few to learn (the learning check off; test_learning_check.py tests it)
COMMON = "save_weights=false trainer.enable_progress_bar=false divergence.unigram_floor=false data.num_workers=0"


def test_the_default_tasks_run_with_the_hub_variables_unset_and_no_network(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}  # the hub's defaults
    env["HOME"] = str(tmp_path / "home")  # no cache of an earlier download to fall back on
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    runs = [
        f"run task=llama_lm model=llama_debug model.vocab_size=8192 trainer.max_steps=2 trainer.val_check_interval=null "
        f"trainer.limit_val_batches=1 data.seq_len=16 {COMMON} results_dir={tmp_path / 'lm'}",
        f"run task=vit_tiny model.num_layers=2 model.hidden_size=32 model.num_heads=2 trainer.max_steps=2 trainer.max_epochs=1 "
        f"trainer.limit_val_batches=1 {COMMON} results_dir={tmp_path / 'vit'}",
    ]
    attempts = tmp_path / "attempts.txt"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(attempts), *runs], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not attempts.exists(), attempts.read_text()  # not one connection tried
    for folder in ("lm", "vit"):
        (path,) = (tmp_path / folder).rglob("record.json")
        record = json.loads(path.read_text())
        assert record["status"] == "completed" and record["steps"] == 2
