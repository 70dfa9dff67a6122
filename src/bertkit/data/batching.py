"""Padding and batching: the one place where lists of token ids become padded tensors.

Fine-tuning, evaluation, `embed`, token features and the benchmark all batch through here.
Sequences are padded on the right to the longest in the batch (BERT reads [CLS] at position 0),
labels with IGNORE_INDEX so the loss skips padding.

Shape legend: B batch, T the batch's longest sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from bertkit.config import IGNORE_INDEX

# Sequence keys padded to the batch's longest row, and their padding values ("input_ids": the pad id).
_PAD = {"token_type_ids": 0, "attention_mask": 0, "labels": IGNORE_INDEX}


def pad_rows(rows: Sequence[Sequence[int]], value: int) -> Tensor:
    """Rows of ids of different lengths -> (B, T) long tensor padded on the right with `value`."""
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def length_mask(lengths: Sequence[int], width: int | None = None) -> Tensor:
    """(B, T) 1/0 mask with ones over each row's first `length` positions."""
    lengths = torch.as_tensor(list(lengths), dtype=torch.long)
    if width is None:
        width = int(lengths.max()) if len(lengths) else 0
    return (torch.arange(width)[None, :] < lengths[:, None]).long()


def collate(features: list[dict], pad_id: int = 0) -> dict[str, Tensor]:
    """Stack feature dicts into tensors, padding sequences to the longest in the batch.

    Lists become (B, T) tensors ("input_ids" padded with `pad_id`, labels with IGNORE_INDEX);
    scalars become (B,) float tensors when any is a float (regression targets), long otherwise.
    An attention mask is added when the features have none.
    """
    batch: dict[str, Tensor] = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], (list, tuple)):
            batch[key] = pad_rows(values, pad_id if key == "input_ids" else _PAD.get(key, 0))
        elif any(isinstance(v, float) for v in values):
            batch[key] = torch.tensor(values, dtype=torch.float32)
        else:
            batch[key] = torch.tensor(values, dtype=torch.long)
    if "attention_mask" not in batch and "input_ids" in batch:
        batch["attention_mask"] = length_mask([len(f["input_ids"]) for f in features], batch["input_ids"].shape[1])
    return batch


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
