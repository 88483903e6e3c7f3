"""The READMEs' headline numbers are what ``mixbench table`` computes from the committed records: the tuned table of
the lr sweep (results/proxy/lr_sensitivity), the ladder's tuned table by size and its equal-token view
(results/proxy/ladder), the fixed-token ladder's tables (results/proxy/ladder_tokens), and the top README's claims about
them, and the generated tables committed beside the ladders' records.  A record added, removed or re-classified that
moves a headline number fails here until the README says the new one."""

import re

import pytest
from _support.paths import REPO_ROOT

from mixbench.cli.app import main
from mixbench.results.equal_tokens import equal_token_points
from mixbench.results.ladder_figures import ladders
from mixbench.results.records import load_records

SWEEP = REPO_ROOT / "results" / "proxy" / "lr_sensitivity"
LADDER = REPO_ROOT / "results" / "proxy" / "ladder"
TOKENS = REPO_ROOT / "results" / "proxy" / "ladder_tokens"
NUMBER = r"[−+-]?\d[\d,]*\.?\d*"
DELTA = re.compile(rf"Δ ({NUMBER}) \[({NUMBER}), ({NUMBER})\]")
LADDER_ROWS = {"pre": "pre", "post": "post", "mix": "mix(α=0.25)", "deepnorm": "deepnorm", "olmo2": "reordered+qk_norm=full"}
LADDER_ROWS |= {"lns": "lns", "peri": "peri", "dyt": "dyt"}
VIT_ROWS = {"pre": "pre", "post": "post", "mix": "mix(α=0.25)", "admin": "admin", "hybrid": "hybrid"}


def number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", "").replace("+", ""))


def decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def same(printed: str, value: float) -> bool:
    """``printed`` is ``value`` rounded to the decimals it shows."""
    return abs(number(printed) - value) <= 0.5 * 10 ** -decimals(printed) + 1e-9


def says_delta(shown: str, diff: float, low: float | None, high: float | None) -> bool:
    """``shown`` ("−7.10 [−11.75, −2.44]" or "−6.76, one seed") is ``diff``, with an interval where, and only where,
    one exists (``low`` not None), and that interval is ``[low, high]``."""
    value, *interval = re.match(rf"({NUMBER})(?: \[({NUMBER}), ({NUMBER})\])?", shown).groups()
    if (interval[0] is None) != (low is None):
        return False
    return same(value, diff) and (low is None or (same(interval[0], low) and same(interval[1], high)))


def table_rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            name = re.match(r"`?([^`]+)`?", cells[0]).group(1)  # `pre` (value) → pre
            rows[name] = cells[1:]
    return rows


@pytest.fixture(scope="module")
def tokens_lm():
    """The fixed-token ladder's LLaMA ladder, its records, and its rungs by size as the README writes them (130m)."""
    records, _ = load_records(TOKENS)
    lm = ladders(records)["lm"]
    return lm, records, {rung.column.split(" ")[0].removeprefix("c4_llama_"): rung for rung in lm.rungs}


@pytest.fixture(scope="module")
def lm_and_vit():
    records, _ = load_records(LADDER)
    found = ladders(records)
    return found["lm"], found["vision"], records


def test_the_lr_sweeps_tuned_table_in_its_readme_is_what_mixbench_table_prints(capsys):
    assert main(["table", "--results-dir", str(SWEEP), "--best-over", "optim.lr", "--baseline", "pre", "--format", "md"]) == 0
    printed = table_rows(capsys.readouterr().out)
    text = (SWEEP / "README.md").read_text()
    start = text.index("| norm | c4_llama_71m")
    readme = table_rows(text[start : text.index("\n\n", start)])  # the tuned table (the README's first of that header)
    checked = 0
    for row, cells in printed.items():
        if row in readme and any("Δ" in c for c in cells):
            assert [DELTA.findall(c) for c in readme[row][: len(cells)]] == [DELTA.findall(c) for c in cells], row
            checked += 1
    assert checked >= 13  # every placement but the baseline


