"""ModernBERT (Warner et al. 2024): a pre-LN encoder for long inputs.

Pre-LN layers with a final LayerNorm (`norm_first`; the first layer reads the normalised
embeddings), rotary positions in attention (global layers base `global_rope_theta`, local ones
`local_rope_theta`), every `global_attn_every_n_layers`-th layer global and the others local within
`local_attention` tokens, a GeGLU feed-forward (`Wi` is 2 x intermediate_size wide), no biases in
its linear maps and LayerNorms by default, no segments, 8,192 positions. The masked-LM head is
`head` (dense, `classifier_activation`, LayerNorm) and `decoder` (tied, with its bias); sequence
classifiers pool (`classifier_pooling`: the first token or the mean) and token heads read each
token, both through that same `head` before `classifier`. transformers 5 writes `layer_types` and
`rope_parameters`; both layouts are read, and the older flat one is written (every version reads it).
"""

from __future__ import annotations

from bertkit.families.base import Family, Summary

ENCODER_KEYS: dict[str, str | tuple[str, ...]] = {
    "embeddings.word.{p}": "embeddings.tok_embeddings.{p}",
    "embeddings.norm.{p}": "embeddings.norm.{p}",
    "layers.{}.qkv.{p}": "layers.{}.attn.Wqkv.{p}",
    "layers.{}.attn_out.{p}": "layers.{}.attn.Wo.{p}",
    "layers.{}.attn_norm.{p}": "layers.{}.attn_norm.{p}",
    "layers.{}.ffn_in.{p}": "layers.{}.mlp.Wi.{p}",
    "layers.{}.ffn_out.{p}": "layers.{}.mlp.Wo.{p}",
    "layers.{}.ffn_norm.{p}": "layers.{}.mlp_norm.{p}",
    "final_norm.{p}": "final_norm.{p}",
}
HEAD_KEYS = {
    "mlm.dense.{p}": "head.dense.{p}",
    "mlm.norm.{p}": "head.norm.{p}",
    "mlm.bias": "decoder.bias",
    "summary.dense.{p}": "head.dense.{p}",
    "summary.norm.{p}": "head.norm.{p}",
    "output.{p}": "{output}.{p}",
}
# ours -> ModernBertConfig's names
_NAMES = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_hidden_layers",
          "num_attention_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
          "hidden_act": "hidden_activation", "max_position_embeddings": "max_position_embeddings",
          "initializer_range": "initializer_range", "layer_norm_eps": "norm_eps", "norm_bias": "norm_bias",
          "pad_token_id": "pad_token_id", "bias": "attention_bias", "attention_probs_dropout_prob": "attention_dropout",
          "hidden_dropout_prob": "embedding_dropout", "local_attention": "local_attention",
          "global_attn_every_n_layers": "global_attn_every_n_layers", "rope_theta": "global_rope_theta",
          "local_rope_theta": "local_rope_theta", "decoder_bias": "decoder_bias", "head_bias": "classifier_bias",
          "pooler_hidden_act": "classifier_activation", "classifier_pooling": "classifier_pooling",
          "classifier_dropout": "classifier_dropout"}
# ModernBertConfig's defaults where they are not BertConfig's
_DEFAULTS = {"hidden_act": "gelu", "max_position_embeddings": 8192, "layer_norm_eps": 1e-5, "norm_bias": False,
             "pad_token_id": 50283, "bias": False, "attention_probs_dropout_prob": 0.0, "hidden_dropout_prob": 0.0,
             "local_attention": 128, "global_attn_every_n_layers": 3, "rope_theta": 160_000.0,
             "local_rope_theta": 10_000.0, "head_bias": False, "pooler_hidden_act": "gelu", "classifier_dropout": 0.0,
             "intermediate_size": 1152, "vocab_size": 50368}


def _every_n(layer_types: list) -> int:
    """The period of `layer_types` (full attention at multiples of it), or a ValueError."""
    n = next((i for i, t in enumerate(layer_types) if i and t == "full_attention"), len(layer_types))
    expected = ["sliding_attention" if i % n else "full_attention" for i in range(len(layer_types))]
    if layer_types != expected:
        raise ValueError("layer_types must be full attention every n-th layer from the first, sliding otherwise")
    return n


def _read(d: dict) -> dict:
    fields = {**_DEFAULTS, **{ours: d[theirs] for ours, theirs in _NAMES.items() if theirs in d}}
    if d.get("mlp_bias", fields["bias"]) != fields["bias"]:
        raise ValueError("attention_bias and mlp_bias must be equal")
    if isinstance(d.get("layer_types"), list):
        fields["global_attn_every_n_layers"] = _every_n(d["layer_types"])
    rope = d.get("rope_parameters") or {}
    for kind, ours in (("full_attention", "rope_theta"), ("sliding_attention", "local_rope_theta")):
        if isinstance(rope.get(kind), dict) and "rope_theta" in rope[kind]:
            fields[ours] = rope[kind]["rope_theta"]
    return {**fields, "type_vocab_size": 0, "position_embedding_type": "rotary", "norm_first": True,
            "gated_ffn": True}


def _write(config) -> dict:
    out = {theirs: getattr(config, ours) for ours, theirs in _NAMES.items()}
    out["classifier_dropout"] = config.head_dropout  # ModernBertConfig takes a number, not null
    out.update(mlp_bias=config.bias, mlp_dropout=config.hidden_dropout_prob, tie_word_embeddings=True)
    return out


def from_bert(config):
    """ModernBERT's architecture for a BERT shape: pre-LN with a final norm, rotary positions, a
    GeGLU feed-forward as many parameters as BERT's (intermediate 8/3 the width, two maps in, one
    out), no biases, local attention in 128-token windows with every third layer global, no
    segments, ModernBERT's epsilon, 8,192 positions."""
    return config.replace(model_type="modernbert", norm_first=True, gated_ffn=True, bias=False, norm_bias=False,
                          head_bias=False, position_embedding_type="rotary", type_vocab_size=0, local_attention=128,
                          global_attn_every_n_layers=3, rope_theta=160_000.0, local_rope_theta=10_000.0,
                          layer_norm_eps=1e-5, pooler_hidden_act="gelu", max_position_embeddings=8192,
                          intermediate_size=round(8 * config.hidden_size / 3))


_CLASSES = {f"Bert{kind}": f"ModernBert{kind}" for kind in
            ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")}
MODERNBERT = Family(
    "modernbert", "model.", ENCODER_KEYS, HEAD_KEYS, _CLASSES, _read, _write,
    mlm_act=lambda c: c.pooler_hidden_act, summary=Summary(lambda c: c.pooler_hidden_act, norm=True),
    token_summary=True, outputs={"BertForQuestionAnswering": "classifier"}, pooler=False,
    redundant=r"(^|\.)position_ids$|^decoder\.weight$|inv_freq$",
    marks=(("decoder.", "masked-LM"), ("classifier.", "classifier")), from_bert=from_bert)
