"""Records made by hand for the results tests (tables, sweeps, interrupted runs)."""

from mixbench.results.records import SCHEMA

V = 100  # the LLaMA records' vocabulary: ℓ₀ = ln 100 = 4.60517


def lm_run(norm, ppl, loss, lr, seed=0, status="completed", **extra):
    """An LLaMA record: val/ppl (primary, ↓) and val/loss set apart, so that a test tells which one is used."""
    return {
        "schema": SCHEMA,
        "task": "llama_lm",
        "family": "lm",
        "model": {"name": "llama_tiny", "options": {"vocab_size": V}},
        "norm": {"label": norm, "placement": norm},
        "seed": seed,
        "status": status,
        "metrics": {"val/ppl": ppl, "val/loss": loss},
        "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": ppl},
        "dataset": {"name": "textmix"},
        "scale": "proxy",
        "config": {"optim": {"lr": lr}, "seed": seed},
        **extra,
    }


def record(norm, value, seed=0, status="completed", task="vit_small", metric="val/top1", hib=True, started=None, with_value=True):
    """A minimal (ViT) record; ``with_value=False`` leaves the primary metric out of ``metrics``."""
    return {
        "schema": SCHEMA,
        "task": task,
        "family": "vision",
        "model": {"name": task},
        "norm": {"label": norm, "placement": norm},
        "seed": seed,
        "status": status,
        "metrics": {metric: value} if with_value else {},
        "scale": "embedded",
        "primary_metric": {"name": metric, "higher_is_better": hib, "value": value if with_value else None},
        "dataset": {"name": "cifar10_embedded"},
        "started_at": started,
    }


def with_validations(r, steps_values, total=100, **extra):
    """``r`` with validations inside fit at ``(step, value)`` pairs of a ``total``-step budget."""
    metric = r["primary_metric"]["name"]
    return {
        **r,
        "budget": {"total_steps": total},
        **extra,
        "validations": [{"step": s, "fraction": s / total, "metrics": {metric: v}} for s, v in steps_values],
    }
