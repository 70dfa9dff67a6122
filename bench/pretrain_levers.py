"""Learning per CPU-minute, each pretraining lever against the budget recipe at equal time on an AVX2
fp32 core: `bertkit experiment levers`.

    OMP_NUM_THREADS=1 python bench/pretrain_levers.py [--scale demo|ablation|tiny] [--set arms=a,b] [--plan-only]

The experiment (timing, training and scoring cells, calibration, report) is
src/bertkit/experiments/levers.py; its results go to docs/results/levers/ (the bench's own earlier
run: docs/results/pretrain-levers/). Run the same command in a second terminal to share the folder
(two one-thread processes on two cores), and again to continue a stopped run.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from bertkit.cli import main as bertkit

    return bertkit(["experiment", "levers", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
