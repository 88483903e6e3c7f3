"""Result records (one JSON per run, written atomically) and their aggregation into comparison tables."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import MixbenchError

SCHEMA = "mixbench.result/1"
REQUIRED = ("schema", "task", "model", "norm", "seed", "status", "metrics", "primary_metric", "dataset", "scale")
STATUSES = ("completed", "diverged", "failed")


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
    return records, problems


@dataclass
class Cell:
    values: list[float] = field(default_factory=list)
    diverged: int = 0
    failed: int = 0

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def text(self, digits: int = 2) -> str:
        if not self.values:
            return "diverged" if self.diverged else ("failed" if self.failed else "")
        s = f"{self.mean:.{digits}f}"
        if self.std is not None:
            s += f" ± {self.std:.{digits}f}"
        s += f" (n={len(self.values)})"
        if self.diverged:
            s += f" +{self.diverged} diverged"
        return s


@dataclass
class Table:
    columns: list[str]
    rows: list[str]
    cells: dict[tuple[str, str], Cell]
    metric_of: dict[str, str]
    higher_is_better: dict[str, bool]
    best: dict[str, str]


def column_key(record: dict) -> str:
    data = record["dataset"]
    label = data.get("name", "?") if isinstance(data, dict) else str(data)
    model = record["model"]
    model = model.get("label", model.get("name", "?")) if isinstance(model, dict) else str(model)
    return f"{record['task']} · {model} · {label} [{record['scale']}]"


def row_key(record: dict) -> str:
    norm = record["norm"]
    return norm.get("label", norm.get("placement", "?")) if isinstance(norm, dict) else str(norm)


def aggregate(records: list[dict]) -> Table:
    """Rows = norm, columns = task · model · dataset [scale]; cell = primary metric over seeds."""
    cells: dict[tuple[str, str], Cell] = {}
    metric_of, hib = {}, {}
    for r in records:
        col, row = column_key(r), row_key(r)
        metric_of.setdefault(col, r["primary_metric"]["name"])
        hib.setdefault(col, bool(r["primary_metric"]["higher_is_better"]))
        cell = cells.setdefault((row, col), Cell())
        value = r["metrics"].get(r["primary_metric"]["name"])
        if r["status"] == "completed" and isinstance(value, (int, float)) and math.isfinite(value):
            cell.values.append(float(value))
        elif r["status"] == "failed":
            cell.failed += 1
        else:
            cell.diverged += 1
    columns = sorted(metric_of)
    order = {"pre": 0, "post": 1, "mix": 2}
    rows = sorted({row for row, _ in cells}, key=lambda n: (order.get(n.split("(")[0].split("[")[0], 3), n))
    best = {}
    for col in columns:
        scored = [(cells[(row, col)].mean, row) for row in rows if (row, col) in cells and cells[(row, col)].mean is not None]
        if scored:
            best[col] = (max if hib[col] else min)(scored)[1]
    return Table(columns, rows, cells, metric_of, hib, best)


def _header(table: Table, col: str) -> str:
    arrow = "↑" if table.higher_is_better[col] else "↓"
    return f"{col} {table.metric_of[col]} {arrow}"


def _cell_text(table: Table, row: str, col: str, mark: tuple[str, str]) -> str:
    cell = table.cells.get((row, col))
    if cell is None:
        return ""
    text = cell.text()
    return f"{mark[0]}{text}{mark[1]}" if table.best.get(col) == row else text


def render(table: Table, fmt: str = "md") -> str:
    """``md`` | ``csv`` | ``latex`` text of the table; the best cell per column is bold (``*`` in csv)."""
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["norm", *[_header(table, c) for c in table.columns]])
        for row in table.rows:
            writer.writerow([row, *[_cell_text(table, row, c, ("*", "")) for c in table.columns]])
        return buf.getvalue()
    if fmt == "latex":
        esc = lambda s: s.replace("_", r"\_").replace("±", r"$\pm$").replace("α", r"$\alpha$").replace("·", r"$\cdot$").replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$")  # noqa: E731
        lines = [r"\begin{tabular}{l" + "c" * len(table.columns) + "}", r"\toprule",
                 " & ".join(["norm", *[esc(_header(table, c)) for c in table.columns]]) + r" \\", r"\midrule"]
        for row in table.rows:
            lines.append(" & ".join([esc(row), *[esc(_cell_text(table, row, c, (r"\textbf{", "}"))) for c in table.columns]]) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines) + "\n"
    if fmt == "md":
        lines = ["| norm | " + " | ".join(_header(table, c) for c in table.columns) + " |",
                 "|---|" + "---|" * len(table.columns)]
        for row in table.rows:
            lines.append(f"| {row} | " + " | ".join(_cell_text(table, row, c, ("**", "**")) for c in table.columns) + " |")
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown table format {fmt!r}; valid: rich, md, csv, latex")


def rich_table(table: Table):
    """A ``rich.table.Table`` for the terminal; the best cell per column is bold green."""
    from rich.table import Table as RichTable

    out = RichTable(title="mixbench results (primary metric, mean ± std over seeds)", show_lines=False)
    out.add_column("norm", style="bold")
    for col in table.columns:
        out.add_column(_header(table, col), justify="right")
    for row in table.rows:
        out.add_row(row, *[_cell_text(table, row, c, ("[bold green]", " ★[/]")) for c in table.columns])
    return out
