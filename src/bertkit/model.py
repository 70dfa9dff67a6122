"""The BERT encoder: embeddings, post-LN Transformer layers, tanh pooler — the whole forward pass.

Differences from Hugging Face's modeling_bert, none of which change the numbers:
- query, key and value are one fused (C, 3C) projection; the interop table in `hf.py` splits it
  back into HF's three keys on save;
- the word-embedding table holds `padded_vocab_size` rows (a multiple of 64) so the tied MLM
  decoder's matmul is aligned; the extra rows are never looked up and never saved;
- attention goes through `F.scaled_dot_product_attention` (flash / memory-efficient kernels when
  there is no mask) with a boolean mask, which softmaxes to exactly the zeros of HF's additive
  dtype-minimum mask;
- `attention="causal"` gives the paper's left-to-right ablation;
- with `embedding_size` E != C (ELECTRA's generator), the embeddings are E wide and one linear
  projection (ELECTRA's `embeddings_project`) maps them to C before the first layer.

One path through the layers, `BertModel.forward`; what differs between its uses is how attention
is computed, chosen once per call (`BertModel._attention`), and which rows the last layer keeps:
- padded (`PaddedAttention`): (B, T, C) with a padding mask, as everyone does;
- unpadded (`unpad=True`, `PackedAttention`): the real tokens are gathered into one (N, C) matrix
  before the first layer, every dense layer runs on those N rows only, attention runs per
  sequence, and the result is scattered back to (B, T, C) with zeros at padding. A padded batch
  of variable-length texts spends most of its matrix work on [PAD] (SST-2's dev sentences average
  ~25 tokens); outputs at real tokens equal the padded path's. Attention per sequence: on CUDA in
  half precision without attention dropout, one `varlen_attn` call (flash attention over
  cumulative lengths); elsewhere the sequences are grouped by length and each group is one
  unmasked SDPA call;
- fused (`BertModel.fused_attention`, `FusedAttention`, for `bertkit export`): padded attention,
  traced by torch.onnx.export as ONNX Runtime's `com.microsoft.Attention` operator, whose packed
  (C, 3C) weight is our fused projection: one operator per layer (one int8 `QAttention` after
  dynamic quantisation);
- last-layer rows (`rows=`; padded or fused): the last layer computes its output only where a
  head reads it (pretraining: the labelled positions, and [CLS] for the pooler), after full
  attention.

Shape legend: B batch, T tokens, C hidden, H heads, D head size (C = H*D), I intermediate,
E embedding width (C unless `embedding_size` says otherwise), N real (or selected) tokens,
G sequences of one length L.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.config import BertConfig
from bertkit.hf import PretrainedMixin

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # exact erf GELU, as in the original BERT
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


@dataclass
class EncoderOutput:
    last_hidden_state: Tensor  # (B, T, C); (N, C) when `rows` was given
    pooler_output: Tensor | None = None  # (B, C): tanh(W h_[CLS] + b)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + each layer, each (B, T, C)


@dataclass
class Packing:
    """Where the real tokens of a padded batch are, computed once and shared by every layer."""

    index: Tensor  # (N,) flat positions in the (B*T) padded layout, row-major
    positions: Tensor  # (N,) each real token's position within its sequence
    cu_seqlens: Tensor  # (B+1,) int32 start of each sequence in the packed rows
    max_len: int  # longest sequence, in tokens
    groups: list[tuple[int, Tensor]]  # (L, (G, L) packed-row indices of the sequences of length L)

    @classmethod
    def from_mask(cls, attention_mask: Tensor) -> Packing:
        keep = attention_mask.bool()
        T = keep.shape[1]
        lengths = keep.sum(1)  # (B,)
        index = keep.reshape(-1).nonzero().squeeze(1)  # (N,)
        cu = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)  # (B+1,)
        groups = []
        for L in sorted(set(lengths.tolist()) - {0}):
            starts = cu[:-1][lengths == L]  # (G,)
            rows = starts[:, None] + torch.arange(L, device=starts.device)  # (G, L)
            groups.append((int(L), rows.long()))
        return cls(index, index % T, cu, int(lengths.max()) if lengths.numel() else 0, groups)

    def pack(self, t: Tensor) -> Tensor:
        """(B, T, ...) padded -> (N, ...) at the real tokens."""
        return t.reshape(-1, *t.shape[2:])[self.index]

    def repad(self, x: Tensor, B: int, T: int) -> Tensor:
        """(N, C) packed rows -> (B, T, C) with zeros at padding."""
        return x.new_zeros(B * T, x.shape[-1]).index_copy(0, self.index, x).view(B, T, -1)


class Embeddings(nn.Module):
    """Token + position + segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        # padding_idx: as in transformers, looking up [PAD] sends no gradient to its row.
        E = config.embedding_width
        self.word = nn.Embedding(config.padded_vocab_size, E, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, E)
        self.segment = nn.Embedding(config.type_vocab_size, E)
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor | None) -> Tensor:
        """Any shape of ids, (B, T) padded or (N,) packed, with positions that broadcast to it."""
        x = self.word(input_ids) + self.position(positions)  # (..., E)
        if token_type_ids is None:
            x = x + self.segment.weight[0]  # all segment A
        else:
            x = x + self.segment(token_type_ids)
        return self.dropout(self.norm(x))


