"""Matryoshka widths at inference: a vector's first d components, unit length again.

A model trained with `--matryoshka-dims` (`finetune.contrastive.matryoshka`, sentence-transformers'
MatryoshkaLoss) keeps its quality in each prefix it was trained on; `embed`, `index`, `search` and
`serve` (`dimensions`) cut every vector to `--dimensions N` and renormalise it when the vectors are
unit length, the one rule (`truncate_rows`) for all of them. A long text's chunks are cut and
renormalised before they are averaged. The saved model lists its trained widths under
`matryoshka_dims` in config_sentence_transformers.json (`trained_dims`).
"""

from __future__ import annotations

import os

import numpy as np

from bertkit.errors import UserError


def check_dimensions(d: int | None, width: int, flag: str = "--dimensions") -> None:
    """A UserError unless d is None or 1 <= d <= width."""
    if d is not None and not 1 <= d <= width:
        raise UserError(f"{flag} {d} must be between 1 and the vectors' width {width}")


def truncate_rows(vectors: np.ndarray, d: int | None, normalize: bool = True) -> np.ndarray:
    """(N, C) -> (N, d) float32: the first d components, each row unit length again when
    `normalize` (a zero row stays zero); None keeps the rows as they are."""
    if d is None:
        return vectors
    cut = np.ascontiguousarray(vectors[..., :d], dtype=np.float32)
    if normalize:
        norms = np.linalg.norm(cut.astype(np.float64), axis=-1, keepdims=True)
        cut = (cut / np.maximum(norms, 1e-12)).astype(np.float32)
    return cut


def trained_dims(model_dir: str | os.PathLike) -> list[int]:
    """The Matryoshka widths the model was trained on, widest first ([] when none are recorded)."""
    from bertkit.st import model_st_config

    return [int(d) for d in model_st_config(model_dir).get("matryoshka_dims") or []]
