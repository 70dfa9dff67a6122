"""The encoder of every family: embeddings, Transformer layers, pooler — the whole forward pass.

BERT's encoder (post-LN layers, learned absolute positions, tanh pooler) is the default; a family
(`bertkit.families`) changes parts of it through its config, never the loop:
- positions: a learned table (BERT, from `position_offset` for RoBERTa), rotary inside attention
  (ModernBERT), or DeBERTa's relative table in attention (`bertkit.attention`);
- layers: post-LN (BERT) or pre-LN with a final LayerNorm (`norm_first`, ModernBERT; its first layer
  reads the normalised embeddings without a norm of its own); the feed-forward plain or gated
  (`gated_ffn`: act(x W) * (x V), GeGLU); biases and LayerNorm biases on or off;
- sharing: ALBERT's layers take their weights from `num_hidden_groups` groups (one set of tensors,
  reused at every depth);
- segments: none when `type_vocab_size` is 0 (DistilBERT, ModernBERT);
- DeBERTa-v2's convolution (`conv_kernel_size`, `TokenConv`): over the embeddings, added to the
  first layer's output and normalised, as transformers' ConvLayer.

Differences from Hugging Face's modeling files, none of which change the numbers:
- query, key and value are one fused (C, 3C) projection; the interop tables in `bertkit.families`
  split it back into each family's keys on save;
- the word-embedding table holds `padded_vocab_size` rows (a multiple of 64) so the tied MLM
  decoder's matmul is aligned; the extra rows are never looked up and never saved;
- attention goes through `F.scaled_dot_product_attention` with a boolean mask (or, for DeBERTa, its
  relative scores as an additive mask), which softmaxes to the same probabilities as HF's additive
  dtype-minimum masks at every real token;
- RoBERTa's positions count from `position_offset` at every position (HF gives padding the
  padding row; padding is never attended to, so no real token changes);
- dropout sits where BERT's does in every family (the same numbers in evaluation);
- `attention="causal"` gives the paper's left-to-right ablation;
- with `embedding_size` E != C (ELECTRA's generator, ALBERT), the embeddings are E wide and one
  linear projection maps them to C before the first layer.

One path through the layers, `BertModel.forward`; what differs between its uses is how attention
is computed, chosen once per call (`BertModel._attention`, kinds in `bertkit.attention`), and
which rows the last layer keeps:
- padded (`PaddedAttention`): (B, T, C) with a padding mask, as everyone does;
- unpadded (`unpad=True`, `PackedAttention`): the real tokens are gathered into one (N, C) matrix
  before the first layer, every dense layer runs on those N rows only, attention runs per
  sequence, and the result is scattered back to (B, T, C) with zeros at padding. A padded batch
  of variable-length texts spends most of its matrix work on [PAD] (SST-2's dev sentences average
  ~25 tokens); outputs at real tokens equal the padded path's;
- fused (`BertModel.fused_attention`, `FusedAttention`, for `bertkit export`): padded attention,
  traced by torch.onnx.export as ONNX Runtime's `com.microsoft.Attention` operator, whose packed
  (C, 3C) weight is our fused projection (plain attention only);
- last-layer rows (`rows=`; padded or fused): the last layer computes its output only where a
  head reads it (pretraining: the labelled positions, and [CLS] for the pooler), after full
  attention.

Shape legend: B batch, T tokens, C hidden, H heads, D head size (C = H*D), I intermediate,
E embedding width (C unless `embedding_size` says otherwise), N real (or selected) tokens,
G sequences of one length L, S relative distances.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.attention import (  # noqa: F401 - attention_mask_for_sdpa and _varlen_kernel: the tests read them here
    Attention,
    FusedAttention,
    PackedAttention,
    PaddedAttention,
    Relative,
    _varlen_kernel,
    attention_mask_for_sdpa,
    plain,
    relative_span,
)
from bertkit.config import BertConfig
from bertkit.hf import PretrainedMixin

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # exact erf GELU, as in the original BERT
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "tanh": torch.tanh,
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
    """Token (+ position) (+ segment) embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        # padding_idx: as in transformers, looking up [PAD] sends no gradient to its row.
        E = config.embedding_width
        self.word = nn.Embedding(config.padded_vocab_size, E, padding_idx=config.pad_token_id)
        absolute = config.position_embedding_type == "absolute"
        self.position = nn.Embedding(config.max_position_embeddings, E) if absolute else None
        self.segment = nn.Embedding(config.type_vocab_size, E) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor | None) -> Tensor:
        """Any shape of ids, (B, T) padded or (N,) packed, with positions that broadcast to it."""
        x = self.word(input_ids)  # (..., E)
        if self.position is not None:
            x = x + self.position(positions)
        if self.segment is not None:
            x = x + (self.segment.weight[0] if token_type_ids is None else self.segment(token_type_ids))
        return self.dropout(self.norm(x))


