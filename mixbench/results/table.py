"""Result records (one JSON per run, written atomically), their aggregation into comparison tables (counted by seed,
with differences from a baseline row and Welch confidence intervals) and pandas views of them."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError, MixbenchError
from ..core.settings import flat_settings
from . import stats

SCHEMA = "mixbench.result/1"
REQUIRED = ("schema", "task", "model", "norm", "seed", "status", "metrics", "primary_metric", "dataset", "scale")
STATUSES = ("completed", "diverged", "stalled", "failed", "pruned")  # pruned: a search trial its pruner stopped early


class RecordError(MixbenchError):
    """A results file is malformed."""


def write_record(record: dict, path: str | Path) -> Path:
    """Write ``record`` as JSON via a temp file in the same folder + rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, sort_keys=False, default=str, allow_nan=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_record(path: str | Path) -> dict:
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: expected a JSON object")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise RecordError(f"{path}: missing field(s) {missing}")
    if record["schema"] != SCHEMA:
        raise RecordError(f"{path}: unknown schema {record['schema']!r} (expected {SCHEMA})")
    if record["status"] not in STATUSES:
        raise RecordError(f"{path}: unknown status {record['status']!r}")
    pm = record["primary_metric"]
    if not isinstance(pm, dict) or not {"name", "higher_is_better"} <= set(pm):
        raise RecordError(f"{path}: primary_metric needs name and higher_is_better")
    return record


def load_records(results_dir: str | Path) -> tuple[list[dict], list[str]]:
    """Every ``record.json`` under ``results_dir``; unreadable ones are returned as problem messages."""
    records, problems = [], []
    for path in sorted(Path(results_dir).rglob("record.json")):
        try:
            record = read_record(path)
        except RecordError as err:
            problems.append(str(err))
            continue
        record["_path"] = str(path)
        records.append(record)
    return annotate_recipes(records), problems


def load_records_frame(results_dir: str | Path):
    """``(records_frame(records), problems)`` of :func:`load_records`: one DataFrame row per run."""
    records, problems = load_records(results_dir)
    return records_frame(records), problems


# ---------------------------------------------------------------- one record → its outcome and value


def primary_value(record: dict):
    """The record's primary metric as stored in ``metrics`` (else ``primary_metric.value``); may be None or NaN."""
    name = record["primary_metric"]["name"]
    metrics = record["metrics"] if isinstance(record["metrics"], dict) else {}
    return metrics.get(name, record["primary_metric"].get("value"))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def outcome(record: dict) -> str:
    """``completed`` (with a finite primary metric), ``diverged``, ``stalled`` or ``failed`` (crashed).  A record that
    says ``completed`` without a finite primary metric counts as ``diverged``."""
    status = record["status"]
    if status == "completed":
        return "completed" if _finite(primary_value(record)) else "diverged"
    return status


def _seed_key(seed):
    try:
        hash(seed)
    except TypeError:
        return json.dumps(seed, sort_keys=True, default=str)
    return seed


def _time_order(record: dict) -> tuple[str, str]:
    """Records in the order they were made: ``started_at`` (ISO, UTC), then the file path."""
    return str(record.get("started_at") or record.get("finished_at") or ""), str(record.get("_path", ""))


# ---------------------------------------------------------------- one table cell: the records of one norm × column


@dataclass
class Delta:
    """``diff = mean(cell) − mean(baseline)``; ``low``/``high``/``dof``: Welch's interval (None when either cell
    has fewer than 2 finished seeds)."""

    baseline: str
    diff: float
    low: float | None = None
    high: float | None = None
    dof: float | None = None

    @property
    def significant(self) -> bool | None:
        return None if self.low is None else stats.excludes_zero(self.low, self.high)


