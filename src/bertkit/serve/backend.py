"""What runs the model behind `bertkit serve`: a small interface, and its PyTorch implementation.

A backend loads one `ModelSpec` and runs operations on padded batches of numpy arrays; it
returns one numpy array per row, real tokens only:

| op | row output |
|---|---|
| embed | (C,) the pooled sentence vector, not normalised |
| hidden | (n, C) the last layer's vector of each of the row's n tokens |
| classify | (L,) logits of the sequence classifier |
| tokens | (n, L) logits of each of the row's n tokens (token classifier) |
| qa | (n, 2) start and end logits of each token |
| mlm | (M, V) vocabulary logits at the row's M [MASK] positions |

`BACKENDS` maps `--backend` names to factories `(spec, device) -> Backend`: "torch" here, "onnx"
(ONNX Runtime on a `bertkit export` folder, `export.serving.OnnxServeBackend`); another runtime
plugs in by adding a class with the same `run` and an entry here.

Shape legend: B rows, T longest row, C hidden, L labels, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bertkit.serve.models import ModelSpec


@dataclass
class Batch:
    input_ids: np.ndarray  # (B, T) int64, right-padded
    token_type_ids: np.ndarray  # (B, T) int64
    attention_mask: np.ndarray  # (B, T) int64, 1 at real tokens

    @property
    def lengths(self) -> list[int]:
        return self.attention_mask.sum(axis=1).tolist()


def pad_batch(rows: list[tuple[list[int], list[int]]], pad_id: int) -> Batch:
    """(ids, type ids) rows -> a right-padded `Batch`."""
    width = max(len(ids) for ids, _ in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for r, (row_ids, row_types) in enumerate(rows):
        ids[r, : len(row_ids)] = row_ids
        types[r, : len(row_types)] = row_types
        mask[r, : len(row_ids)] = 1
    return Batch(ids, types, mask)


class Backend(Protocol):
    def run(self, op: str, batch: Batch) -> list[np.ndarray]:
        """One output per row of `batch` (see the module's table)."""
        ...


_HEADS = {"masked-lm": "BertForMaskedLM", "classifier": "BertForSequenceClassification",
          "token-classifier": "BertForTokenClassification", "question-answering": "BertForQuestionAnswering"}


class TorchBackend:
    """bertkit's own PyTorch model, in eval mode under inference_mode (int8 linear layers when the
    spec says int8: `bertkit.quantize`, CPU only; under bf16 autocast when its precision is bf16,
    outputs returned as float32); on the CPU on the unpadded
    path (`model.set_unpadding`: the dense layers run on real tokens only, so a batch of mixed
    lengths costs its real tokens; outputs equal the padded path's to float rounding). On a GPU,
    short batches are launch-bound and the padded path is faster (bench/README.md)."""

    def __init__(self, spec: ModelSpec, device: str = "cpu"):
        import torch

        self.spec, self.device = spec, torch.device(device)
        self.model, self.encoder = self.load(spec)

    def load(self, spec: ModelSpec):
        """(the model, its encoder): what `run` calls. Another runtime whose models are called
        like bertkit's (ids, attention_mask=, token_type_ids= -> the same output classes) can
        subclass this and override `load` alone."""
        from bertkit import heads
        from bertkit.model import BertModel, set_unpadding
        from bertkit.quantize import maybe_int8

        if spec.config.model_type == "static":  # a table (bertkit.static): its rows are the "hidden states"
            from bertkit.static import load_static

            model = load_static(spec.path)[0].to(self.device)
            return model, model
        if spec.kind == "encoder":
            model = BertModel.from_pretrained(spec.path)
        else:
            model = getattr(heads, _HEADS[spec.kind]).from_pretrained(spec.path)
        model = maybe_int8(model.eval().to(self.device), spec.int8)  # raises on a non-CPU device
        set_unpadding(model, enabled=self.device.type == "cpu")
        return model, model if spec.kind == "encoder" else model.encoder

    def run(self, op: str, batch: Batch) -> list[np.ndarray]:
        import torch

        from bertkit.devices import autocast

        with torch.inference_mode(), autocast(self.spec.precision, self.device):
            return self._run(op, batch)

    def _run(self, op: str, batch: Batch) -> list[np.ndarray]:
        import torch

        ids, types, mask = (torch.from_numpy(a).to(self.device)
                            for a in (batch.input_ids, batch.token_type_ids, batch.attention_mask))
        lengths = batch.lengths
        if op in ("embed", "hidden"):
            from bertkit.embed import pool

            hidden = self.encoder(ids, attention_mask=mask, token_type_ids=types).last_hidden_state.float()  # (B, T, C)
            if op == "hidden":
                return [row[:n] for row, n in zip(hidden.cpu().numpy(), lengths)]  # (n, C) each
            return list(pool(hidden, mask, self.spec.pooling).cpu().numpy())
        if op == "classify":
            return list(self.model(ids, attention_mask=mask, token_type_ids=types).logits.float().cpu().numpy())
        if op == "tokens":
            logits = self.model(ids, attention_mask=mask, token_type_ids=types).logits.float().cpu().numpy()
            return [row[:n] for row, n in zip(logits, lengths)]  # (n, L) each
        if op == "qa":
            out = self.model(ids, attention_mask=mask, token_type_ids=types)
            both = torch.stack([out.start_logits, out.end_logits], dim=-1).float().cpu().numpy()  # (B, T, 2)
            return [row[:n] for row, n in zip(both, lengths)]
        if op == "mlm":
            return self._masked(ids, types, mask)
        raise ValueError(f"unknown operation {op!r}")

    def _masked(self, ids, types, mask) -> list[np.ndarray]:
        hidden = self.encoder(ids, attention_mask=mask, token_type_ids=types).last_hidden_state  # (B, T, C)
        where = ids == self.spec.tokenizer.mask_id  # (B, T)
        logits = self.model.mlm(hidden[where]).float().cpu().numpy()  # (M, V), row-major over (B, T)
        counts = where.sum(dim=1).tolist()
        bounds = np.cumsum([0, *counts])
        return [logits[bounds[r]:bounds[r + 1]] for r in range(len(counts))]


def _onnx(spec: ModelSpec, device: str = "cpu") -> Backend:
    from bertkit.export.serving import OnnxServeBackend  # onnxruntime only when asked for

    return OnnxServeBackend(spec, device)


BACKENDS: dict[str, Callable[[ModelSpec, str], Backend]] = {"torch": TorchBackend, "onnx": _onnx}
