"""The issue-21 device benches, on CPU: their `mixbench run` arguments compose (no config error on the GPU machine), and
their parsing and arithmetic (timm's log lines, epoch averages, fp8 seed pairs)."""

import argparse
import gzip
import json

import pytest
from _support.bench import bench_module
from _support.paths import REPO_ROOT

from mixbench.training.config import compose


def test_vit_e2e_and_timm_peer_arguments_compose(tmp_path):
    timm_peer = bench_module("speed", "timm_peer")
    vit_e2e = bench_module("speed", "vit_e2e")

    args = vit_e2e.parse_args([])
    for pipeline in ("cpu", "dali"):
        cfg = compose(vit_e2e.run_args(args, tmp_path, "mix", pipeline))
        assert cfg.data.pipeline == pipeline and cfg.compile.mode == "default" and cfg.norm.placement == "mix"
        assert compose(timm_peer.mixbench_args(timm_peer.parse_args([]), tmp_path, pipeline)).data.batch_size == 256
    # --variants: each row set once more with a recipe part off; later settings win over the script's own
    args = vit_e2e.parse_args(["--variants", "", "compile.mode=reduce-overhead", "mixup.mixup_alpha=0,mixup.cutmix_alpha=0"])
    recipe, graphs, no_mixup = (compose(vit_e2e.run_args(args, tmp_path, "pre", "dali", v)) for v in args.variants)
    assert recipe.mixup.cutmix_alpha == 1.0 and recipe.compile.mode == "default"
    assert graphs.compile.mode == "reduce-overhead" and graphs.mixup.cutmix_alpha == 1.0
    assert no_mixup.mixup.mixup_alpha == 0 and no_mixup.mixup.cutmix_alpha == 0


def test_fp8_pair_arguments_compose():
    fp8_pairs = bench_module("speed", "fp8_pairs")

    cfg = compose(["task=c4_llama_350m", "trainer.precision=fp8", "fp8.recipe=tensorwise", "seed=2", "compile=true"])
    assert cfg.trainer.precision == "fp8" and cfg.model.name == "llama_350m"
    assert fp8_pairs.parse_args([]).seeds == [0, 1, 2]


def test_timm_log_lines_give_each_epochs_average_rate():
    timm_peer = bench_module("speed", "timm_peer")

    log = "\n".join(
        f"Train: {e} [{i:>4d}/32 ({100 * (i + 1) / 32:>3.0f}%)]  Loss: 6.9 (6.9)  "
        f"Time: 0.12s, 2100.00/s  ({0.1 + e:.3f}s, {r:>7.2f}/s)  LR: 1e-3"
        for e, (i, r) in enumerate([(31, 1500.0), (31, 1900.5)])
    )
    assert timm_peer.timm_epoch_rates(log) == {0: (32, 1500.0), 1: (32, 1900.5)}


def test_epoch_average_skips_the_first_epoch():
    epoch_average = bench_module("speed", "harness").epoch_average

    record = {
        "throughput": {
            "epochs": [{"items": 100, "seconds": 10.0, "steps": 4, "items_per_sec": 10.0}]
            + [
                {"items": 100, "seconds": 1.0, "steps": 4, "items_per_sec": 100.0},
                {"items": 100, "seconds": 3.0, "steps": 4, "items_per_sec": 33.3},
            ]
        }
    }
    average = epoch_average(record)
    assert average["items_per_sec"] == pytest.approx(50.0) and average["steps_per_epoch"] == 4 and average["epochs_timed"] == 2


def test_fp8_pairs_summary_pays_only_when_faster_and_inside_the_noise():
    fp8_pairs = bench_module("speed", "fp8_pairs")

    def runs(speed: float, shift: float):
        return [
            {
                "seed": s,
                "precision": p,
                "status": "completed",
                "tokens_per_sec": 100.0 * (speed if p == "fp8" else 1.0),
                "val_loss": 3.0 + 0.02 * s + (shift if p == "fp8" else 0.0),
            }
            for s in range(3)
            for p in fp8_pairs.PRECISIONS
        ]

    fast = fp8_pairs.summary("llama_1b", runs(1.3, 0.01))
    assert fast["pairs"] == 3 and fast["speed_ratio"] == pytest.approx(1.3) and fast["loss_diff"] == pytest.approx(0.01) and fast["pays"]
    assert not fp8_pairs.summary("llama_1b", runs(1.1, 0.01))["pays"]
    assert not fp8_pairs.summary("llama_1b", runs(1.3, 0.2))["pays"]
    assert isinstance(fp8_pairs.parse_args(["--models", "llama_1b"]), argparse.Namespace)


