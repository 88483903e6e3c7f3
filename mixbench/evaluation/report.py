"""What downstream accuracies over seeds support: each task's floors and each placement's difference from a baseline.

Small models sit near the floors of multiple-choice tasks, so an accuracy means something only next to them:

* **chance** — the expected accuracy of a uniform random pick, ``mean over items of 1 / (number of choices)``;
* **majority** — the accuracy of always giving the most common gold answer (label, letter or option position),
  ``max_a #{items with gold a} / n``.  A model that always answers "no" on BoolQ scores BoolQ's share of "no".

Per placement and task: the mean ± std over seeds of the harness accuracy, the mean of the harness's own standard error
(the test set's sampling error of one run), and the difference from the baseline placement with Welch's 95 % interval
over seeds (:func:`mixbench.results.stats.welch_interval`).  Runs whose fine-tuning diverged are counted and shown, never dropped.
"""

from __future__ import annotations

from collections import Counter

from ..results.stats import mean_std, welch_interval
from .suites import find_task_data


def gold_and_choices(task: str, doc: dict) -> tuple[str, int]:
    """The gold answer of a harness-format ``doc`` of ``task`` and its number of choices."""
    if task in ("boolq", "piqa"):
        return str(doc["label"]), 2
    if task == "winogrande":
        return str(doc["answer"]), 2
    if task == "social_iqa":
        return str(doc["label"]), 3
    if task == "hellaswag":
        return str(doc["label"]), len(doc["endings"])
    if task == "mmlu":
        return str(doc["answer"]), len(doc["choices"])
    if task in ("arc_easy", "arc_challenge", "openbookqa"):
        return str(doc["answerKey"]), len(doc["choices"]["text"])
    raise ValueError(f"no gold-answer rule for task {task!r}")


def task_floors(task: str, sources: list[str]) -> dict:
    """``{n, chance, majority, majority_answer, file}`` (accuracies in %) of ``task``'s items as evaluated from ``sources``."""
    data = find_task_data(task, sources)
    golds = [gold_and_choices(task, doc) for doc in data.harness_docs()]
    answer, count = Counter(g for g, _ in golds).most_common(1)[0]
    return {
        "n": len(golds),
        "chance": 100 * sum(1 / c for _, c in golds) / len(golds),
        "majority": 100 * count / len(golds),
        "majority_answer": answer,
        "file": data.describe()["file"],
    }


def _percent(records: list[dict], metric: str) -> list[float]:
    """``metric`` (e.g. ``eval/boolq/acc``) × 100 of every record that has it."""
    return [100 * r["metrics"][metric] for r in records if metric in r.get("metrics", {})]


def _fmt(mean: float | None, sd: float | None) -> str:
    return "–" if mean is None else f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def seeds_report(groups: dict[str, list[dict]], tasks: list[str], floors: dict[str, dict], baseline: str) -> str:
    """Markdown: a floors table, per-placement accuracy (mean ± std over seeds, mean harness stderr, diverged count,
    whether the mean clears the majority level) and Welch 95 % intervals of each placement minus ``baseline``."""
    lines = ["| task | items | chance | majority (answer) |", "|---|---|---|---|"] if floors else []
    lines += [f"| {t} | {f['n']} | {f['chance']:.2f} | {f['majority']:.2f} ({f['majority_answer']}) |" for t, f in floors.items()]
    lines += [""] * bool(floors) + ["| placement | seeds (SFT diverged) | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    for name, recs in groups.items():
        diverged = sum(r.get("status") == "diverged" for r in recs)
        cells = []
        for task in tasks:
            mean, sd = mean_std(_percent(recs, f"eval/{task}/acc"))
            se, _ = mean_std(_percent(recs, f"eval/{task}/acc_stderr"))
            mark = "" if mean is None or task not in floors else " ▲" if mean > floors[task]["majority"] else " ▽"
            cells.append(f"{_fmt(mean, sd)}{mark}" + (f" (se {se:.2f})" if se is not None else ""))
        lines.append(f"| {name} | {len(recs)} ({diverged} diverged) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "▲ / ▽: the mean is above / at or below the majority-class level (a position, not a test: compare the gap",
        "with se).  se: the harness's standard error of one run's accuracy (test-set sampling), averaged over seeds.",
        "",
    ]
    if baseline in groups:
        comparisons = (len(groups) - 1) * len(tasks)
        lines += [
            f"Difference from {baseline}, Welch 95 % interval over seeds (\\* = excludes 0).  With {comparisons} intervals,",
            f"about {0.05 * comparisons:.1f} would exclude 0 by chance alone if no placement differed.",
            "",
            "| placement − " + baseline + " | " + " | ".join(tasks) + " |",
            "|---|" + "---|" * len(tasks),
        ]
        for name, recs in groups.items():
            if name == baseline:
                continue
            cells = []
            for task in tasks:
                a, b = _percent(recs, f"eval/{task}/acc"), _percent(groups[baseline], f"eval/{task}/acc")
                if len(a) < 2 or len(b) < 2:
                    cells.append("–")
                    continue
                iv = welch_interval(a, b)
                cells.append(f"{iv.diff:+.2f} [{iv.low:+.2f}, {iv.high:+.2f}]" + ("\\*" if iv.significant else ""))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
