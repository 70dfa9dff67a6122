"""Hugging Face model directories: our only checkpoint format.

A model directory is `config.json` + `model.safetensors` (HF key names) + vocabulary files.
This module holds the one table between our module names and HF's keys; nowhere else in the
code base do HF names appear. Loading is strict: a key we cannot place, a parameter we cannot
find, or a shape that differs raises a `UserError` naming them. The one leniency is the one
fine-tuning needs: a task head absent from the checkpoint (a classifier on a pretrained
encoder) starts from BERT's initialisation, and the heads of other tasks in the file are
skipped; `load_report` on the model records both.

`pytorch_model.bin` files are read with `torch.load(weights_only=True)`, which unpickles only
tensors and plain containers, never arbitrary objects.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import Tensor

from bertkit.errors import UserError

WEIGHTS = "model.safetensors"

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
HEAD_KEYS: dict[str, str] = {
    "mlm.dense.{p}": "cls.predictions.transform.dense.{p}",
    "mlm.norm.{p}": "cls.predictions.transform.LayerNorm.{p}",
    "mlm.bias": "cls.predictions.bias",
    "nsp.{p}": "cls.seq_relationship.{p}",
    "classifier.{p}": "classifier.{p}",
    "qa_outputs.{p}": "qa_outputs.{p}",
}
# HF keys that carry no information of their own: buffers and tied copies.
_REDUNDANT = re.compile(r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$")
_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
_TIED = "mlm.word_embeddings.weight"  # the decoder, tied to embeddings.word.weight


def _to_regex(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(r"\{\}", r"(\d+)").replace(r"\{p\}", r"(weight|bias)")
    return re.compile(pattern + "$")


_TABLE = [(_to_regex(ours), ours, hf) for ours, hf in ENCODER_KEYS.items()]
_HEAD_TABLE = [(_to_regex(ours), ours, hf) for ours, hf in HEAD_KEYS.items()]


def hf_names(our_name: str) -> tuple[tuple[str, ...], bool]:
    """HF key(s) for one of our parameter names, and whether it belongs to the encoder."""
    base = our_name[5:] if our_name.startswith("bert.") else our_name
    for table, encoder in ((_TABLE, True), (_HEAD_TABLE, False)):
        for regex, ours, hf in table:
            m = regex.match(base if encoder else our_name)
            if not m:
                continue
            groups = list(m.groups())
            layer = groups.pop(0) if "{}" in ours else None
            p = groups[0] if groups else None
            names = hf if isinstance(hf, tuple) else (hf,)
            names = tuple(n.replace("{}", str(layer)).replace("{p}", str(p)) for n in names)
            prefix = "bert." if encoder and our_name.startswith("bert.") else ""
            return tuple(prefix + n for n in names), encoder
    raise KeyError(our_name)


def to_hf_state_dict(model: torch.nn.Module) -> dict[str, Tensor]:
    """Our state dict in HF's names and shapes (fused QKV split, vocabulary padding dropped)."""
    vocab = model.config.vocab_size
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(_TIED):
            continue
        keys, _ = hf_names(name)
        if name.endswith(("embeddings.word.weight", "mlm.bias")):
            tensor = tensor[:vocab]
        for key, part in zip(keys, tensor.chunk(len(keys), dim=0)):
            out[key] = part.detach().to("cpu").contiguous().clone()
    return out


def read_state_dict(model_dir: Path) -> dict[str, Tensor]:
    st, binary = model_dir / WEIGHTS, model_dir / "pytorch_model.bin"
    if st.exists():
        from safetensors.torch import load_file

        try:
            return load_file(st)
        except Exception as e:  # safetensors raises several types for a corrupt file
            raise UserError(f"cannot read weights: {e}", st) from None
    if binary.exists():
        try:
            return torch.load(binary, map_location="cpu", weights_only=True)
        except Exception as e:
            raise UserError(f"cannot read weights safely: {e}", binary) from None
    raise UserError(f"no {WEIGHTS} or pytorch_model.bin", model_dir)


def _normalise_keys(state: dict[str, Tensor], want_prefix: bool) -> dict[str, Tensor]:
    """Legacy LayerNorm names, and the "bert." prefix added or dropped to suit the target."""
    out = {}
    for key, t in state.items():
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        if _REDUNDANT.search(key):
            continue
        is_head = key.startswith(_HEAD_PREFIXES)
        if want_prefix and not is_head and not key.startswith("bert."):
            key = "bert." + key
        elif not want_prefix and key.startswith("bert."):
            key = key[5:]
        out[key] = t
    return out


def load_hf_state_dict(model: torch.nn.Module, state: dict[str, Tensor], same_architecture: bool,
                       source: object = "checkpoint") -> dict[str, list[str]]:
    """Copy an HF state dict into `model`; returns {"initialized": [...], "skipped": [...]}."""
    own = model.state_dict()
    want_prefix = any(k.startswith("bert.") for k in own)
    state = _normalise_keys(state, want_prefix)
    vocab, padded = model.config.vocab_size, model.config.padded_vocab_size
    used: set[str] = set()
    missing, shapes, initialized = [], [], []
    new: dict[str, Tensor] = {}
    for name, target in own.items():
        if name.endswith(_TIED):
            continue
        keys, encoder = hf_names(name)
        if not all(k in state for k in keys):
            absent = [k for k in keys if k not in state]
            # A head (or a pooler) the checkpoint never had starts from BERT's initialisation.
            if not same_architecture and (not encoder or ".pooler." in f".{name}"):
                initialized.append(name)
            else:
                missing.extend(absent)
            continue
        tensor = torch.cat([state[k] for k in keys], dim=0) if len(keys) > 1 else state[keys[0]]
        used.update(keys)
        if name.endswith(("embeddings.word.weight", "mlm.bias")) and tensor.shape[0] == vocab:
            pad = torch.zeros((padded - vocab, *tensor.shape[1:]), dtype=tensor.dtype)
            tensor = torch.cat([tensor, pad], dim=0)
        if tensor.shape != target.shape:
            shapes.append(f"{'/'.join(keys)} {tuple(tensor.shape)} vs expected {tuple(target.shape)}")
            continue
        new[name] = tensor
    leftover = [k for k in state if k not in used]
    skipped = [k for k in leftover if k.startswith(_HEAD_PREFIXES) or ("pooler." in k and not same_architecture)]
    unexpected = [k for k in leftover if k not in skipped]
    problems = []
    if missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    if shapes:
        problems.append(f"mis-shaped keys: {'; '.join(shapes)}")
    if problems:
        raise UserError(f"weights do not fit {type(model).__name__}: " + " | ".join(problems), source)
    with torch.no_grad():
        for name, tensor in new.items():
            own[name].copy_(tensor)
    return {"initialized": initialized, "skipped": skipped}


class PretrainedMixin:
    """`from_pretrained` / `save_pretrained` on Hugging Face model directories."""

    @classmethod
    def from_pretrained(cls, path, **config_changes):
        from bertkit.config import BertConfig

        path = Path(path)
        if not path.is_dir():
            raise UserError("no such model directory", path)
        config = BertConfig.load(path)
        if config_changes:
            config = config.replace(**config_changes)
        architectures = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or []
        model = cls(config)
        report = load_hf_state_dict(model, read_state_dict(path), cls.__name__ in architectures, path)
        model.load_report = report
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
        config = self.config.to_dict()
        config["architectures"] = [type(self).__name__]
        write_json(path / "config.json", config)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
