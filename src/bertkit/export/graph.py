"""The torch modules `bertkit export` traces: one per kind of model directory.

A model directory becomes one of two kinds of graph, each taking `input_ids`, `attention_mask`
and `token_type_ids` ((B, T) int64, both axes dynamic):
- an embedding graph (a bare encoder, a sentence-transformers directory): `token_embeddings`
  (B, T, C), the last layer, and `sentence_embedding` (B, C), pooled as the directory's
  sentence-transformers files say (`search.encoder.model_pooling`) and, when they list a
  Normalize module, scaled to unit length: what sentence-transformers' `encode` returns;
- a head graph: the head's outputs under transformers' names: `logits` (classifier (B, L),
  token classifier (B, T, L), masked LM (B, T, V)), `start_logits` / `end_logits` (B, T) for
  question answering, and for a pretraining head also `seq_relationship_logits` (B, 2).

Attention can be traced as ONNX Runtime's fused `com.microsoft.Attention` operator: our fused
(C, 3C) query|key|value projection is exactly the packed weight it takes, so each layer's
attention is one operator (and, after dynamic quantisation, one int8 `QAttention`). The torch
side computes the same as `model.Layer.forward`; only the traced graph differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import UserError
from bertkit.model import BertModel, attention_mask_for_sdpa

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
HEAD_OUTPUTS = {
    "BertForSequenceClassification": ("logits",),
    "BertForTokenClassification": ("logits",),
    "BertForQuestionAnswering": ("start_logits", "end_logits"),
    "BertForMaskedLM": ("logits",),
    "BertForPreTraining": ("logits", "seq_relationship_logits"),
}
EMBEDDING_OUTPUTS = ("token_embeddings", "sentence_embedding")


class _FusedAttention(torch.autograd.Function):
    """Self-attention from the packed projection; traced as com.microsoft.Attention."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, mask: Tensor, heads: int) -> Tensor:
        B, T, C = x.shape
        q, k, v = (x @ weight + bias).view(B, T, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
        keep = mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (B, H, T, D)
        return a.transpose(1, 2).reshape(B, T, C)

    @staticmethod
    def symbolic(g, x, weight, bias, mask, heads):
        out = g.op("com.microsoft::Attention", x, weight, bias, mask, num_heads_i=heads)
        out.setType(x.type())  # the output has the input's shape and type: tells the exporter's shape inference
        return out


class _Encoder(nn.Module):
    """`BertModel`'s padded forward (eval mode), attention fused or as the model writes it."""

    def __init__(self, encoder: BertModel, fused_attention: bool):
        super().__init__()
        self.encoder = encoder
        self.fused = fused_attention
        if fused_attention and encoder.config.attention == "causal":
            raise UserError("fused attention is bidirectional: export a left-to-right model with --attention plain")

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> tuple[Tensor, Tensor]:
        """(last hidden state (B, T, C), pooler output (B, C) or None)."""
        enc = self.encoder
        T = input_ids.shape[1]
        x = enc.embeddings(input_ids, torch.arange(T, device=input_ids.device), token_type_ids)  # (B, T, C)
        if self.fused:
            mask = attention_mask.to(torch.int32)
            for layer in enc.layers:
                a = _FusedAttention.apply(x, layer.qkv.weight.t(), layer.qkv.bias, mask, layer.n_head)
                x = layer.finish(x, a)
        else:
            sdpa_mask, is_causal = attention_mask_for_sdpa(attention_mask, T, enc.config.attention == "causal")
            for layer in enc.layers:
                x = layer(x, sdpa_mask, is_causal)
        return x, enc.pool(x)


def pool_tokens(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(B, T, C) -> (B, C) as `embed.pool`, written with masks that trace to plain ONNX ops."""
    keep = attention_mask.to(hidden.dtype)[:, :, None]  # (B, T, 1)
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1.0)
    return hidden.masked_fill(keep == 0, torch.finfo(hidden.dtype).min).amax(1)


class EmbeddingGraph(nn.Module):
    def __init__(self, encoder: BertModel, pooling: str, normalize: bool, fused_attention: bool):
        super().__init__()
        self.body = _Encoder(encoder, fused_attention)
        self.pooling, self.normalize = pooling, normalize

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden, _ = self.body(input_ids, attention_mask, token_type_ids)
        vectors = pool_tokens(hidden, attention_mask, self.pooling)
        if self.normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
        return hidden, vectors


class HeadGraph(nn.Module):
    """A `BertFor...` head on the traced encoder; outputs as `HEAD_OUTPUTS` names them."""

    def __init__(self, model: nn.Module, fused_attention: bool):
        super().__init__()
        self.model = model
        self.body = _Encoder(model.encoder, fused_attention)
        self.kind = type(model).__name__

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden, pooled = self.body(input_ids, attention_mask, token_type_ids)
        m = self.model
        if self.kind == "BertForSequenceClassification":
            return m.output(pooled)
        if self.kind == "BertForTokenClassification":
            return m.output(hidden)
        if self.kind == "BertForQuestionAnswering":
            start, end = m.output(hidden).unbind(-1)
            return start, end
        if self.kind == "BertForMaskedLM":
            return m.mlm(hidden)
        return m.mlm(hidden), m.nsp(pooled)


def _architecture(model_dir: Path) -> str | None:
    try:
        names = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("architectures") or []
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
