"""`bertkit ablate`: the paper's ablations (Tables 5-8) run from one corpus and reported beside
the paper's figures.

`tables.py` holds the paper's tables (rows, columns, figures); `plan.py` the scales and the
cells a scale runs; `cells.py` runs the cells, each one resumable and written atomically;
`report.py` turns finished cells into report.json and report.md, with the sign rule.
"""