@dataclass
class Cell:
    """The records of one configuration, counted by seed.

    Records with the same seed are *repeats* (re-runs of the same configuration), not independent samples.  Each
    seed has one outcome: that of its latest record (by ``started_at``) that did not crash — a ``failed`` record
    is a crash, not a training outcome, so it decides only when every record of the seed failed.  A seed whose
    outcome is ``completed`` contributes one sample: the mean primary metric of its completed records.  ``mean`` /
    ``std`` are over those samples, i.e. over the finished seeds only.
    """

    samples: dict = field(default_factory=dict)  # seed → value (finished seeds; repeats averaged)
    outcomes: dict = field(default_factory=dict)  # seed → completed | diverged | stalled | failed
    records: int = 0
    delta: Delta | None = None

    @classmethod
    def from_records(cls, records: list[dict]) -> Cell:
        by_seed: dict = {}
        for r in sorted(records, key=_time_order):
            by_seed.setdefault(_seed_key(r["seed"]), []).append(r)
        cell = cls(records=len(records))
        for seed, recs in by_seed.items():
            outcomes = [outcome(r) for r in recs]
            decisive = [o for o in outcomes if o != "failed"]
            cell.outcomes[seed] = decisive[-1] if decisive else "failed"
            if cell.outcomes[seed] == "completed":
                cell.samples[seed] = statistics.fmean(float(primary_value(r)) for r, o in zip(recs, outcomes) if o == "completed")
        return cell

    @property
    def values(self) -> list[float]:
        return list(self.samples.values())

    @property
    def n(self) -> int:
        """Finished seeds (the samples)."""
        return len(self.samples)

    @property
    def n_seeds(self) -> int:
        """Distinct seeds, whatever their outcome."""
        return len(self.outcomes)

    @property
    def repeats(self) -> int:
        """Records beyond one per seed."""
        return self.records - self.n_seeds

    def count(self, what: str) -> int:
        return sum(o == what for o in self.outcomes.values())

    @property
    def diverged(self) -> int:
        return self.count("diverged")

    @property
    def stalled(self) -> int:
        return self.count("stalled")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def mean(self) -> float | None:
        return stats.mean_std(self.values)[0]

    @property
    def std(self) -> float | None:
        return stats.mean_std(self.values)[1]

    def summary(self, digits: int = 2) -> str:
        """``mean ± std (n=…)`` and the seeds that did not finish, e.g. ``30.13 ± 0.41 (n=2) 1/3 diverged``."""
        parts = []
        if self.values:
            s = _num(self.mean, digits) + (f" ± {_num(self.std, digits)}" if self.std is not None else "")
            n = f"n={self.n}" + (f" seed{'s' * (self.n != 1)}, {_repeats(self.repeats)}" if self.repeats else "")
            parts.append(f"{s} ({n})")
        parts += [f"{self.count(o)}/{self.n_seeds} {o}" for o in NOT_FINISHED if self.count(o)]
        if not self.values and self.repeats:
            parts.append(f"({_repeats(self.repeats)})")
        return " ".join(parts)

    def delta_text(self, digits: int = 2) -> str:
        """``Δ −0.52 [−0.90, −0.14]*`` (``*``: the interval excludes 0); ``Δ −0.52`` without an interval."""
        if self.delta is None:
            return ""
        d = self.delta
        s = f"Δ {'+' if d.diff >= 0 else '−'}{abs(d.diff):.{digits}f}"
        if d.low is not None:
            s += f" [{_num(d.low, digits)}, {_num(d.high, digits)}]" + ("*" if d.significant else "")
        return s

    def text(self, digits: int = 2, sep: str = " ") -> str:
        return sep.join(t for t in (self.summary(digits), self.delta_text(digits)) if t)


NOT_FINISHED = ("diverged", "stalled", "failed", "pruned")


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}".replace("-", "−")


def _repeats(k: int) -> str:
    return f"{k} repeat{'s' * (k != 1)}"


# ---------------------------------------------------------------- the table: rows = norm, columns = task · model · dataset [scale]


@dataclass
class Table:
    columns: list[str]
    rows: list[str]
    cells: dict[tuple[str, str], Cell]
    metric_of: dict[str, str]
    higher_is_better: dict[str, bool]
    best: dict[str, str]
    info: dict[str, dict] = field(default_factory=dict)  # column → task, model, dataset, scale
    baseline: str | None = None  # as asked for (--baseline)
    baseline_of: dict[str, str | None] = field(default_factory=dict)  # column → the row used as its baseline
    confidence: float = 0.95


def model_label(record: dict) -> str:
    """The model's label, plus ``+fp8(<recipe>)`` for a run whose matmuls were float8: its numbers differ from the
    bf16 run of the same seed, so the two never share a table cell as repeats."""
    model = record["model"]
    label = model.get("label", model.get("name", "?")) if isinstance(model, dict) else str(model)
    fp8 = record.get("fp8")
    return label + (f"+fp8({fp8.get('recipe', '?')})" if isinstance(fp8, dict) else "")


