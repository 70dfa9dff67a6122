"""ALBERT (Lan et al. 2020): factorised embeddings and one layer's weights shared across depth.

The embeddings are `embedding_size` wide, normalised, then projected to the hidden size
(`encoder.embedding_hidden_mapping_in`); the layers take their weights from `num_hidden_groups`
groups (one in every released model), each group holding one layer (`inner_group_num` 1: other
values are refused). The pooler is a bare linear map (`albert.pooler`, tanh), the masked-LM head
`predictions` (projecting back to `embedding_size`), and pretraining's sentence-order head
`sop_classifier.classifier`.
"""

from __future__ import annotations

from bertkit.families.base import BERT_FIELDS, Family, shared_fields, written

_LAYER = "encoder.albert_layer_groups.{}.albert_layers.0."
ENCODER_KEYS: dict[str, str | tuple[str, ...]] = {
    "embeddings.word.{p}": "embeddings.word_embeddings.{p}",
    "embeddings.position.{p}": "embeddings.position_embeddings.{p}",
    "embeddings.segment.{p}": "embeddings.token_type_embeddings.{p}",
    "embeddings.norm.{p}": "embeddings.LayerNorm.{p}",
    "embed_proj.{p}": "encoder.embedding_hidden_mapping_in.{p}",
    "layers.{}.qkv.{p}": tuple(f"{_LAYER}attention.{n}.{{p}}" for n in ("query", "key", "value")),
    "layers.{}.attn_out.{p}": _LAYER + "attention.dense.{p}",
    "layers.{}.attn_norm.{p}": _LAYER + "attention.LayerNorm.{p}",
    "layers.{}.ffn_in.{p}": _LAYER + "ffn.{p}",
    "layers.{}.ffn_out.{p}": _LAYER + "ffn_output.{p}",
    "layers.{}.ffn_norm.{p}": _LAYER + "full_layer_layer_norm.{p}",
    "pooler.{p}": "pooler.{p}",
}
HEAD_KEYS = {
    "mlm.dense.{p}": "predictions.dense.{p}",
    "mlm.norm.{p}": "predictions.LayerNorm.{p}",
    "mlm.bias": "predictions.bias",
    "nsp.{p}": "sop_classifier.classifier.{p}",  # sentence-order prediction: two classes on the pooled [CLS]
    "output.{p}": "{output}.{p}",
}
_FIELDS = (*BERT_FIELDS, "embedding_size", "num_hidden_groups")


def _read(d: dict) -> dict:
    if d.get("inner_group_num", 1) != 1:
        raise ValueError(f"inner_group_num {d['inner_group_num']!r} unsupported (every released ALBERT has 1)")
    fields = shared_fields(d, _FIELDS)
    fields.setdefault("embedding_size", 128)  # AlbertConfig's default
    fields.setdefault("num_hidden_groups", 1)
    fields["hidden_act"] = d.get("hidden_act", "gelu_new")
    if "classifier_dropout_prob" in d:
        fields["classifier_dropout"] = d["classifier_dropout_prob"]
    return fields


def _write(config) -> dict:
    out = written(config, BERT_FIELDS)
    out.pop("classifier_dropout")
    return {**out, "embedding_size": config.embedding_width, "num_hidden_groups": config.layer_groups,
            "inner_group_num": 1, "classifier_dropout_prob": config.head_dropout, "position_embedding_type": "absolute"}


def from_bert(config):
    """ALBERT's architecture for a BERT shape: embeddings a quarter as wide as the layers (at least
    16; ALBERT-base: 128 for 768), one group of layer weights shared across depth, ALBERT's GELU."""
    return config.replace(model_type="albert", embedding_size=max(16, config.hidden_size // 4), num_hidden_groups=1,
                          hidden_act="gelu_new")


_CLASSES = {f"Bert{kind}": f"Albert{kind}" for kind in
            ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
             "ForPreTraining")}
ALBERT = Family(
    "albert", "albert.", ENCODER_KEYS, HEAD_KEYS, _CLASSES, _read, _write,
    redundant=r"(^|\.)position_ids$|(^|\.)token_type_ids$|^predictions\.decoder\.(weight|bias)$",
    marks=(("predictions.", "masked-LM"), ("sop_classifier.", "sentence-order"), ("classifier.", "classifier"),
           ("qa_outputs.", "question-answering")), from_bert=from_bert)
