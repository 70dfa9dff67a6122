"""`BertConfig`: the model's shape, with Hugging Face's field names so `config.json` is shared.

Fields we add beyond HF's are `attention` (the paper's left-to-right ablation; written to
config.json also as HF's `is_decoder` so transformers builds the same causal model).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import UserError

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")


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

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be a multiple of num_attention_heads "
                f"{self.num_attention_heads}: change one of them"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} unsupported; use one of {_ACTIVATIONS}")
        if self.attention not in ("bidirectional", "causal"):
            raise ValueError(f"attention must be 'bidirectional' or 'causal', not {self.attention!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    @property
    def padded_vocab_size(self) -> int:
        """Vocabulary rounded up to a multiple of 64 inside the model (faster matmuls);
        never visible in saved files."""
        return -(-self.vocab_size // 64) * 64

    def replace(self, **changes) -> "BertConfig":
        return dataclasses.replace(self, **changes)

    def with_labels(self, labels) -> "BertConfig":
        return self.replace(id2label={i: str(name) for i, name in enumerate(labels)})

    # ---- JSON in Hugging Face's layout ----
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["model_type"] = "bert"
        d["position_embedding_type"] = "absolute"
        d["is_decoder"] = self.attention == "causal"
        if self.id2label is not None:
            d["id2label"] = {str(i): name for i, name in self.id2label.items()}
            d["label2id"] = {name: i for i, name in self.id2label.items()}
        else:
            del d["id2label"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BertConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if "attention" not in d and d.get("is_decoder"):
            kwargs["attention"] = "causal"
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type {d['position_embedding_type']!r} unsupported")
        if kwargs.get("id2label") is not None:
            kwargs["id2label"] = {int(i): n for i, n in kwargs["id2label"].items()}
        elif "num_labels" in d:
            kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(int(d["num_labels"]))}
        return cls(**kwargs)

    def save(self, path: str | Path) -> None:
        from bertkit.io import write_json

        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        if not path.exists():
            raise UserError("no such model directory", path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise UserError("no config.json: not a model directory", path.parent)
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"not valid JSON ({e})", path) from None
        except (TypeError, ValueError) as e:
            raise UserError(f"bad model config: {e}", path) from None

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        return dataclasses.replace(PRESETS[name], **overrides)


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
