"""Operations: bad input is one clear line and exit status 2 (fuzzed), nothing earlier is lost; concurrent runs;
sweeps and grids that report failures; replaying a run."""

import gzip
import json
import logging
import random
import shlex
from pathlib import Path

import pytest
from _support.images import make_folder
from _support.project import TINY_LM as PROJECT_LM
from _support.weights import TINY_LM as WEIGHTS_LM
from _support.weights import TINY_VIT as WEIGHTS_VIT

from mixbench.cli.app import main
from mixbench.grids.sweep_args import expand_sweep

TINY_VIT = ["task=vit_tiny", *WEIGHTS_VIT]  # 2 steps each (tests/_support/weights.py)
TINY_LM = [*(arg for arg in WEIGHTS_LM if not arg.startswith("data.seq_len=")), "data.seq_len=16"]


def records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("record.json"))]


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def bad_arguments(count: int, seed: int = 0) -> list[list[str]]:
    """Generated bad command lines: unknown or misspelt keys, wrong types, unparsable YAML, unknown choices, values out of
    range, keys mixbench fills itself, malformed key=value."""
    rng = random.Random(seed)
    numbers = ["seed", "optim.lr", "data.batch_size", "trainer.max_steps", "norm.alpha", "optim.weight_decay", "divergence.patience"]
    flags = ["compile", "save_weights", "norm.final_norm", "norm.scaled_init", "data.augment"]
    groups = ["mixup", "optim", "trainer", "norm"]
    lists = ["optim.betas"]
    texts = ["results_dir", "scale"]

    def misspell(key: str) -> str:
        i = rng.randrange(len(key))
        return key[:i] + rng.choice("xqzj") + key[i + 1 :]

    makers = [
        lambda: [f"{misspell(rng.choice(numbers + flags))}=1"],
        lambda: [f"{rng.choice(numbers)}={rng.choice(['abc', '[1, 2]', '{a: 1}', 'true', 'nan-ish', '1e'])}"],
        lambda: [f"{rng.choice(flags)}={rng.choice(['maybe', '3', '[true]', '0.5'])}"],
        lambda: [f"{rng.choice(groups)}={rng.choice(['1', 'x', '[a]'])}"],
        lambda: [f"{rng.choice(lists)}={rng.choice(['0.9', 'x'])}"],
        lambda: [f"{rng.choice(texts)}={rng.choice(['[a, b]', '{k: v}'])}"],
        lambda: [rng.choice(numbers + texts) + "=" + rng.choice(["[", "{", '"open', "a: b: c", "${nope}"])],
        lambda: [f"{rng.choice(['norm', 'model', 'data', 'task'])}={rng.choice(['nope', 'mixx', 'vit_smal', 'cifar', ''])}"],
        lambda: [
            rng.choice(
                [
                    "norm.alpha=1.5",
                    "norm.alpha=-0.1",
                    "norm.num_post=-1",
                    "norm.kind=batchnorm",
                    "optim.name=sgd",
                    "data.batch_size=0",
                    "optim.lr=-1",
                    "seed=0.5",
                    "norm.qk_norm=both",
                    "resume=yes",
                    "norm=custom",
                    "norm.layers=[pre,postt]",
                    "checkpoint.keep_last=0.5",
                ]
            )
        ],
        lambda: [f"+trainer.{rng.choice(['logger', 'callbacks', 'default_root_dir', 'enable_checkpointing'])}=false"],
        lambda: [rng.choice(["seed", "norm.alpha", "=3", "a..b=1", ".x=1", "norm.=1", "trainer.max_steps==3"])],
        lambda: [f"{rng.choice(['foo', 'optim.fancy', 'trainer.max_stepz', 'data.nope'])}.{rng.choice(['a', 'b'])}=1"],
    ]
    return [makers[i % len(makers)]() for i in range(count)]


def test_fuzzed_bad_arguments_each_exit_2_with_one_line(tmp_path, caplog):
    cases = bad_arguments(300)
    unique = list(dict.fromkeys(map(tuple, cases)))  # the 300 draws hold 135 different command lines: each tried once
    for args in unique:
        caplog.clear()
        code = main(["run", "task=vit_tiny", f"results_dir={tmp_path}", *args, "--print-config"])
        messages = errors(caplog)
        assert code == 2, args
        assert len(messages) == 1 and "\n" not in messages[0] and "Traceback" not in messages[0], (args, messages)
    assert not list(tmp_path.rglob("record.json"))
    # the same through real runs: nothing starts, nothing is written
    for args in cases[::25]:
        caplog.clear()
        assert main(["run", *TINY_VIT, "+trainer.fast_dev_run=true", f"results_dir={tmp_path}", *args]) == 2, args
        assert len(errors(caplog)) == 1
    assert not list(tmp_path.rglob("record.json"))


