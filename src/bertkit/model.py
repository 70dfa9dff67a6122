"""The BERT encoder: embeddings, post-LN Transformer layers, tanh pooler.

The whole forward pass is in this file. Differences from Hugging Face's modeling_bert, none of
which change the numbers:
- query, key and value are one fused (C, 3C) projection; the interop table in `hf.py` splits it
  back into HF's three keys on save;
- the word-embedding table holds `padded_vocab_size` rows (a multiple of 64) so the tied MLM
  decoder's matmul is aligned; the extra rows are never looked up and never saved;
- attention goes through `F.scaled_dot_product_attention` (flash / memory-efficient kernels when
  there is no mask) with a boolean mask, which softmaxes to exactly the zeros of HF's additive
  dtype-minimum mask;
- `attention="causal"` gives the paper's left-to-right ablation;
- two ways to skip work whose result nobody reads: `unpad=True` drops padding before the layers
  (`bertkit.unpad`), and `rows=` computes the last layer's output only where a head needs it
  (pretraining: labelled positions and [CLS]).

Shape legend: B batch, T tokens, C hidden, H heads, D head size (C = H*D), I intermediate.
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
    last_hidden_state: Tensor  # (B, T, C)
    pooler_output: Tensor | None = None  # (B, C): tanh(W h_[CLS] + b)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + each layer, each (B, T, C)


class Embeddings(nn.Module):
    """Token + position + segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        # padding_idx: as in transformers, looking up [PAD] sends no gradient to its row.
        self.word = nn.Embedding(config.padded_vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
        T = input_ids.shape[1]
        positions = torch.arange(T, device=input_ids.device)
        x = self.word(input_ids) + self.position(positions)  # (B, T, C)
        if token_type_ids is None:
            x = x + self.segment.weight[0]  # all segment A
        else:
            x = x + self.segment(token_type_ids)
        return self.dropout(self.norm(x))


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

    def forward(self, x: Tensor, mask: Tensor | None, is_causal: bool, rows: Tensor | None = None) -> Tensor:
        """(B, T, C) -> (B, T, C); with `rows` (flat indices into B*T), (len(rows), C) for those only."""
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, D)
        p = self.attn_dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
        a = a.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        if rows is not None:  # every key and value was needed; the rest only for these rows
            x, a = x.reshape(B * T, C)[rows], a.reshape(B * T, C)[rows]  # (N, C) each
        return self.finish(x, a)

    def finish(self, x: Tensor, a: Tensor) -> Tensor:
        """Everything after attention, token by token; x and a are (..., C), so the unpadded
        path (`bertkit.unpad`) runs it on (N, C) real tokens only."""
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
        self.unpad = unpad  # drop padding before the layers (`bertkit.unpad`); same outputs at real tokens
        self.embeddings = Embeddings(config)
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
        """With `rows`, the last layer computes its output only at those positions (after full
        attention): last_hidden_state is then (N, C) in that order and there is no pooler output.
        Pretraining needs only the labelled positions and [CLS], so it skips ~85% of the last
        layer's output projection and feed-forward work."""
        T = input_ids.shape[1]
        if T > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence of {T} tokens exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}: truncate the input"
            )
        causal = self.config.attention == "causal"
        if self.unpad and attention_mask is not None and rows is None:
            from bertkit.unpad import forward_unpadded  # imports this module: import when used

            return forward_unpadded(self, input_ids, attention_mask, token_type_ids, output_hidden_states)
        mask, is_causal = attention_mask_for_sdpa(attention_mask, T, causal)
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, C)
        states = [x] if output_hidden_states else None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, is_causal, rows if i == last else None)
            if states is not None:
                states.append(x)
        if rows is not None:
            return EncoderOutput(x, None, tuple(states) if states is not None else None)  # x: (N, C)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None  # (B, C)
        return EncoderOutput(x, pooled, tuple(states) if states is not None else None)


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


def compile_blocks(model: nn.Module, **compile_kwargs) -> nn.Module:
    """torch.compile every Transformer layer (and an MLM head's transform) in place; returns `model`.

    Why per block and not the whole model: the sparse pretraining heads gather the labelled
    positions with `nonzero`, a data-dependent shape. Compiling across it either breaks the graph or
    (with `capture_dynamic_output_shape_ops`) asks inductor for unbacked sizes, which failed to
    compile the backward pass on torch 2.11 / H200. Inside a block every size comes from an input's
    shape, so the blocks compile with ordinary dynamic shapes, the gather stays eager, and the
    module's parameter names (its checkpoints) do not change.
    """
    from bertkit.heads import MLMHead  # heads imports this module

    # One code object (Layer.forward) serves every layer, in train and eval, with and without
    # `rows`, static and then dynamic sizes: more cache entries than dynamo's default 8, past
    # which it silently runs the remaining layers eager (seen on the H200 at seq 512).
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
    for m in model.modules():
        if isinstance(m, (Layer, MLMHead)):
            m.compile(**compile_kwargs)
    return model