def test_dali_bundle_parts_are_joined_checked_and_put_on_the_paths(tmp_path):
    """bench/device/dali_bundle.sh on a stand-in bundle (a fake nvidia.dali): parts received one call at a time are joined,
    checked against SHA256 and unpacked, and `env` puts the install on PYTHONPATH / LD_LIBRARY_PATH; a cut part is refused."""
    import hashlib
    import io
    import lzma
    import os
    import subprocess
    import tarfile

    site = tmp_path / "src"
    (site / "nvidia" / "dali").mkdir(parents=True)
    (site / "nvidia" / "dali" / "__init__.py").write_text("__version__ = 'stand-in'\n")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        tar.add(site, arcname=".")
    packed = lzma.compress(archive.getvalue())
    bundle, parts, dest = tmp_path / "bundle", tmp_path / "parts", tmp_path / "site"
    env = {**os.environ, "DALI_BUNDLE": str(bundle), "DALI_PARTS": str(parts), "DALI_SITE": str(dest)}
    script = REPO_ROOT / "bench" / "device" / "dali_bundle.sh"
    half = len(packed) // 2
    for i, chunk in enumerate((packed[:half], packed[half:])):  # one call per part: only that part is in the checkout
        bundle.mkdir(exist_ok=True)
        for old in bundle.glob("part-*"):
            old.unlink()
        (bundle / f"part-{i:02d}").write_bytes(chunk)
        (bundle / "SHA256").write_text(hashlib.sha256(packed).hexdigest() + "\n")
        assert subprocess.run(["bash", str(script), "receive"], env=env, capture_output=True, text=True).returncode == 0
    shell = f'source {script} env && echo "$PYTHONPATH|$LD_LIBRARY_PATH"'
    out = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "DALI stand-in" in out.stdout, out.stdout + out.stderr
    paths = out.stdout.strip().splitlines()[-1]
    assert paths.startswith(f"{dest}") and f"{dest}/nvidia/nvimgcodec:{dest}/nvidia/cu13/lib" in paths
    (parts / "part-01").write_bytes(packed[half:-1])  # a part cut short: refused, though an earlier bundle is unpacked
    (parts / "SHA256").write_text("0" * 64 + "\n")
    out = subprocess.run(["bash", "-c", f"source {script} env"], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "do not match SHA256" in out.stdout
    empty = {**env, "DALI_BUNDLE": str(tmp_path / "none")}
    out = subprocess.run(["bash", str(script), "receive"], env=empty, capture_output=True, text=True)
    assert out.returncode == 2 and "carry one" in out.stdout


def test_fp8_pairs_resumes_complete_pairs_of_the_same_machine_and_settings(tmp_path, monkeypatch):
    import json

    fp8_pairs = bench_module("speed", "fp8_pairs")
    harness = bench_module("speed", "harness")

    ran = []

    def fake_mixbench(self, args, gpus="0"):
        seed, precision = int(args[2].split("=")[1]), args[3].split("=")[1]
        ran.append((seed, precision))
        return {
            "status": "completed",
            "throughput": {"perf/items_per_sec": 100.0 + 30 * (precision == "fp8")},
            "metrics": {"val/loss": 3.0},
        }

    cards = {"cards": ["NVIDIA H200"], "cores_usable": 16, "cpu": "x86_64", "torch": "2", "cuda": "13"}
    monkeypatch.setattr(harness.Runner, "mixbench", fake_mixbench)
    monkeypatch.setattr(harness, "machine", lambda: cards)
    monkeypatch.setattr(fp8_pairs, "machine", lambda: cards)
    out = tmp_path / "fp8.json"
    fp8_pairs.main(["--seeds", "0", "1", "--out", str(out)])
    assert ran == [(0, "bf16-mixed"), (0, "fp8"), (1, "bf16-mixed"), (1, "fp8")]
    fp8_pairs.main(["--seeds", "0", "1", "2", "--out", str(out), "--resume"])  # only seed 2 is new
    assert ran[4:] == [(2, "bf16-mixed"), (2, "fp8")]
    summary = [r["summary"] for r in json.loads(out.read_text())["rows"] if "summary" in r][0]
    assert summary["pairs"] == 3 and summary["speed_ratio"] == pytest.approx(1.3)
    cards["cards"] = ["NVIDIA H100 80GB HBM3"]  # another machine: its pairs are not mixed in
    with pytest.raises(SystemExit, match="measured on"):
        fp8_pairs.main(["--seeds", "3", "--out", str(out), "--resume"])
    cards["cards"] = ["NVIDIA H200"]
    with pytest.raises(SystemExit, match="other settings"):
        fp8_pairs.main(["--seeds", "3", "--steps", "40", "--out", str(out), "--resume"])


def test_a_run_that_wrote_no_record_reports_the_end_of_its_output(tmp_path):
    harness = bench_module("speed", "harness")

    runner = harness.Runner(tmp_path, dry_run=False, timeout=60)
    record = runner.mixbench(["task=no_such_task_to_fail_early", "this is not a key=value"])
    assert record["status"] == "failed" and "no record; output ends:" in record["error"]
    assert len(record["error"]) > len("exit 1, no record; output ends: ")


def test_multi_gpu_reads_text_only_for_llama_rows(tmp_path, monkeypatch):
    """``--only vit_small`` needs no ``--text`` (it stops at the GPU count instead); an LLaMA row names the missing shards."""
    multi_gpu = bench_module("speed", "multi_gpu")

    monkeypatch.setattr(multi_gpu, "gpu_names", lambda: [])
    missing = str(tmp_path / "none-*.json.gz")
    with pytest.raises(SystemExit, match="needs 2 GPUs"):
        multi_gpu.main(["--only", "vit_small", "--text", missing, "--out", str(tmp_path / "m.json")])
    with pytest.raises(SystemExit, match="--text .*validation"):
        multi_gpu.main(["--only", "llama_130m", "--text", missing, "--out", str(tmp_path / "m.json")])


def test_vit_e2e_keeps_a_profiled_runs_report_beside_its_json(tmp_path):
    vit_e2e = bench_module("speed", "vit_e2e")

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "fit-profile.txt").write_text("FIT Profiler Report\n")
    (run_dir / "fit-profile.1700000000.pt.trace.json").write_text('{"traceEvents": []}')
    out = tmp_path / "results" / "vit_e2e.json"
    kept = vit_e2e.keep_profile({"run_dir": str(run_dir)}, out, 3)
    assert kept == str(tmp_path / "results" / "vit_e2e_row3_fit-profile.txt")
    assert (tmp_path / "results" / "vit_e2e_row3_fit-profile.txt").read_text() == "FIT Profiler Report\n"
    with gzip.open(tmp_path / "results" / "vit_e2e_row3_fit-profile.pt.trace.json.gz", "rt") as trace:  # the timeline, compressed
        assert json.load(trace) == {"traceEvents": []}
    assert vit_e2e.keep_profile({"status": "failed", "error": "exit 1"}, out, 4) is None


