"""The learning-rate sweep grid (``mixbench reproduce lr_sensitivity``): every placement at half-decade learning rates,
then each at its own best one (``--best-from``)."""

import json
import math
import shlex

import pytest
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.grids.reproduce import expand
from mixbench.training.config import compose, norm_spec
from mixbench.training.run import runs_parent

LLAMA_LRS = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2}
VIT_LRS = {4e-4, 1.2e-3, 4e-3, 1.2e-2, 4e-2, 1.2e-1}


def arg(argv: list[str], key: str) -> str:
    return next(a.split("=", 1)[1] for a in argv if a.startswith(key + "="))


def listed(capsys) -> list[list[str]]:
    """The runs a ``mixbench reproduce ... --dry-run`` printed."""
    return [shlex.split(line)[2:] for line in capsys.readouterr().out.splitlines()]


@pytest.fixture
def any_data(monkeypatch):
    """The dry run's data check passed (it has its own tests in test_dry_run_plan.py): this grid's two families read
    different data, which one ``data.path`` cannot give both."""
    from mixbench.grids import dry_run

    monkeypatch.setattr(dry_run, "data_needs", lambda configs: dry_run.DataNeeds())


def test_dry_run_lists_every_placement_of_both_families_at_five_or_more_half_decade_lrs(capsys, any_data):
    """The grid's 154 runs (what the dry run lists), and the dry run itself on every placement at one lr of each family
    and pre at every lr (each value of each axis composed; the whole grid in the slow test below)."""
    runs = expand("lr_sensitivity")
    for only in (["norm=pre"], ["optim.lr=0.001"], ["optim.lr=0.004"]):  # proxy is this grid's only scale: no --scale needed
        assert main(["reproduce", "lr_sensitivity", "--dry-run", *(f"--only={o}" for o in only)]) == 0
        assert listed(capsys) == [argv for argv in runs if all(o in argv for o in only)]
    lrs: dict[tuple[str, str], set[float]] = {}
    for argv in runs:
        lrs.setdefault((arg(argv, "task"), arg(argv, "norm")), set()).add(float(arg(argv, "optim.lr")))
    norms = {norm for _, norm in lrs}
    assert {"pre", "post", "mix", "admin", "dyt", "hybrid", "hybrid_star", "olmo2", "reordered", "lns", "peri"} <= norms and len(
        norms
    ) == 14
    for (task, _), swept in lrs.items():
        assert swept == (LLAMA_LRS if task == "c4_llama_71m" else VIT_LRS)
        steps = sorted(math.log10(lr) for lr in swept)
        assert all(0.45 < b - a < 0.55 for a, b in zip(steps, steps[1:]))  # half-decades (×3 and ×3.33 alternately)
    assert {arg(argv, "model.num_layers") for argv in runs if arg(argv, "task") == "c4_llama_71m"} == {"24"}  # 12 blocks: --best-from
    assert len(runs) == 14 * 5 + 14 * 6
    assert main(["reproduce", "lr_sensitivity", "--scale", "paper", "--dry-run"]) == 2  # no paper scale
    assert main(["reproduce", "placements", "--scale", "proxy", "--dry-run", "--best-from", "x"]) == 2  # no sweep there


@pytest.mark.slow
def test_dry_run_composes_every_run_of_the_grid(capsys, any_data):
    assert main(["reproduce", "lr_sensitivity", "--dry-run"]) == 0  # validates the whole grid: 154 configs composed
    assert listed(capsys) == expand("lr_sensitivity")