def ladder_cell_checks(ladder, rows: dict, readme_rows: dict[str, list[str]]) -> int:
    """Each README cell ``−31.1 [−33.4, −28.7] @1e-3`` (or one-seed ``−1.44 @5e-4``) against the ladder's own cell."""
    checked = 0
    for short, row in rows.items():
        for rung, text in zip(ladder.rungs, readme_rows[short]):
            sweep = ladder.sweep(row, rung)
            match = re.match(rf"\**({NUMBER})(?: \[({NUMBER}), ({NUMBER})\])?\** @({NUMBER}(?:e-\d)?)", text.replace("**", ""))
            if short == "pre" or sweep is None or match is None:
                continue
            delta = ladder.table.cells[(row, rung.column)].delta
            value, low, high, lr = match.groups()
            assert same(value, delta.diff), (short, rung.label, text)
            assert (low is None) == (delta.low is None), (short, rung.label, text)
            if low is not None:
                assert same(low, delta.low) and same(high, delta.high), (short, rung.label, text)
            assert number(lr) == pytest.approx(float(sweep.best)), (short, rung.label, text)
            checked += 1
    return checked


def test_the_ladders_tuned_tables_in_its_readme_are_the_records_cells(lm_and_vit):
    lm, vit, _ = lm_and_vit
    readme = (LADDER / "README.md").read_text()
    section = readme.split("## The tuned table by size")[1].split("## Figures")[0]
    tables = section.split("\n\n")
    lm_rows = table_rows(next(t for t in tables if "LLaMA 71M" in t))
    vit_rows = table_rows(next(t for t in tables if "ViT-Ti" in t))
    assert ladder_cell_checks(lm, LADDER_ROWS, lm_rows) >= 25
    assert ladder_cell_checks(vit, VIT_ROWS, vit_rows) == 8


def test_the_equal_token_view_in_the_ladder_readme_is_the_records(lm_and_vit):
    lm, _, records = lm_and_vit
    points = {(round(p.target / 1e6, 1), p.column.split(" ")[0], p.row): p for p in equal_token_points(lm, records)}
    section = (LADDER / "README.md").read_text().split("## At equal tokens: the same records")[1].split("\n- ")[0]
    sizes = ["c4_llama_71m", "c4_llama_130m", "c4_llama_250m", "c4_llama_1b"]
    checked, target = 0, None
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| tokens"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        target = number(cells[0].rstrip("M")) if cells[0] else target
        row = LADDER_ROWS[cells[1].strip("`")]
        for size, text in zip(sizes, cells[2:]):
            match = re.match(rf"({NUMBER})(?: \[({NUMBER}), ({NUMBER})\])?", text)
            if match is None:
                continue
            point = points[(target, size, row)]
            assert same(match.group(1), point.delta), (target, size, row, text)
            if match.group(2):
                assert same(match.group(2), point.low) and same(match.group(3), point.high), (target, size, row, text)
            checked += 1
    assert checked >= 19


