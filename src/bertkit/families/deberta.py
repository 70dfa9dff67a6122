"""DeBERTa-v2 and -v3 (He et al. 2021, 2023): disentangled attention over relative positions.

Each attention score adds to the content-content product a content-to-position and a
position-to-content term read from one table of log-bucketed relative distances
(`encoder.rel_embeddings`, with its LayerNorm `encoder.LayerNorm`), projected by each layer's
content maps (`share_att_key`, v3) or maps of their own (`pos_key_proj`, `pos_query_proj`); absolute
positions are added to the input only with `position_biased_input` (v3: none); v3 has no
segments. The masked-LM head is `cls.predictions` (transformers' `legacy` layout, the default) or
`lm_predictions.lm_head` (read, written back as `cls`); the sequence classifier has its own layer
on the first token (`pooler.dense`, `pooler_hidden_act`) before `classifier`. The convolution
some v2 models add after the first layer (`conv_kernel_size`, `conv_act`, `conv_groups`:
`encoder.conv`) is `model.TokenConv`. The replaced-token detection head is DeBERTa-v3's own
(`LMMaskPredictionHead` in microsoft/DeBERTa, `mask_predictions`: LayerNorm of each token's state
plus the first token's, dense, activation, a 1-logit `classifier`), which transformers has no class
for: a discriminator is saved as `DebertaV2Model`, as the released v3 checkpoints are, and
transformers reports its six `mask_predictions` tensors as unexpected. Embeddings of another width
are refused.
"""

from __future__ import annotations

from bertkit.families.base import BERT_FIELDS, Family, Summary, shared_fields, written

_LAYER = "encoder.layer.{}."
ENCODER_KEYS: dict[str, str | tuple[str, ...]] = {
    "embeddings.word.{p}": "embeddings.word_embeddings.{p}",
    "embeddings.position.{p}": "embeddings.position_embeddings.{p}",
    "embeddings.segment.{p}": "embeddings.token_type_embeddings.{p}",
    "embeddings.norm.{p}": "embeddings.LayerNorm.{p}",
    "layers.{}.qkv.{p}": tuple(f"{_LAYER}attention.self.{n}.{{p}}" for n in ("query_proj", "key_proj", "value_proj")),
    "layers.{}.pos_key.{p}": _LAYER + "attention.self.pos_key_proj.{p}",
    "layers.{}.pos_query.{p}": _LAYER + "attention.self.pos_query_proj.{p}",
    "layers.{}.attn_out.{p}": _LAYER + "attention.output.dense.{p}",
    "layers.{}.attn_norm.{p}": _LAYER + "attention.output.LayerNorm.{p}",
    "layers.{}.ffn_in.{p}": _LAYER + "intermediate.dense.{p}",
    "layers.{}.ffn_out.{p}": _LAYER + "output.dense.{p}",
    "layers.{}.ffn_norm.{p}": _LAYER + "output.LayerNorm.{p}",
    "rel_embeddings.{p}": "encoder.rel_embeddings.{p}",
    "rel_norm.{p}": "encoder.LayerNorm.{p}",
    "token_conv.conv.{p}": "encoder.conv.conv.{p}",
    "token_conv.norm.{p}": "encoder.conv.LayerNorm.{p}",
}
HEAD_KEYS = {
    "mlm.dense.{p}": "cls.predictions.transform.dense.{p}",
    "mlm.norm.{p}": "cls.predictions.transform.LayerNorm.{p}",
    "mlm.bias": "cls.predictions.bias",
    "summary.dense.{p}": "pooler.dense.{p}",
    "output.{p}": "{output}.{p}",
    # DeBERTa-v3's replaced-token detection head (`Family.rtd_context`), in its own code's names
    "rtd.norm.{p}": "mask_predictions.LayerNorm.{p}",
    "rtd.dense.{p}": "mask_predictions.dense.{p}",
    "rtd.prediction.{p}": "mask_predictions.classifier.{p}",
}
# the newer masked-LM layout, read as the legacy one
RENAMED = {"lm_predictions.lm_head.dense.": "cls.predictions.transform.dense.",
           "lm_predictions.lm_head.LayerNorm.": "cls.predictions.transform.LayerNorm.",
           "lm_predictions.lm_head.bias": "cls.predictions.bias"}
