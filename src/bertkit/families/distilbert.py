"""DistilBERT (Sanh et al. 2019): BERT's layers, half as many, without segments or a pooler.

Its config.json names fields its own way (`dim`, `n_layers`, `n_heads`, `hidden_dim`,
`activation`, `dropout`); its LayerNorms' epsilon is fixed at 1e-12; the sequence classifier has a
layer of its own on the first token (`pre_classifier`, ReLU) before `classifier`.
"""

from __future__ import annotations

from bertkit.families.base import Family, Summary

_LAYER = "transformer.layer.{}."
ENCODER_KEYS: dict[str, str | tuple[str, ...]] = {
    "embeddings.word.{p}": "embeddings.word_embeddings.{p}",
    "embeddings.position.{p}": "embeddings.position_embeddings.{p}",
    "embeddings.norm.{p}": "embeddings.LayerNorm.{p}",
    "layers.{}.qkv.{p}": tuple(f"{_LAYER}attention.{n}.{{p}}" for n in ("q_lin", "k_lin", "v_lin")),
    "layers.{}.attn_out.{p}": _LAYER + "attention.out_lin.{p}",
    "layers.{}.attn_norm.{p}": _LAYER + "sa_layer_norm.{p}",
    "layers.{}.ffn_in.{p}": _LAYER + "ffn.lin1.{p}",
    "layers.{}.ffn_out.{p}": _LAYER + "ffn.lin2.{p}",
    "layers.{}.ffn_norm.{p}": _LAYER + "output_layer_norm.{p}",
}
HEAD_KEYS = {
    "mlm.dense.{p}": "vocab_transform.{p}",
    "mlm.norm.{p}": "vocab_layer_norm.{p}",
    "mlm.bias": "vocab_projector.bias",
    "summary.dense.{p}": "pre_classifier.{p}",
    "output.{p}": "{output}.{p}",
}
# ours -> DistilBertConfig's names
_NAMES = {"vocab_size": "vocab_size", "hidden_size": "dim", "num_hidden_layers": "n_layers",
          "num_attention_heads": "n_heads", "intermediate_size": "hidden_dim", "hidden_act": "activation",
          "hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout",
          "max_position_embeddings": "max_position_embeddings", "initializer_range": "initializer_range",
          "pad_token_id": "pad_token_id", "classifier_dropout": "seq_classif_dropout"}


def _read(d: dict) -> dict:
    fields = {ours: d[theirs] for ours, theirs in _NAMES.items() if theirs in d}
    return {**fields, "type_vocab_size": 0, "layer_norm_eps": 1e-12}


def _write(config) -> dict:
    if config.type_vocab_size:
        raise ValueError("DistilBERT has no segment embeddings (type_vocab_size 0)")
    out = {theirs: getattr(config, ours) for ours, theirs in _NAMES.items()}
    out["seq_classif_dropout"] = config.head_dropout  # DistilBertConfig takes a number, not null
    out["qa_dropout"] = config.head_dropout
    out["sinusoidal_pos_embds"] = False
    out["tie_weights_"] = True
    return out


_CLASSES = {f"Bert{kind}": f"DistilBert{kind}" for kind in
            ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")}
DISTILBERT = Family(
    "distilbert", "distilbert.", ENCODER_KEYS, HEAD_KEYS, _CLASSES, _read, _write,
    summary=Summary(lambda c: "relu"), pooler=False,
    redundant=r"(^|\.)position_ids$|^vocab_projector\.weight$",
    marks=(("vocab_transform.", "masked-LM"), ("pre_classifier.", "classifier"), ("classifier.", "classifier"),
           ("qa_outputs.", "question-answering")))