def dataset_name(record: dict) -> str:
    data = record["dataset"]
    return data.get("name", "?") if isinstance(data, dict) else str(data)


# config settings that say where and how a run ran, not what it trained: never a reason to split a column
NOT_RECIPE = (
    "seed",
    "run_dir",
    "results_dir",
    "resume",
    "resume_from",
    "command",
    "slurm",
    "save_weights",
    "checkpoint",
    "logger",
    "logger_options",
    "grad_norm_every_n_steps",
    "divergence",
    "compile",
    "init_from",
    "norm",
    "choices",
    "task",
    "ddp",
    "fsdp",
    "data.path",
    "data.num_workers",
    "data.cache_dir",
    "data.eval_batch_size",
    "data.pin_memory",
    "data.persistent_workers",
    "data.prefetch_factor",
    "data.pipeline",
    "trainer.enable_progress_bar",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.log_every_n_steps",
    "trainer.deterministic",
    "trainer.benchmark",
)


def _is_recipe(key: str) -> bool:
    return not any(key == k or key.startswith(k + ".") for k in NOT_RECIPE)


def annotate_recipes(records: list[dict]) -> list[dict]:
    """Set each record's ``_recipe``: the training settings (``optim.lr=0.008``, ``model.attention_backend=math``…)
    that differ between runs of one norm in one column, so that such runs get columns of their own instead of being
    averaged as if they were seeds of one configuration.  Settings that differ only between norms (a placement's own
    options) do not split a column; a setting a record lacks (written before it existed) is left out of its label."""
    settings = [{k: v for k, v in flat_settings(r.get("config") or {}).items() if _is_recipe(k)} for r in records]
    varying: dict[str, set[str]] = {}  # base column → settings that differ inside one of its cells
    cells: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(records):
        cells.setdefault((row_key(r), _base_column_key(r)), []).append(i)
    for (_, column), members in cells.items():
        keys = set().union(*(settings[i].keys() for i in members))
        for key in keys:
            values = {repr(settings[i][key]) for i in members if key in settings[i]}
            if len(values) > 1:
                varying.setdefault(column, set()).add(key)
    for r, mine in zip(records, settings):
        keys = sorted(varying.get(_base_column_key(r), ()))
        r["_recipe"] = ", ".join(f"{k}={mine[k]}" for k in keys if k in mine)
    return records


def with_recipes(records: list[dict]) -> list[dict]:
    """``records`` as :func:`load_records` returns them (``_recipe`` set); records built elsewhere are annotated as
    copies."""
    return records if all("_recipe" in r for r in records) else annotate_recipes([dict(r) for r in records])


def _base_column_key(record: dict) -> str:
    return f"{record['task']} · {model_label(record)} · {dataset_name(record)} [{record['scale']}]"


def column_key(record: dict) -> str:
    """task · model · dataset [scale], then the training settings that set this run apart (:func:`annotate_recipes`)
    and the budget fraction of a ``--at`` view."""
    budget = record.get("_at_budget")
    recipe = record.get("_recipe")
    return _base_column_key(record) + (f" · {recipe}" if recipe else "") + (f" @{budget:.2f}" if budget is not None else "")


BUDGET_TOLERANCE = 0.02  # a validation counts as "at fraction f of the budget" within ±2 % of the budget


