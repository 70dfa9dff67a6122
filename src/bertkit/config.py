"""`BertConfig`: the encoder's shape, with Hugging Face's field names so `config.json` is shared.

One config for every family bertkit reads (`bertkit.families`): BERT's fields, then what BERT's
descendants change, each a field whose default is BERT's behaviour, named as the family's own
config.json names it where one family owns it (ModernBERT's `local_attention`, DeBERTa's
`position_buckets`) and generically where several share it (`norm_first`, `gated_ffn`, `bias`).
`model_type` names the family, which decides the key names, the heads' layout and the config.json
translation (`bertkit.families`, through `bertkit.hf`). Beyond HF we add `attention` (the paper's
left-to-right ablation).
Every field is checked on construction: the first wrong one is named with its type or range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bertkit.errors import UserError

IGNORE_INDEX = -100  # the label that every loss skips (transformers' and PyTorch's convention)

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "tanh")
POSITIONS = ("absolute", "rotary", "none")  # a learned table added to the input; rotary in attention; none
# integer fields and their smallest allowed value (type_vocab_size 0: no segment embeddings)
_INT_FIELDS = {"vocab_size": 1, "hidden_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1,
               "intermediate_size": 1, "max_position_embeddings": 2, "type_vocab_size": 0, "position_offset": 0,
               "local_attention": 0, "global_attn_every_n_layers": 1, "conv_kernel_size": 0, "conv_groups": 1}
_BOOLS = ("norm_first", "gated_ffn", "bias", "norm_bias", "head_bias", "decoder_bias", "relative_attention",
          "share_att_key", "norm_rel_ebd")
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
    # ---- what BERT's descendants change (bertkit.families); every default is BERT's ----
    model_type: str = "bert"  # the family: one of bertkit.families.FAMILIES
    position_embedding_type: str = "absolute"  # one of POSITIONS (ModernBERT: rotary; DeBERTa-v3: none)
    position_offset: int = 0  # the first position's row of the table (RoBERTa: pad_token_id + 1)
    norm_first: bool = False  # pre-LN layers and a final LayerNorm (ModernBERT); False: BERT's post-LN
    gated_ffn: bool = False  # feed-forward act(x W) * (x V), intermediate_size wide (ModernBERT's GeGLU)
    bias: bool = True  # biases of the layers' linear maps (ModernBERT: none)
    norm_bias: bool = True  # LayerNorm biases (ModernBERT: none)
    head_bias: bool = True  # biases of the heads' dense layers (ModernBERT's classifier_bias)
    decoder_bias: bool = True  # the masked-LM decoder's bias
    num_hidden_groups: int | None = None  # ALBERT: groups of shared layer weights; None: one per layer
    local_attention: int = 0  # tokens a local layer sees, centred (ModernBERT 128); 0: every layer global
    global_attn_every_n_layers: int = 1  # with local_attention: layer i is global when i % n == 0
    rope_theta: float = 10000.0  # rotary base of global layers
    local_rope_theta: float = 10000.0  # rotary base of local layers
    relative_attention: bool = False  # DeBERTa's disentangled attention (content and relative position)
    max_relative_positions: int = -1  # DeBERTa: farthest distance; -1: max_position_embeddings
    position_buckets: int = -1  # DeBERTa: log-bucketed distances; -1: none
    pos_att_type: tuple[str, ...] = ()  # DeBERTa: "c2p" (content to position) and/or "p2c"
    share_att_key: bool = False  # DeBERTa: positions projected by the content query/key maps
    norm_rel_ebd: bool = False  # DeBERTa: LayerNorm over the relative embeddings
    pooler_hidden_act: str = "tanh"  # the pooled summary's activation (DeBERTa: gelu)
    conv_kernel_size: int = 0  # DeBERTa-v2: tokens (odd) of a convolution added to the first layer's output; 0: none
    conv_act: str = "tanh"  # DeBERTa-v2: that convolution's activation
    conv_groups: int = 1  # DeBERTa-v2: that convolution's channel groups (a divisor of hidden_size)
    classifier_pooling: str = "cls"  # ModernBERT's sequence summary: the first token or the mean

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
        self._check_descendants()

    def _check_descendants(self) -> None:
        """The fields BERT's descendants add, and how they go together."""
        for name in _BOOLS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, not {getattr(self, name)!r}")
        for name in ("rope_theta", "local_rope_theta"):
            if not _is_number(getattr(self, name)) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive number, not {getattr(self, name)!r}")
        if not isinstance(self.model_type, str):
            raise ValueError(f"model_type must be a string, not {self.model_type!r}")
        if self.position_embedding_type not in POSITIONS:
            raise ValueError(f"position_embedding_type must be one of {', '.join(POSITIONS)}, "
                             f"not {self.position_embedding_type!r}")
        for name in ("pooler_hidden_act", "conv_act"):
            if getattr(self, name) not in _ACTIVATIONS:
                raise ValueError(f"{name} {getattr(self, name)!r} unsupported; use one of {_ACTIVATIONS}")
        if self.classifier_pooling not in ("cls", "mean"):
            raise ValueError(f"classifier_pooling must be 'cls' or 'mean', not {self.classifier_pooling!r}")
        groups = self.num_hidden_groups
        if groups is not None and (not _is_int(groups) or groups < 1 or self.num_hidden_layers % groups):
            raise ValueError(f"num_hidden_groups must divide num_hidden_layers {self.num_hidden_layers}, "
                             f"not {groups!r}")
        if self.conv_kernel_size and (self.conv_kernel_size % 2 == 0 or self.hidden_size % self.conv_groups):
            raise ValueError(f"conv_kernel_size must be odd ({self.conv_kernel_size}) and conv_groups divide "
                             f"hidden_size {self.hidden_size} ({self.conv_groups}): change them")
        if not set(self.pos_att_type) <= {"c2p", "p2c"}:
            raise ValueError(f"pos_att_type may hold 'c2p' and 'p2c', not {list(self.pos_att_type)!r}")
        if self.position_embedding_type == "rotary" and self.head_size % 2:
            raise ValueError(f"rotary positions need an even head size, not {self.head_size}")
        if self.max_position_embeddings <= self.position_offset:
            raise ValueError(f"max_position_embeddings {self.max_position_embeddings} leaves no position after "
                             f"position_offset {self.position_offset}")

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
    def head_size(self) -> int:
        """D: each attention head's width."""
        return self.hidden_size // self.num_attention_heads

    @property
    def max_tokens(self) -> int:
        """The longest input the model reads, in tokens (positions past the offset)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def layer_groups(self) -> int:
        """Layers with weights of their own: num_hidden_groups (ALBERT), else every layer."""
        return self.num_hidden_groups or self.num_hidden_layers

    def is_global(self, layer: int) -> bool:
        """Whether `layer` attends to the whole input (ModernBERT's local layers see a window)."""
        return not self.local_attention or layer % self.global_attn_every_n_layers == 0

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

