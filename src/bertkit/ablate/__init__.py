"""`bertkit ablate`: the paper's ablations (Tables 5-8) run from one corpus and reported beside
the paper's figures.

`tables.py` holds the paper's tables (rows, columns, figures; Table 5 also at equal wall time,
with ELECTRA's row and a NER column); `scales.py` the scales (shapes, recipe and per-objective
learning rates, task sizes, measured rates); `curve.py` Table 5 along a compute axis (each
objective at a scale's budgets, at equal FLOPs); `plan.py` the cells a scale runs and their time
estimate; `taskdata.py` writes the fixed task subsets every variant fine-tunes on and scores their
majority class; `cells.py` runs the cells, each one resumable, written atomically and valid only
for the settings it was made with (`claims.py`: how processes sharing a folder split them);
`report.py` turns finished cells into report.json and report.md, with the sign rule (`signs.py`)
and the compute curve's section (`curve_report.py`); `tune.py` (`--tune-lr`) and `check.py`
(`--check-tasks`) are the steps before a full run; `runner.py` is the whole command as one library
call (plan, run the cells not yet done, write what the mode writes).
"""
