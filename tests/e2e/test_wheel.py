"""A wheel built from the repository runs outside the checkout: configs/ and tasks/ ship inside the package."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from _support.paths import REPO_ROOT
from _support.weights import TINY_VIT


def run(cmd, cwd, env=None):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_wheel_installs_in_a_fresh_venv_and_runs_outside_the_checkout(tmp_path):
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(REPO_ROOT)],
        tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("mixbench-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)  # this environment's pip installs into it:
    python = venv / "bin" / "python"  # no ~8 s of ensurepip
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path)
    # the heavy dependencies (torch, lightning, timm, ...) come from this environment, appended after the venv's own
    # site-packages, whose mixbench is the wheel's (this environment's editable mixbench is never imported: .pth files
    # of an appended folder are not processed)
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip()
    Path(site, "parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    where = run([str(python), "-c", "import mixbench; print(mixbench.__file__)"], work, env).stdout.strip()
    assert where.startswith(str(venv)), where
    listing = run([str(venv / "bin" / "mixbench"), "list"], work, env).stdout
    assert "llama_lm" in listing and "vit_small" in listing and "mix" in listing
    run(
        [
            str(venv / "bin" / "mixbench"),
            "run",
            "task=vit_tiny",
            "norm=mix",
            "norm.alpha=0.5",
            *TINY_VIT,
            f"results_dir={work / 'results'}",
        ],
        work,
        env,
    )
    (record,) = (work / "results").rglob("record.json")
    record = json.loads(record.read_text())
    assert record["status"] == "completed" and record["norm"]["plan"] == ["post", "pre"]
    assert (Path(record["run_dir"]) / "model.safetensors").is_file()