def test_run_time_input_errors_are_one_line_and_keep_earlier_results(tmp_path, caplog):
    results = tmp_path / "results"
    assert main(["run", *TINY_LM, f"results_dir={results}"]) == 0
    before = {p: p.read_bytes() for p in results.rglob("*") if p.is_file()}
    shards = tmp_path / "c4"
    shards.mkdir()
    with gzip.open(shards / "c4-train.00000-of-00001.json.gz", "wt") as f:
        f.writelines(json.dumps({"text": f"document {i} " * 50}) + "\n" for i in range(200))
    data = (shards / "c4-train.00000-of-00001.json.gz").read_bytes()
    (shards / "c4-train.00000-of-00001.json.gz").write_bytes(data[: len(data) // 2])  # truncated
    (shards / "c4-validation.00000-of-00001.json.gz").write_bytes(data)
    (tmp_path / "bad-tokenizer.json").write_text('{"version": "1.0", "model": ')
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    cases = {
        "truncated": (
            [*TINY_LM, f"data.path={shards}/c4-train.*.json.gz", f"data.cache_dir={tmp_path / 'cache'}"],
            "c4-train.00000-of-00001.json.gz: truncated or corrupt",
        ),
        "tokenizer": ([*TINY_LM, f"data.tokenizer={tmp_path / 'bad-tokenizer.json'}"], "does not parse as a Hugging Face tokenizer.json"),
        "no folder": ([*TINY_VIT, "data=imagefolder", f"data.root={tmp_path / 'nothing'}"], "set data.root"),
        "empty folder": ([*TINY_VIT, "data=imagefolder", f"data.root={tmp_path / 'empty'}"], str(tmp_path / "empty")),
        "no npz": ([*TINY_VIT, f"data.path={tmp_path / 'none.npz'}"], "none.npz"),
        "unwritable": ([*TINY_VIT, f"results_dir={tmp_path / 'a-file' / 'results'}"], "set results_dir= to a writable folder"),
        "trainer": ([*TINY_VIT, "trainer.precision=banana"], "Lightning rejected the trainer.* settings"),
    }
    for name, (args, expected) in cases.items():
        caplog.clear()
        if not any(a.startswith("results_dir=") for a in args):
            args = [*args, f"results_dir={results}"]
        assert main(["run", *args]) == 2, name
        (message,) = errors(caplog)
        assert expected in message and "\n" not in message, (name, message)
    assert {p: p.read_bytes() for p in before} == before


def test_a_bad_data_path_is_one_line_before_any_run_folder_exists(tmp_path, caplog):
    """Missing data files are found by the pre-flight checks: exit 2, one line naming the setting, and nothing written
    — no run folder, no config.yaml, no failed record that a table would show as a column of its own."""
    (tmp_path / "c4").mkdir()
    (tmp_path / "c4" / "c4-train.00000-of-00001.json.gz").write_bytes(b"")  # a train shard without its validation shard
    (tmp_path / "empty").mkdir()
    cases = {
        "c4 glob": (["task=llama_lm", "data=c4", "data.path=/nope/*.json.gz"], "no files match data path '/nope/*.json.gz'"),
        "validation glob": ([*TINY_LM, f"data.path={tmp_path}/c4/c4-train.*.json.gz"], "c4-validation.*.json.gz"),
        "image root": ([*TINY_VIT, "data=imagefolder", f"data.root={tmp_path / 'empty'}"], "data.root="),
        "npz": ([*TINY_VIT, f"data.path={tmp_path / 'none.npz'}"], "none.npz"),
    }
    for name, (args, expected) in cases.items():
        caplog.clear()
        results = tmp_path / f"results-{name.replace(' ', '_')}"
        assert main(["run", *args, f"results_dir={results}"]) == 2, name
        (message,) = errors(caplog)
        assert expected in message and "\n" not in message, (name, message)
        assert not results.exists(), name
    sweep = tmp_path / "sweep"  # a grid checks every configuration before it runs any
    assert (
        main(["run", "-m", *TINY_LM, "seed=0,1", f"data.path={tmp_path}/c4/c4-train.*.json.gz", f"results_dir={sweep}", "--jobs", "2"]) == 2
    )
    assert not sweep.exists()


def test_a_corrupt_image_is_fatal_by_default_and_skipped_and_counted_on_request(tmp_path, caplog):
    root = make_folder(tmp_path / "folder")
    victim = sorted((root / "train").rglob("*.*"))[0]
    victim.write_bytes(victim.read_bytes()[:40])  # a truncated JPEG
    args = [
        "run",
        "task=vit_tiny",
        "data=imagefolder",
        f"data.root={root}",
        "data.img_size=32",
        "data.num_workers=0",
        "data.batch_size=4",
        "model.num_layers=2",
        "model.hidden_size=32",
        "model.num_heads=2",
        "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        f"results_dir={tmp_path / 'results'}",
    ]
    assert main(args) == 2
    (message,) = errors(caplog)
    assert str(victim) in message and "data.skip_bad_images=true" in message
    assert main([*args, "data.skip_bad_images=true"]) == 0
    finished = [r for r in records(tmp_path / "results") if r["status"] == "completed"]
    assert finished[0]["dataset"]["bad_images_skipped"] >= 1


def test_four_concurrent_runs_into_one_results_folder_each_write_their_record(tmp_path):
    """Four processes at once (forked from the chaos harness's preloaded server: no ~10 s of imports each)."""
    from _support.chaos_harness import Launcher

    launcher, results = Launcher(tmp_path / "logs"), tmp_path / "results"
    processes = [launcher.start(["run", *TINY_VIT, f"results_dir={results}"]) for _ in range(4)]
    for p in processes:
        p.process.join(timeout=600)
    assert [p.returncode for p in processes] == [0, 0, 0, 0], [p.output()[-1000:] for p in processes]
    found = records(results)
    assert len(found) == 4 and len({r["run_dir"] for r in found}) == 4 and all(r["status"] == "completed" for r in found)


def test_sweep_expands_the_product_reports_failures_and_resumes(tmp_path, caplog):
    sweep = ["run", "-m", *TINY_LM, "norm=pre,mix", "seed=0,1", f"results_dir={tmp_path}"]
    assert main(sweep) == 0
    found = records(tmp_path)
    assert sorted((r["norm"]["placement"], r["seed"]) for r in found) == [("mix", 0), ("mix", 1), ("pre", 0), ("pre", 1)]
    assert found[0]["command"][:2] == ["mixbench", "run"] and "norm=pre,mix" not in found[0]["command"]
    # a failing cell (vocab too small for the tokenizer: fails at run time) makes the exit status 1 and is named
    caplog.clear()
    failing = ["run", "-m", *TINY_LM, "model.vocab_size=8192,64", f"results_dir={tmp_path / 'b'}"]
    assert main(failing) == 1
    assert any("failed: mixbench run" in m and "model.vocab_size=64" in m for m in errors(caplog))
    # --resume: finished cells are skipped (no new record), the failed one is tried again
    assert main([*failing, "--resume"]) == 1
    statuses = sorted(r["status"] for r in records(tmp_path / "b"))
    assert statuses == ["completed", "failed"]


@pytest.mark.parametrize("cores, jobs, workers, share", [(4, 2, 3, 2), (2, 2, 4, 1), (2, 3, 0, 1), (16, 2, 4, 8)])
def test_jobs_give_each_run_its_share_of_the_cores(tmp_path, monkeypatch, cores, jobs, workers, share):
    """``--jobs N``: each run process gets cores // N (at least 1) torch threads (OMP_NUM_THREADS in its environment)
    and at most that many data workers — and a resume of the grid still finds its runs."""
    import mixbench.grids.runner as runner

    started = []

    class Process:  # a run process that exits at once without a record
        def __init__(self, command, env=None, **kwargs):
            started.append((command, env))

        def wait(self):
            return 0

    monkeypatch.setattr(runner, "cores", lambda: cores)
    monkeypatch.setattr(runner.subprocess, "Popen", Process)
    argvs = expand_sweep([*TINY_LM, "seed=0,1", f"data.num_workers={workers}", f"results_dir={tmp_path}"])
    outcomes = runner.run_many(argvs, jobs=jobs)
    assert len(started) == 2 and all(o.status == "failed" for o in outcomes)  # the fake processes wrote no record
    for command, env in started:
        assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(share)
        capped = [a for a in command if a.startswith("data.num_workers=")][-1]
        assert capped == f"data.num_workers={min(workers, share)}"
    folders = sorted(p for p in tmp_path.rglob("seed*-*") if p.is_dir())
    for folder in folders:  # as the runs write their config.yaml (data.num_workers capped)
        from omegaconf import OmegaConf

        from mixbench.training.config import compose

        seed = folder.name.split("-")[0][4:]
        argv = [*TINY_LM, f"seed={seed}", f"data.num_workers={min(workers, share)}", f"results_dir={tmp_path}"]
        (folder / "config.yaml").write_text(OmegaConf.to_yaml(compose(argv)))
    started.clear()
    monkeypatch.setattr(runner, "cores", lambda: 1)  # another machine: another cap
    runner.run_many(argvs, jobs=jobs, resume=True)  # the same folders: data.num_workers does not tell runs apart
    assert sorted(next(a for a in c if a.startswith("run_dir="))[8:] for c, _ in started) == [str(f) for f in folders]


def test_ctrl_c_stops_a_grid_side_by_side_running_runs_get_sigint_and_no_more_start(tmp_path, monkeypatch, caplog):
    """``--jobs 2``, four runs: a Ctrl-C to the grid is passed to the two running run processes (each then checkpoints
    its step and exits 130), the other two never start, and the grid stops with exit status 130 and one line."""
    import os
    import signal
    import threading

    import mixbench.grids.runner as runner

    started, both = [], threading.Barrier(3)

    class Process:  # a run process that stops when it gets SIGINT, as mixbench run does
        def __init__(self, command, **kwargs):
            self.signals, self.stopped = [], threading.Event()
            started.append(self)

        def send_signal(self, signum):
            self.signals.append(signum)
            self.stopped.set()

        def wait(self):
            both.wait(60)  # both runs started: the Ctrl-C comes
            self.stopped.wait(60)
            return 130

    monkeypatch.setattr(runner.subprocess, "Popen", Process)
    sweep = ["run", "-m", *TINY_LM, "seed=0,1,2,3", f"results_dir={tmp_path}", "--jobs", "2"]
    threading.Thread(target=lambda: (both.wait(60), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
    caplog.clear()
    assert main(sweep) == 130
    assert len(started) == 2 and all(p.signals == [signal.SIGINT] for p in started)
    assert "interrupted (Ctrl-C): 0 running run(s) stopped at a checkpoint, 2 not started" in caplog.text
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the grid's handler is gone


def test_a_sweep_side_by_side_runs_the_project_s_placement_given_with_project(project, tmp_path, monkeypatch):
    """``mixbench --project DIR run -m --jobs 2`` from outside the project: each run process is told the project, so
    its task (my_lm) and placement (halfpre) are known there too."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    sweep = ["--project", str(project), "run", "-m", "task=my_lm,llama_lm", "norm=halfpre", *PROJECT_LM, f"results_dir={results}"]
    assert main([*sweep, "--jobs", "2"]) == 0
    found = records(results)
    assert sorted((r["task"], r["norm"]["label"], r["status"]) for r in found) == [
        ("llama_lm", "halfpre", "completed"),
        ("my_lm", "halfpre", "completed"),
    ]
    assert all(r["command"][:3] == ["mixbench", "--project", str(project)] for r in found)


def test_ctrl_c_while_composing_is_one_line_and_writes_nothing(tmp_path, monkeypatch, caplog):
    import mixbench.training.config as config

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(config, "compose", ctrl_c)
    monkeypatch.setattr("mixbench.grids.runner.compose", ctrl_c)
    for argv in (["run", *TINY_LM], ["run", "-m", *TINY_LM, "seed=0,1"]):
        caplog.clear()
        assert main([*argv, f"results_dir={tmp_path}"]) == 130
        assert errors(caplog) == ["interrupted (Ctrl-C) before any run started: nothing written"]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_between_two_runs_of_a_grid_stops_it_there(tmp_path, monkeypatch, caplog):
    """One run after another (no --jobs): a Ctrl-C before the first run took it over writes nothing; one between two
    runs stops the grid with exit status 130, naming the runs not started, and its manifest keeps them planned."""
    import mixbench.grids.runner as runner

    done = []

    def run_one(i, total, argv, cfg):  # the first run finishes; the Ctrl-C comes as the second starts
        if len(done) == stop_at:
            raise KeyboardInterrupt
        done.append(argv)
        return runner.Outcome(argv, None, {"status": "completed", "wall_time_s": 60.0})

    monkeypatch.setattr(runner, "_in_process", run_one)
    sweep = ["run", "-m", *TINY_LM, "seed=0,1,2", f"results_dir={tmp_path}"]
    stop_at = 0
    caplog.clear()
    assert main(sweep) == 130
    assert errors(caplog) == ["interrupted (Ctrl-C) before any run started: nothing written"]
    assert list(tmp_path.iterdir()) == []  # not even the grid's manifest
    stop_at = 1
    caplog.clear()
    assert main(sweep) == 130
    assert "interrupted (Ctrl-C): 0 running run(s) stopped at a checkpoint, 2 not started" in caplog.text
    (manifest,) = [json.loads(p.read_text()) for p in (tmp_path / "runs" / ".grids").glob("*.json")]
    assert [r["state"] for r in manifest["runs"]] == ["ended", "planned", "planned"] and manifest["ended_at"]


def test_a_grid_whose_manifest_cannot_be_written_still_runs(tmp_path, monkeypatch, caplog):
    import mixbench.grids.manifest as manifest
    import mixbench.grids.runner as runner

    def full(path, text):
        raise OSError(28, "No space left on device")

    ran = []
    monkeypatch.setattr(manifest, "atomic_write_text", full)
    monkeypatch.setattr(
        runner, "_in_process", lambda i, total, argv, cfg: ran.append(argv) or runner.Outcome(argv, None, {"status": "completed"})
    )
    caplog.clear()
    assert len(runner.run_many(expand_sweep([*TINY_LM, "seed=0,1", f"results_dir={tmp_path}"]))) == len(ran) == 2
    assert "could not write the grid's manifest" in caplog.text and "No space left" in caplog.text


def test_replay_a_run_from_its_config(tmp_path):
    assert main(["run", *TINY_VIT, "norm=mix", "norm.alpha=0.5", f"results_dir={tmp_path}"]) == 0
    (first,) = records(tmp_path)
    config = Path(first["run_dir"]) / "config.yaml"
    assert main(["run", "--config", str(config), "trainer.max_steps=1"]) == 0
    replayed = [r for r in records(tmp_path) if r["run_dir"] != first["run_dir"]]
    assert len(replayed) == 1 and replayed[0]["steps"] == 1 and replayed[0]["norm"]["plan"] == ["post", "pre"]
    assert replayed[0]["command"] == ["mixbench", "run", "--config", str(config), "trainer.max_steps=1"]
    assert replayed[0]["config"]["norm"] == first["config"]["norm"]
    assert main(["run", "--config", str(config), "norm=pre"]) == 2


@pytest.mark.parametrize("command", ["run", "table", "reproduce", "analyze", "plot", "reclassify", "list"])
def test_every_subcommand_help_has_an_example(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and f"mixbench {command}" in out.replace("mixbench --project my_project list", "mixbench list")
    if command == "run":
        assert "norm:  " in out and "mix" in out and "vit_small" in out  # the choices of every group


def test_version(capsys):
    import mixbench

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"mixbench {mixbench.__version__}"


def test_placements_grid_lists_every_placement_and_only_filters(capsys, local_data):
    assert main(["reproduce", "placements", "--scale", "proxy", "--dry-run", "--only", "model.num_layers=24", *local_data.lm]) == 0
    lines = capsys.readouterr().out.splitlines()
    norms = [next(a for a in line.split() if a.startswith("norm=")) for line in lines]
    assert len(lines) == 13 and {"norm=lns", "norm=peri", "norm=hybrid_star", "norm=dyt", "norm=mix", "norm=post"} <= set(norms)
    assert all("model.num_layers=24" in line and "task=c4_llama_71m" in line for line in lines)
    assert main(["reproduce", "placements", "--scale", "proxy", "--dry-run", "--only", "model.num_layers=7"]) == 2


def test_reproduce_dry_run_with_resume_lists_only_the_runs_still_to_train(tmp_path, capsys, local_data):
    from omegaconf import OmegaConf

    from mixbench.training.config import compose, norm_spec
    from mixbench.training.run import runs_parent

    args = [
        "reproduce",
        "placements",
        "--scale",
        "proxy",
        "--dry-run",
        "--only",
        "model.num_layers=24",
        "--only",
        "norm=mix",
        *local_data.lm,
    ]
    assert main([*args, "--seeds", "2", f"results_dir={tmp_path}"]) == 0
    planned = [shlex.split(line)[2:] for line in capsys.readouterr().out.splitlines()]
    assert len(planned) == 2  # seeds 0 and 1
    cfg = compose(planned[0])  # seed 0 finished: its folder as `mixbench run` leaves it
    folder = runs_parent(cfg, norm_spec(cfg).label()) / "seed0-20261127T000000-abcdef"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (folder / "record.json").write_text(json.dumps({"status": "completed"}))
    assert main([*args, "--seeds", "2", "--resume", f"results_dir={tmp_path}"]) == 0
    assert [shlex.split(line)[2:] for line in capsys.readouterr().out.splitlines()] == planned[1:]
    (folder / "record.json").write_text(json.dumps({"status": "failed"}))  # a crashed run is trained again
    assert main([*args, "--seeds", "2", "--resume", f"results_dir={tmp_path}"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
