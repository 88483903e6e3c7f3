"""load_grids: parsed once per state of the grid files, each call a fresh copy."""

from mixbench.grids.paper import load_grids


def test_load_grids_sees_an_edited_grid_file_and_hands_out_copies(tmp_path):
    grids_dir = tmp_path / "configs" / "grids"
    grids_dir.mkdir(parents=True)
    mine = grids_dir / "mine.yaml"
    mine.write_text("mine_a: {runs: []}\n")
    first = load_grids(tmp_path)
    assert "mine_a" in first and "table1" in first and "placements" in first
    first["mine_a"]["runs"].append("changed by a caller")
    first.pop("table1")
    again = load_grids(tmp_path)
    assert again["mine_a"] == {"runs": []} and "table1" in again  # a caller's edits do not reach the next call
    mine.write_text("mine_b: {runs: [{task: t, norm: pre}]}\n")  # another size: parsed again
    edited = load_grids(tmp_path)
    assert "mine_a" not in edited and edited["mine_b"] == {"runs": [{"task": "t", "norm": "pre"}]}
