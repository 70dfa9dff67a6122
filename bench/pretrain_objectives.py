"""Masked LM against replaced-token detection (ELECTRA) at equal wall-clock time, scored by topic and
sense probes and SST-2: `bertkit experiment objectives`.

    OMP_NUM_THREADS=1 python bench/pretrain_objectives.py [--scale cpu|tiny] [--plan-only]

The experiment (ELECTRA's lr tuning, the pretrainings, probes and SST-2 seeds as cells, calibration,
report) is src/bertkit/experiments/objectives.py; its results go to docs/results/objectives/ (the
bench's own earlier runs: docs/results/pretrain-objectives/). Run the same command in a second
terminal to share the folder, and again to continue a stopped run.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from bertkit.cli import main as bertkit

    return bertkit(["experiment", "objectives", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
