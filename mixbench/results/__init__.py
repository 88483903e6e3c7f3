"""Result records and what is computed from them: the comparison table, Welch statistics, provenance, training curves.

``records`` reads and writes ``record.json``; ``table`` aggregates records into cells and renders them;
``stats`` holds the interval arithmetic; ``provenance`` the versions, commit and source digest a record stores;
``curves`` the logged metrics of a run folder.
"""