def test_trace_summary_counts_device_busy_time_once_and_per_host_action(tmp_path):
    trace_summary = bench_module("speed", "trace_summary")

    def span(cat, name, ts, dur, tid):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    events = [  # two 100 µs steps on the main thread (tid 1); a DataLoader thread's step range is not the main one
        span("user_annotation", "ProfilerStep#3", 0, 100, 1),
        span("user_annotation", "ProfilerStep#4", 100, 100, 1),
        span("user_annotation", "ProfilerStep#3", 0, 200, 9),
        span("user_annotation", "[pl][profile][Strategy]SingleDeviceStrategy.training_step", 0, 60, 1),
        span("user_annotation", "[pl][profile][_TrainingEpochLoop].train_dataloader_next", 140, 40, 1),
        span("kernel", "gemm", 10, 40, 7),  # stream 7: 10-50 and 40-80 overlap: 70 µs busy
        span("kernel", "gemm", 40, 40, 7),
        span("gpu_memcpy", "Memcpy HtoD", 60, 40, 8),  # stream 8: 60-100, half of it under stream 7's work
        span("kernel", "late", 150, 10, 7),  # during the data wait
        span("kernel", "outside", 500, 10, 7),  # after the recorded steps: not counted
    ]
    trace = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    s = trace_summary.summarise(trace_summary.load(trace))
    assert s["steps"] == 2 and s["step_ms"] == pytest.approx(0.1)
    assert s["streams_busy_ms"] == pytest.approx({"7": 0.04, "8": 0.02})  # (70 + 10) µs and 40 µs over 2 steps
    assert s["gpu_busy_ms"] == pytest.approx(0.05)  # 10-100 and 150-160: 100 µs over 2 steps
    step = s["actions"]["[Strategy]SingleDeviceStrategy.training_step"]
    assert step == {"host_ms": pytest.approx(0.03), "gpu_busy_ms": pytest.approx(0.025)}  # 0-60: busy 10-60
    assert s["actions"]["[_TrainingEpochLoop].train_dataloader_next"]["gpu_busy_ms"] == pytest.approx(0.005)
    assert "| 7 | 0.04 |" in trace_summary.markdown(s)


