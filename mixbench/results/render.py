"""Text output: a :class:`~mixbench.results.table.Table` as markdown, LaTeX, CSV or the rich terminal view, and
records as tidy CSV."""

from __future__ import annotations

import csv
import io
import math
import re

from ..core.text import csv_cell, printable
from .frames import TIDY_FIELDS, tidy_frame
from .sweep import legend as sweep_legend
from .table import Table


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
    text += (
        "k/n diverged (likewise stalled, pruned = a search trial its pruner stopped early, failed = crashed, and "
        "interrupted = stopped by Ctrl-C) "
        "= k of the cell's n seeds ended so (a seed's latest record decides); the mean is over the finished seeds "
        "only. (x) k/n stalled (likewise diverged), in a cell where no seed finished: x = the mean value those seeds "
        f"measured, no sample and never best (x, n=j: j of them left a finite value). {best} = best mean of the column."
    )
    return text + (_sweep_legend(table) if table.best_over else "") + _source_legend(table)


def _source_legend(table: Table) -> str:
    """The results folders of the records, numbered (a cell's ``src 1+2``), where there are several: a table of one
    folder is the same text whichever folder holds its runs."""
    if len(table.sources) > 1:
        listed = ", ".join(f"src {k} = {source}" for k, source in enumerate(table.sources, 1))
        text = f" Records from several folders: {listed}; each cell names the folders of its records, each run counted once."
        notes = [f"{col}: {table.source_notes[col]}" for col in table.columns if col in table.source_notes]
        return text + (
            f" Rows of one column whose folders differ in a training setting (no cell pools them): {'; '.join(notes)}." if notes else ""
        )
    return ""


def source_tag(table: Table, row: str, col: str) -> str:
    """``src 1+2``: the numbers of the folders (:func:`_source_legend`) the cell's records came from; blank where the
    table reads one folder."""
    if len(table.sources) < 2:
        return ""
    return "src " + "+".join(str(table.sources.index(s) + 1) for s in table.cell_sources.get((row, col), ()))


def _sweep_legend(table: Table) -> str:
    return " " + sweep_legend(table.best_over)


def _header(table: Table, col: str) -> str:
    arrow = "↑" if table.higher_is_better[col] else "↓"
    return f"{col} {table.metric_of[col]} {arrow}"


def cell_parts(table: Table, row: str, col: str) -> tuple[str, str, str]:
    """A cell's text in parts: its summary (with ``@lr 3e-3`` under ``--best-over``, and ``src 1`` where the table has
    several folders), its Δ and its LR sensitivity (``S 0.42 (5 lrs)``, only under ``--best-over``); blank where there
    is none."""
    cell, sweep = table.cells.get((row, col)), table.sweeps.get((row, col))
    if cell is None:
        return "", "", ""
    summary = " ".join(t for t in ((cell if sweep is None else sweep).summary(), source_tag(table, row, col)) if t)
    return summary, cell.delta_text(), "" if sweep is None else sweep.sensitivity_text()


def _cell_text(table: Table, row: str, col: str, sep: str = " ") -> str:
    return sep.join(part for part in cell_parts(table, row, col) if part)


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
    "interrupted",
    "diverged_value",
    "stalled_value",
    "baseline",
    "delta",
    "ci_low",
    "ci_high",
    "dof",
    "confidence",
    "significant",
    "best",
    "source",
    "source_differs",
)


# with --best-over KEY: the KEY (best_over), its value in the cell (best_value), how many values the row and the column
# were swept over, how many of the row's finished (some seed did) / diverged / stalled, the LR sensitivity S, ℓ₀ and ℓ*
SWEEP_FIELDS = (
    "best_over",
    "best_value",
    "swept",
    "swept_column",
    "swept_finished",
    "swept_diverged",
    "swept_stalled",
    "sensitivity",
    "init_loss",
    "best_loss",
)


def fields_of(table: Table) -> tuple[str, ...]:
    """The CSV columns of ``table``: :data:`CELL_FIELDS`, and :data:`SWEEP_FIELDS` under ``--best-over``."""
    return CELL_FIELDS + (SWEEP_FIELDS if table.best_over else ())