# ---- attention: each kind maps a layer's input x, through its fused query|key|value projection,
# to the attention output of x's shape; `BertModel._attention` picks one per forward call ----

def _sdpa(qkv: Tensor, heads: int, mask: Tensor | None, is_causal: bool, dropout_p: float) -> Tensor:
    """Padded self-attention from the projected (B, T, 3C) query|key|value -> (B, T, C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.view(B, T, 3, heads, C // heads).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, D)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
    return a.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C)


@dataclass
class PaddedAttention:
    """(B, T, C) with SDPA's mask from `attention_mask_for_sdpa` (None: no padding)."""

    mask: Tensor | None  # bool, (B, 1, 1, T) or (B, 1, T, T); True where attention is allowed
    is_causal: bool  # SDPA's own causal mask (only when there is no padding mask)

    def __call__(self, x: Tensor, qkv: nn.Linear, heads: int, dropout_p: float) -> Tensor:
        return _sdpa(qkv(x), heads, self.mask, self.is_causal, dropout_p)


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

    packing: Packing
    causal: bool

    def __call__(self, x: Tensor, qkv: nn.Linear, heads: int, dropout_p: float) -> Tensor:
        N, C = x.shape
        H, D = heads, C // heads
        packed = qkv(x).view(N, 3, H, D)  # (N, 3, H, D)
        varlen_attn = _varlen_kernel(packed, dropout_p)
        if varlen_attn is not None:
            q, k, v = (t.contiguous() for t in packed.unbind(1))  # 3 x (N, H, D)
            cu, m = self.packing.cu_seqlens, self.packing.max_len
            a = varlen_attn(q, k, v, cu, cu, m, m, window_size=(-1, 0) if self.causal else (-1, -1))
            return a.reshape(N, C)
        parts, rows = [], []
        for _, idx in self.packing.groups:  # idx: (G, L) packed rows of the sequences of one length L
            q, k, v = packed[idx].permute(2, 0, 3, 1, 4)  # (G, L, 3, H, D) -> 3 x (G, H, L, D)
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=self.causal)
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
        return _sdpa(F.linear(x, weight.t(), bias), heads, keep, False, 0.0)  # weight: (C, 3C)

    @staticmethod
    def symbolic(g, x, weight, bias, mask, heads):
        out = g.op("com.microsoft::Attention", x, weight, bias, mask, num_heads_i=heads)
        out.setType(x.type())  # the output has the input's shape and type: tells the exporter's shape inference
        return out


@dataclass
class FusedAttention:
    """Bidirectional `PaddedAttention`, traced (torch.onnx.export) as one ONNX Runtime operator."""

    mask: Tensor  # (B, T) int32, 1 for tokens, 0 for padding

    def __call__(self, x: Tensor, qkv: nn.Linear, heads: int, dropout_p: float) -> Tensor:
        if torch.jit.is_tracing():  # the export traces in eval mode: no dropout
            return _OnnxRuntimeAttention.apply(x, qkv.weight.t(), qkv.bias, self.mask, heads)
        return _sdpa(qkv(x), heads, self.mask.bool()[:, None, None, :], False, dropout_p)  # mask (B, 1, 1, T)


Attention = PaddedAttention | PackedAttention | FusedAttention


