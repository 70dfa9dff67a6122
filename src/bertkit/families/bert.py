"""BERT (Devlin et al. 2018) and ELECTRA (Clark et al. 2020): the same encoder, two layouts.

ELECTRA's directories name the encoder `electra.`, may have embeddings narrower than the layers
(`embedding_size`, projected by `embeddings_project`), have no pooler (ours starts new on load and
is written under BERT's name), and name the generator's masked-LM head `generator_predictions` /
`generator_lm_head` and the discriminator's `discriminator_predictions`. ELECTRA's sequence
classifier has a layer of its own on the first token, as RoBERTa's but with the exact GELU
(`classifier.dense`, GELU, `classifier.out_proj`), in place of BERT's pooler; its token and QA
heads are BERT's.
"""

from __future__ import annotations

from bertkit.families.base import BERT_FIELDS, RTD_KEYS, Family, Summary, shared_fields, written

ENCODER_KEYS: dict[str, str | tuple[str, ...]] = {
    "embeddings.word.{p}": "embeddings.word_embeddings.{p}",
    "embeddings.position.{p}": "embeddings.position_embeddings.{p}",
    "embeddings.segment.{p}": "embeddings.token_type_embeddings.{p}",
    "embeddings.norm.{p}": "embeddings.LayerNorm.{p}",
    "embed_proj.{p}": "embeddings_project.{p}",  # ELECTRA's layout only (BERT has no projection)
    "layers.{}.qkv.{p}": tuple(f"encoder.layer.{{}}.attention.self.{n}.{{p}}" for n in ("query", "key", "value")),
    "layers.{}.attn_out.{p}": "encoder.layer.{}.attention.output.dense.{p}",
    "layers.{}.attn_norm.{p}": "encoder.layer.{}.attention.output.LayerNorm.{p}",
    "layers.{}.ffn_in.{p}": "encoder.layer.{}.intermediate.dense.{p}",
    "layers.{}.ffn_out.{p}": "encoder.layer.{}.output.dense.{p}",
    "layers.{}.ffn_norm.{p}": "encoder.layer.{}.output.LayerNorm.{p}",
    "pooler.{p}": "pooler.dense.{p}",
}
# The replaced-token detection head has only ELECTRA's names, in either layout (base.RTD_KEYS).
HEAD_KEYS: dict[str, str] = {
    "mlm.dense.{p}": "cls.predictions.transform.dense.{p}",
    "mlm.norm.{p}": "cls.predictions.transform.LayerNorm.{p}",
    "mlm.bias": "cls.predictions.bias",
    "nsp.{p}": "cls.seq_relationship.{p}",
    "output.{p}": "{output}.{p}",
    **RTD_KEYS,
}
ELECTRA_HEAD_KEYS: dict[str, str] = {
    "mlm.dense.{p}": "generator_predictions.dense.{p}",
    "mlm.norm.{p}": "generator_predictions.LayerNorm.{p}",
    "mlm.bias": "generator_lm_head.bias",  # its weight is tied to the word embeddings
    "summary.dense.{p}": "classifier.dense.{p}",
    "output.{p}": "{output}.{p}",
    **RTD_KEYS,
}
_REDUNDANT = r"(^|\.)position_ids$|(^|\.)token_type_ids$|^cls\.predictions\.decoder\.(weight|bias)$|" \
             r"^generator_lm_head\.weight$"
_MARKS = (("cls.predictions.", "masked-LM"), ("generator_predictions.", "masked-LM"),
          ("cls.seq_relationship.", "next-sentence"), ("discriminator_predictions.", "replaced-token detection"),
          ("classifier.", "classifier"), ("qa_outputs.", "question-answering"))
# ELECTRA's generator (its MLM transform always the exact GELU, transformers' ElectraGeneratorPredictions)
_ELECTRA_FIELDS = (*BERT_FIELDS, "embedding_size")
_ELECTRA_EMBEDDING_SIZE = 128  # transformers' ElectraConfig default, for a config.json that names none


def _read_bert(d: dict) -> dict:
    fields = shared_fields(d)
    if "attention" in d:
        fields["attention"] = d["attention"]
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {d['position_embedding_type']!r} unsupported")
    return fields


def _read_electra(d: dict) -> dict:
    return {**_read_bert(d), "embedding_size": d.get("embedding_size", _ELECTRA_EMBEDDING_SIZE)}


def _write_bert(config) -> dict:
    out = {**written(config), "attention": config.attention, "position_embedding_type": "absolute"}
    if config.embedding_size is not None:  # a projection BERT's classes cannot build: only ELECTRA writes one
        out["embedding_size"] = config.embedding_size
    return out


def _write_electra(config) -> dict:
    # always written: ElectraConfig's own default is not the hidden size
    return {**_write_bert(config), "embedding_size": config.embedding_width}


BERT = Family("bert", "bert.", ENCODER_KEYS, HEAD_KEYS, {}, _read_bert, _write_bert, redundant=_REDUNDANT,
              marks=_MARKS, from_bert=lambda config: config)
ELECTRA = Family(
    "electra", "electra.", ENCODER_KEYS, ELECTRA_HEAD_KEYS,
    {"BertModel": "ElectraModel", "BertForMaskedLM": "ElectraForMaskedLM",
     "BertForSequenceClassification": "ElectraForSequenceClassification",
     "BertForTokenClassification": "ElectraForTokenClassification",
     "BertForQuestionAnswering": "ElectraForQuestionAnswering"},
    _read_electra, _write_electra,
    mlm_act=lambda c: "gelu" if c.embedding_size is not None else c.hidden_act,
    summary=Summary(lambda c: "gelu"), outputs={"BertForSequenceClassification": "classifier.out_proj"},
    pooler=False, redundant=_REDUNDANT, marks=_MARKS)