def at_budget(record: dict, fraction: float) -> dict | None:
    """A view of ``record`` at ``fraction`` of its training budget (``mixbench table --at``), or None where the run has
    no validation there (within :data:`BUDGET_TOLERANCE`; older records have none).

    ``fraction`` 1: the record as it is (its final validation and status).  Below 1: the metrics of the validation
    inside ``fit`` at that fraction (``record["validations"]``).  A run that never beat chance stays ``stalled`` and a
    crash stays ``failed`` in every column; a run that diverged counts as ``completed`` at the budgets it reached with
    a finite metric before it blew up, and as ``diverged`` after."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"--at takes budget fractions in (0, 1], got {fraction}")
    view = {**record, "_at_budget": fraction}
    if fraction >= 1.0 - BUDGET_TOLERANCE:
        return view
    if record["status"] in ("stalled", "failed"):
        return view
    nearby = [
        v for v in record.get("validations") or [] if v.get("fraction") is not None and abs(v["fraction"] - fraction) <= BUDGET_TOLERANCE
    ]
    validation = min(nearby, key=lambda v: abs(v["fraction"] - fraction)) if nearby else None
    value = validation["metrics"].get(record["primary_metric"]["name"]) if validation else None
    diverged_at = (record.get("divergence") or {}).get("step")
    if _finite(value) and (record["status"] != "diverged" or diverged_at is None or validation["step"] <= diverged_at):
        return {
            **view,
            "status": "completed",
            "metrics": validation["metrics"],
            "primary_metric": {**record["primary_metric"], "value": value},
        }
    return view if record["status"] == "diverged" else None  # diverged before this budget; else no validation here


def budget_views(records: list[dict], fractions: list[float]) -> list[dict]:
    """Every record at each budget fraction (:func:`at_budget`): one table column per column and fraction."""
    return [view for fraction in fractions for r in records if (view := at_budget(r, fraction)) is not None]


def row_key(record: dict) -> str:
    norm = record["norm"]
    return norm.get("label", norm.get("placement", "?")) if isinstance(norm, dict) else str(norm)


def find_baseline(baseline: str | None, rows: list[str]) -> str | None:
    """The row of ``rows`` that is ``baseline``: the row labelled exactly so, else the one row whose label is
    ``baseline`` followed by its parameters in parentheses (``mix`` → ``mix(α=0.25)``; ``pre`` never picks
    ``pre[layernorm]``).  None when there is none; several matches are an error (give the label exactly)."""
    if not baseline:
        return None
    if baseline in rows:
        return baseline
    matches = [r for r in rows if r.startswith(baseline + "(")]
    if len(matches) > 1:
        raise ConfigError(f"--baseline {baseline} matches several rows ({', '.join(matches)}); give one of them exactly")
    return matches[0] if matches else None


def aggregate(records: list[dict], baseline: str | None = "pre", confidence: float = 0.95) -> Table:
    """Rows = norm, columns = task · model · dataset [scale]; cell = the primary metric over seeds (:class:`Cell`),
    with its difference from the ``baseline`` row of its column and Welch's ``confidence`` interval."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0, 1), got {confidence}")
    groups: dict[tuple[str, str], list[dict]] = {}
    metric_of, hib, info = {}, {}, {}
    records = with_recipes(records)
    for r in records:
        col = column_key(r)
        metric_of.setdefault(col, r["primary_metric"]["name"])
        hib.setdefault(col, bool(r["primary_metric"]["higher_is_better"]))
        info.setdefault(
            col,
            {
                "task": r["task"],
                "model": model_label(r),
                "dataset": dataset_name(r),
                "scale": r["scale"],
                "recipe": r.get("_recipe") or None,
                **({"budget": r["_at_budget"]} if r.get("_at_budget") is not None else {}),
            },
        )
        groups.setdefault((row_key(r), col), []).append(r)
    cells = {key: Cell.from_records(recs) for key, recs in groups.items()}
    columns = sorted(metric_of)
    order = {"pre": 0, "post": 1, "mix": 2}
    rows = sorted({row for row, _ in cells}, key=lambda n: (order.get(n.split("(")[0].split("[")[0], 3), n))
    best, baseline_of = {}, {}
    for col in columns:
        in_col = [row for row in rows if (row, col) in cells]
        scored = [(cells[(row, col)].mean, row) for row in in_col if cells[(row, col)].mean is not None]
        if scored:
            best[col] = (max if hib[col] else min)(scored)[1]
        base_row = baseline_of[col] = find_baseline(baseline, in_col)
        base = cells.get((base_row, col))
        if base is None or not base.values:
            continue
        for row in in_col:
            cell = cells[(row, col)]
            if row == base_row or not cell.values:
                continue
            if cell.n >= 2 and base.n >= 2:
                diff, low, high, dof = stats.welch_interval(cell.values, base.values, confidence)
                cell.delta = Delta(base_row, diff, low, high, dof)
            else:
                cell.delta = Delta(base_row, cell.mean - base.mean)
    return Table(columns, rows, cells, metric_of, hib, best, info, baseline, baseline_of, confidence)


# ---------------------------------------------------------------- outputs


