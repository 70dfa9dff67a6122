"""Padding and batching: the one place where lists of token ids become padded tensors.

Fine-tuning, evaluation, `embed`, token features and the benchmark all batch through here.
Sequences are padded on the right to the longest in the batch (BERT reads [CLS] at position 0),
labels with IGNORE_INDEX so the loss skips padding.

Shape legend: B batch, T the batch's longest sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import accumulate

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


def length_groups(lengths: Sequence[int], max_groups: int = 4, group_cost: int = 64) -> list[list[int]]:
    """Row indices in at most `max_groups` groups of similar length, each sorted by length, that
    minimise the padded tokens sum(len(group) * longest in group) plus `group_cost` tokens per
    group (a forward pass's fixed cost). A contrastive batch of 32 short questions and 32
    paragraphs becomes two groups, as if each column were embedded on its own."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if not order:
        return []
    counts = Counter(lengths)
    values = sorted(counts)  # groups only ever split between different lengths
    below = [0, *accumulate(counts[v] for v in values)]  # below[u]: rows shorter than values[u]
    u, inf = len(values), float("inf")
    # best[g][b]: cost of the rows with the b shortest lengths in g groups; cut: where the last starts.
    best = [[0.0] + [inf] * u] + [[inf] * (u + 1) for _ in range(max_groups)]
    cut = [[0] * (u + 1) for _ in range(max_groups + 1)]
    for g in range(1, max_groups + 1):
        for b in range(1, u + 1):
            for a in range(g - 1, b):
                c = best[g - 1][a] + (below[b] - below[a]) * values[b - 1] + group_cost
                if c < best[g][b]:
                    best[g][b], cut[g][b] = c, a
    g = min(range(1, max_groups + 1), key=lambda k: best[k][u])
    groups, b = [], u
    while g:
        a = cut[g][b]
        groups.append(order[below[a]:below[b]])
        b, g = a, g - 1
    return groups[::-1]


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
