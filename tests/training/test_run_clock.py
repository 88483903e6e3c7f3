"""RunClock: where a run's wall time goes (the record's time_parts), on a scripted clock."""

import statistics
from types import SimpleNamespace

import pytest

from mixbench.training import callbacks
from mixbench.training.callbacks import RunClock


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def trainer(sanity_checking=False):
    device = SimpleNamespace(root_device=SimpleNamespace(type="cpu"))
    return SimpleNamespace(strategy=device, state=SimpleNamespace(fn="fit"), sanity_checking=sanity_checking)


def validate(run, clock, seconds, sanity_checking=False):
    run.on_validation_start(trainer(sanity_checking), None)
    clock.now += seconds
    run.on_validation_end(trainer(sanity_checking), None)


def scripted_run(monkeypatch, steps: int, every: int, step_s=0.5, validation_s=3.0, slow_steps=(), global_step=None):
    """A run on a scripted clock: 10 s before fit, 2 s of setup (with a 1 s sanity check), a 5 s first step, the others
    ``step_s`` (or 2 s at ``slow_steps``), a ``validation_s`` validation every ``every`` steps, 1 s to the loop's end,
    0.25 s of teardown, a 4 s final validation, 0.25 s for the record.  ``global_step``: the step it ends at (a resumed
    run's is more than the ``steps`` it ran)."""
    clock = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    run = RunClock(t0=90.0)
    run.on_fit_start(trainer(), None)
    clock.now += 1.0
    validate(run, clock, 1.0, sanity_checking=True)  # Lightning's sanity check: setup's, no validation of the run
    for step in range(1, steps + 1):
        run.on_train_batch_start(trainer(), None, None, step - 1)
        clock.now += 5.0 if step == 1 else 2.0 if step in slow_steps else step_s
        run.on_train_batch_end(trainer(), None, None, None, step - 1)
        if step % every == 0:
            validate(run, clock, validation_s)
    clock.now += 1.0  # the loop's end
    run.on_train_end(trainer(), None)
    clock.now += 0.25  # Lightning's teardown (the model to the CPU), then on_fit_end
    run.on_fit_end(trainer(), None)
    clock.now += 4.0  # the final validation
    clock.now += 0.25  # the record
    return run, run.parts(steps=global_step or steps, final_validation_s=4.0, wall_s=clock.now - 90.0, before_run_s=7.25)


def test_the_parts_of_a_run_on_a_scripted_clock(monkeypatch):
    run, parts = scripted_run(monkeypatch, steps=60, every=30)
    assert parts["before_run_s"] == 7.25 and parts["before_fit_s"] == 10.0 and parts["setup_s"] == 2.0
    assert parts["first_steps_s"] == pytest.approx(5.0 + 9 * 0.5) and parts["first_steps_over_steady_s"] == pytest.approx(4.5)
    assert parts["validations_s"] == [3.0, 3.0] and parts["final_validation_s"] == 4.0  # the sanity check is not one
    assert run.windows == pytest.approx([0.5] * 5)  # 11-20, 21-30, then (after the validation) 31-40, 41-50, 51-60
    assert parts["steady_step_s"] == pytest.approx(0.5) and parts["steady_s"] == pytest.approx(30.0)
    assert parts["later_steps_s"] == pytest.approx(50 * 0.5 + 1.0) and parts["step_excess_s"] == pytest.approx(1.0)
    assert parts["after_fit_s"] == pytest.approx(0.5)  # the teardown after on_train_end, and the record
    wall = 10 + 2 + 5 + 59 * 0.5 + 6 + 1 + 0.25 + 4 + 0.25
    assert parts["wall_s"] == pytest.approx(wall) and parts["wall_over_steady"] == pytest.approx(wall / 30.0, abs=1e-3)
    pieces = ("before_fit_s", "setup_s", "first_steps_s", "later_steps_s", "final_validation_s", "after_fit_s")
    assert sum(parts[k] for k in pieces) + sum(parts["validations_s"]) == pytest.approx(parts["wall_s"])


def test_a_resumed_run_counts_the_batches_it_ran(monkeypatch):
    """Resumed at step 940 and run to 1000: its steady time, excess and ratio are of the 60 batches this process ran."""
    run, parts = scripted_run(monkeypatch, steps=60, every=30, global_step=1000)
    assert parts["steps"] == 1000 and parts["batches"] == 60
    assert parts["steady_s"] == pytest.approx(30.0) and parts["step_excess_s"] == pytest.approx(1.0)
    assert parts["wall_over_steady"] == pytest.approx(parts["wall_s"] / 30.0, abs=1e-3)


