"""What a family is: one row of `bertkit.families.FAMILIES`.

A family says how bertkit's one encoder and heads are written in a Hugging Face directory of that
kind: config.json's translation (`read_config` / `write_config`: HF's field names to `BertConfig`'s
and back), the key table (our parameter names to HF's, a dict looked up with the layer index as
"{}" and the parameter as "{p}"), the class names transformers uses for each of our heads, and
the parts of the heads that differ (which activation the masked-LM transform uses, whether a
sequence classifier reads the encoder's pooler or has a summary layer of its own, whether token
heads put a transform before their output layer, what the output layer is called).

The encoder itself is `bertkit.model`'s; a family only selects its switches through the config.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from bertkit.config import BertConfig

# BertConfig fields that config.json holds under the same name in BERT's layout
BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "classifier_dropout")


RTD_KEYS = {"rtd.dense.{p}": "discriminator_predictions.dense.{p}",
            "rtd.prediction.{p}": "discriminator_predictions.dense_prediction.{p}"}


@dataclass(frozen=True)
class Summary:
    """A sequence (or token) summary layer some families put before the output layer: dense C -> C,
    an activation, and for ModernBERT a LayerNorm."""

    act: Callable[[BertConfig], str]  # the activation's name, from the config
    norm: bool = False


@dataclass(frozen=True, eq=False)
class Family:
    """One family of HF directories (see the module docstring)."""

    name: str  # config.json's model_type, and our config's
    prefix: str  # the encoder's key prefix inside a head's file ("bert.", "roberta.", "model.")
    encoder_keys: dict[str, str | tuple[str, ...]]  # ours (relative to the encoder) -> HF; a tuple: fused QKV
    head_keys: dict[str, str]  # ours -> HF for the heads' own parameters; "{output}" is the output layer
    classes: dict[str, str]  # our class name -> transformers' (BertForMaskedLM -> RobertaForMaskedLM)
    read_config: Callable[[dict], dict]  # config.json -> BertConfig fields (model_type added by the caller)
    write_config: Callable[[BertConfig], dict]  # BertConfig -> config.json fields (model_type added)
    mlm_act: Callable[[BertConfig], str] = lambda c: c.hidden_act  # the masked-LM transform's activation
    summary: Summary | None = None  # None: sequence classifiers read the encoder's pooler (BERT)
    token_summary: bool = False  # token heads (NER, QA) put the summary layer first (ModernBERT)
    outputs: dict[str, str] = field(default_factory=dict)  # our head class -> its output layer's HF name
    pooler: bool = True  # whether its bare model has a pooler (else ours starts new on load, as ELECTRA)
    # the replaced-token head normalises each token's state plus the first token's before its dense
    # layer (DeBERTa-v3's); False: ELECTRA's head, dense, activation, 1-logit output
    rtd_context: bool = False
    # HF keys that carry no information of their own: buffers and tied copies
    redundant: str = r"(^|\.)position_ids$|(^|\.)token_type_ids$"
    # (HF key prefix, head name) pairs that say which heads a file holds
    marks: tuple[tuple[str, str], ...] = ()
    # `bertkit pretrain --arch`: a BERT preset's shape made this family's architecture (None: not pretrained)
    from_bert: Callable[[BertConfig], BertConfig] | None = None

    def __post_init__(self):
        # every family can carry a replaced-token detection head (`--objective electra`): ELECTRA's
        # names unless the family has its own
        if not any(k.startswith("rtd.") for k in self.head_keys):
            object.__setattr__(self, "head_keys", {**self.head_keys, **RTD_KEYS})

    def hf_class(self, ours: str) -> str:
        return self.classes.get(ours, ours)

    def output_layer(self, head_class: str) -> str:
        default = "qa_outputs" if head_class.endswith("QuestionAnswering") else "classifier"
        return self.outputs.get(head_class, default)

    @property
    def head_prefixes(self) -> tuple[str, ...]:
        """The first component of every head key: keys that never take the encoder's prefix."""
        names = {re.split(r"[.{]", hf, maxsplit=1)[0] + "." for hf in self.head_keys.values()}
        names.discard(".")
        return tuple(sorted(names | {"classifier.", "qa_outputs."}))

    def is_redundant(self, key: str) -> bool:
        return re.search(self.redundant, key) is not None


def shared_fields(d: dict, names: tuple[str, ...] = BERT_FIELDS) -> dict:
    """The BertConfig fields config.json `d` names as BERT does."""
    return {k: d[k] for k in names if k in d}


def written(config: BertConfig, names: tuple[str, ...] = BERT_FIELDS) -> dict:
    """`config`'s fields `names`, as config.json writes them."""
    return {k: getattr(config, k) for k in names}


def config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(BertConfig)}
