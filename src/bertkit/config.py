"""`BertConfig`: the model's shape, with Hugging Face's field names so `config.json` is shared.

The one field we add beyond HF's BERT is `attention` (the paper's left-to-right ablation), and we
take ELECTRA's `embedding_size` (embeddings narrower or wider than the layers, projected to them);
reading and writing config.json, with its translation to HF's `is_decoder` and ELECTRA's layout, is
`bertkit.hf`'s job.
Every field is checked on construction: the first wrong one is named with its type or range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bertkit.errors import UserError

IGNORE_INDEX = -100  # the label that every loss skips (transformers' and PyTorch's convention)

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")
# integer fields and their smallest allowed value
_INT_FIELDS = {"vocab_size": 1, "hidden_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1,
               "intermediate_size": 1, "max_position_embeddings": 2, "type_vocab_size": 1}
_PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob")
_POSITIVE_FLOATS = ("initializer_range", "layer_norm_eps")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522  # WordPiece entries
    hidden_size: int = 768  # C: width of every token vector
    num_hidden_layers: int = 12  # encoder layers
    num_attention_heads: int = 12  # H; head size D = C / H
    intermediate_size: int = 3072  # feed-forward inner width
    hidden_act: str = "gelu"  # "gelu" is the exact erf GELU of the original BERT
    hidden_dropout_prob: float = 0.1  # dropout on embeddings and residual branches
    attention_probs_dropout_prob: float = 0.1  # dropout on attention probabilities
    max_position_embeddings: int = 512  # longest sequence, in tokens
    type_vocab_size: int = 2  # segments (A/B)
    initializer_range: float = 0.02  # std of the normal init of weights
    layer_norm_eps: float = 1e-12  # BERT's LayerNorm epsilon
    pad_token_id: int = 0  # id of [PAD]
    classifier_dropout: float | None = None  # head dropout; None means hidden_dropout_prob
    attention: str = "bidirectional"  # "bidirectional" (BERT) or "causal" (the LTR ablation)
    id2label: dict[int, str] | None = field(default=None, hash=False, compare=True)
    problem_type: str | None = None  # HF's: "regression", "single_label_classification", ...
    embedding_size: int | None = None  # E: embeddings' width, projected to C before the layers (ELECTRA); None: C

    def __post_init__(self):
        if self.embedding_size == self.hidden_size:  # one spelling of "no projection", so configs compare equal
            object.__setattr__(self, "embedding_size", None)
        self._check_fields()
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be a multiple of num_attention_heads "
                f"{self.num_attention_heads}: change one of them"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} unsupported; use one of {_ACTIVATIONS}")
        if self.attention not in ("bidirectional", "causal"):
            raise ValueError(f"attention must be 'bidirectional' or 'causal', not {self.attention!r}")

    def _check_fields(self) -> None:
        """Types and ranges, field by field: a ValueError naming the first wrong one."""
        for name, low in _INT_FIELDS.items():
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise ValueError(f"{name} must be an integer of at least {low}, not {value!r}")
        for name in _PROBABILITIES:
            value = getattr(self, name)
            if not _is_number(value) or not 0 <= value < 1:
                raise ValueError(f"{name} must be a number in [0, 1), not {value!r}")
        for name in _POSITIVE_FLOATS:
            value = getattr(self, name)
            if not _is_number(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number, not {value!r}")
        if self.classifier_dropout is not None and (not _is_number(self.classifier_dropout)
                                                    or not 0 <= self.classifier_dropout < 1):
            raise ValueError(f"classifier_dropout must be null or a number in [0, 1), not {self.classifier_dropout!r}")
        if self.pad_token_id is not None and (not _is_int(self.pad_token_id)
                                              or not 0 <= self.pad_token_id < self.vocab_size):
            raise ValueError(f"pad_token_id must be an id below vocab_size {self.vocab_size}, "
                             f"not {self.pad_token_id!r}")
        if not isinstance(self.hidden_act, str):
            raise ValueError(f"hidden_act must be a string, not {self.hidden_act!r}")
        if self.embedding_size is not None and (not _is_int(self.embedding_size) or self.embedding_size < 1):
            raise ValueError(f"embedding_size must be null or an integer of at least 1, not {self.embedding_size!r}")

    @property
    def head_dropout(self) -> float:
        """Dropout before a task head's output layer: classifier_dropout, else hidden_dropout_prob."""
        return self.classifier_dropout if self.classifier_dropout is not None else self.hidden_dropout_prob

    @property
    def embedding_width(self) -> int:
        """E: the embeddings' width (embedding_size, else hidden_size); the tied MLM decoder's too."""
        return self.embedding_size if self.embedding_size is not None else self.hidden_size

    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    @property
    def padded_vocab_size(self) -> int:
        """Vocabulary rounded up to a multiple of 64 inside the model (faster matmuls);
        never visible in saved files."""
        return -(-self.vocab_size // 64) * 64

    def replace(self, **changes) -> BertConfig:
        return dataclasses.replace(self, **changes)

    def with_labels(self, labels) -> BertConfig:
        return self.replace(id2label={i: str(name) for i, name in enumerate(labels)})

    @classmethod
    def preset(cls, name: str, **overrides) -> BertConfig:
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        return dataclasses.replace(PRESETS[name], **overrides)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _preset(layers: int, hidden: int) -> BertConfig:
    return BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(hidden // 64, 2),
        intermediate_size=4 * hidden,
    )


# Parameter counts with the 30,522-entry vocabulary, pooler and MLM+NSP heads included
# (BertForPreTraining, as save_pretrained writes it: tied decoder once, no vocabulary padding);
# `bertkit info` prints the exact number for any model.
PRESETS: dict[str, BertConfig] = {
    "tiny": _preset(2, 128),  # 4,433,468
    "mini": _preset(4, 256),  # 11,267,900
    "small": _preset(4, 512),  # 29,058,876
    "medium": _preset(8, 512),  # 41,668,412
    "base": _preset(12, 768),  # 110,106,428
    "large": _preset(24, 1024),  # 336,226,108
}

