"""A search index of 1,000,000 vectors built from shards: build time and peak memory, a
memory-mapped search's peak resident memory, recall@10 against exact search, query p50 / p99.

The index cells of `bertkit experiment corpus`; what is measured, and how the vectors are
generated, is in src/bertkit/experiments/corpus_index.py. Results go to docs/results/corpus/;
the same command again continues a stopped run.

    python bench/index_shards.py --plan-only     # the cells and their time on this machine
    python bench/index_shards.py                 # run them
"""

from __future__ import annotations

import sys

CELLS = "index/*"


def main(argv: list[str] | None = None) -> int:
    from bertkit.cli import main as bertkit

    argv = sys.argv[1:] if argv is None else list(argv)
    return bertkit(["experiment", "corpus", *([] if "--only" in argv else ["--only", CELLS]), *argv])


if __name__ == "__main__":
    sys.exit(main())
