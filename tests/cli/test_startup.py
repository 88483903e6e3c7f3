"""Commands that read results start at once: what each command imports (structure, not time; the times are
bench/startup).  Each test drives the commands through ``mixbench.cli.app.main`` in a fresh interpreter and reads which
heavy libraries its ``sys.modules`` holds afterwards."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _support.paths import REPO_ROOT

LR_SWEEP = REPO_ROOT / "results" / "proxy" / "lr_sensitivity"
HEAVY = ("torch", "lightning", "pytorch_lightning")

DRIVER = """
import contextlib, io, json, sys
from mixbench.cli.app import main

loaded = {}
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:  # --help
            pass
    loaded[" ".join(argv)] = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps(loaded))
""".replace("HEAVY", repr(HEAVY))


def heavy_modules_after(commands: list[list[str]], cwd: Path = REPO_ROOT) -> dict[str, list[str]]:
    """The heavy libraries imported after each command, the commands run one after another in one fresh process."""
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reading_commands_import_neither_torch_nor_lightning(tmp_path):
    commands = [
        ["--help"],
        ["table", "--results-dir", str(LR_SWEEP), "--best-over", "optim.lr"],
        ["plot", "lr", "--results-dir", str(LR_SWEEP), "--out", str(tmp_path / "lr.png")],
        ["status", str(LR_SWEEP)],
    ]
    loaded = heavy_modules_after(commands)
    assert loaded == {" ".join(argv): [] for argv in commands}
    assert list(tmp_path.glob("lr*.png")), "plot lr drew nothing: the test did not reach its code path"


def test_reclassify_imports_neither_torch_nor_lightning():
    argv = ["reclassify", "--results-dir", str(LR_SWEEP), "--dry-run"]
    assert heavy_modules_after([argv]) == {" ".join(argv): []}


def project_with_a_placement(folder: Path) -> Path:
    """A project folder whose own placement ``mine`` (plugins.py, configs/norm/mine.yaml) ``list`` shows."""
    (folder / "configs" / "norm").mkdir(parents=True)
    (folder / "configs" / "norm" / "mine.yaml").write_text("placement: mine\n")
    (folder / "plugins.py").write_text(
        "from mixbench.layers import register_placement\nfrom mixbench.layers.placements import PreLN\n\n\n"
        "@register_placement\nclass Mine(PreLN):\n    name = 'mine'\n"
    )
    return folder


# config errors of `mixbench run` (an unknown norm, task, key, data argument), and a config that composes
CONFIG_ERRORS = [
    ["task=llama_lm", "norm=nope"],
    ["task=nope"],
    ["task=llama_lm", "nope=1"],
    ["task=vit_tiny", "data.nope=1"],
]


def test_list_imports_no_lightning_nor_timm(tmp_path):
    """`list` reads the family specs (models, presets), the placements and the project's own: no Lightning, no timm
    (torch it may: the placement registry holds torch modules)."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER.replace(repr(HEAVY), repr((*HEAVY, "timm"))), json.dumps([["list"]])],
        cwd=project_with_a_placement(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert [m for m in json.loads(done.stdout.strip().splitlines()[-1])["list"] if m != "torch"] == []


def test_composing_a_run_imports_no_lightning(tmp_path):
    """Composing `mixbench run`'s config (its config errors, and a config that composes) imports no Lightning: the
    data module's arguments are read from its source (:mod:`mixbench.data.arguments`)."""
    driver = (
        "import json, sys\nfrom mixbench.core.errors import ConfigError\nfrom mixbench.training.config import compose\nout = {}\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    try:\n        compose(args)\n        out[' '.join(args)] = 'composed'\n"
        "    except ConfigError:\n        out[' '.join(args)] = 'ConfigError'\n"
        "    out[' '.join(args)] += ' ' + str([m for m in ('lightning', 'pytorch_lightning') if m in sys.modules])\n"
        "print(json.dumps(out))"
    )
    argvs = [*CONFIG_ERRORS, ["task=llama_lm", "norm=mine"], ["task=vit_tiny"]]
    done = subprocess.run(
        [sys.executable, "-c", driver, json.dumps(argvs)],
        cwd=project_with_a_placement(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = {" ".join(a): "ConfigError []" for a in CONFIG_ERRORS} | {
        "task=llama_lm norm=mine": "composed []",
        "task=vit_tiny": "composed []",
    }
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected


# data a run needs that is not here (a CIFAR .npz, C4-format shards, data.root unset): they compose, and `mixbench run`
# names them before it loads the training stack (mixbench/data/sources.py)
DATA_ERRORS = [
    ["task=vit_tiny", "data.path=/nowhere/cifar10.npz"],
    ["task=llama_lm", "data.path=/nowhere/c4-train.*.json.gz"],
    ["task=in1k_vit_tiny"],
]


def test_run_config_errors_import_no_lightning(tmp_path):
    """`mixbench run`'s config errors, missing data among them, come before Lightning: cli/app.py's stops_resumably looks
    the stop types up only once mixbench.training.run is loaded."""
    commands = [["run", *args] for args in [*CONFIG_ERRORS, *DATA_ERRORS]]
    loaded = heavy_modules_after(commands, cwd=project_with_a_placement(tmp_path))
    assert {argv: [m for m in modules if m != "torch"] for argv, modules in loaded.items()} == {" ".join(a): [] for a in commands}


def test_import_mixbench_is_light():
    done = subprocess.run(
        [sys.executable, "-c", f"import sys, mixbench, mixbench.cli, mixbench.analysis; print([m for m in {HEAVY!r} if m in sys.modules])"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]


def test_lazy_names_resolve():
    import mixbench

    assert mixbench.layer_plan("mix", 4, alpha=0.5) == ["post", "post", "pre", "pre"]
    assert "build_model" in dir(mixbench) and callable(mixbench.compose)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mixbench.nope  # noqa: B018


def test_a_sweep_with_a_bad_setting_fails_before_lightning_loads():
    """``run -m``: every configuration of the sweep is composed (which loads torch, as a single run's does) before the
    grid runner, and Lightning with it, is imported."""
    for argv in (["run", "-m", "task=llama_lm", "norm=pre,bogus"], ["run", "-m", "task=vit_tiny", "seed=0,1", "data.path=/nowhere.npz"]):
        loaded = heavy_modules_after([argv])[" ".join(argv)]  # main() returned its exit status 2 (unknown norm, no data)
        assert "torch" in loaded and "lightning" not in loaded and "pytorch_lightning" not in loaded
