"""`bertkit ablate`: the paper's ablations (Tables 5-8) run from one corpus and reported beside
the paper's figures.

`tables.py` holds the paper's tables (rows, columns, figures); `plan.py` the scales and the
cells a scale runs; `taskdata.py` writes the fixed task subsets every variant fine-tunes on;
`cells.py` runs the cells, each one resumable and written atomically; `report.py` turns
finished cells into report.json and report.md, with the sign rule; `runner.py` is the whole
command as one library call (plan, run the cells not yet done, report).
"""
