"""Self-attention for every family: how one layer's input becomes its attention output.

One function computes attention for a block of same-length sequences, `attend(q, k, v, ...)`:
scaled dot product (`F.scaled_dot_product_attention`) with whatever the family adds to it, each
switched on by the config:
- rotary positions (ModernBERT): query and key rotated by their position before the product, with
  the global or the local base (`rope_theta`, `local_rope_theta`);
- a local window (ModernBERT): a local layer's token sees only tokens within local_attention / 2
  of it (both sides, inclusive, as transformers' bidirectional sliding window);
- disentangled attention (DeBERTa): content-to-position and position-to-content scores from a
  shared table of log-bucketed relative distances (`Relative`), added to the content scores,
  all three scaled by 1/sqrt(D x (1 + terms)), as DeBERTa scales them.
The kinds of call (`BertModel._attention` picks one per forward) only decide what such a block is:
- `PaddedAttention`: the (B, T, C) batch with a padding mask;
- `PackedAttention`: (N, C) real tokens, sequences grouped by length, each group unmasked (or one
  flash varlen call on CUDA when nothing but plain attention is asked);
- `FusedAttention`: padded, traced for ONNX Runtime as one `com.microsoft.Attention` operator per
  layer (plain attention only: other families export through the padded path).

Shape legend: B batch, T tokens, C hidden, H heads, D head size, N real tokens, G sequences of one
length L, S the relative table's rows (2 x span).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.config import BertConfig


# ---- positions inside attention ----
def rotary_tables(positions: Tensor, head_size: int, theta: float) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (..., D) for positions (...,): the angles of rotary embeddings (Su et al.),
    frequencies theta^(-2i/D), the two halves of the head rotated together, computed in fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_size, 2, dtype=torch.float32, device=positions.device)
                                / head_size))
    angles = positions.float()[..., None] * inv_freq  # (..., D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., D)
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (G, H, L, D) rotated by (L, D) tables, in fp32 and back to x's dtype."""
    x32 = x.float()
    half = x32.shape[-1] // 2
    turned = torch.cat([-x32[..., half:], x32[..., :half]], dim=-1)
    return (x32 * cos + turned * sin).to(x.dtype)


def log_buckets(distance: Tensor, buckets: int, max_position: int) -> Tensor:
    """DeBERTa's relative distances: exact within buckets/2 of zero, logarithmic beyond, so
    `buckets` rows cover distances up to `max_position`. The logarithms are fp32, the base's too,
    as transformers computes them: in fp64 the ceiling puts some distances in the next bucket
    (20 buckets over 64 positions: distance 63 in 20, not 19)."""
    mid = buckets // 2
    sign = torch.sign(distance)
    near = (distance < mid) & (distance > -mid)
    size = torch.where(near, torch.tensor(mid - 1, dtype=distance.dtype, device=distance.device), distance.abs())
    base = torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32, device=distance.device))
    far = torch.ceil(torch.log(size.float() / mid) / base * (mid - 1)) + mid
    return torch.where(size <= mid, distance.to(far.dtype), far * sign).long()


def farthest_distance(config: BertConfig) -> int:
    """DeBERTa's max_relative_positions, where -1 (or any value below 1) means
    max_position_embeddings: the distance the log buckets reach."""
    return config.max_relative_positions if config.max_relative_positions > 0 else config.max_position_embeddings


def relative_positions(L: int, config: BertConfig, device) -> Tensor:
    """(L, L): query i to key j, i - j, log-bucketed when the config buckets distances."""
    ids = torch.arange(L, device=device)
    distance = ids[:, None] - ids[None, :]
    if config.position_buckets > 0:
        return log_buckets(distance, config.position_buckets, farthest_distance(config))
    return distance


def relative_span(config: BertConfig) -> int:
    """Rows on each side of zero in DeBERTa's relative table."""
    return config.position_buckets if config.position_buckets > 0 else farthest_distance(config)


