"""Sequence lengths of real dev sets, for the variable-length inference cases.

The lengths come from tokenizing the dev sets under ../shared/data with BERT's uncased
vocabulary: SST-2 sentences, MRPC sentence pairs, SQuAD v1.1 question + context capped at 384
tokens (BERT's SQuAD setting), each with its [CLS]/[SEP] tokens. When the data is absent the
stored histograms below (the same computation, binned) stand in, so the cases run anywhere.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

SQUAD_MAX = 384

# Length histograms of the three dev sets, {upper edge of bin: count}; a bin holds the lengths
# (previous edge, edge]. Computed by `real_lengths` on 2026-11-30 (bin widths 4, 4 and 16):
# 872 SST-2 sentences, mean 25.2 tokens; 408 MRPC pairs, mean 53.2; 10,570 SQuAD questions, mean 174.6.
STORED: dict[str, dict[int, int]] = {
    "sst2": {4: 2, 8: 22, 12: 79, 16: 94, 20: 124, 24: 115, 28: 128, 32: 100, 36: 73, 40: 59, 44: 44,
             48: 15, 52: 10, 56: 7},
    "mrpc": {28: 2, 32: 20, 36: 17, 40: 35, 44: 35, 48: 49, 52: 40, 56: 42, 60: 41, 64: 46, 68: 30,
             72: 25, 76: 12, 80: 9, 84: 4, 88: 1},
    "squad": {48: 52, 64: 150, 80: 193, 96: 338, 112: 455, 128: 1071, 144: 1523, 160: 1371, 176: 1125,
              192: 989, 208: 798, 224: 657, 240: 389, 256: 286, 272: 320, 288: 186, 304: 183, 320: 101,
              336: 72, 352: 38, 368: 53, 384: 220},
}


def shared_data_dir() -> Path | None:
    """../shared/data beside the repository (or $BERTKIT_SHARED/data), when present."""
    candidates = []
    if os.environ.get("BERTKIT_SHARED"):
        candidates.append(Path(os.environ["BERTKIT_SHARED"]) / "data")
    candidates += [Path(__file__).resolve().parents[3].parent / "shared" / "data",
                   Path.cwd().parent / "shared" / "data"]
    return next((p for p in candidates if p.is_dir()), None)


def _tsv_rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


def real_lengths(task: str, data: Path) -> np.ndarray:
    """Token counts of every dev example of `task` ("sst2", "mrpc" or "squad")."""
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(data / "vocab" / "bert-base-uncased")
    if task == "sst2":
        rows = _tsv_rows(data / "glue" / "SST-2" / "dev.tsv")
        enc = tok.encode_batch([r[0] for r in rows])
    elif task == "mrpc":
        rows = [r for r in _tsv_rows(data / "glue" / "MRPC" / "dev.tsv") if len(r) >= 5]
        enc = tok.encode_batch([r[3] for r in rows], [r[4] for r in rows])
    elif task == "squad":
        squad = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
        questions, contexts = [], []
        for article in squad["data"]:
            for para in article["paragraphs"]:
                for qa in para["qas"]:
                    questions.append(qa["question"])
                    contexts.append(para["context"])
        enc = tok.encode_batch(questions, contexts, max_length=SQUAD_MAX)
    else:
        raise ValueError(f"unknown length distribution {task!r}; use sst2, mrpc or squad")
    return np.array([len(e.ids) for e in enc], dtype=np.int64)


def histogram(lengths: np.ndarray, width: int) -> dict[int, int]:
    edges = (np.ceil(lengths / width) * width).astype(np.int64)
    values, counts = np.unique(edges, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts)}


def from_histogram(hist: dict[int, int], width: int) -> np.ndarray:
    """Lengths spread evenly over each bin: a stand-in with the same shape and mean."""
    out = []
    for edge, count in hist.items():
        low = max(edge - width + 1, 3)
        out.extend(np.linspace(low, edge, count).round().astype(np.int64).tolist())
    return np.array(out, dtype=np.int64)


WIDTHS = {"sst2": 4, "mrpc": 4, "squad": 16}


def dev_lengths(task: str) -> tuple[np.ndarray, str]:
    """The task's dev-set lengths and where they came from ("tokenized ..." or "stored histogram")."""
    data = shared_data_dir()
    if data is not None:
        try:
            return real_lengths(task, data), f"tokenized {task} dev from {data}"
        except (OSError, KeyError, IndexError):
            pass
    return from_histogram(STORED[task], WIDTHS[task]), "stored histogram (shared data absent)"


def sample_batches(lengths: np.ndarray, batch_size: int, n_batches: int, seed: int = 0) -> list[np.ndarray]:
    """`n_batches` random batches (without replacement inside a batch) of dev-set lengths."""
    rng = np.random.default_rng(seed)
    return [rng.choice(lengths, size=batch_size, replace=False) for _ in range(n_batches)]
