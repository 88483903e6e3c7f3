import sys

import pytest

from mixbench.core.tasks import TaskError, discover_tasks


def write(root, name, text):
    (root / "tasks" / name).mkdir(parents=True)
    (root / "tasks" / name / "task.yaml").write_text(text)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "defaults.yaml").write_text("seed: 0\n")
    (tmp_path / "tasks").mkdir()
    return tmp_path


GOOD = """name: {name}
family: vision
model: vit_small
data: cifar10_embedded
metrics: [{{name: val/top1, higher_is_better: true, primary: true}}]
"""


def test_shipped_tasks_are_valid_and_declare_metric_directions():
    tasks = discover_tasks()
    assert {"vit_small", "vit_tiny", "llama_lm"} <= set(tasks)
    for task in tasks.values():
        assert task.primary_metric.name.startswith("val/")
        assert all(isinstance(m.higher_is_better, bool) for m in task.metrics)


def test_discovery_does_not_import_task_code(project):
    write(project, "alpha", GOOD.format(name="alpha"))
    (project / "tasks" / "alpha" / "task.py").write_text("raise RuntimeError('imported!')\n")
    tasks = discover_tasks(project)
    assert "mixbench_tasks.alpha" not in sys.modules
    with pytest.raises(RuntimeError, match="imported!"):
        tasks["alpha"].load_plugin()
    sys.modules.pop("mixbench_tasks.alpha", None)


def test_task_plugin_can_register_a_data_loader(project):
    from mixbench.data import get_datamodule_class

    write(project, "beta", GOOD.format(name="beta"))
    (project / "tasks" / "beta" / "task.py").write_text(
        "from mixbench.data import register_datamodule\nregister_datamodule('beta_images', 'mixbench.data.images:CifarArrayDataModule')\n"
    )
    discover_tasks(project)["beta"].load_plugin()
    assert get_datamodule_class("beta_images").__name__ == "CifarArrayDataModule"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nfamily: vision\n", "missing key"),
        (GOOD.format(name="x").replace("vision", "audio"), "family must be one of"),
        (GOOD.format(name="x").replace("primary: true", "primary: false"), "exactly one metric"),
        (GOOD.format(name="x").replace("higher_is_better: true, ", ""), "higher_is_better"),
        (GOOD.format(name="x") + "recipie: {}\n", "unknown key"),
    ],
)
def test_malformed_task_files_fail_clearly(project, text, message):
    write(project, "x", text)
    with pytest.raises(TaskError, match=message):
        discover_tasks(project)


def test_duplicate_names_and_bad_base_fail(project):
    write(project, "a", GOOD.format(name="same"))
    write(project, "b", GOOD.format(name="same"))
    with pytest.raises(TaskError, match="declared twice"):
        discover_tasks(project)


def test_base_must_exist(project):
    write(project, "child", "name: child\nbase: nothere\n")
    with pytest.raises(TaskError, match="does not exist"):
        discover_tasks(project)
