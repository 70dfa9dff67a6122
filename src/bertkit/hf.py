"""Hugging Face model directories: our only checkpoint format, and the only place HF names live.

A model directory is `config.json` + `model.safetensors` (HF key names) + vocabulary files.
This module holds everything between our names and HF's:
- config.json <-> `BertConfig` (HF's `model_type`, `is_decoder`, `id2label` string keys);
- the key table between our module names (`encoder.layers.3.qkv`, `output`, `mlm`) and HF's
  (`bert.encoder.layer.3.attention.self.query`, `classifier` / `qa_outputs`, `cls.predictions`);
- what a directory holds (weight names and shapes, which heads), read without loading tensors.

Loading is strict: a key we cannot place, a parameter we cannot find, or a shape that differs
raises a `UserError` naming them. The one leniency is the one fine-tuning needs: a task head
absent from the checkpoint (a classifier on a pretrained encoder) starts from BERT's
initialisation, and the heads of other tasks in the file are skipped; `load_report` on the model
lists both, in HF's key names. `pytorch_model.bin` files are read with
`torch.load(weights_only=True)`, which unpickles only tensors and plain containers.

torch is imported inside functions, so `bertkit info` reads a directory without it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.config import BertConfig
from bertkit.errors import UserError

if TYPE_CHECKING:
    from torch import Tensor, nn

WEIGHTS = "model.safetensors"
PICKLED_WEIGHTS = "pytorch_model.bin"

# ---- config.json ----
_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def config_to_dict(config: BertConfig) -> dict:
    """config.json's content in HF's layout (transformers' BertConfig reads every field)."""
    d = dataclasses.asdict(config)
    d["model_type"] = "bert"
    d["position_embedding_type"] = "absolute"
    d["is_decoder"] = config.attention == "causal"  # transformers builds the same causal model
    if config.id2label is not None:
        d["id2label"] = {str(i): name for i, name in config.id2label.items()}
        d["label2id"] = {name: i for i, name in config.id2label.items()}
    else:
        del d["id2label"]
    return d


def config_from_dict(d: dict) -> BertConfig:
    """A BertConfig from config.json's content; ValueError naming the first field that is wrong."""
    if not isinstance(d, dict):
        raise ValueError(f"expected a JSON object of config fields, found a {type(d).__name__}")
    if d.get("model_type", "bert") != "bert":
        raise ValueError(f"model_type {d['model_type']!r} is not a BERT model")
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {d['position_embedding_type']!r} unsupported")
    missing = [f for f in _SHAPE_FIELDS if f not in d]
    if missing:
        raise ValueError(f"no {missing[0]} field (a BERT config.json names {', '.join(_SHAPE_FIELDS)})")
    names = {f.name for f in dataclasses.fields(BertConfig)}
    kwargs = {k: v for k, v in d.items() if k in names}
    if "attention" not in d and d.get("is_decoder"):
        kwargs["attention"] = "causal"
    labels = kwargs.get("id2label")
    if labels is not None:
        if not isinstance(labels, dict) or not all(str(i).isdigit() for i in labels):
            raise ValueError("id2label must map label ids to names")
        kwargs["id2label"] = {int(i): str(n) for i, n in labels.items()}
    elif "num_labels" in d:
        if not isinstance(d["num_labels"], int) or d["num_labels"] < 1:
            raise ValueError(f"num_labels must be a positive integer, not {d['num_labels']!r}")
        kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(d["num_labels"])}
    return BertConfig(**kwargs)


def load_config(path: str | Path) -> BertConfig:
    """The BertConfig of a model directory (or of a config.json file)."""
    path = Path(path)
    if not path.exists():
        raise UserError("no such model directory", path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise UserError("no config.json: not a model directory", path.parent)
    try:
        return config_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"not valid JSON ({e})", path) from None
    except (TypeError, ValueError) as e:
        raise UserError(f"bad model config: {e}", path) from None