@pytest.mark.parametrize(
    "claim, source, row, column, kind",
    [
        ("Mix-LN −8.4 [−11.6, −5.2] ppl", "sweep", "mix(α=0.25)", "num_layers=24", "interval"),
        ("Post-LN\n  −7.5 [−10.8, −4.3] against Pre-LN", "sweep", "post", "num_layers=24", "interval"),
        ("(+5.8 [4.1, 7.5] against Pre-LN", "sweep", "post", "vit_tiny", "interval"),
        ("−9.5 [−12.5, −6.5] ppl against Pre-LN at 596 steps", "ladder", "post", "llama_250m", "interval"),
        ("Mix-LN −11.2 [−13.5, −8.9]", "ladder", "mix(α=0.25)", "llama_250m", "interval"),
        ("Mix-LN −31.4,", "ladder", "mix(α=0.25)", "llama_130m", "value"),
        ("Post-LN −31.1,", "ladder", "post", "llama_130m", "value"),
        ("Mix-LN's gain over Pre-LN is +4.70 at ViT-Ti", "ladder", "mix(α=0.25)", "vit_tiny", "value"),
        ("and +5.05 at ViT-S", "ladder", "mix(α=0.25)", "vit_small", "value"),
        ("Mix-LN −1.42 [−3.37, 0.53]", "ladder_tokens", "mix(α=0.25)", "llama_130m", "interval"),
        ("Post-LN −0.91 [−2.85, 1.03]", "ladder_tokens", "post", "llama_130m", "interval"),
        ("Mix-LN −3.59 [−6.16, −1.02]", "ladder_tokens", "mix(α=0.25)", "llama_71m", "interval"),
        ("Post-LN −3.60 [−6.05, −1.15]", "ladder_tokens", "post", "llama_71m", "interval"),
        ("Post-LN\n  −6.39 at 250M", "ladder_tokens", "post", "llama_250m", "value"),
    ],
)
def test_the_top_readmes_headline_numbers_are_the_records(claim, source, row, column, kind, lm_and_vit, tokens_lm):
    readme = (REPO_ROOT / "README.md").read_text()
    assert claim in readme, f"the top README no longer says {claim!r}"
    if source == "ladder":
        lm, vit, _ = lm_and_vit
        table = (lm if "llama" in column else vit).table
    elif source == "ladder_tokens":
        table = tokens_lm[0].table
    else:
        records, _ = load_records(SWEEP)
        table = ladders(records)["lm" if "num_layers" in column else "vision"].table
    (col,) = [c for c in table.columns if column in c and (row, c) in table.cells]
    delta = table.cells[(row, col)].delta
    numbers = re.findall(NUMBER, claim.split("Pre-LN")[0] if "gain" not in claim else claim.split("is")[-1])
    numbers = [n for n in numbers if "." in n]
    assert same(numbers[0], delta.diff), (claim, delta)
    if kind == "interval":
        assert same(numbers[1], delta.low) and same(numbers[2], delta.high), (claim, delta)


def test_the_top_readmes_equal_token_claim_is_the_records(lm_and_vit):
    """The README's sentence on Mix-LN's lead at 11M tokens (130M, 250M, 1B), read from the README, is the records'."""
    lm, _, records = lm_and_vit
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    claim = re.search(r"Mix-LN leads Pre-LN by (\d\.\d\d) nats at 130M and (\d\.\d\d) at 250M[^.]*?and by (\d\.\d\d) at 1B", readme)
    assert claim, "the README's equal-token sentence is missing or reworded: update this test with it"
    points = {(p.column.split(" ")[0], p.row): p for p in equal_token_points(lm, records) if round(p.target / 1e6, 1) == 11.0}
    measured = [-points[(size, "mix(α=0.25)")].delta for size in ("c4_llama_130m", "c4_llama_250m", "c4_llama_1b")]
    assert all(same(said, value) for said, value in zip(claim.groups(), measured)), (claim.groups(), measured)


