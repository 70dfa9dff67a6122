"""RoBERTa (Liu et al. 2019) and XLM-R (Conneau et al. 2020): BERT's encoder with another recipe.

What differs from BERT in the files: the `roberta.` prefix; positions that start past the padding
id (`position_offset` = pad_token_id + 1, so a 514-row table reads 512 tokens); one segment; the
masked-LM head `lm_head` (its transform always the exact GELU); and a sequence classifier with a
layer of its own on the first token (`classifier.dense`, tanh, then `classifier.out_proj`), no
pooler. XLM-R is the same model under the name `xlm-roberta` (and its classes' names).
"""

from __future__ import annotations

from bertkit.families.base import Family, Summary, shared_fields, written
from bertkit.families.bert import ENCODER_KEYS

HEAD_KEYS = {
    "mlm.dense.{p}": "lm_head.dense.{p}",
    "mlm.norm.{p}": "lm_head.layer_norm.{p}",
    "mlm.bias": "lm_head.bias",
    "summary.dense.{p}": "classifier.dense.{p}",
    "output.{p}": "{output}.{p}",
}
_REDUNDANT = r"(^|\.)position_ids$|(^|\.)token_type_ids$|^lm_head\.decoder\.(weight|bias)$"
_MARKS = (("lm_head.", "masked-LM"), ("classifier.", "classifier"), ("qa_outputs.", "question-answering"))


def _read(d: dict) -> dict:
    fields = shared_fields(d)
    fields["position_offset"] = int(d.get("pad_token_id", 1)) + 1
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {d['position_embedding_type']!r} unsupported")
    return fields


def _write(config) -> dict:
    if config.position_offset != config.pad_token_id + 1:
        raise ValueError(f"RoBERTa's positions start at pad_token_id + 1 ({config.pad_token_id + 1}), "
                         f"not {config.position_offset}")
    return {**written(config), "position_embedding_type": "absolute"}


def from_bert(config):
    """RoBERTa's architecture for a BERT shape: positions past the padding id (as many more rows),
    one segment; the same layers."""
    offset = config.pad_token_id + 1
    return config.replace(model_type="roberta", position_offset=offset, type_vocab_size=1,
                          max_position_embeddings=config.max_position_embeddings + offset)


def _family(name: str, prefix: str) -> Family:
    """`prefix`: the transformers class prefix ("Roberta", "XLMRoberta")."""
    classes = {f"Bert{kind}": f"{prefix}{kind}" for kind in
               ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                "ForQuestionAnswering")}
    return Family(name, "roberta.", ENCODER_KEYS, HEAD_KEYS, classes, _read, _write, mlm_act=lambda c: "gelu",
                  summary=Summary(lambda c: "tanh"), outputs={"BertForSequenceClassification": "classifier.out_proj"},
                  redundant=_REDUNDANT, marks=_MARKS, from_bert=from_bert if name == "roberta" else None)


ROBERTA = _family("roberta", "Roberta")
XLM_ROBERTA = _family("xlm-roberta", "XLMRoberta")