@dataclass
class Relative:
    """DeBERTa's disentangled attention for one forward: the relative table (after its LayerNorm)
    and the terms asked for; each layer projects the table with its own maps (`Layer`)."""

    table: Tensor  # (S, C)
    span: int
    terms: tuple[str, ...]  # "c2p", "p2c"
    config: BertConfig
    _indices: dict = field(default_factory=dict)  # L -> rows used and the gather indices, shared by the layers

    @property
    def scale(self) -> float:
        return 1 + len(self.terms)

    def indices(self, L: int, device) -> tuple[int, int, Tensor, Tensor]:
        """(first and last table row that sequences of L tokens use, content-to-position and
        position-to-content gather indices (L, L) into those rows). Outside a trace only the rows
        the distances reach are projected (127 of DeBERTa-v3's 512 at L = 64); a trace keeps all,
        so the graph serves every length."""
        if L not in self._indices:
            rel = relative_positions(L, self.config, device)  # (L, L)
            c2p = (rel + self.span).clamp(0, 2 * self.span - 1)
            p2c = (-rel + self.span).clamp(0, 2 * self.span - 1)  # key j, query i: i - j's row
            lo, hi = (0, 2 * self.span - 1) if torch.jit.is_tracing() else (int(c2p.min()), int(c2p.max()))
            self._indices[L] = (lo, hi, c2p - lo, p2c - lo)
        return self._indices[L]

    def bias(self, q: Tensor, k: Tensor, layer, L: int) -> Tensor:
        """(G, H, L, L): content-to-position plus position-to-content scores, unscaled."""
        lo, hi, c2p, p2c = self.indices(L, q.device)
        H, D = q.shape[1], q.shape[-1]
        pos_q, pos_k = layer.position_maps(self.table[lo : hi + 1])  # (S', C) each, None where not asked
        out = torch.zeros((), dtype=q.dtype, device=q.device)
        if "c2p" in self.terms:
            scores = q @ pos_k.view(-1, H, D).permute(1, 2, 0)  # (G, H, L, D) @ (H, D, S') -> (G, H, L, S')
            out = out + scores.gather(-1, c2p.expand(*scores.shape[:2], L, L))
        if "p2c" in self.terms:
            scores = k @ pos_q.view(-1, H, D).permute(1, 2, 0)  # (G, H, L, S'): key j against distances
            out = out + scores.gather(-1, p2c.expand(*scores.shape[:2], L, L)).transpose(-1, -2)
        return out


