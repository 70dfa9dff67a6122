"""`bertkit serve`'s backend interface (`serve.backend.Backend`) on an ONNX export.

`OnnxServeBackend(spec, device)` runs the folder's graph where `serve.backend.TorchBackend` runs
the torch model, with the same `run(op, batch)` and the same per-row outputs (real tokens only):
`embed` pools the graph's token vectors as `spec.pooling` says (not normalised, as the torch
backend), `classify` / `tokens` / `qa` / `mlm` read the head graph's logits. An export holds one
graph, so a head's folder serves its head's operations and an embedding folder `embed`.
`spec.path` is the export folder; `spec.int8` (when the spec has it) picks the int8 graph.
"""

from __future__ import annotations

import numpy as np
import torch

from bertkit.embed import pool
from bertkit.errors import UserError
from bertkit.export.backend import OnnxModel

_OPS = {"embedding": ("embed", "hidden"), "BertForSequenceClassification": ("classify",),
        "BertForTokenClassification": ("tokens",), "BertForQuestionAnswering": ("qa",),
        "BertForMaskedLM": ("mlm",), "BertForPreTraining": ("mlm",)}


class OnnxServeBackend:
    def __init__(self, spec, device: str = "cpu", int8: bool | None = None):
        if str(device) not in ("cpu", "auto"):
            raise UserError("the ONNX backend runs on the CPU: serve it with --device cpu")
        self.spec = spec
        self.model = OnnxModel.load(spec.path, int8=bool(getattr(spec, "int8", False) if int8 is None else int8))

    @property
    def ops(self) -> tuple[str, ...]:
        return _OPS[self.model.kind]

    def run(self, op: str, batch) -> list[np.ndarray]:
        if op not in self.ops:
            raise ValueError(f"the exported {self.model.kind} graph does not run {op!r}")
        out = self.model.run(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        lengths = batch.lengths
        if op == "hidden":
            return [row[:n] for row, n in zip(out["token_embeddings"], lengths)]  # (n, C) each
        if op == "embed":
            hidden, mask = (torch.from_numpy(a) for a in (out["token_embeddings"], batch.attention_mask))
            return list(pool(hidden, mask, self.spec.pooling).numpy())  # (B, T, C) -> (B, C)
        if op == "classify":
            return list(out["logits"])
        if op == "tokens":
            return [row[:n] for row, n in zip(out["logits"], lengths)]
        if op == "qa":
            both = np.stack([out["start_logits"], out["end_logits"]], axis=-1)  # (B, T, 2)
            return [row[:n] for row, n in zip(both, lengths)]
        where = batch.input_ids == self.spec.tokenizer.mask_id  # (B, T)
        return [row[w] for row, w in zip(out["logits"], where)]  # (M, V) each
