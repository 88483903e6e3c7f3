"""bench/grids/search_proxy.sh: the proxy search script plans both studies (dry run)."""

from _support.paths import REPO_ROOT


def test_proxy_search_script_plans_both_studies(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = REPO_ROOT
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "GPUS": "2",
        "JOBS": "2",
        "TRIALS": "8",
        "RESULTS": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(["bash", str(root / "bench" / "grids" / "search_proxy.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("mixbench search")]
    assert len(lines) == 8 and all("--trials 2 " in line and "compile=true" in line for line in lines)  # 4 lanes × 2 studies
    llama = [line for line in lines if "--study llama24_alpha" in line]
    assert len(llama) == 4 and "model.num_layers=24 " in llama[0] and "trainer.max_steps=760 " in llama[0] and "--min-steps 380" in llama[0]
    assert "norm=" not in llama[0] and "seed=" not in llama[0]
    vit = [line for line in lines if "--study vit_plan" in line]
    assert "--space plan --kinds hybrid,sandwich --min-steps 464" in vit[0] and "data=cifar10_proxy" in vit[0]
    assert not (tmp_path / "search").exists()  # a dry run starts no study
