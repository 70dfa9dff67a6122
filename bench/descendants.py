"""BERT's descendants side by side (issue 50, item 4): `bertkit experiment descendants`.

    OMP_NUM_THREADS=1 python bench/descendants.py [--scale tiny] [--plan-only] [--out DIR --work DIR]

The experiment (cells, calibration, report) is src/bertkit/experiments/descendants.py; its results go
to docs/results/descendants/. Run the same command in a second terminal to share the folder (two
one-thread processes on two cores), and again to continue a stopped run.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from bertkit.cli import main as bertkit

    return bertkit(["experiment", "descendants", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