class Layer(nn.Module):
    """One post-LN Transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        C = config.hidden_size
        self.n_head = config.num_attention_heads
        self.qkv = nn.Linear(C, 3 * C)  # fused query | key | value
        self.attn_out = nn.Linear(C, C)
        self.attn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(C, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, C)
        self.ffn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.attn_dropout = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, attention: Attention | Tensor | None, is_causal: bool = False,
                rows: Tensor | None = None) -> Tensor:
        """(B, T, C) padded or (N, C) packed -> the same shape; with `rows` (flat indices into
        x's tokens), (len(rows), C) for those only. `attention` is how this call attends (see
        `BertModel._attention`); SDPA's mask (or None) with `is_causal`, as
        `attention_mask_for_sdpa` gives them, stands for `PaddedAttention(mask, is_causal)`."""
        if attention is None or isinstance(attention, Tensor):
            attention = PaddedAttention(attention, is_causal)
        p = self.attn_dropout if self.training else 0.0
        a = attention(x, self.qkv, self.n_head, p)  # x's shape
        if rows is not None:  # every key and value was needed; the rest only for these rows
            C = x.shape[-1]
            x, a = x.reshape(-1, C)[rows], a.reshape(-1, C)[rows]  # (N, C) each
        x = self.attn_norm(x + self.dropout(self.attn_out(a)))
        h = self.ffn_out(self.act(self.ffn_in(x)))  # (..., I) -> (..., C)
        return self.ffn_norm(x + self.dropout(h))


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


class BertModel(PretrainedMixin, nn.Module):
    """The bare encoder: returns hidden states and, with a pooler, the pooled [CLS] vector."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True, unpad: bool = False):
        super().__init__()
        self.config = config
        self.unpad = unpad  # drop padding before the layers; same outputs at real tokens
        self.fused_attention = False  # `bertkit export`: each layer's attention traced as one operator
        self.embeddings = Embeddings(config)
        # E -> C before the first layer, when the embeddings are not C wide (ELECTRA's generator)
        self.embed_proj = nn.Linear(config.embedding_width, config.hidden_size) if config.embedding_size else None
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.apply(lambda m: init_weights(m, config))
        with torch.no_grad():  # [PAD] and the alignment rows past vocab_size start at zero
            self.embeddings.word.weight[config.vocab_size :].zero_()
            if config.pad_token_id is not None:
                self.embeddings.word.weight[config.pad_token_id].zero_()

    def forward(
        self,
        input_ids: Tensor,  # (B, T)
        attention_mask: Tensor | None = None,  # (B, T), 1 for tokens, 0 for padding
        token_type_ids: Tensor | None = None,  # (B, T), 0 for segment A, 1 for B
        output_hidden_states: bool = False,
        rows: Tensor | None = None,  # (N,) flat indices into B*T: the only outputs needed
    ) -> EncoderOutput:
        """With `rows`, the last layer computes its output only at those positions (and at [CLS]
        for the pooler), after full attention: last_hidden_state is then (N, C) in that order.
        Unpadded, outputs are zero at padding; the pooler reads position 0, so pad on the right."""
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:  # noqa: SIM300 - T is the sequence length, not a constant
            raise ValueError(
                f"sequence of {T} tokens exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}: truncate the input"
            )
        attention, packing = self._attention(attention_mask, T, rows)
        n_cls = B if rows is not None and self.pooler is not None else 0
        if n_cls:  # the pooler reads [CLS]: its rows come first
            rows = torch.cat([torch.arange(B, device=rows.device) * T, rows])
        x = self._embed(input_ids, token_type_ids, packing)  # (B, T, E), or (N, E) packed
        if self.embed_proj is not None:
            x = self.embed_proj(x)  # (..., E) -> (..., C)
        states = [x] if output_hidden_states else None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, attention, rows=rows if i == last else None)
            if states is not None:
                states.append(x)
        if packing is not None:  # (N, C) -> (B, T, C), zeros at padding
            x = packing.repad(x, B, T)
            states = [packing.repad(s, B, T) for s in states] if states is not None else None
        hidden = tuple(states) if states is not None else None
        if rows is None:
            return EncoderOutput(x, self.pool(x), hidden)
        return EncoderOutput(x[n_cls:], self.pool(x[:n_cls]), hidden)  # (N, C), (B, C) or None

    def _attention(self, attention_mask: Tensor | None, T: int,
                   rows: Tensor | None) -> tuple[Attention, Packing | None]:
        """This call's attention for every layer, and where the real tokens are when it is packed."""
        causal = self.config.attention == "causal"
        if self.fused_attention:
            if causal or attention_mask is None:
                raise ValueError("fused attention is bidirectional and takes an attention mask")
            return FusedAttention(attention_mask.to(torch.int32)), None
        if self.unpad and attention_mask is not None and rows is None:
            packing = Packing.from_mask(attention_mask)
            return PackedAttention(packing, causal), packing
        return PaddedAttention(*attention_mask_for_sdpa(attention_mask, T, causal)), None

    def _embed(self, input_ids: Tensor, token_type_ids: Tensor | None, packing: Packing | None) -> Tensor:
        if packing is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (T,)
            return self.embeddings(input_ids, positions, token_type_ids)  # (B, T, E)
        types = packing.pack(token_type_ids) if token_type_ids is not None else None
        return self.embeddings(packing.pack(input_ids), packing.positions, types)  # (N, E)

    def pool(self, hidden: Tensor) -> Tensor | None:
        """The paper's pooled [CLS] vector: tanh(W h_0 + b), (B, T, C) or (B, C) -> (B, C)."""
        if self.pooler is None:
            return None
        return torch.tanh(self.pooler(hidden[:, 0] if hidden.dim() == 3 else hidden))


def set_unpadding(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Switch every encoder inside `model` (a head or a bare BertModel) to the unpadded path."""
    for module in model.modules():
        if isinstance(module, BertModel):
            module.unpad = enabled
    return model


@torch.no_grad()
def init_weights(module: nn.Module, config: BertConfig) -> None:
    """BERT's initialisation: N(0, initializer_range) weights, zero biases, unit LayerNorm."""
    std = config.initializer_range
    if isinstance(module, nn.Linear):
        module.weight.normal_(0.0, std)
        if module.bias is not None:
            module.bias.zero_()
    elif isinstance(module, nn.Embedding):
        module.weight.normal_(0.0, std)
    elif isinstance(module, nn.LayerNorm):
        module.weight.fill_(1.0)
        module.bias.zero_()
