"""A small size ladder of hand-made LLaMA records (two sizes, three placements) for the ladder's figures and tables and
the reading commands' tests."""

from .records import lm_run

SIZES = {"s": 1_000_000, "l": 4_000_000}


def run(norm, ppl, lr, size, seed=0, status="completed"):
    """A ``llama_lm`` record (its task's default lr: 1e-3) of the model ``llama_<size>``; mix has one parameter more."""
    model = {"name": f"llama_{size}", "label": f"llama_{size}", "num_params": SIZES[size] + (norm == "mix")}
    return lm_run(norm, ppl, 3.0, lr, seed=seed, status=status, model=model)


RUNS = [
    # small: pre 30/31/32 at 1e-3; mix 27/28/29 at 1e-3 (Δ −3 [−5.27, −0.73], as in test_sweep); post at 1e-3: 40, 42
    # and a stalled seed (every lr of post has stalled seeds, 1e-3 the fewest): Δ +10, "1/3 stalled"
    *(run("pre", p, 1e-3, "s", seed=s) for s, p in enumerate([30.0, 31.0, 32.0])),
    run("pre", 35.0, 3e-3, "s"),
    *(run("mix", p, 1e-3, "s", seed=s) for s, p in enumerate([27.0, 28.0, 29.0])),
    run("mix", 33.0, 3e-4, "s"),
    run("post", 40.0, 1e-3, "s", seed=0),
    run("post", 42.0, 1e-3, "s", seed=1),
    run("post", 900.0, 1e-3, "s", seed=2, status="stalled"),
    run("post", 900.0, 3e-3, "s", status="stalled"),
    # large: pre 20/21/22 at 1e-3; mix best at 3e-4 (below the default 1e-3) with one seed: Δ −3, no interval;
    # post stalls at every lr: it breaks here
    *(run("pre", p, 1e-3, "l", seed=s) for s, p in enumerate([20.0, 21.0, 22.0])),
    run("pre", 25.0, 3e-4, "l"),
    run("mix", 18.0, 3e-4, "l"),
    run("mix", 19.5, 1e-3, "l"),
    *(run("post", 950.0, lr, "l", status="stalled") for lr in (1e-4, 3e-4, 1e-3)),
]
