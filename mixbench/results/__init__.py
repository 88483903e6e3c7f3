"""Result records and what is computed from them: the comparison table, Welch statistics, provenance, training curves.

``records`` reads and writes ``record.json`` and says what one record is (outcome, table row and column); ``cell``
counts one cell's records by seed; ``table`` aggregates records into cells; ``sweep`` picks a cell's best value of one
setting (``--best-over optim.lr``) and ``sensitivity`` computes the LR sensitivity over the values; ``render`` writes a
table as md, LaTeX, CSV or rich text; ``frames`` the pandas views; ``stats`` holds the interval arithmetic;
``provenance`` the versions, commit and source digest a record stores; ``curves`` the logged metrics of a run folder;
``lr_curves`` the metric against the learning rate.
"""