def test_a_run_shorter_than_a_window_puts_its_loop_in_the_first_steps(monkeypatch):
    run, parts = scripted_run(monkeypatch, steps=4, every=100)
    assert parts["first_steps"] == 4 and parts["first_steps_s"] == pytest.approx(5.0 + 3 * 0.5 + 1.0)
    assert parts["later_steps_s"] == 0.0 and parts["steady_step_s"] is None and "wall_over_steady" not in parts
    pieces = ("before_fit_s", "setup_s", "first_steps_s", "later_steps_s", "final_validation_s", "after_fit_s")
    assert sum(parts[k] for k in pieces) == pytest.approx(parts["wall_s"])


def test_a_short_run_with_close_validations_still_has_a_steady_step(monkeypatch):
    """48 steps with a validation every 12 (the bench's short run): each 10-step window from the end of the first steps
    holds a validation, so only the windows started after a validation (13-22, 25-34, 37-46) measure the steps."""
    run, parts = scripted_run(monkeypatch, steps=48, every=12)
    assert run.windows == pytest.approx([0.5] * 3) and parts["steady_step_s"] == pytest.approx(0.5)
    assert parts["validations_s"] == [3.0] * 4


def test_slow_steps_count_as_excess_not_as_the_steady_step(monkeypatch):
    run, parts = scripted_run(monkeypatch, steps=60, every=30, slow_steps=(35,))  # one step waits 1.5 s more on data
    assert parts["steady_step_s"] == pytest.approx(0.5)  # the median window
    assert sorted(run.windows)[-1] == pytest.approx(0.65)  # the window 31-40 holds it
    assert parts["step_excess_s"] == pytest.approx(1.0 + 1.5)


def test_the_record_keeps_the_step_to_five_digits_and_the_ratio_to_three(monkeypatch):
    run, parts = scripted_run(monkeypatch, steps=60, every=30, step_s=0.1234567)
    assert parts["steady_step_s"] == 0.12346
    wall = 10 + 2 + 5 + 59 * 0.1234567 + 2 * 3.0 + 1 + 0.25 + 4 + 0.25  # the scripted run's, unrounded
    ratio = wall / (statistics.median(run.windows) * 60)  # 4.83083…
    assert parts["wall_over_steady"] == round(ratio, 3) == 4.831


def test_without_a_final_validation_the_rest_after_the_loop_is_teardown(monkeypatch):
    run, _ = scripted_run(monkeypatch, steps=20, every=100)
    parts = run.parts(steps=20, final_validation_s=None, wall_s=40.0)  # the loop ended 90 + 10 + 2 + 5 + 19·0.5 + 1 = 117.5 − 90
    assert parts["final_validation_s"] is None and parts["after_fit_s"] == pytest.approx(40.0 - 27.5)


def test_parts_of_a_fit_that_ran_no_batch_say_none_rather_than_fail(monkeypatch):
    """A resume at its last step runs no batch; a record is still written, so parts never raises on missing hooks."""
    clock = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    untouched = RunClock(t0=90.0).parts(steps=0, final_validation_s=None, wall_s=20.0)
    assert all(untouched[k] is None for k in ("before_fit_s", "setup_s", "first_steps_s", "later_steps_s", "after_fit_s"))
    run = RunClock(t0=90.0)
    run.on_fit_start(trainer(), None)
    clock.now += 2.0
    run.on_train_end(trainer(), None)
    parts = run.parts(steps=764, final_validation_s=3.0, wall_s=16.0)
    assert parts["before_fit_s"] == 10.0 and parts["setup_s"] is None and parts["first_steps_s"] is None
    assert parts["later_steps_s"] is None and parts["after_fit_s"] == pytest.approx(16.0 - 12.0 - 3.0)
    assert parts["batches"] == 0 and parts["steady_s"] is None and "wall_over_steady" not in parts


def test_parts_of_a_loop_that_never_reached_its_end_leave_the_loops_rest_open(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    run = RunClock(t0=90.0)
    run.on_fit_start(trainer(), None)
    for step in range(30):
        run.on_train_batch_start(trainer(), None, None, step)
        clock.now += 0.5
        run.on_train_batch_end(trainer(), None, None, None, step)
    parts = run.parts(steps=30, final_validation_s=None, wall_s=30.0)  # on_train_end never came
    assert parts["steady_step_s"] == pytest.approx(0.5) and parts["first_steps_s"] == pytest.approx(5.0)
    assert parts["step_excess_s"] is None and parts["after_fit_s"] is None
