"""Text-pair rows for bi-encoder and cross-encoder training: (anchor, positive[, negatives...][, score]).

One reader for TSV and JSONL (plain, .gz or .xz). A TSV needs a header; its columns are found
by name: `anchor` (or `query`, `sentence1`), `positive` (or `passage`, `sentence2`), any number
of columns whose name starts with `negative` (empty cells skipped) and an optional `score`;
other columns are ignored, so GLUE's STS-B train.tsv reads as scored pairs unchanged. A JSONL
line is an object with the same keys; `negatives` may also be a list of strings.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import UserError

ANCHOR = ("anchor", "query", "sentence1")
POSITIVE = ("positive", "passage", "sentence2")


@dataclass(frozen=True)
class PairRow:
    anchor: str
    positive: str
    negatives: tuple[str, ...] = ()
    score: float | None = None  # a graded similarity (CoSENT); None for (anchor, positive) pairs

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.anchor, self.positive, *self.negatives)


def _column(names: list[str], choices: tuple[str, ...], path: Path) -> int:
    for choice in choices:
        if choice in names:
            return names.index(choice)
    raise UserError(f"the header names no {' / '.join(choices)} column", path, 1)


def _score(value, path: Path, number: int) -> float | None:
    if value is None or value == "":
        return None
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise UserError(f"score {value!r} is not a number", path, number) from None
    if not math.isfinite(score):
        raise UserError(f"score {value!r} is not a finite number", path, number)
    return score


def _row(anchor, positive, negatives, score, path: Path, number: int) -> PairRow:
    texts = [anchor, positive, *negatives]
    if not all(isinstance(t, str) for t in texts):
        raise UserError("anchor, positive and negatives must be strings", path, number)
    if not anchor.strip() or not positive.strip():
        raise UserError("empty anchor or positive text", path, number)
    return PairRow(anchor, positive, tuple(n for n in negatives if n.strip()), _score(score, path, number))


def _read_tsv(path: Path) -> list[PairRow]:
    from bertkit.io import read_lines

    lines = read_lines(path)
    header = next(lines, None)
    if header is None:
        raise UserError("empty file", path)
    names = [n.strip().lower() for n in header.split("\t")]
    a, p = _column(names, ANCHOR, path), _column(names, POSITIVE, path)
    negatives = [i for i, n in enumerate(names) if n.startswith("negative")]
    score = names.index("score") if "score" in names else None
    rows = []
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) < len(names):
            raise UserError(f"expected {len(names)} tab-separated columns, found {len(cells)}", path, number)
        rows.append(_row(cells[a], cells[p], [cells[i] for i in negatives],
                         None if score is None else cells[score], path, number))
    return rows


def _read_jsonl(path: Path) -> list[PairRow]:
    from bertkit.io import read_jsonl

    rows = []
    for number, obj in read_jsonl(path):
        anchor = next((obj[k] for k in ANCHOR if k in obj), None)
        positive = next((obj[k] for k in POSITIVE if k in obj), None)
        if anchor is None or positive is None:
            raise UserError('expected an object with "anchor" and "positive" texts', path, number)
        negatives = obj.get("negatives", [])
        if not isinstance(negatives, list):
            raise UserError('"negatives" must be a list of texts', path, number)
        negatives = negatives + [v for k, v in sorted(obj.items()) if k.startswith("negative") and k != "negatives"]
        rows.append(_row(anchor, positive, negatives, obj.get("score"), path, number))
    return rows


def read_pair_rows(path: str | os.PathLike) -> list[PairRow]:
    """The rows of a TSV or JSONL file (by its name: .jsonl, .jsonl.gz, ...; else TSV)."""
    path = Path(path)
    rows = _read_jsonl(path) if ".jsonl" in path.name else _read_tsv(path)
    if not rows:
        raise UserError("no rows", path)
    return rows