def _sweep_fields(table: Table, row: str, col: str) -> dict:
    sweep = table.sweeps.get((row, col))
    if sweep is None:
        return {}
    outcomes = [sweep.outcome(v) for v in sweep.cells]
    return {
        "best_over": sweep.key,
        "best_value": sweep.best,
        "swept": len(sweep.cells),
        "swept_column": sweep.column_values,
        "swept_finished": outcomes.count("completed"),
        "swept_diverged": outcomes.count("diverged"),
        "swept_stalled": outcomes.count("stalled"),
        "sensitivity": sweep.sensitivity,
        "init_loss": sweep.init,
        "best_loss": sweep.best_loss,
    }


def cell_rows(table: Table) -> list[dict]:
    """One dict per table cell with the numbers behind its text (keys :func:`fields_of`; None where blank)."""
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
                    "interrupted": cell.interrupted,
                    "diverged_value": cell.measured_mean("diverged"),
                    "stalled_value": cell.measured_mean("stalled"),
                    "baseline": table.baseline_of.get(col),
                    "delta": d.diff if d else None,
                    "ci_low": d.low if d else None,
                    "ci_high": d.high if d else None,
                    "dof": d.dof if d else None,
                    "confidence": table.confidence if d and d.low is not None else None,
                    "significant": d.significant if d else None,
                    "best": table.best.get(col) == row,
                    "source": ";".join(table.cell_sources.get((row, col), ())) if len(table.sources) > 1 else None,
                    "source_differs": table.source_notes.get(col),
                    **_sweep_fields(table, row, col),
                }
            )
    return out


def cells_frame(table: Table):
    """:func:`cell_rows` as a pandas DataFrame."""
    import pandas as pd

    frame = pd.DataFrame(cell_rows(table), columns=list(fields_of(table)))
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
                "" if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) if isinstance(v, bool) else csv_cell(v)
                for v in (row.get(f) for f in fields)
            ]
        )
    return buf.getvalue()


def render(table: Table, fmt: str = "md") -> str:
    """``md`` | ``latex`` text of the table (best cell per column bold, legend under it), or ``csv``: one row per
    cell with numeric columns (:data:`CELL_FIELDS`)."""
    if fmt == "csv":
        return _csv(cell_rows(table), fields_of(table))
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


HEADER_WIDTH = 28  # column-header parts and norm labels are broken after commas into lines of at most this many characters


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
            (info["task"], info["model"], f"{info['dataset']} [{info['scale']}]", *(info["recipe"] or "").split(", "), _budget(info))
            if info
            else (col,)
        )
        parts = tuple(part for part in parts if part)
        name = "\n".join(line for part in parts for line in _wrap_label(printable(part)))
        arrow = "↑" if table.higher_is_better[col] else "↓"
        out.add_column(Text(printable(f"{name}\n{table.metric_of[col]} {arrow}")), justify="right", no_wrap=True)
    for row in table.rows:
        cells = [table.cells.get((row, col)) for col in columns]
        if all(cell is None for cell in cells):
            continue
        texts = []
        for col in columns:
            summary, *rest = cell_parts(table, row, col)
            if table.best.get(col) == row:
                texts.append(Text("\n".join(t for t in (summary + " ★", *rest) if t), style="bold green"))
            else:
                texts.append(Text("\n".join(t for t in (summary, *rest) if t)))
        out.add_row(Text("\n".join(_wrap_label(printable(row)))), *texts)  # a long plan label, e.g. custom[po,…], on lines
    return out


def _budget(info: dict) -> str:
    """``@0.25``: the budget fraction of a ``--at`` column, as in its name (blank for a column without one)."""
    return f"@{info['budget']:.2f}" if info.get("budget") is not None else ""


def print_rich(table: Table, console) -> None:
    """The terminal view on a ``rich.console.Console``: the columns in blocks that fit the console's width, the norm
    column repeated in each (one table per block, only the rows with a cell in it), then the legend.  Cells are never
    cut: a column is as wide as its widest line; header parts and norm labels are broken after commas into lines of at
    most ``HEADER_WIDTH`` characters, so one column and the norm column fit an 80-column terminal.  The best cell of
    each column is bold green ★."""
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
    console.print(Text(printable(legend(table, best="★"))))


def tidy_csv(records: list[dict]) -> str:
    """:func:`tidy_frame` as CSV (booleans as 1/0, blanks for missing values)."""
    frame = tidy_frame(records).astype(object)
    return _csv(frame.where(frame.notna(), None).to_dict("records"), TIDY_FIELDS)