_FIELDS = (*BERT_FIELDS, "relative_attention", "max_relative_positions", "position_buckets", "share_att_key",
           "position_biased_input", "pooler_hidden_act", "conv_kernel_size", "conv_act", "conv_groups")


def _read(d: dict) -> dict:
    if d.get("embedding_size", d.get("hidden_size")) != d.get("hidden_size"):
        raise ValueError("DeBERTa embeddings of another width than hidden_size are unsupported")
    fields = shared_fields(d, _FIELDS)
    if fields.get("conv_kernel_size", 0) <= 0:  # transformers' ConvLayer only for a positive size
        for name in ("conv_kernel_size", "conv_act", "conv_groups"):
            fields.pop(name, None)
    fields.setdefault("type_vocab_size", 0)  # DebertaV2Config's default
    fields.setdefault("layer_norm_eps", 1e-7)
    fields.setdefault("pooler_hidden_act", "gelu")
    terms = d.get("pos_att_type") or []
    if isinstance(terms, str):
        terms = [t.strip() for t in terms.lower().split("|")]
    fields["pos_att_type"] = tuple(t for t in ("c2p", "p2c") if t in terms)
    fields["norm_rel_ebd"] = "layer_norm" in str(d.get("norm_rel_ebd", "none")).lower()
    fields["position_embedding_type"] = "absolute" if d.get("position_biased_input", True) else "none"
    fields.pop("position_biased_input", None)
    if "cls_dropout" in d:
        fields["classifier_dropout"] = d["cls_dropout"]
    return fields


def _write(config) -> dict:
    out = written(config, BERT_FIELDS)
    out.pop("classifier_dropout")
    return {**out, "relative_attention": config.relative_attention,
            "max_relative_positions": config.max_relative_positions, "position_buckets": config.position_buckets,
            "pos_att_type": list(config.pos_att_type), "share_att_key": config.share_att_key,
            "norm_rel_ebd": "layer_norm" if config.norm_rel_ebd else "none",
            "position_biased_input": config.position_embedding_type == "absolute",
            "pooler_hidden_size": config.hidden_size, "pooler_hidden_act": config.pooler_hidden_act,
            "pooler_dropout": 0.0, "legacy": True,
            **({"cls_dropout": config.classifier_dropout} if config.classifier_dropout is not None else {}),
            **({"conv_kernel_size": config.conv_kernel_size, "conv_act": config.conv_act,
                "conv_groups": config.conv_groups} if config.conv_kernel_size else {})}


def from_bert(config):
    """DeBERTa-v3's architecture for a BERT shape: no absolute positions and no segments, relative
    attention over log-bucketed distances (buckets: half the positions, at most 256) with both
    terms through the content maps, a LayerNorm on the relative table, DeBERTa's epsilon and its
    GELU pooler."""
    return config.replace(model_type="deberta-v2", relative_attention=True, position_embedding_type="none",
                          type_vocab_size=0, position_buckets=min(256, config.max_position_embeddings // 2),
                          max_relative_positions=config.max_position_embeddings, pos_att_type=("c2p", "p2c"),
                          share_att_key=True, norm_rel_ebd=True, layer_norm_eps=1e-7, pooler_hidden_act="gelu")


_CLASSES = {f"Bert{kind}": f"DebertaV2{kind}" for kind in
            ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")}
_CLASSES["ElectraForPreTraining"] = "DebertaV2Model"  # the discriminator: the encoder (+ mask_predictions)
DEBERTA_V2 = Family(
    "deberta-v2", "deberta.", ENCODER_KEYS, HEAD_KEYS, _CLASSES, _read, _write,
    summary=Summary(lambda c: c.pooler_hidden_act), pooler=False, rtd_context=True,
    redundant=r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$",
    marks=(("cls.predictions.", "masked-LM"), ("lm_predictions.", "masked-LM"), ("classifier.", "classifier"),
           ("qa_outputs.", "question-answering"), ("mask_predictions.", "replaced-token detection")),
    from_bert=from_bert)
