"""The bi-encoder of a search index: a model directory with the pooling its own files ask for.

A sentence-transformers directory says how it pools in `1_Pooling/config.json` (the module
listed in `modules.json`) and its longest input in `sentence_bert_config.json`; a plain BERT
directory gets mean pooling and 256 tokens (what sentence-transformers would give it). Search
always normalises the vectors, so the inner product is the cosine whatever the model says.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import UserError

_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}
DEFAULT_MAX_LENGTH = 256


def _read(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None


def _pooling_mode(config: dict, path: Path) -> str:
    """The pooling a 1_Pooling/config.json names: sentence-transformers >= 6 writes
    `"pooling_mode": "mean"` (a string, or a list of modes), earlier versions one boolean per mode."""
    mode = config.get("pooling_mode")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    chosen = [mode] if mode is not None else [name for key, name in _MODES.items() if config.get(key)]
    if len(chosen) != 1 or chosen[0] not in _MODES.values():
        raise UserError(f"pooling must be exactly one of cls, mean or max (found {chosen or 'none'})", path)
    return chosen[0]


def model_pooling(model_dir: str | os.PathLike) -> tuple[str, int]:
    """(pooling, max_length) as the directory's sentence-transformers files say, else (mean, 256)."""
    model_dir = Path(model_dir)
    pooling, max_length = "mean", DEFAULT_MAX_LENGTH
    modules = model_dir / "modules.json"
    if modules.is_file():
        for module in _read(modules):
            if str(module.get("type", "")).endswith("Pooling"):
                path = model_dir / module.get("path", "") / "config.json"
                pooling = _pooling_mode(_read(path), path)
    settings = model_dir / "sentence_bert_config.json"
    if settings.is_file():
        max_length = int(_read(settings).get("max_seq_length") or DEFAULT_MAX_LENGTH)
    return pooling, max_length


def model_normalizes(model_dir: str | os.PathLike) -> bool:
    """Whether the directory's sentence-transformers modules end in Normalize (unit-length vectors)."""
    path = Path(model_dir) / "modules.json"
    if not path.is_file():
        return False
    modules = _read(path)
    return isinstance(modules, list) and any(str(m.get("type", "")).endswith("Normalize")
                                             for m in modules if isinstance(m, dict))


@dataclass
class Encoder:
    """A loaded encoder with its tokenizer and pooling; `encode` gives unit-length float32 rows."""

    model_dir: str
    model: object
    tokenizer: object
    pooling: str
    max_length: int
    batch_size: int = 32
    device: str = "cpu"

    @classmethod
    def load(cls, model_dir: str | os.PathLike, pooling: str | None = None, max_length: int | None = None,
             batch_size: int = 32, device: str = "cpu", backend: str = "torch", int8: bool = False) -> Encoder:
        """`backend` "onnx": a `bertkit export` folder in ONNX Runtime; `int8`: its int8 graph, or
        for torch the weights quantized (`bertkit.quantize`)."""
        from bertkit.export.backend import load_encoder_for

        own_pooling, own_length = model_pooling(model_dir)
        model, tokenizer = load_encoder_for(model_dir, backend, int8)
        return cls(str(model_dir), model, tokenizer, pooling or own_pooling, max_length or own_length, batch_size, device)

    def encode(self, texts: list[str], progress: bool = False, report: dict | None = None) -> np.ndarray:
        from bertkit.embed import embed_texts

        return embed_texts(self.model, self.tokenizer, texts, pooling=self.pooling, normalize=True,
                           batch_size=self.batch_size, max_length=self.max_length, device=self.device,
                           progress=progress, report=report)


def write_sentence_transformers_files(model_dir: str | os.PathLike, pooling: str, max_length: int, width: int,
                                      normalize: bool = False) -> None:
    """Beside an HF encoder directory, the files that make it a sentence-transformers model:
    Transformer -> Pooling (`pooling`) [-> Normalize], the pooling `model_pooling` reads back."""
    from bertkit.io import write_json

    model_dir = Path(model_dir)
    if pooling not in _MODES.values():
        raise UserError(f"pooling must be one of {', '.join(_MODES.values())}, not {pooling!r}")
    modules = [("", "Transformer"), ("1_Pooling", "Pooling")] + ([("2_Normalize", "Normalize")] if normalize else [])
    write_json(model_dir / "modules.json", [{"idx": i, "name": str(i), "path": path,
                                             "type": f"sentence_transformers.models.{kind}"}
                                            for i, (path, kind) in enumerate(modules)])
    write_json(model_dir / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    (model_dir / "1_Pooling").mkdir(exist_ok=True)
    write_json(model_dir / "1_Pooling" / "config.json", {
        "word_embedding_dimension": width, **{key: name == pooling for key, name in _MODES.items()},
        "pooling_mode_mean_sqrt_len_tokens": False})
    if normalize:
        (model_dir / "2_Normalize").mkdir(exist_ok=True)
    write_json(model_dir / "config_sentence_transformers.json",
               {"similarity_fn_name": "cosine", "prompts": {}, "default_prompt_name": None})
