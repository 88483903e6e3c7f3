"""RunClock: where a run's wall time goes (the record's time_parts), on a scripted clock."""

from types import SimpleNamespace

import pytest

from mixbench.training import callbacks
from mixbench.training.callbacks import RunClock


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_parts_of_a_run_on_a_scripted_clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=SimpleNamespace(type="cpu")), state=SimpleNamespace(fn="fit"))
    run = RunClock(t0=90.0)  # 10 s before fit: data and model
    run.on_fit_start(trainer, None)
    clock.now += 2.0  # Lightning's setup
    for step in range(1, 61):
        run.on_train_batch_start(trainer, None, None, step - 1)
        clock.now += 5.0 if step == 1 else 0.5  # the first step compiles
        run.on_train_batch_end(trainer, None, None, None, step - 1)
        if step in (30, 60):  # a validation every 30 steps
            run.on_validation_start(trainer, None)
            clock.now += 3.0
            run.on_validation_end(trainer, None)
    run.on_fit_end(trainer, None)
    clock.now += 4.0  # the final validation
    parts = run.parts(steps=60, final_validation_s=4.0, wall_s=clock.now - 90.0)
    assert parts["before_fit_s"] == 10.0 and parts["setup_s"] == 2.0
    assert parts["first_steps_s"] == pytest.approx(5.0 + 9 * 0.5) and parts["first_steps_over_steady_s"] == pytest.approx(4.5)
    assert parts["validations_s"] == [3.0, 3.0] and parts["final_validation_s"] == 4.0
    assert run.windows == pytest.approx([0.5] * 4)  # windows 11-20, 21-30, 41-50, 51-60: 31-40 holds a validation
    assert parts["steady_step_s"] == pytest.approx(0.5)
    assert parts["steady_s"] == pytest.approx(30.0)
    wall = 10 + 2 + 5 + 59 * 0.5 + 6 + 4
    assert parts["wall_s"] == pytest.approx(wall) and parts["wall_over_steady"] == pytest.approx(wall / 30.0, abs=1e-3)