# ---- the key table ----
# Ours -> HF, relative to the encoder; "{}" is a layer index. A tuple means our one tensor is
# the concatenation (along dim 0) of HF's tensors: the fused QKV projection.
ENCODER_KEYS: dict[str, str | tuple[str, ...]] = {
    "embeddings.word.{p}": "embeddings.word_embeddings.{p}",
    "embeddings.position.{p}": "embeddings.position_embeddings.{p}",
    "embeddings.segment.{p}": "embeddings.token_type_embeddings.{p}",
    "embeddings.norm.{p}": "embeddings.LayerNorm.{p}",
    "layers.{}.qkv.{p}": tuple(f"encoder.layer.{{}}.attention.self.{n}.{{p}}" for n in ("query", "key", "value")),
    "layers.{}.attn_out.{p}": "encoder.layer.{}.attention.output.dense.{p}",
    "layers.{}.attn_norm.{p}": "encoder.layer.{}.attention.output.LayerNorm.{p}",
    "layers.{}.ffn_in.{p}": "encoder.layer.{}.intermediate.dense.{p}",
    "layers.{}.ffn_out.{p}": "encoder.layer.{}.output.dense.{p}",
    "layers.{}.ffn_norm.{p}": "encoder.layer.{}.output.LayerNorm.{p}",
    "pooler.{p}": "pooler.dense.{p}",
}
# A head's own parameters; "{output}" is the head's one output layer, named by task in HF.
HEAD_KEYS: dict[str, str] = {
    "mlm.dense.{p}": "cls.predictions.transform.dense.{p}",
    "mlm.norm.{p}": "cls.predictions.transform.LayerNorm.{p}",
    "mlm.bias": "cls.predictions.bias",
    "nsp.{p}": "cls.seq_relationship.{p}",
    "output.{p}": "{output}.{p}",
}
OUTPUT_LAYER = {"BertForQuestionAnswering": "qa_outputs"}  # every other head: "classifier"
ENCODER_PREFIX = ("encoder.", "bert.")  # ours, HF's: where a head keeps its encoder
_TIED = "mlm.word_embeddings.weight"  # the decoder, tied to the word embeddings
_VOCAB_ROWS = ("embeddings.word.weight", "mlm.bias")  # padded to a multiple of 64 inside the model
# HF keys that carry no information of their own: buffers and tied copies.
_REDUNDANT = re.compile(r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$")
_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
_HEAD_MARKS = (("cls.predictions.", "masked-LM"), ("cls.seq_relationship.", "next-sentence"),
               ("pooler.dense.", "pooler"), ("classifier.", "classifier"), ("qa_outputs.", "question-answering"))


def _to_regex(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(r"\{\}", r"(\d+)").replace(r"\{p\}", r"(weight|bias)")
    return re.compile(pattern + "$")


_ENCODER_TABLE = [(_to_regex(ours), ours, hf) for ours, hf in ENCODER_KEYS.items()]
_HEAD_TABLE = [(_to_regex(ours), ours, hf) for ours, hf in HEAD_KEYS.items()]


def _output_layer(model) -> str:
    return next((OUTPUT_LAYER[c.__name__] for c in type(model).__mro__ if c.__name__ in OUTPUT_LAYER), "classifier")


def hf_names(model, our_name: str) -> tuple[tuple[str, ...], bool]:
    """HF key(s) for one of `model`'s parameter names, and whether it belongs to the encoder."""
    ours, theirs = ENCODER_PREFIX
    in_head = our_name.startswith(ours)
    base = our_name[len(ours):] if in_head else our_name
    for table, encoder in ((_ENCODER_TABLE, True), (_HEAD_TABLE, False)):
        m = next(((regex, template, hf) for regex, template, hf in table
                  if regex.match(base if encoder else our_name)), None)
        if m is None:
            continue
        regex, template, hf = m
        groups = list(regex.match(base if encoder else our_name).groups())
        layer = groups.pop(0) if "{}" in template else None
        p = groups[0] if groups else None
        names = hf if isinstance(hf, tuple) else (hf,)
        names = tuple(n.replace("{}", str(layer)).replace("{p}", str(p)).replace("{output}", _output_layer(model))
                      for n in names)
        prefix = theirs if encoder and in_head else ""
        return tuple(prefix + n for n in names), encoder
    raise KeyError(our_name)


def to_hf_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Our state dict in HF's names and shapes (fused QKV split, vocabulary padding dropped)."""
    vocab = model.config.vocab_size
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(_TIED):
            continue
        keys, _ = hf_names(model, name)
        if name.endswith(_VOCAB_ROWS):
            tensor = tensor[:vocab]
        for key, part in zip(keys, tensor.chunk(len(keys), dim=0)):
            out[key] = part.detach().to("cpu").contiguous().clone()
    return out


# ---- what a directory holds ----
def read_state_dict(model_dir: Path) -> dict[str, Tensor]:
    st, binary = model_dir / WEIGHTS, model_dir / PICKLED_WEIGHTS
    if st.exists():
        from safetensors.torch import load_file

        try:
            return load_file(st)
        except Exception as e:  # safetensors raises several types for a corrupt file
            raise UserError(f"cannot read weights: {_first_line(e)}", st) from None
    if binary.exists():
        return _read_pickled(binary)
    raise UserError(f"no {WEIGHTS} or {PICKLED_WEIGHTS}", model_dir)


def _read_pickled(path: Path) -> dict[str, Tensor]:
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols would add lines to the one-line error
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError("cannot read weights safely: the file holds pickled Python objects besides tensors, "
                        "which could run code, so it is not loaded; save a checkpoint you trust as "
                        "model.safetensors where it was made (transformers' save_pretrained writes one)",
                        path) from None
    except Exception as e:
        raise UserError(f"cannot read weights: {_first_line(e)}", path) from None


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def weight_shapes(model_dir: str | Path) -> dict[str, list[int]]:
    """HF key -> shape for every tensor of a model directory; safetensors needs no torch here."""
    model_dir = Path(model_dir)
    weights = model_dir / WEIGHTS
    if not weights.exists():
        return {k: list(v.shape) for k, v in read_state_dict(model_dir).items()}
    from safetensors import safe_open

    try:
        with safe_open(str(weights), "np") as f:  # "np": reading names and shapes needs no torch
            return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - safe_open is no dict
    except Exception as e:  # safetensors raises several types for a corrupt file
        raise UserError(f"cannot read weights: {_first_line(e)}", weights) from None


def heads_in(keys) -> list[str]:
    """The heads whose weights appear among HF keys: masked-LM, next-sentence, pooler, ..."""
    keys = list(keys)
    return [name for mark, name in _HEAD_MARKS
            if any(k.startswith(mark) or (mark == "pooler.dense." and mark in k) for k in keys)]


def parameter_count(shapes: dict[str, list[int]]) -> int:
    """Parameters of a directory's tensors, without buffers and the tied MLM decoder's copies."""
    total = 0
    for key, shape in shapes.items():
        if _REDUNDANT.search(key):
            continue
        n = 1
        for s in shape:
            n *= s
        total += n
    return total


# ---- loading ----
def _normalise_keys(state: dict[str, Tensor], want_prefix: bool) -> dict[str, Tensor]:
    """Legacy LayerNorm names, and the "bert." prefix added or dropped to suit the target."""
    prefix = ENCODER_PREFIX[1]
    out = {}
    for key, t in state.items():
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        if _REDUNDANT.search(key):
            continue
        is_head = key.startswith(_HEAD_PREFIXES)
        if want_prefix and not is_head and not key.startswith(prefix):
            key = prefix + key
        elif not want_prefix and key.startswith(prefix):
            key = key[len(prefix):]
        out[key] = t
    return out


def _listing(keys: list[str], most: int = 4) -> str:
    """A few names and a count: a message stays one readable line however many keys differ."""
    shown = ", ".join(keys[:most])
    return f"{shown} and {len(keys) - most} more" if len(keys) > most else shown


def _matched(model, state, same_architecture: bool):
    """(tensors to copy by our name, HF keys used, HF keys missing, shape problems, initialised)."""
    import torch

    vocab, padded = model.config.vocab_size, model.config.padded_vocab_size
    new, used, missing, shapes, initialized = {}, set(), [], [], []
    for name, target in model.state_dict().items():
        if name.endswith(_TIED):
            continue
        keys, encoder = hf_names(model, name)
        if not all(k in state for k in keys):
            # A head (or a pooler) the checkpoint never had starts from BERT's initialisation.
            if not same_architecture and (not encoder or ".pooler." in f".{name}"):
                initialized.extend(keys)
            else:
                missing.extend(k for k in keys if k not in state)
            continue
        tensor = torch.cat([state[k] for k in keys], dim=0) if len(keys) > 1 else state[keys[0]]
        used.update(keys)
        if name.endswith(_VOCAB_ROWS) and tensor.shape[0] == vocab:
            pad = torch.zeros((padded - vocab, *tensor.shape[1:]), dtype=tensor.dtype)
            tensor = torch.cat([tensor, pad], dim=0)
        if tensor.shape != target.shape:
            shapes.append(f"{'/'.join(keys)} {tuple(tensor.shape)} vs expected {tuple(target.shape)}")
            continue
        new[name] = tensor
    return new, used, missing, shapes, initialized


def load_hf_state_dict(model: nn.Module, state: dict[str, Tensor], same_architecture: bool,
                       source: object = "checkpoint") -> dict[str, list[str]]:
    """Copy an HF state dict into `model`; returns {"initialized": [...], "skipped": [...]} (HF keys)."""
    import torch

    state = _normalise_keys(state, want_prefix=any(k.startswith(ENCODER_PREFIX[0]) for k in model.state_dict()))
    new, used, missing, shapes, initialized = _matched(model, state, same_architecture)
    leftover = [k for k in state if k not in used]
    skipped = [k for k in leftover if k.startswith(_HEAD_PREFIXES) or ("pooler." in k and not same_architecture)]
    unexpected = [k for k in leftover if k not in skipped]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing keys: {_listing(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys: {_listing(unexpected)}")
    if shapes:
        problems.append(f"mis-shaped keys: {_listing(shapes, 2)}")
    if problems:
        raise UserError(f"weights do not fit {type(model).__name__}: " + " | ".join(problems), source)
    own = model.state_dict()
    with torch.no_grad():
        for name, tensor in new.items():
            own[name].copy_(tensor)
    return {"initialized": initialized, "skipped": skipped}


class PretrainedMixin:
    """`from_pretrained` / `save_pretrained` on Hugging Face model directories."""

    @classmethod
    def from_pretrained(cls, path, **config_changes):
        path = Path(path)
        if not path.is_dir():
            raise UserError("no such model directory", path)
        config = load_config(path)
        if config_changes:
            try:
                config = config.replace(**config_changes)
            except (TypeError, ValueError) as e:
                raise UserError(f"bad model config: {e}", path) from None
        architectures = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or []
        model = cls(config)
        model.load_report = load_hf_state_dict(model, read_state_dict(path), cls.__name__ in architectures, path)
        return model

    def save_pretrained(self, path, tokenizer=None) -> None:
        """Write config.json and model.safetensors (and the tokenizer's files when given),
        each atomically; transformers' class of the same name loads the folder strictly."""
        from safetensors.torch import save_file

        from bertkit.io import atomic_path, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with atomic_path(path / WEIGHTS) as tmp:
            save_file(to_hf_state_dict(self), str(tmp), metadata={"format": "pt"})
        write_json(path / "config.json", {**config_to_dict(self.config), "architectures": [type(self).__name__]})
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