def finished(base: list[str], results, seed: int, value: float, status: str = "completed") -> None:
    """A finished run of ``base`` at seed ``seed`` with primary metric ``value``, as ``mixbench run`` leaves it."""
    cfg = compose([*base, f"seed={seed}", f"results_dir={results}"])
    folder = runs_parent(cfg, norm_spec(cfg).label()) / f"seed{seed}-20261128T000000-{len(list(results.rglob('record.json'))):06x}"
    folder.mkdir(parents=True)
    config = OmegaConf.to_container(cfg, resolve=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    metric = cfg.task.name.startswith("c4") and "val/ppl" or "val/top1"
    record = {"status": status, "seed": seed, "config": config, "metrics": {metric: value}, "model": {"name": cfg.model.name}}
    record["primary_metric"] = {"name": metric, "higher_is_better": metric == "val/top1", "value": value}
    (folder / "record.json").write_text(json.dumps(record))


def test_best_from_runs_each_placement_at_its_best_lr_and_12_blocks_at_the_24_block_best(tmp_path):
    grid = expand("lr_sensitivity", seeds=(0,))
    mix24 = [a for a in grid if arg(a, "norm") == "mix" and arg(a, "task") == "c4_llama_71m"]
    ppl = {"0.0001": 80.0, "0.0003": 50.0, "0.001": 40.0, "0.003": 35.0, "0.01": None}  # None: diverged
    for argv in mix24:
        value = ppl[arg(argv, "optim.lr")]
        finished([a for a in argv if not a.startswith("seed=")], tmp_path, 0, value or math.nan, "completed" if value else "diverged")
    pre24 = next(a for a in grid if arg(a, "norm") == "pre" and arg(a, "optim.lr") == "0.001")
    for seed, value in ((0, 30.0), (1, 50.0)):  # 1e-3 averages 40.0 over two seeds ...
        finished([a for a in pre24 if not a.startswith("seed=")], tmp_path, seed, value)
    pre24_3e3 = [a if not a.startswith("optim.lr=") else "optim.lr=0.003" for a in pre24 if not a.startswith("seed=")]
    finished(pre24_3e3, tmp_path, 0, 39.0)  # ... so one seed of 39.0 at 3e-3 is better
    at_best = expand("lr_sensitivity", seeds=(0, 1, 2), extra=(), best_from=str(tmp_path))
    chosen = {
        (arg(a, "norm"), arg(a, "model.num_layers") if "c4" in arg(a, "task") else "vit", arg(a, "seed")): arg(a, "optim.lr")
        for a in at_best
    }
    assert {k: v for k, v in chosen.items() if k[0] in ("mix", "pre")} == {
        (norm, layers, seed): lr for norm, lr in (("mix", "0.003"), ("pre", "0.003")) for layers in ("24", "12") for seed in "012"
    }
    assert len(at_best) == 2 * 2 * 3  # placements, ViT without a finished run are left out (logged)


def test_best_from_with_only_composes_just_the_matching_tasks_with_their_own_settings(tmp_path, capsys, any_data):
    """``--only task=c4_llama_71m`` with a text-only setting (``data.tokenizer``): the ViT placements are left out before
    their best lr is looked up, which would compose them with a setting they do not have."""
    grid = expand("lr_sensitivity", seeds=(0,))
    pre24 = next(a for a in grid if arg(a, "norm") == "pre" and arg(a, "optim.lr") == "0.003")
    finished([a for a in pre24 if not a.startswith("seed=")] + ["data.tokenizer=embedded"], tmp_path, 0, 39.0)
    text = ("data.tokenizer=embedded",)
    with pytest.raises(Exception, match="data.tokenizer"):  # without the filter: the ViT rows cannot take it
        expand("lr_sensitivity", seeds=(0,), extra=text, best_from=str(tmp_path))
    at_best = expand("lr_sensitivity", seeds=(0, 1), extra=text, best_from=str(tmp_path), only=("task=c4_llama_71m",))
    assert sorted((arg(a, "norm"), arg(a, "model.num_layers"), arg(a, "optim.lr"), arg(a, "seed")) for a in at_best) == [
        ("pre", layers, "0.003", seed) for layers in ("12", "24") for seed in "01"
    ]
    argv = ["reproduce", "lr_sensitivity", "--dry-run", "--best-from", str(tmp_path), "--seeds", "0,", "--only", "task=c4_llama_71m"]
    assert main([*argv, *text]) == 0
    assert {(arg(a, "norm"), arg(a, "optim.lr")) for a in listed(capsys)} == {("pre", "0.003")}


def test_placements_grid_records_count_as_finished_sweep_runs_at_the_default_lr_except_changed_inits():
    """The lr sweep reuses the placements grid's records at its default lr: a record saved before Admin's profiling init
    existed (``norm.admin_init: null``) matches the same run today, except for Admin and DyT, whose inits changed."""
    import glob

    from mixbench.training.run import run_defaults, same_run_settings

    matches = {}
    for norm, task in (("pre", "c4_llama_71m"), ("mix", "in1k_vit_tiny"), ("admin", "c4_llama_71m"), ("dyt", "in1k_vit_tiny")):
        path = sorted(glob.glob(f"results/proxy/placements/runs/{task}/*/{norm}*/seed0-*/record.json"))[0]
        record = json.loads(open(path).read())
        argv = [a for a in record["command"][2:] if not a.startswith(("results_dir=", "resume="))]
        cfg = compose([*argv, "optim.lr=0.001" if task.startswith("c4") else "optim.lr=0.004"])
        matches[norm] = same_run_settings(record["config"], cfg, run_defaults(cfg))
    assert matches == {"pre": True, "mix": True, "admin": False, "dyt": False}
