"""The torch modules `bertkit export` traces: one per kind of model directory.

A model directory becomes one of two kinds of graph, each taking `input_ids`, `attention_mask`
and `token_type_ids` ((B, T) int64, both axes dynamic):
- an embedding graph (a bare encoder, a sentence-transformers directory): `token_embeddings`
  (B, T, C), the last layer, and `sentence_embedding` (B, C), pooled as the directory's
  sentence-transformers files say (`st.model_pooling`) and, when they list a
  Normalize module, scaled to unit length: what sentence-transformers' `encode` returns;
- a head graph: the head's outputs under transformers' names: `logits` (classifier (B, L),
  token classifier (B, T, L), masked LM (B, T, V)), `start_logits` / `end_logits` (B, T) for
  question answering, and for a pretraining head also `seq_relationship_logits` (B, 2).

Both run the model's own forward (`BertModel.forward`, a head's `forward`) and the one pooling
(`embed.pool`). Attention can be traced as ONNX Runtime's fused `com.microsoft.Attention`
operator (`BertModel.fused_attention`, see `model.FusedAttention`): one operator per layer (and,
after dynamic quantisation, one int8 `QAttention`); the torch side computes the same as the
padded path, only the traced graph differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.nn.functional as F
from torch import nn

from bertkit.embed import pool
from bertkit.errors import UserError
from bertkit.model import BertModel

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
HEAD_OUTPUTS = {
    "BertForSequenceClassification": ("logits",),
    "BertForTokenClassification": ("logits",),
    "BertForQuestionAnswering": ("start_logits", "end_logits"),
    "BertForMaskedLM": ("logits",),
    "BertForPreTraining": ("logits", "seq_relationship_logits"),
}
EMBEDDING_OUTPUTS = ("token_embeddings", "sentence_embedding")


def _traceable(encoder: BertModel, fused_attention: bool) -> BertModel:
    """`encoder` set to trace its padded forward, attention fused or as the model writes it."""
    if fused_attention and encoder.config.attention == "causal":
        raise UserError("fused attention is bidirectional: export a left-to-right model with --attention plain")
    encoder.unpad, encoder.fused_attention = False, fused_attention
    return encoder


class EmbeddingGraph(nn.Module):
    def __init__(self, encoder: BertModel, pooling: str, normalize: bool, fused_attention: bool):
        super().__init__()
        self.encoder = _traceable(encoder, fused_attention)
        self.pooling, self.normalize = pooling, normalize

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state  # (B, T, C)
        vectors = pool(hidden, attention_mask, self.pooling)  # (B, C)
        if self.normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
        return hidden, vectors


class HeadGraph(nn.Module):
    """A `BertFor...` head's own forward; outputs as `HEAD_OUTPUTS` names them (its output's fields)."""

    def __init__(self, model: nn.Module, fused_attention: bool):
        super().__init__()
        self.model = model
        _traceable(model.encoder, fused_attention)
        self.kind = type(model).__name__

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids, attention_mask, token_type_ids)
        logits = tuple(getattr(out, name) for name in HEAD_OUTPUTS[self.kind])
        return logits if len(logits) > 1 else logits[0]


def _architecture(model_dir: Path) -> str | None:
    from bertkit.hf import our_architectures

    try:
        names = our_architectures(json.loads((model_dir / "config.json").read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return next((n for n in names if n in HEAD_OUTPUTS), None)


def graph_kind(model_dir: str | Path, graph: str = "auto") -> str:
    """"embedding", or the head class to export. `graph` "auto": the directory's head (config.json's
    architectures) unless it is a sentence-transformers directory or names none; "head": its head
    or a UserError; "embedding": the embedding graph whatever the head."""
    model_dir = Path(model_dir)
    head = _architecture(model_dir)
    if graph == "embedding" or (graph == "auto" and ((model_dir / "modules.json").is_file() or head is None)):
        return "embedding"
    if head is None:
        raise UserError("config.json names no BertFor... head (architectures): export it with --graph embedding",
                        model_dir)
    return head


def build_graph(model_dir: str | Path, kind: str, pooling: str, normalize: bool,
                fused_attention: bool) -> tuple[nn.Module, tuple[str, ...]]:
    """(the eval-mode module to trace, its output names) for a directory of this kind."""
    from bertkit.heads import HEADS

    if kind == "embedding":
        encoder = BertModel.from_pretrained(model_dir)
        return EmbeddingGraph(encoder, pooling, normalize, fused_attention).eval(), EMBEDDING_OUTPUTS
    from bertkit.finetune.task import require_trained_head

    model = HEADS[kind].from_pretrained(model_dir)
    require_trained_head(model, Path(model_dir))
    return HeadGraph(model, fused_attention).eval(), HEAD_OUTPUTS[kind]