def legend(table: Table, best: str = "bold") -> str:
    """What the cells say, for under the table (``best``: how the best cell of a column is marked)."""
    used = sorted({b for b in table.baseline_of.values() if b})
    text = "mean ± std over seeds, n = seeds that finished (records of one seed are repeats, averaged into one sample). "
    if used:
        text += (
            f"Δ = mean − mean of the baseline row ({' / '.join(used)}) of the column, [low, high] = its Welch "
            f"{100 * table.confidence:g} % confidence interval (Welch–Satterthwaite dof; none when either cell has "
            "fewer than 2 finished seeds), * = the interval excludes 0. "
        )
    elif table.baseline:
        text += f"No baseline row {table.baseline!r} in any column: no Δ. "
    return text + (
        "k/n diverged (likewise stalled, pruned = a search trial its pruner stopped early, and failed = crashed) "
        "= k of the cell's n seeds ended so (a seed's latest record decides); the mean is over the finished seeds "
        f"only. {best} = best mean of the column."
    )


def _header(table: Table, col: str) -> str:
    arrow = "↑" if table.higher_is_better[col] else "↓"
    return f"{col} {table.metric_of[col]} {arrow}"


def _cell_text(table: Table, row: str, col: str) -> str:
    cell = table.cells.get((row, col))
    return "" if cell is None else cell.text()


CELL_FIELDS = (
    "norm",
    "task",
    "model",
    "dataset",
    "scale",
    "recipe",
    "budget",
    "metric",
    "higher_is_better",
    "mean",
    "std",
    "n",
    "n_seeds",
    "records",
    "repeats",
    "diverged",
    "stalled",
    "failed",
    "baseline",
    "delta",
    "ci_low",
    "ci_high",
    "dof",
    "confidence",
    "significant",
    "best",
)


def cell_rows(table: Table) -> list[dict]:
    """One dict per table cell with the numbers behind its text (keys :data:`CELL_FIELDS`; None where blank)."""
    out = []
    for col in table.columns:
        for row in table.rows:
            cell = table.cells.get((row, col))
            if cell is None:
                continue
            d = cell.delta
            out.append(
                {
                    "norm": row,
                    **table.info.get(col, {}),
                    "metric": table.metric_of[col],
                    "higher_is_better": table.higher_is_better[col],
                    "mean": cell.mean,
                    "std": cell.std,
                    "n": cell.n,
                    "n_seeds": cell.n_seeds,
                    "records": cell.records,
                    "repeats": cell.repeats,
                    "diverged": cell.diverged,
                    "stalled": cell.stalled,
                    "failed": cell.failed,
                    "baseline": table.baseline_of.get(col),
                    "delta": d.diff if d else None,
                    "ci_low": d.low if d else None,
                    "ci_high": d.high if d else None,
                    "dof": d.dof if d else None,
                    "confidence": table.confidence if d and d.low is not None else None,
                    "significant": d.significant if d else None,
                    "best": table.best.get(col) == row,
                }
            )
    return out


def cells_frame(table: Table):
    """:func:`cell_rows` as a pandas DataFrame."""
    import pandas as pd

    frame = pd.DataFrame(cell_rows(table), columns=list(CELL_FIELDS))
    frame["significant"] = frame["significant"].astype("boolean")  # True / False / <NA> (no interval)
    return frame


