"""Tiny runs trained once a session and read by several tests (registered by tests/conftest.py).  Each is written into
its own ``tmp_path_factory`` folder; a test that changes what it finds there copies it first (``shutil.copytree``)."""

from pathlib import Path

import pytest

from . import runs, weights
from .crash import COMMON, record


def _run(*args: str) -> None:
    from mixbench.cli.app import main

    assert main(["run", *args]) == 0


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory) -> dict:
    """The record of the crash-safety run (``_support.crash.COMMON``) trained without a fault: what every killed,
    signalled or disk-full run must end at after ``resume=auto`` (e2e/test_crash_safety, e2e/test_disk_full)."""
    run_dir = tmp_path_factory.mktemp("full") / "run"
    _run(*COMMON, f"run_dir={run_dir}")
    return record(run_dir)


@pytest.fixture(scope="session")
def tiny_lm_run(tmp_path_factory) -> Path:
    """``weights.TINY_LM`` (2 steps of the debug LLaMA, default placement), checkpointed at every step: its run folder
    (core/test_links, training/test_trusted_loading, training/test_weights)."""
    run_dir = tmp_path_factory.mktemp("tiny_lm") / "run"
    _run(*weights.TINY_LM, "checkpoint.every_n_steps=1", f"run_dir={run_dir}")
    return run_dir


@pytest.fixture(scope="session")
def tiny_vit_run(tmp_path_factory) -> Path:
    """``weights.TINY_VIT`` on ``task=vit_tiny`` (2 steps, default placement), checkpointed at every step: its run
    folder (training/test_trusted_loading)."""
    run_dir = tmp_path_factory.mktemp("tiny_vit") / "run"
    _run("task=vit_tiny", *weights.TINY_VIT, "checkpoint.every_n_steps=1", f"run_dir={run_dir}")
    return run_dir


@pytest.fixture(scope="session")
def tiny_vit_results(tmp_path_factory) -> Path:
    """A results folder of two ``runs.TINY_VIT`` runs of ``task=vit_tiny`` (3 steps): Pre-LN and Mix-LN with
    ``norm.alpha=0.5`` (cli/test_cli)."""
    results = tmp_path_factory.mktemp("tiny_vit_results")
    for norm in (["norm=pre"], ["norm=mix", "norm.alpha=0.5"]):  # a norm.* option the placement ignores is an error
        _run("task=vit_tiny", *norm, f"results_dir={results}", *runs.TINY_VIT)
    return results
