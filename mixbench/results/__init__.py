"""Result records and what is computed from them: the comparison table, Welch statistics, provenance, training curves.

``records`` reads and writes ``record.json`` and says what one record is (outcome, table row and column); ``cell``
counts one cell's records by seed; ``table`` aggregates records into cells; ``render`` writes a table as md, LaTeX,
CSV or rich text; ``frames`` the pandas views; ``stats`` holds the interval arithmetic; ``provenance`` the versions,
commit and source digest a record stores; ``curves`` the logged metrics of a run folder.
"""
