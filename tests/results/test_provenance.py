import subprocess
import sys
import time

from mixbench.results.provenance import digest_at, source_digest, which_commits


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True)


def test_source_digest_names_the_code_a_stale_checkout_ran(tmp_path):
    """A copy whose .git is stale still records which commit's code it ran: the digest of the files on disk equals the
    digest of exactly that commit, and which_commits finds it; files that are not source do not count."""
    (tmp_path / "mixbench").mkdir()
    (tmp_path / "tasks").mkdir()
    (tmp_path / "mixbench" / "model.py").write_text("x = 1\n")
    (tmp_path / "tasks" / "task.yaml").write_text("lr: 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    first = source_digest(tmp_path)
    assert first == digest_at("HEAD", tmp_path)
    (tmp_path / "mixbench" / "model.py").write_text("x = 2\n")
    (tmp_path / "mixbench" / "notes.txt").write_text("not source\n")
    second = source_digest(tmp_path)
    assert second != first
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "second")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert which_commits(second, tmp_path) == [head] and len(which_commits(first, tmp_path)) == 1


def test_peak_gpu_memory_is_said_in_gib_where_cuda_ran_counted_from_each_runs_start(monkeypatch):
    import torch

    from mixbench.results.provenance import peak_gpu_memory, reset_peak_gpu_memory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert peak_gpu_memory() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 36 * 2**30 + 2**29)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 40 * 2**30)
    assert peak_gpu_memory() == {"allocated_gib": 36.5, "reserved_gib": 40.0}
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: resets.append(1))
    reset_peak_gpu_memory()
    assert resets == [1]


def test_the_process_age_is_the_process_s_own():
    """A child that sleeps 0.3 s and imports the clock says an age between that and the parent's clock of it."""
    code = "import time; time.sleep(0.3); from mixbench.results.provenance import process_age_s; print(process_age_s())"
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    elapsed = time.perf_counter() - started
    assert 0.3 <= float(out) <= elapsed + 0.02  # /proc's start time is in 10 ms ticks
