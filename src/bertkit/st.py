"""The sentence-transformers layout of a model directory: how it pools, how long its inputs are,
whether it normalises, and writing those files beside an HF encoder directory.

A sentence-transformers directory lists its modules in `modules.json` (Transformer -> Pooling
[-> Normalize]); the Pooling module's `1_Pooling/config.json` names the pooling, and
`sentence_bert_config.json` the longest input. A plain BERT directory reads as mean pooling and
256 tokens, not normalised (what sentence-transformers would give it). `hf.py` holds the HF
files of the same directory; this module holds only what sentence-transformers adds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bertkit.errors import UserError

_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}
DEFAULT_MAX_LENGTH = 256
LONG_INPUT_MODEL = 512  # a model reading more tokens than this is a long-input one
STATIC_MAX_TOKENS = 1_000_000  # a static model reads every token (model2vec's seq_length)


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


def declared_pooling(model_dir: str | os.PathLike) -> str | None:
    """The pooling (cls, mean or max) the directory's Pooling module names (a StaticEmbedding's:
    mean, its EmbeddingBag's); None without one."""
    model_dir = Path(model_dir)
    modules = model_dir / "modules.json"
    pooling = None
    if modules.is_file():
        for module in _read(modules):
            if str(module.get("type", "")).endswith("StaticEmbedding"):
                pooling = "mean"
            if str(module.get("type", "")).endswith("Pooling"):
                path = model_dir / module.get("path", "") / "config.json"
                pooling = _pooling_mode(_read(path), path)
    return pooling


def static_module(model_dir: str | os.PathLike) -> Path | None:
    """The folder of the directory's StaticEmbedding module (its `model.safetensors` and
    `tokenizer.json`) when its first module is one: a static embedding model (`bertkit.static`);
    else None."""
    path = Path(model_dir) / "modules.json"
    modules = _read(path) if path.is_file() else None
    if not isinstance(modules, list) or not modules or not isinstance(modules[0], dict):
        return None
    first = modules[0]
    if not str(first.get("type", "")).endswith("StaticEmbedding"):
        return None
    return Path(model_dir) / str(first.get("path", ""))


def model_pooling(model_dir: str | os.PathLike) -> tuple[str, int]:
    """(pooling, max_length) as the directory's sentence-transformers files say, else mean pooling
    over 256 tokens, or over every position of a long-input model (more than BERT's 512: ModernBERT's
    8,192), whose length is what it is used for. A static model: the mean over every token."""
    from bertkit.hf import load_config

    if static_module(model_dir) is not None:
        return "mean", STATIC_MAX_TOKENS
    settings = Path(model_dir) / "sentence_bert_config.json"
    if settings.is_file():
        max_length = int(_read(settings).get("max_seq_length") or DEFAULT_MAX_LENGTH)
    else:
        positions = load_config(model_dir).max_tokens if (Path(model_dir) / "config.json").is_file() else 0
        max_length = positions if positions > LONG_INPUT_MODEL else DEFAULT_MAX_LENGTH
    return declared_pooling(model_dir) or "mean", max_length


def model_normalizes(model_dir: str | os.PathLike) -> bool:
    """Whether the directory's sentence-transformers modules end in Normalize (unit-length vectors)."""
    path = Path(model_dir) / "modules.json"
    if not path.is_file():
        return False
    modules = _read(path)
    return isinstance(modules, list) and any(str(m.get("type", "")).endswith("Normalize")
                                             for m in modules if isinstance(m, dict))


def write_sentence_transformers_files(model_dir: str | os.PathLike, pooling: str, max_length: int, width: int,
                                      normalize: bool = False, prompts: dict[str, str] | None = None,
                                      matryoshka_dims: tuple[int, ...] | list[int] = ()) -> None:
    """Beside an HF encoder directory, the files that make it a sentence-transformers model:
    Transformer -> Pooling (`pooling`) [-> Normalize], the pooling `model_pooling` reads back;
    config_sentence_transformers.json holds `prompts` and, when trained, the Matryoshka widths
    (`matryoshka_dims`, bertkit's own key: sentence-transformers reads only `truncate_dim`)."""
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
               {"similarity_fn_name": "cosine", "prompts": dict(prompts or {}), "default_prompt_name": None,
                **({"matryoshka_dims": sorted(matryoshka_dims, reverse=True)} if matryoshka_dims else {})})


def model_st_config(model_dir: str | os.PathLike) -> dict:
    """The directory's config_sentence_transformers.json ({} without one): prompts,
    default_prompt_name, matryoshka_dims."""
    path = Path(model_dir) / "config_sentence_transformers.json"
    config = _read(path) if path.is_file() else {}
    if not isinstance(config, dict):
        raise UserError("expected a JSON object", path)
    return config


def pooling_includes_prompt(model_dir: str | os.PathLike) -> bool:
    """Whether the Pooling module pools a prompt's tokens too (sentence-transformers'
    `include_prompt`, true unless its config says false)."""
    model_dir = Path(model_dir)
    modules = model_dir / "modules.json"
    for module in (_read(modules) if modules.is_file() else []):
        if str(module.get("type", "")).endswith("Pooling"):
            path = model_dir / module.get("path", "") / "config.json"
            return _read(path).get("include_prompt", True) is not False
    return True
