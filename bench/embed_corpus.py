"""Embedding a corpus on CPU: bertkit (in-process, and on Ray with 1 and 2 workers) against
sentence-transformers (torch, and backend="onnx") and fastembed, the same model and passages.

The throughput and Ray-scaling cells of `bertkit experiment corpus`; what is measured, and how, is
in src/bertkit/experiments/corpus.py. Results go to docs/results/corpus/ (cells/, report.md,
report.json, PNGs); the same command again continues a stopped run.

    python bench/embed_corpus.py --plan-only                  # the cells and their time on this machine
    python bench/embed_corpus.py                              # run them (two at once: run it twice)
    python bench/embed_corpus.py --only 'throughput/avx2/*'   # any `bertkit experiment` flag

The peers run in their own environment (sentence-transformers[onnx] pins transformers<4.58 and
fastembed huggingface-hub<2, which bertkit's cannot hold); without it their cells stop, saying:

    python -m venv .venv-peers
    .venv-peers/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    .venv-peers/bin/pip install "sentence-transformers[onnx]" fastembed==0.9.1
"""

from __future__ import annotations

import sys

CELLS = "throughput/*,scaling/*"


def main(argv: list[str] | None = None) -> int:
    from bertkit.cli import main as bertkit

    argv = sys.argv[1:] if argv is None else list(argv)
    return bertkit(["experiment", "corpus", *([] if "--only" in argv else ["--only", CELLS]), *argv])


if __name__ == "__main__":
    sys.exit(main())
