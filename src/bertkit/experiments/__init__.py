"""Experiments as product code: each a table row of cells, run resumably by one runner.

`core.py` declares what an experiment is (cells with params, an executor, a calibration, a
report); `runner.py` runs cells (records written atomically, finished cells skipped, claims so
several processes share one folder, a needed cell's files remade when a later session lacks
them); `calibrate.py` times this machine for the plan's estimate; `run.py` is one experiment as
one call (`bertkit experiment NAME`). The experiments, one file each: `shapes.py` (Table 5's
reference shape), `table5.py` (Table 5 on a compute curve), with `pretraining.py` what the
pretrain-then-fine-tune experiments share; `descendants.py` (BERT's descendants side by side, its
cells' work in `descendants_cells.py`, its table in `descendants_report.py`), `rtd.py` (replaced-token
detection against masked LM at equal FLOPs), `levers.py` (the demo's pretraining levers at equal
AVX2 time, one arm's training in `levers_arm.py`), `objectives.py` (masked LM, mask rate 30% and
ELECTRA against transformers' Trainer) and `corpus.py` (embedding and indexing at corpus scale);
`bertkit ablate` runs its cells through the same runner.
"""

from __future__ import annotations

import importlib

from bertkit.errors import UserError

# name -> the module whose EXPERIMENT it is
EXPERIMENTS = {"t5-shapes": "bertkit.experiments.shapes", "table5": "bertkit.experiments.table5",
               "corpus": "bertkit.experiments.corpus", "descendants": "bertkit.experiments.descendants",
               "rtd": "bertkit.experiments.rtd", "levers": "bertkit.experiments.levers",
               "objectives": "bertkit.experiments.objectives"}


def get_experiment(name: str):
    if name not in EXPERIMENTS:
        raise UserError(f"no experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    return importlib.import_module(EXPERIMENTS[name]).EXPERIMENT