def test_vit_e2e_repeats_rotate_the_run_order_and_report_each_rows_median(tmp_path, monkeypatch):
    vit_e2e = bench_module("speed", "vit_e2e")

    assert [row for _, _, row in vit_e2e.rotated_rounds(["a", "b", "c"], 3)] == list("abcbcacab")  # each row first once
    order, rates = [], {"pre": [100.0, 130.0, 120.0], "mix": [200.0, 180.0, 190.0]}

    def fake_run(self, args, gpus="0"):  # a run's rate: the next one of its norm
        norm = next(a.split("=")[1] for a in args if a.startswith("norm="))
        order.append(norm)
        rate = rates[norm].pop(0)
        epochs = [{"items": 1, "seconds": 1.0, "steps": 32, "items_per_sec": 1.0}] + [
            {"items": rate, "seconds": 1.0, "steps": 32, "items_per_sec": rate}
        ] * 2
        return {"status": "completed", "throughput": {"epochs": epochs}}

    monkeypatch.setattr(vit_e2e, "write_jpegs", lambda *a: None)
    monkeypatch.setattr(vit_e2e, "model_alone", lambda args: 400.0)
    monkeypatch.setattr(vit_e2e.Runner, "mixbench", fake_run)
    out = tmp_path / "e2e.json"
    vit_e2e.main(["--pipelines", "dali", "--norms", "pre", "mix", "--repeats", "3", "--out", str(out)])
    assert order == ["pre", "mix", "mix", "pre", "pre", "mix"]
    pre, mix = json.loads(out.read_text())["rows"][1:]
    assert pre["images_per_sec"] == 120.0 and pre["spread"] == [100.0, 130.0] and pre["of_model"] == 0.3
    assert [r["position"] for r in pre["runs"]] == [1, 2, 1] and mix["images_per_sec"] == 190.0
    assert "100, 130, 120" in out.with_suffix(".md").read_text()


def test_host_contention_plan_and_summary():
    """bench/speed/host_contention.py: rounds rotate the modes; the summary takes medians and shares of the no-draw runs."""
    hc = bench_module("speed", "host_contention")

    assert hc.main(["--dry-run", "--rounds", "2"]) == 0
    order = hc.plan(2)
    assert order[:5] == list(hc.MODES) and order[5:] == [*hc.MODES[1:], hc.MODES[0]]
    units = {m: (100, 90, 110) if m == "none" else (50, 60, 55) for m in hc.MODES}
    runs = [{"mode": m, "worker_units": u, "draw_ms": 1.0, "draws_per_sec": 30.0} for m in hc.MODES for u in units[m]]
    rows = {r["mode"]: r for r in hc.summarize(runs)}
    assert rows["none"]["of_no_draws"] == 1 and rows["torch"]["worker_units"] == 55 and rows["torch"]["of_no_draws"] == 0.55


def test_step_capture_keeps_the_rows_of_a_group_cut_short(monkeypatch, tmp_path):
    """bench/speed/step_capture.py writes its JSON after every run: a device call's time limit that stops a group keeps
    the medians of the runs so far (the Markdown table only at the end)."""
    import step_capture

    rates = iter([1000.0, 1100.0, 900.0])

    class CutShort:
        def __init__(self, *args):
            pass

        def mixbench(self, argv, gpu):
            rate = next(rates, None)
            if rate is None:
                raise KeyboardInterrupt  # the call's limit
            captured = "cuda_graph_step=true" in argv
            return {"status": "completed", "throughput": {"perf/items_per_sec": rate}, "cuda_graph_step": {"captured": captured}}

    monkeypatch.setattr(step_capture, "Runner", CutShort)
    out = tmp_path / "llama.json"
    with pytest.raises(KeyboardInterrupt):
        step_capture.main(["--group", "llama_71m", "--repeats", "2", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    # rotating rounds: uncaptured, captured, then captured, uncaptured — cut after the third run
    assert [len(r.get("runs") or [None]) for r in rows] == [1, 2]
    assert rows[0]["images_per_sec"] == 1000.0 and rows[1]["images_per_sec"] == 1000.0 and rows[1]["rates"] == [1100.0, 900.0]
    assert not out.with_suffix(".md").exists()
