"""Unpadded encoder forward: the Transformer layers see only real tokens.

A padded batch of variable-length texts spends most of its matrix work on [PAD]: SST-2's dev
sentences average ~25 tokens but a batch pads to its longest. Here the real tokens are gathered
into one (N, C) matrix before the first layer, every dense layer (QKV, output projection, FFN,
LayerNorm) runs on those N rows only, attention runs per sequence, and the result is scattered
back to (B, T, C) with zeros at padding. Outputs at real tokens equal the padded path's (the
same weights, the same per-token arithmetic; attention differs only by summation order).

Attention per sequence: on CUDA in half precision without attention dropout, one call to
`torch.nn.attention.varlen.varlen_attn` (flash attention over cumulative lengths); elsewhere the
sequences are grouped by length and each group is one unmasked SDPA call, so a batch costs as
many attention calls as it has distinct lengths.

Shape legend: B batch, T padded length, N real tokens in the batch, C hidden, H heads, D head
size, G sequences of one length, L that length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.model import BertModel, EncoderOutput, Layer


@dataclass
class Packing:
    """Where the real tokens of a padded batch are, computed once and shared by every layer."""

    index: Tensor  # (N,) flat positions in the (B*T) padded layout, row-major
    cu_seqlens: Tensor  # (B+1,) int32 start of each sequence in the packed rows
    max_len: int  # longest sequence, in tokens
    groups: list[tuple[int, Tensor]]  # (L, (G, L) packed-row indices of the sequences of length L)

    @classmethod
    def from_mask(cls, attention_mask: Tensor) -> "Packing":
        keep = attention_mask.bool()
        lengths = keep.sum(1)  # (B,)
        index = keep.reshape(-1).nonzero().squeeze(1)  # (N,)
        cu = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)  # (B+1,)
        groups = []
        for L in sorted(set(lengths.tolist()) - {0}):
            starts = cu[:-1][lengths == L]  # (G,)
            rows = starts[:, None] + torch.arange(L, device=starts.device)  # (G, L)
            groups.append((int(L), rows.long()))
        return cls(index, cu, int(lengths.max()) if lengths.numel() else 0, groups)


def _varlen_kernel(qkv: Tensor, dropout_p: float):
    """torch's flash varlen attention when it applies here (CUDA, half precision, no dropout)."""
    if not qkv.is_cuda or qkv.dtype not in (torch.float16, torch.bfloat16) or dropout_p:
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn  # torch >= 2.10
    except ImportError:
        return None
    return varlen_attn


def attend_packed(layer: Layer, x: Tensor, packing: Packing, causal: bool) -> Tensor:
    """One encoder layer on packed tokens: (N, C) -> (N, C)."""
    N, C = x.shape
    H, D = layer.n_head, C // layer.n_head
    qkv = layer.qkv(x).view(N, 3, H, D)  # (N, 3, H, D)
    p = layer.attn_dropout if layer.training else 0.0
    varlen_attn = _varlen_kernel(qkv, p)
    if varlen_attn is not None:
        q, k, v = (t.contiguous() for t in qkv.unbind(1))  # 3 x (N, H, D)
        cu, m = packing.cu_seqlens, packing.max_len
        a = varlen_attn(q, k, v, cu, cu, m, m, window_size=(-1, 0) if causal else (-1, -1))
    else:
        parts, rows = [], []
        for L, idx in packing.groups:
            q, k, v = qkv[idx].permute(2, 0, 3, 1, 4)  # (G, L, 3, H, D) -> 3 x (G, H, L, D)
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
            parts.append(o.transpose(1, 2).reshape(-1, H, D))  # (G*L, H, D)
            rows.append(idx.reshape(-1))
        order = torch.cat(rows)  # packed row of each output row
        a = torch.empty_like(qkv[:, 0]).index_copy(0, order, torch.cat(parts))  # (N, H, D)
    return layer.finish(x, a.reshape(N, C))


def _embed_packed(model: BertModel, input_ids: Tensor, token_type_ids: Tensor | None,
                  packing: Packing) -> Tensor:
    """The embeddings of the real tokens only, with the positions they have in the padded batch."""
    emb = model.embeddings
    B, T = input_ids.shape
    positions = torch.arange(T, device=input_ids.device).repeat(B)[packing.index]  # (N,)
    x = emb.word(input_ids.reshape(-1)[packing.index]) + emb.position(positions)  # (N, C)
    if token_type_ids is None:
        x = x + emb.segment.weight[0]
    else:
        x = x + emb.segment(token_type_ids.reshape(-1)[packing.index])
    return emb.dropout(emb.norm(x))


def _repad(x: Tensor, packing: Packing, B: int, T: int) -> Tensor:
    out = x.new_zeros(B * T, x.shape[-1]).index_copy(0, packing.index, x)  # (B*T, C)
    return out.view(B, T, -1)  # (B, T, C)


def forward_unpadded(model: BertModel, input_ids: Tensor, attention_mask: Tensor,
                     token_type_ids: Tensor | None = None, output_hidden_states: bool = False) -> EncoderOutput:
    """`model`'s forward with padding removed before the layers; zeros at padded positions.

    The pooler reads position 0, as in the padded path, so pad on the right (BERT's layout).
    """
    B, T = input_ids.shape
    packing = Packing.from_mask(attention_mask)
    causal = model.config.attention == "causal"
    x = _embed_packed(model, input_ids, token_type_ids, packing)  # (N, C)
    states = [x] if output_hidden_states else None
    for layer in model.layers:
        x = attend_packed(layer, x, packing, causal)
        if states is not None:
            states.append(x)
    last = _repad(x, packing, B, T)  # (B, T, C)
    pooled = torch.tanh(model.pooler(last[:, 0])) if model.pooler is not None else None  # (B, C)
    hidden = tuple(_repad(s, packing, B, T) for s in states) if states is not None else None
    return EncoderOutput(last, pooled, hidden)


def set_unpadding(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Switch every encoder inside `model` (a head or a bare BertModel) to the unpadded path."""
    for module in model.modules():
        if isinstance(module, BertModel):
            module.unpad = enabled
    return model