def _csv(rows: list[dict], fields) -> str:
    """CSV with blank cells for None and 1/0 for booleans: every number column parses as float."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(fields)
    for row in rows:
        writer.writerow(
            [
                "" if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) if isinstance(v, bool) else v
                for v in (row.get(f) for f in fields)
            ]
        )
    return buf.getvalue()


def render(table: Table, fmt: str = "md") -> str:
    """``md`` | ``latex`` text of the table (best cell per column bold, legend under it), or ``csv``: one row per
    cell with numeric columns (:data:`CELL_FIELDS`)."""
    if fmt == "csv":
        return _csv(cell_rows(table), CELL_FIELDS)
    if fmt == "latex":
        lines = [
            r"\begin{tabular}{l" + "c" * len(table.columns) + "}",
            r"\toprule",
            " & ".join(["norm", *[_latex(_header(table, c)) for c in table.columns]]) + r" \\",
            r"\midrule",
        ]
        for row in table.rows:
            lines.append(" & ".join([_latex(row), *[_latex_cell(table, row, c) for c in table.columns]]) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}", r"{\footnotesize " + _latex(legend(table, best="Bold")) + r"\par}"]
        return "\n".join(lines) + "\n"
    if fmt == "md":
        lines = ["| norm | " + " | ".join(_header(table, c) for c in table.columns) + " |", "|---|" + "---|" * len(table.columns)]
        for row in table.rows:
            lines.append(f"| {_md_escape(row)} | " + " | ".join(_md_cell(table, row, c) for c in table.columns) + " |")
        lines += ["", _md_escape(legend(table, best="Bold"))]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown table format {fmt!r}; valid: rich, md, csv, latex, tidy")


def _md_cell(table: Table, row: str, col: str) -> str:
    """Markdown cell: a significance ``*`` escaped (``\\*``), the best cell in ``**bold**``."""
    text = _md_escape(_cell_text(table, row, col))
    return f"**{text}**" if text and table.best.get(col) == row else text


def _md_escape(s: str) -> str:
    return s.replace("*", r"\*").replace("|", r"\|")


def _latex_cell(table: Table, row: str, col: str) -> str:
    text = _latex(_cell_text(table, row, col))
    return rf"\textbf{{{text}}}" if text and table.best.get(col) == row else text


_LATEX = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "±": r"$\pm$",
    "α": r"$\alpha$",
    "·": r"$\cdot$",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "−": r"$-$",
    "Δ": r"$\Delta$",
    "–": "--",
}


def _latex(s: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in s)


HEADER_WIDTH = 28  # a column header's parts are broken after commas into lines of at most this many characters


def _wrap_label(text: str, width: int = HEADER_WIDTH) -> list[str]:
    """``vit_tiny[drop_path_rate=0.1,img_size=32]`` → lines of at most ``width`` characters, broken after commas (a
    piece longer than ``width`` stays whole on its line)."""
    lines, line = [], ""
    for piece in re.split(r"(?<=,)", text):
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = piece
        else:
            line += piece
    return [*lines, line]


def _rich_block(table: Table, columns: list[str], title: str):
    """One ``rich.table.Table`` of ``columns`` (rows without a cell in them left out); no column wraps its text."""
    from rich.table import Table as RichTable
    from rich.text import Text

    out = RichTable(title=title, show_lines=True)
    out.add_column("norm", style="bold", no_wrap=True)
    for col in columns:  # Text, not markup: "[proxy]" is no style tag; the parts of the column name on lines of their own
        info = table.info.get(col)
        parts = (
            (info["task"], info["model"], f"{info['dataset']} [{info['scale']}]", *(info["recipe"] or "").split(", ")) if info else (col,)
        )
        parts = tuple(part for part in parts if part)
        name = "\n".join(line for part in parts for line in _wrap_label(part))
        arrow = "↑" if table.higher_is_better[col] else "↓"
        out.add_column(Text(f"{name}\n{table.metric_of[col]} {arrow}"), justify="right", no_wrap=True)
    for row in table.rows:
        cells = [table.cells.get((row, col)) for col in columns]
        if all(cell is None for cell in cells):
            continue
        texts = []
        for col, cell in zip(columns, cells):
            if cell is None:
                texts.append(Text(""))
            elif table.best.get(col) == row:
                texts.append(Text("\n".join(t for t in (cell.summary() + " ★", cell.delta_text()) if t), style="bold green"))
            else:
                texts.append(Text(cell.text(sep="\n")))
        out.add_row(Text(row), *texts)
    return out


def print_rich(table: Table, console) -> None:
    """The terminal view on a ``rich.console.Console``: the columns in blocks that fit the console's width, the norm
    column repeated in each (one table per block, only the rows with a cell in it), then the legend.  Cells are never
    cut: a column is as wide as its widest line, and a block too wide even with one column is printed at its own width
    (the terminal wraps whole lines).  The best cell of each column is bold green ★."""
    from rich.measure import Measurement
    from rich.text import Text

    def width_of(block) -> int:
        return Measurement.get(console, console.options.update_width(10**6), block).maximum

    title = "mixbench results"
    blocks, current = [], []
    for col in table.columns:
        if current and width_of(_rich_block(table, [*current, col], title)) > console.width:
            blocks.append(current)
            current = []
        current.append(col)
    blocks.append(current)
    for k, columns in enumerate(blocks):
        block = _rich_block(table, columns, title + (f" ({k + 1}/{len(blocks)})" if len(blocks) > 1 else ""))
        console.print(block, width=max(console.width, width_of(block)))
    console.print(Text(legend(table, best="★")))


# ---------------------------------------------------------------- pandas views: one row per run (wide) or per run × metric (tidy)

RUN_FIELDS = (
    "task",
    "family",
    "model",
    "dataset",
    "scale",
    "norm",
    "seed",
    "repeat",
    "status",
    "primary_metric",
    "primary_value",
    "higher_is_better",
    "wall_time_s",
    "run_dir",
)


def _repeat_index(records: list[dict]) -> list[int]:
    """For each record, how many earlier records (by ``started_at``) share its norm, column and seed: 0 = the first."""
    records = with_recipes(records)
    order = sorted(range(len(records)), key=lambda i: _time_order(records[i]))
    seen: dict = {}
    index = [0] * len(records)
    for i in order:
        key = (row_key(records[i]), column_key(records[i]), _seed_key(records[i]["seed"]))
        index[i] = seen.get(key, 0)
        seen[key] = index[i] + 1
    return index


def _run_fields(record: dict, repeat: int) -> dict:
    pm = record["primary_metric"]
    value = primary_value(record)
    path = record.get("_path")
    return {
        "task": record["task"],
        "family": record.get("family"),
        "model": model_label(record),
        "dataset": dataset_name(record),
        "scale": record["scale"],
        "norm": row_key(record),
        "seed": record["seed"],
        "repeat": repeat,
        "status": record["status"],
        "primary_metric": pm["name"],
        "primary_value": _float(value),
        "higher_is_better": bool(pm["higher_is_better"]),
        "wall_time_s": _float(record.get("wall_time_s")),
        "run_dir": str(Path(path).parent) if path else record.get("run_dir"),
    }


def _float(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _typed(frame, numeric: tuple[str, ...]):
    for name in numeric:
        frame[name] = frame[name].astype("float64")
    for name in ("seed", "repeat"):
        if name in frame:
            frame[name] = frame[name].astype("Int64")
    if "higher_is_better" in frame:
        frame["higher_is_better"] = frame["higher_is_better"].astype("boolean")
    return frame


def records_frame(records: list[dict]):
    """A pandas DataFrame, one row per run: :data:`RUN_FIELDS` (``repeat``: 0 for the first record of its norm,
    column and seed, 1… for re-runs; ``run_dir``: the folder holding the record) and one float column per metric
    of ``record["metrics"]`` (NaN where a run lacks it)."""
    import pandas as pd

    repeats = _repeat_index(records)
    metric_names = sorted({m for r in records if isinstance(r["metrics"], dict) for m in r["metrics"]})
    columns = {m: (m if m not in RUN_FIELDS else f"metrics.{m}") for m in metric_names}
    rows = []
    for r, repeat in zip(records, repeats):
        row = _run_fields(r, repeat)
        metrics = r["metrics"] if isinstance(r["metrics"], dict) else {}
        row.update({columns[m]: _float(metrics.get(m)) for m in metric_names})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[*RUN_FIELDS, *columns.values()])
    return _typed(frame, ("primary_value", "wall_time_s", *columns.values()))


TIDY_FIELDS = (*RUN_FIELDS[:9], "metric", "value", "primary", "higher_is_better", "wall_time_s", "run_dir")


def tidy_frame(records: list[dict]):
    """Long format: one row per run and metric (``metric``, ``value``, ``primary``, ``higher_is_better`` of that
    metric); a run without metrics (crashed) keeps one row, its primary metric with a blank value."""
    import pandas as pd

    rows = []
    for r, repeat in zip(records, _repeat_index(records)):
        base = _run_fields(r, repeat)
        primary = r["primary_metric"]["name"]
        specs = {s.get("name"): s.get("higher_is_better") for s in r.get("metric_specs") or [] if isinstance(s, dict)}
        specs[primary] = bool(r["primary_metric"]["higher_is_better"])
        metrics = dict(r["metrics"]) if isinstance(r["metrics"], dict) and r["metrics"] else {primary: None}
        for name, value in metrics.items():
            hib = specs.get(name)
            rows.append(
                {
                    **base,
                    "metric": name,
                    "value": _float(value),
                    "primary": name == primary,
                    "higher_is_better": None if hib is None else bool(hib),
                }
            )
    frame = pd.DataFrame(rows, columns=list(TIDY_FIELDS))
    frame["primary"] = frame["primary"].astype("bool")
    return _typed(frame, ("value", "wall_time_s"))


def tidy_csv(records: list[dict]) -> str:
    """:func:`tidy_frame` as CSV (booleans as 1/0, blanks for missing values)."""
    frame = tidy_frame(records).astype(object)
    return _csv(frame.where(frame.notna(), None).to_dict("records"), TIDY_FIELDS)