# ---- one block of same-length sequences ----
def attend(q: Tensor, k: Tensor, v: Tensor, layer, index: int, keep: Tensor | None, is_causal: bool,
           dropout_p: float, relative: Relative | None, cache: dict) -> Tensor:
    """(G, H, L, D) queries, keys, values -> (G, H, L, D). `keep`: bool, broadcasting to
    (G, 1 or H, L, L), True where attention is allowed (None: everywhere). `cache`: the call's
    rotary tables and window masks, made once for every layer of that length."""
    config: BertConfig = layer.config
    L, D = q.shape[-2], q.shape[-1]
    if config.position_embedding_type == "rotary":
        theta = config.rope_theta if config.is_global(index) else config.local_rope_theta
        if ("rope", L, theta) not in cache:
            cache["rope", L, theta] = rotary_tables(torch.arange(L, device=q.device), D, theta)
        q, k = (rotate(t, *cache["rope", L, theta]) for t in (q, k))
    half = config.local_attention // 2
    if not config.is_global(index) and 8 * max(half, 1) < L and not (is_causal or relative or torch.jit.is_tracing()):
        return local_blocks(q, k, v, half, keep, dropout_p)  # long inputs: O(L x window), not O(L^2)
    if not config.is_global(index) and (half < L - 1 or torch.jit.is_tracing()):  # else the window holds all
        if ("window", L) not in cache:
            positions = torch.arange(L, device=q.device)
            cache["window", L] = (positions[:, None] - positions[None, :]).abs() <= half  # (L, L)
        keep = cache["window", L] if keep is None else keep & cache["window", L]
    if is_causal and (keep is not None or relative is not None):  # SDPA takes a mask or is_causal, not both
        causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
        keep, is_causal = (causal if keep is None else keep & causal), False
    if relative is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p, is_causal=is_causal)
    scale = 1.0 / math.sqrt(D * relative.scale)
    bias = relative.bias(q, k, layer, L) * scale
    if keep is not None:
        bias = bias.masked_fill(~keep, torch.finfo(bias.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout_p, scale=scale)


def local_blocks(q: Tensor, k: Tensor, v: Tensor, half: int, keep: Tensor | None, dropout_p: float) -> Tensor:
    """Attention within `half` tokens either side, block by block: each block of 2 x half queries
    reads the 4 x half keys around it (a band mask inside), so a local layer over L tokens costs
    O(L x window) rather than the O(L^2) of one masked product; the same numbers as that product.
    (G, H, L, D) -> (G, H, L, D); `keep`: None or the (G, 1, 1, L) key padding mask."""
    G, H, L, D = q.shape
    size = 2 * half  # queries per block
    blocks = -(-L // size)
    pad = blocks * size - L
    span = size + 2 * half  # keys per block: the block and half a window either side

    def keys(t: Tensor) -> Tensor:  # (G, H, L, D) -> (G, H, blocks, span, D)
        t = F.pad(t, (0, 0, half, pad + half))
        return t.unfold(2, span, size).transpose(-1, -2)

    qb = F.pad(q, (0, 0, 0, pad)).view(G, H, blocks, size, D)
    query_at = torch.arange(blocks * size, device=q.device).view(blocks, size, 1)  # (blocks, size, 1)
    key_at = (torch.arange(blocks, device=q.device) * size - half).view(blocks, 1, 1) + torch.arange(span,
                                                                                                     device=q.device)
    allowed = ((query_at - key_at).abs() <= half) & (key_at >= 0) & (key_at < L)  # (blocks, size, span)
    if keep is not None:  # the padding mask, gathered the same way as the keys
        real = F.pad(keep.reshape(G, 1, L).float(), (half, pad + half)).unfold(2, span, size).bool()  # (G, 1, b, s)
        allowed = allowed & real[:, :, :, None, :]  # (G, 1, blocks, size, span)
    out = F.scaled_dot_product_attention(qb, keys(k), keys(v), attn_mask=allowed, dropout_p=dropout_p)
    return out.reshape(G, H, blocks * size, D)[:, :, :L]


def _heads(qkv: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """(G, L, 3C) -> 3 x (G, H, L, D)."""
    G, L, C3 = qkv.shape
    return qkv.view(G, L, 3, heads, C3 // 3 // heads).permute(2, 0, 3, 1, 4)


def merge_heads(a: Tensor) -> Tensor:
    """(G, H, L, D) -> (G, L, C)."""
    G, H, L, D = a.shape
    return a.transpose(1, 2).reshape(G, L, H * D)


def plain(config: BertConfig) -> bool:
    """Attention with nothing added: no rotary, window or relative scores (the fused and varlen kernels)."""
    return (config.position_embedding_type != "rotary" and not config.local_attention
            and not config.relative_attention)


# ---- the kinds of call ----
@dataclass
class PaddedAttention:
    """(B, T, C) with SDPA's mask from `attention_mask_for_sdpa` (None: no padding)."""

    mask: Tensor | None  # bool, (B, 1, 1, T) or (B, 1, T, T); True where attention is allowed
    is_causal: bool  # SDPA's own causal mask (only when there is no padding mask)
    relative: Relative | None = None
    cache: dict = field(default_factory=dict)

    def __call__(self, x: Tensor, layer, index: int, dropout_p: float) -> Tensor:
        q, k, v = _heads(layer.qkv(x), layer.n_head)
        return merge_heads(attend(q, k, v, layer, index, self.mask, self.is_causal, dropout_p, self.relative,
                                  self.cache))


def _varlen_kernel(x: Tensor, dropout_p: float):
    """torch's flash varlen attention when it applies here (CUDA, half precision, no dropout)."""
    if not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16) or dropout_p:
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn  # torch >= 2.10
    except ImportError:
        return None
    return varlen_attn


@dataclass
class PackedAttention:
    """(N, C) packed real tokens, attention within each sequence (varlen, or per length group)."""

    packing: object  # bertkit.model.Packing
    causal: bool
    relative: Relative | None = None
    cache: dict = field(default_factory=dict)

    def __call__(self, x: Tensor, layer, index: int, dropout_p: float) -> Tensor:
        N, C = x.shape
        H, D = layer.n_head, C // layer.n_head
        packed = layer.qkv(x).view(N, 3, H, D)  # (N, 3, H, D)
        varlen_attn = _varlen_kernel(packed, dropout_p) if plain(layer.config) else None
        if varlen_attn is not None:
            q, k, v = (t.contiguous() for t in packed.unbind(1))  # 3 x (N, H, D)
            cu, m = self.packing.cu_seqlens, self.packing.max_len
            a = varlen_attn(q, k, v, cu, cu, m, m, window_size=(-1, 0) if self.causal else (-1, -1))
            return a.reshape(N, C)
        parts, rows = [], []
        for _, idx in self.packing.groups:  # idx: (G, L) packed rows of the sequences of one length L
            q, k, v = packed[idx].permute(2, 0, 3, 1, 4)  # (G, L, 3, H, D) -> 3 x (G, H, L, D)
            o = attend(q, k, v, layer, index, None, self.causal, dropout_p, self.relative, self.cache)
            parts.append(o.transpose(1, 2).reshape(-1, H, D))  # (G*L, H, D)
            rows.append(idx.reshape(-1))
        order = torch.cat(rows)  # packed row of each output row
        a = torch.empty_like(packed[:, 0]).index_copy(0, order, torch.cat(parts))  # (N, H, D)
        return a.reshape(N, C)


class _OnnxRuntimeAttention(torch.autograd.Function):
    """Bidirectional padded attention (no dropout, no backward); traced as com.microsoft.Attention."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, mask: Tensor, heads: int) -> Tensor:
        keep = mask.bool()[:, None, None, :]  # (B, T) -> (B, 1, 1, T)
        q, k, v = _heads(F.linear(x, weight.t(), bias), heads)  # weight: (C, 3C)
        return merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=keep))

    @staticmethod
    def symbolic(g, x, weight, bias, mask, heads):
        out = g.op("com.microsoft::Attention", x, weight, bias, mask, num_heads_i=heads)
        out.setType(x.type())  # the output has the input's shape and type: tells the exporter's shape inference
        return out


@dataclass
class FusedAttention:
    """Bidirectional `PaddedAttention`, traced (torch.onnx.export) as one ONNX Runtime operator."""

    mask: Tensor  # (B, T) int32, 1 for tokens, 0 for padding

    def __call__(self, x: Tensor, layer, index: int, dropout_p: float) -> Tensor:
        qkv: nn.Linear = layer.qkv
        if torch.jit.is_tracing():  # the export traces in eval mode: no dropout
            return _OnnxRuntimeAttention.apply(x, qkv.weight.t(), qkv.bias, self.mask, layer.n_head)
        keep = self.mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        return PaddedAttention(keep, False)(x, layer, index, dropout_p)


Attention = PaddedAttention | PackedAttention | FusedAttention


def attention_mask_for_sdpa(attention_mask: Tensor | None, T: int, causal: bool):
    """Turn a (B, T) 1/0 padding mask into SDPA's arguments: (mask, is_causal).

    Boolean masks are True where attention is allowed; (B, 1, 1, T) broadcasts over heads and
    queries. With no padding mask, causal attention uses SDPA's own is_causal fast path.
    """
    if attention_mask is None:
        return None, causal
    keep = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
    if causal:
        tril = torch.ones(T, T, dtype=torch.bool, device=keep.device).tril()
        keep = keep & tril  # (B, 1, T, T)
    return keep, False