def test_the_fixed_token_ladders_table_in_its_readme_is_the_records(tokens_lm):
    """results/proxy/ladder_tokens/README.md: each row's finished values by lr, stalled lrs, best lr's mean ± sd (n),
    whether it is bracketed, and Δ, against the tuned table of its committed records."""
    lm, _, rung_of = tokens_lm
    text = (TOKENS / "README.md").read_text()
    start = text.index("| size | placement | val/ppl by lr |")
    rows = set()
    for line in text[start : text.index("\n\n", start)].splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        row, rung = LADDER_ROWS[cells[1].strip("`")], rung_of[cells[0].split(" ")[0].lower()]
        sweep = lm.sweep(row, rung)
        for part in cells[2].split(" · "):  # "1e-3: 31.50, 32.80 (seeds 0, 2)" or "3e-3: stalled (1,050)"
            lr, said = part.split(": ", 1)
            (value,) = [v for v in sweep.cells if float(v) == pytest.approx(number(lr))]
            if said.startswith(("stalled", "diverged")):
                assert sweep.outcome(value) == said.split()[0], (line, lr)
            else:
                shown = re.findall(NUMBER, re.sub(r"\(.*?\)", "", said))
                assert sorted(number(x) for x in shown) == pytest.approx(sorted(sweep.cells[value].values), abs=0.005), (line, lr)
        best = re.match(rf"({NUMBER})(?: ± ({NUMBER}))? \(n=(\d+)\) @({NUMBER}(?:e-\d)?)(, not bracketed)?", cells[3])
        if best is None:
            assert sweep.best is None and cells[3].startswith("none"), line
        else:
            mean, std, n, lr, untuned = best.groups()
            assert number(lr) == pytest.approx(float(sweep.best)) and int(n) == sweep.cell.n, line
            assert same(mean, sweep.cell.mean) and (std is None or same(std, sweep.cell.std)), line
            assert (untuned is not None) == (not sweep.bracketed), line
        delta, said = lm.table.cells[(row, rung.column)].delta, cells[4].replace("**", "")
        if re.match(NUMBER, said):  # a Δ, with its interval where both cells have ≥ 2 seeds; bold where it excludes 0
            assert says_delta(said, delta.diff, delta.low, delta.high), line
            assert cells[4].startswith("**") == bool(delta.significant), line
        elif said.startswith("none:"):  # no Δ said, because one of the two best lrs is an edge of its sweep
            assert lm.untuned_text(row, rung), line
        else:
            assert said == "baseline" if row == "pre" else said.startswith("breaks at"), line
        rows.add((rung.column, row))
    placements = ("pre", "post", "mix(α=0.25)", "deepnorm")
    finished = {(rung.column, row) for rung in lm.rungs for row in placements if lm.sweep(row, rung).cells}
    assert rows == finished, f"rows the README lacks: {finished - rows}; rows without records: {rows - finished}"


def test_the_fixed_token_ladders_answer_is_the_records(tokens_lm):
    """results/proxy/ladder_tokens/README.md's answer table: each size's Mix-LN, Post-LN and DeepNorm Δ against Pre-LN, in ppl
    (the tuned table) and in nats (the equal-token view at 25M tokens), with the Welch interval where it says one."""
    lm, records, rung_of = tokens_lm
    nats = {(p.column, p.row): p for p in equal_token_points(lm, records) if round(p.target / 1e6) == 25}
    text = (TOKENS / "README.md").read_text()
    start = text.index("| size | Mix-LN − Pre-LN (ppl) |")
    checked = 0
    for line in text[start : text.index("\n\n", start)].splitlines()[2:]:
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split(" | ")]
        rung = rung_of[cells[0].lower()]
        in_nats = cells[4].split(" / ")
        for row, said, said_nats in zip(("mix(α=0.25)", "post", "deepnorm"), cells[1:4], in_nats, strict=True):
            if said.startswith("—"):
                assert lm.table.cells[(row, rung.column)].delta is None and said_nats == "—", line
                continue
            delta, point = lm.table.cells[(row, rung.column)].delta, nats[(rung.column, row)]
            assert says_delta(said, delta.diff, delta.low, delta.high), (line, said)
            assert says_delta(said_nats, point.delta, point.low, point.high), (line, said_nats)
            checked += 1
    assert checked >= 11


@pytest.mark.parametrize("folder", [LADDER, TOKENS], ids=["ladder", "ladder_tokens"])
def test_the_committed_ladder_tables_are_what_plot_ladder_writes_from_the_records(folder, tmp_path):
    """The tables beside the records (``ladder_<family>.md``, ``ladder_equal_tokens_<family>.md``, ``ladder_layers.md``)
    are what ``mixbench plot ladder`` writes from those records today: a record added or a rule changed without
    re-plotting fails here."""
    assert main(["plot", "ladder", "--results-dir", str(folder), "--out", str(tmp_path)]) == 0
    written = {path.name: path.read_text() for path in tmp_path.glob("*.md")}
    committed = {path.name: path.read_text() for path in folder.glob("ladder*.md")}
    assert written == committed, f"re-run mixbench plot ladder --results-dir {folder.relative_to(REPO_ROOT)}"
