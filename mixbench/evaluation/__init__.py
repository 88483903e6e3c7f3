"""Downstream evaluation of trained runs (paper Table 2), through lm-evaluation-harness.

* :mod:`~mixbench.evaluation.scoring` — batched log-likelihoods and greedy generation with a mixbench LM (torch only);
* :mod:`~mixbench.evaluation.harness` — :class:`MixbenchLM`, the harness model class (needs ``pip install -e '.[eval]'``);
* :mod:`~mixbench.evaluation.formats` — the tasks, their harness / instruction item formats and the conversions;
* :mod:`~mixbench.evaluation.suites` — where items come from (hub, embedded sample, folders) and local harness tasks;
* :mod:`~mixbench.evaluation.runner` — ``mixbench eval``: both protocols, the summary, the run's record.

Importing this package imports neither torch nor the harness.
"""

__all__ = ["evaluate"]


def evaluate(*args, **kwargs):
    """:func:`mixbench.evaluation.runner.evaluate` (imported on first use)."""
    from .runner import evaluate as _evaluate

    return _evaluate(*args, **kwargs)
