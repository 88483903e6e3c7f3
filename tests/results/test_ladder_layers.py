"""The ladder's layer analyses by size (``mixbench plot ladder`` with an ``analysis/`` folder): the summary numbers,
checked by hand on small analysis files."""

import json

import pytest
from _support.paths import REPO_ROOT

from mixbench.core.errors import ConfigError
from mixbench.results.ladder_layers import read_summaries, write_layers


def write_analysis(folder, name, steps, original=None, deltas=None):
    """An analysis pair as mixbench analyze writes it: ``distance[0]`` is d(x^ℓ, x^(ℓ+1)) for ℓ = 0 … L−1."""
    folder.mkdir(parents=True, exist_ok=True)
    angular = json.loads((folder / "angular.json").read_text()) if (folder / "angular.json").exists() else []
    rows = [steps] + [[None] * len(steps) for _ in steps[1:]]  # n ≥ 2 rows: not read by the summary
    angular.append({"name": name, "distance": rows, "tokens": 1000})
    (folder / "angular.json").write_text(json.dumps(angular))
    if deltas is not None:
        prune = json.loads((folder / "prune.json").read_text()) if (folder / "prune.json").exists() else []
        prune.append({"name": name, "original": original, "delta": deltas, "metric": "val/ppl"})
        (folder / "prune.json").write_text(json.dumps(prune))


def test_the_deeper_half_means_and_the_drop_share_by_hand(tmp_path):
    small = tmp_path / "analysis" / "c4_llama_small"
    # 6 blocks, h = 3: first 0.5; early ℓ = 1, 2: (0.1 + 0.3) / 2 = 0.2; deeper ℓ = 3, 4, 5: (0.02 + 0.04 + 0.06) / 3 = 0.04
    write_analysis(small, "pre", [0.5, 0.1, 0.3, 0.02, 0.04, 0.06], original=50.0, deltas=[900.0, 3.0, 3.0, 1.0, 3.0, 20.0])
    write_analysis(small, "mix", [0.1, 0.1, 0.1, 0.08, 0.1, 0.12], original=40.0, deltas=[2.0, 2.0, 2.0, 4.0, 4.0, 30.0])
    write_analysis(tmp_path / "analysis" / "c4_llama_large", "pre", [0.5, 0.2, 0.2, 0.2])  # no prune.json: angular only
    pre, mix, large = sorted(read_summaries(tmp_path / "analysis"), key=lambda r: (r.task != "c4_llama_small", r.name != "pre"))
    assert (pre.first_step, pre.early_step, pre.deep_step) == pytest.approx((0.5, 0.2, 0.04))
    assert pre.deep_drop_share == pytest.approx((1.0 + 3.0) / 2 / 50.0)  # ℓ = 3, 4 (the last block left out) / ppl
    assert (pre.last_drop, pre.first_drop, pre.metric) == (20.0, 900.0, 50.0)
    assert mix.deep_step == pytest.approx(0.1) and mix.deep_drop_share == pytest.approx(4.0 / 40.0)
    assert large.blocks == 4 and large.deep_step == pytest.approx(0.2) and large.deep_drop_share is None and large.metric is None

    paths = write_layers(
        tmp_path / "analysis", tmp_path, {"c4_llama_small": "llama_small · 1M"}, {"c4_llama_small": 1e6, "c4_llama_large": 4e6}
    )
    assert [p.name for p in paths] == ["ladder_layers.md", "ladder_layers.png"] and paths[1].stat().st_size > 0
    md = paths[0].read_text()
    assert "| llama_small · 1M | pre | 6 | 0.500 | 0.200 | 0.040 | 50.00 | 4.0 % | 20.00 | 900.00 |" in md
    assert "| c4_llama_large | pre | 4 | 0.500 | 0.200 | 0.200 | — | — | — | — |" in md  # no label known: the task


def test_nothing_to_summarize_writes_nothing_and_a_broken_file_names_the_fix(tmp_path):
    assert write_layers(tmp_path / "missing", tmp_path, {}, {}) == []
    broken = tmp_path / "analysis" / "c4_llama_small"
    broken.mkdir(parents=True)
    (broken / "angular.json").write_text("{not json")
    with pytest.raises(ConfigError, match="mixbench reproduce ladder --analyze"):
        read_summaries(tmp_path / "analysis")


def test_plot_ladder_sums_up_the_committed_analyses_by_size(tmp_path):

    from mixbench.cli.app import main

    ladder = REPO_ROOT / "results" / "proxy" / "ladder"
    assert main(["plot", "ladder", "--results-dir", str(ladder), "--out", str(tmp_path)]) == 0
    rows = [line for line in (tmp_path / "ladder_layers.md").read_text().splitlines() if line.startswith("| llama_")]
    assert [r.split(" | ")[:3] for r in rows[:2]] == [["| llama_71m · 46.2M", "pre", "12"], ["| llama_71m · 46.2M", "mix(α=0.25)", "12"]]
    assert rows[0].split(" | ")[3:6] == ["0.489", "0.056", "0.030"]  # results/proxy/ladder/README.md quotes these
    assert (tmp_path / "ladder_layers.png").stat().st_size > 0


def test_plot_ladder_without_a_results_dir_finds_the_analyses_beside_the_default_runs_folder(tmp_path, monkeypatch):
    """``reproduce ladder --analyze`` writes ``<results_dir>/analysis``; the runs are in ``<results_dir>/runs``."""
    import shutil

    from mixbench.cli.app import main
    from mixbench.results import sources

    ladder = REPO_ROOT / "results" / "proxy" / "ladder"
    shutil.copytree(ladder / "runs" / "c4_llama_71m", tmp_path / "results" / "runs" / "c4_llama_71m")
    shutil.copytree(ladder / "analysis" / "c4_llama_71m", tmp_path / "results" / "analysis" / "c4_llama_71m")
    monkeypatch.setattr(sources, "default_runs_dir", lambda: tmp_path / "results" / "runs")
    assert main(["plot", "ladder", "--out", str(tmp_path / "out")]) == 0
    rows = [line for line in (tmp_path / "out" / "ladder_layers.md").read_text().splitlines() if line.startswith("| llama_71m")]
    assert [r.split(" | ")[1] for r in rows] == ["pre", "mix(α=0.25)"]