class Layer(nn.Module):
    """One Transformer layer. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    Pre-LN (`norm_first`): x = x + Attn(LN(x)); x = x + FFN(LN(x)), without the first LN in layer 0."""

    def __init__(self, config: BertConfig, first: bool = False):
        super().__init__()
        C, inner, bias = config.hidden_size, config.intermediate_size, config.bias
        self.config = config
        self.n_head = config.num_attention_heads
        self.norm_first = config.norm_first
        self.qkv = nn.Linear(C, 3 * C, bias=bias)  # fused query | key | value
        self.attn_out = nn.Linear(C, C, bias=bias)
        no_norm = config.norm_first and first  # ModernBERT's first layer reads the normalised embeddings
        self.attn_norm = None if no_norm else nn.LayerNorm(C, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.ffn_in = nn.Linear(C, 2 * inner if config.gated_ffn else inner, bias=bias)  # (C, I), gated (C, 2I)
        self.ffn_out = nn.Linear(inner, C, bias=bias)
        self.ffn_norm = nn.LayerNorm(C, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.attn_dropout = config.attention_probs_dropout_prob
        terms = config.pos_att_type if config.relative_attention and not config.share_att_key else ()
        # DeBERTa's own maps of the relative table (with share_att_key, the content key and query maps)
        self.pos_key = nn.Linear(C, C) if "c2p" in terms else None
        self.pos_query = nn.Linear(C, C) if "p2c" in terms else None

    def forward(self, x: Tensor, attention: Attention | Tensor | None, is_causal: bool = False,
                rows: Tensor | None = None, index: int = 0) -> Tensor:
        """(B, T, C) padded or (N, C) packed -> the same shape; with `rows` (flat indices into
        x's tokens), (len(rows), C) for those only. `attention` is how this call attends (see
        `BertModel._attention`); SDPA's mask (or None) with `is_causal`, as
        `attention_mask_for_sdpa` gives them, stands for `PaddedAttention(mask, is_causal)`.
        `index`: the layer's depth (local or global attention)."""
        if attention is None or isinstance(attention, Tensor):
            attention = PaddedAttention(attention, is_causal)
        p = self.attn_dropout if self.training else 0.0
        h = self.attn_norm(x) if self.norm_first and self.attn_norm is not None else x
        a = attention(h, self, index, p)  # x's shape
        if rows is not None:  # every key and value was needed; the rest only for these rows
            C = x.shape[-1]
            x, a = x.reshape(-1, C)[rows], a.reshape(-1, C)[rows]  # (N, C) each
        a = self.dropout(self.attn_out(a))
        x = x + a if self.norm_first else self.attn_norm(x + a)
        h = self.dropout(self.ffn_out(self.feed_forward(self.ffn_norm(x) if self.norm_first else x)))
        return x + h if self.norm_first else self.ffn_norm(x + h)

    def feed_forward(self, x: Tensor) -> Tensor:
        """(..., C) -> (..., I): act(x W), or act(x W) * (x V) when gated."""
        h = self.ffn_in(x)
        if self.config.gated_ffn:
            h, gate = h.chunk(2, dim=-1)
            return self.act(h) * gate
        return self.act(h)

    def position_maps(self, table: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """DeBERTa: the relative table's rows (S, C) as (queries, keys): through the layer's own maps,
        or (`share_att_key`) its content query and key maps, only those the terms need."""
        terms = self.config.pos_att_type
        if self.pos_key is not None or self.pos_query is not None:
            return (self.pos_query(table) if self.pos_query is not None else None,
                    self.pos_key(table) if self.pos_key is not None else None)
        C = table.shape[-1]
        if isinstance(self.qkv, nn.Linear):  # the query and key rows of the fused map; no value
            both = F.linear(table, self.qkv.weight[: 2 * C], None if self.qkv.bias is None else self.qkv.bias[: 2 * C])
        else:  # an int8 map has no weight to slice
            both = self.qkv(table)[:, : 2 * C]
        return (both[:, :C] if "p2c" in terms else None), (both[:, C:] if "c2p" in terms else None)


class TokenConv(nn.Module):
    """DeBERTa-v2's convolution after the first layer: act(conv(embeddings)), zero at padding, is
    added to that layer's output and normalised (zero at padding too)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        C, k = config.hidden_size, config.conv_kernel_size
        self.conv = nn.Conv1d(C, C, k, padding=(k - 1) // 2, groups=config.conv_groups)
        self.norm = nn.LayerNorm(C, eps=config.layer_norm_eps)
        self.act = ACTIVATIONS[config.conv_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, embedded: Tensor, x: Tensor, mask: Tensor | None, rows: Tensor | None = None) -> Tensor:
        """(B, T, C) embeddings and first layer's output, (B, T) mask -> (B, T, C); with `rows`,
        x is (N, C) at those flat positions and so is the result."""
        keep = None if mask is None else mask[..., None].to(embedded.dtype)  # (B, T, 1)
        if keep is not None:
            embedded = embedded * keep  # padding reads as zero, as DeBERTa's masked embeddings
        h = self.conv(embedded.transpose(1, 2)).transpose(1, 2)  # (B, C, T) -> (B, T, C)
        h = self.act(self.dropout(h if keep is None else h * keep))
        if rows is not None:
            h, keep = h.reshape(-1, h.shape[-1])[rows], None if keep is None else keep.reshape(-1, 1)[rows]
        out = self.norm(x + h)
        return out if keep is None else out * keep


class BertModel(PretrainedMixin, nn.Module):
    """The bare encoder: returns hidden states and, with a pooler, the pooled [CLS] vector."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool | None = None, unpad: bool = False):
        """`add_pooling_layer` None: where the family's models have one (not DistilBERT, DeBERTa, ModernBERT)."""
        super().__init__()
        if add_pooling_layer is None:
            from bertkit.families import family_of

            add_pooling_layer = "pooler.{p}" in family_of(config.model_type).encoder_keys
        self.config = config
        self.unpad = unpad  # drop padding before the layers; same outputs at real tokens
        self.fused_attention = False  # `bertkit export`: each layer's attention traced as one operator
        self.embeddings = Embeddings(config)
        # E -> C before the first layer, when the embeddings are not C wide (ELECTRA's generator, ALBERT)
        self.embed_proj = nn.Linear(config.embedding_width, config.hidden_size) if config.embedding_size else None
        # one set of weights per group (ALBERT: one for every depth); BERT: a group per layer
        self.layers = nn.ModuleList(Layer(config, first=g == 0) for g in range(config.layer_groups))
        C = config.hidden_size
        rel = config.relative_attention
        self.rel_embeddings = nn.Embedding(2 * relative_span(config), C) if rel else None  # DeBERTa
        self.rel_norm = nn.LayerNorm(C, eps=config.layer_norm_eps) if rel and config.norm_rel_ebd else None
        self.rel_dropout = nn.Dropout(config.hidden_dropout_prob) if rel else None
        self.token_conv = TokenConv(config) if config.conv_kernel_size else None  # DeBERTa-v2
        self.final_norm = nn.LayerNorm(C, eps=config.layer_norm_eps, bias=config.norm_bias) \
            if config.norm_first else None
        self.pooler = nn.Linear(C, C) if add_pooling_layer else None
        self.apply(lambda m: init_weights(m, config))
        with torch.no_grad():  # [PAD] and the alignment rows past vocab_size start at zero
            self.embeddings.word.weight[config.vocab_size :].zero_()
            if config.pad_token_id is not None:
                self.embeddings.word.weight[config.pad_token_id].zero_()

    def layer_at(self, depth: int) -> Layer:
        """The weights layer `depth` (0-based) computes with: its own, or its group's (ALBERT)."""
        return self.layers[depth * len(self.layers) // self.config.num_hidden_layers]

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
        if T > self.config.max_tokens:  # noqa: SIM300 - T is the sequence length, not a constant
            raise ValueError(f"sequence of {T} tokens exceeds the model's {self.config.max_tokens} positions: "
                             f"truncate the input")
        attention, packing = self._attention(attention_mask, T, rows)
        n_cls = B if rows is not None and self.pooler is not None else 0
        if n_cls:  # the pooler reads [CLS]: its rows come first
            rows = torch.cat([torch.arange(B, device=rows.device) * T, rows])
        x = self._embed(input_ids, token_type_ids, packing)  # (B, T, E), or (N, E) packed
        if self.embed_proj is not None:
            # (..., E) -> (..., C), in the embeddings' dtype: fp32 under bf16 autocast, as BERT's
            # residual stream is (its embeddings leave a LayerNorm); a bf16 stream here cost ALBERT
            # 20x BERT's bf16 error (bench/albert_bf16.py)
            x = self.embed_proj(x).to(x.dtype)
        states, embedded = ([x] if output_hidden_states else None), x
        last = self.config.num_hidden_layers - 1
        for i in range(self.config.num_hidden_layers):
            x = self.layer_at(i)(x, attention, rows=rows if i == last else None, index=i)
            if i == 0 and self.token_conv is not None:
                x = self._convolve(embedded, x, attention_mask, packing, rows if i == last else None)
            if states is not None:
                states.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if states is not None:  # as transformers reports it: the last layer's output normalised
                states[-1] = x
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
        relative = self._relative()
        if self.fused_attention and plain(self.config):
            if causal or attention_mask is None:
                raise ValueError("fused attention is bidirectional and takes an attention mask")
            return FusedAttention(attention_mask.to(torch.int32)), None
        if self.unpad and attention_mask is not None and rows is None:
            packing = Packing.from_mask(attention_mask)
            return PackedAttention(packing, causal, relative), packing
        return PaddedAttention(*attention_mask_for_sdpa(attention_mask, T, causal), relative), None

    def _convolve(self, embedded: Tensor, x: Tensor, attention_mask: Tensor | None, packing: Packing | None,
                  rows: Tensor | None) -> Tensor:
        """DeBERTa-v2's convolution on the first layer's output: over each padded sequence, so
        packed rows are padded for it and packed again."""
        if packing is None:
            return self.token_conv(embedded, x, attention_mask, rows)
        B, T = attention_mask.shape
        return packing.pack(self.token_conv(packing.repad(embedded, B, T), packing.repad(x, B, T), attention_mask))

    def _relative(self) -> Relative | None:
        """DeBERTa's relative table for this call (normalised once, shared by every layer)."""
        if self.rel_embeddings is None:
            return None
        table = self.rel_embeddings.weight
        if self.rel_norm is not None:
            table = self.rel_norm(table)
        table = self.rel_dropout(table)  # DeBERTa's dropout of the table, at the hidden rate
        return Relative(table, relative_span(self.config), tuple(self.config.pos_att_type), self.config)

    def _embed(self, input_ids: Tensor, token_type_ids: Tensor | None, packing: Packing | None) -> Tensor:
        offset = self.config.position_offset
        if packing is None:
            positions = torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)  # (T,)
            return self.embeddings(input_ids, positions, token_type_ids)  # (B, T, E)
        types = packing.pack(token_type_ids) if token_type_ids is not None else None
        return self.embeddings(packing.pack(input_ids), packing.positions + offset, types)  # (N, E)

    def pool(self, hidden: Tensor) -> Tensor | None:
        """The paper's pooled [CLS] vector: act(W h_0 + b) (tanh), (B, T, C) or (B, C) -> (B, C)."""
        if self.pooler is None:
            return None
        return ACTIVATIONS[self.config.pooler_hidden_act](self.pooler(hidden[:, 0] if hidden.dim() == 3 else hidden))


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
        if module.bias is not None:
            module.bias.zero_()
