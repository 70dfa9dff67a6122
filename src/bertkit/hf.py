"""Hugging Face model directories: our only checkpoint format, and the only place HF names live.

A model directory is `config.json` + `model.safetensors` (HF key names) + vocabulary files, in
BERT's layout or ELECTRA's (`LAYOUTS`: ElectraForMaskedLM, the generator; ElectraForPreTraining,
the discriminator). This module holds everything between our names and HF's:
- config.json <-> `BertConfig` (HF's `model_type`, `is_decoder`, `id2label` string keys; ELECTRA's
  `embedding_size`);
- the key table between our module names (`encoder.layers.3.qkv`, `output`, `mlm`, `rtd`) and HF's
  (`bert.encoder.layer.3.attention.self.query`, `classifier` / `qa_outputs`, `cls.predictions`;
  `electra.` for the encoder and `generator_predictions`, `discriminator_predictions` for the heads);
- what a directory holds (which heads), read without loading tensors (`bertkit.weights` reads them).

A model is read in its directory's layout and written in its own (`save_layout`): BERT's, but
ELECTRA's for our `ElectraForPreTraining` and for any model with an embedding projection, which
BERT's layout has no place for. ELECTRA's layout has no pooler: a bertkit model that has one (read
from an ELECTRA directory, it starts new) writes it under BERT's name, which transformers' Electra
classes would report as unexpected.

Loading is strict: a key we cannot place, a parameter we cannot find, or a shape that differs
raises a `UserError` naming them. The one leniency is the one fine-tuning needs: a task head
absent from the checkpoint (a classifier on a pretrained encoder) starts from BERT's
initialisation, and the heads of other tasks in the file are skipped; `load_report` on the model
lists both, in HF's key names.

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
from bertkit.weights import WEIGHTS, read_state_dict
from bertkit.weights import weight_shapes as weight_shapes  # re-exported: what a directory holds

if TYPE_CHECKING:
    from torch import Tensor, nn

# ---- config.json ----
_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_ELECTRA_EMBEDDING_SIZE = 128  # transformers' ElectraConfig default, for a config.json that names none


def config_to_dict(config: BertConfig, model_type: str = "bert") -> dict:
    """config.json's content in HF's layout for `model_type` "bert" or "electra" (transformers'
    BertConfig or ElectraConfig reads every field)."""
    d = dataclasses.asdict(config)
    d["model_type"] = model_type
    d["position_embedding_type"] = "absolute"
    d["is_decoder"] = config.attention == "causal"  # transformers builds the same causal model
    if model_type == "electra":  # always written: ElectraConfig's own default is not the hidden size
        d["embedding_size"] = config.embedding_width
    elif config.embedding_size is None:
        del d["embedding_size"]
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
    model_type = d.get("model_type", "bert")
    if model_type not in LAYOUTS:
        raise ValueError(f"model_type {model_type!r} is not a BERT or ELECTRA model")
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {d['position_embedding_type']!r} unsupported")
    missing = [f for f in _SHAPE_FIELDS if f not in d]
    if missing:
        raise ValueError(f"no {missing[0]} field (a BERT config.json names {', '.join(_SHAPE_FIELDS)})")
    names = {f.name for f in dataclasses.fields(BertConfig)}
    kwargs = {k: v for k, v in d.items() if k in names}
    if model_type == "electra":
        kwargs["embedding_size"] = d.get("embedding_size", _ELECTRA_EMBEDDING_SIZE)
    else:  # transformers' BertConfig has no embedding_size: its models have no projection
        kwargs.pop("embedding_size", None)
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
    "embed_proj.{p}": "embeddings_project.{p}",  # ELECTRA's layout only (BERT has no projection)
    "layers.{}.qkv.{p}": tuple(f"encoder.layer.{{}}.attention.self.{n}.{{p}}" for n in ("query", "key", "value")),
    "layers.{}.attn_out.{p}": "encoder.layer.{}.attention.output.dense.{p}",
    "layers.{}.attn_norm.{p}": "encoder.layer.{}.attention.output.LayerNorm.{p}",
    "layers.{}.ffn_in.{p}": "encoder.layer.{}.intermediate.dense.{p}",
    "layers.{}.ffn_out.{p}": "encoder.layer.{}.output.dense.{p}",
    "layers.{}.ffn_norm.{p}": "encoder.layer.{}.output.LayerNorm.{p}",
    "pooler.{p}": "pooler.dense.{p}",
}
# A head's own parameters, per layout; "{output}" is the head's one output layer, named by task in HF.
# The replaced-token detection head has only ELECTRA's names, in either layout.
RTD_KEYS = {"rtd.dense.{p}": "discriminator_predictions.dense.{p}",
            "rtd.prediction.{p}": "discriminator_predictions.dense_prediction.{p}"}
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
    "output.{p}": "{output}.{p}",
    **RTD_KEYS,
}


@dataclasses.dataclass(frozen=True, eq=False)
class Layout:
    """One family of HF classes: config.json's model_type, the prefix of the encoder's keys in a
    head's file, the heads' keys, and HF's class name for each of ours where they differ."""

    model_type: str
    prefix: str
    heads: dict[str, str]
    classes: dict[str, str]
    pooler: bool  # whether its files hold one: in ELECTRA's, ours always starts new

    def hf_class(self, ours: str) -> str:
        return self.classes.get(ours, ours)


LAYOUTS = {
    "bert": Layout("bert", "bert.", HEAD_KEYS, {}, pooler=True),
    "electra": Layout("electra", "electra.", ELECTRA_HEAD_KEYS,
                      {"BertModel": "ElectraModel", "BertForMaskedLM": "ElectraForMaskedLM",
                       "BertForTokenClassification": "ElectraForTokenClassification",
                       "BertForQuestionAnswering": "ElectraForQuestionAnswering"}, pooler=False),
}
OUTPUT_LAYER = {"BertForQuestionAnswering": "qa_outputs"}  # every other head: "classifier"
_OURS_ENCODER = "encoder."  # where a head keeps its encoder
_TIED = "mlm.word_embeddings.weight"  # the decoder, tied to the word embeddings
_VOCAB_ROWS = ("embeddings.word.weight", "mlm.bias")  # padded to a multiple of 64 inside the model
# HF keys that carry no information of their own: buffers and tied copies.
_REDUNDANT = re.compile(r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$|^generator_lm_head\.weight$")
_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "generator_predictions.", "generator_lm_head.",
                  "discriminator_predictions.")
_HEAD_MARKS = (("cls.predictions.", "masked-LM"), ("generator_predictions.", "masked-LM"),
               ("cls.seq_relationship.", "next-sentence"), ("discriminator_predictions.", "replaced-token detection"),
               ("pooler.dense.", "pooler"), ("classifier.", "classifier"), ("qa_outputs.", "question-answering"))


def save_layout(model) -> Layout:
    """The layout `model` is written in: its class's (`hf_layout`), or ELECTRA's when it has an
    embedding projection, which BERT's layout has no place for."""
    return LAYOUTS["electra" if model.config.embedding_size is not None else model.hf_layout]


def layout_of(config_json: dict) -> Layout:
    """The layout of a directory whose config.json `config_from_dict` has accepted."""
    return LAYOUTS[config_json.get("model_type", "bert")]


def _output_layer(model) -> str:
    return next((OUTPUT_LAYER[c.__name__] for c in type(model).__mro__ if c.__name__ in OUTPUT_LAYER), "classifier")


def _lookup(table: dict, name: str) -> tuple[str | tuple[str, ...] | None, str | None, str | None]:
    """(the table's entry for one of our names, its layer index, its parameter): two dict
    lookups, by the name with its layer index as "{}" and then with its parameter as "{p}"."""
    layer = re.search(r"\.(\d+)\.", name)
    template = re.sub(r"\.\d+\.", ".{}.", name, count=1)
    if template in table:  # a parameter named in full, such as mlm.bias
        return table[template], layer and layer.group(1), None
    stem, _, p = template.rpartition(".")
    return table.get(stem + ".{p}"), layer and layer.group(1), p


def hf_names(model, our_name: str, layout: Layout | None = None) -> tuple[tuple[str, ...], bool]:
    """HF key(s) for one of `model`'s parameter names in `layout` (the one it is saved in unless
    given), and whether it belongs to the encoder."""
    layout = layout or save_layout(model)
    in_head = our_name.startswith(_OURS_ENCODER)
    for table, encoder, name in ((ENCODER_KEYS, True, our_name.removeprefix(_OURS_ENCODER)),
                                 (layout.heads, False, our_name)):
        hf, layer, p = _lookup(table, name)
        if hf is None:
            continue
        names = tuple(n.replace("{}", str(layer)).replace("{p}", str(p)).replace("{output}", _output_layer(model))
                      for n in (hf if isinstance(hf, tuple) else (hf,)))
        prefix = layout.prefix if encoder and in_head else ""
        return tuple(prefix + n for n in names), encoder
    raise KeyError(our_name)


def to_hf_state_dict(model: nn.Module, leave_out: tuple[str, ...] = ()) -> dict[str, Tensor]:
    """Our state dict in HF's names and shapes (fused QKV split, vocabulary padding dropped), in
    the layout `model` is saved in; parameters whose names start with `leave_out` are left out."""
    vocab, layout = model.config.vocab_size, save_layout(model)
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(_TIED) or (leave_out and name.startswith(leave_out)):
            continue
        keys, _ = hf_names(model, name, layout)
        if name.endswith(_VOCAB_ROWS):
            tensor = tensor[:vocab]
        for key, part in zip(keys, tensor.chunk(len(keys), dim=0)):
            out[key] = part.detach().to("cpu").contiguous().clone()
    return out


# ---- what a directory holds ----
def heads_in(keys) -> list[str]:
    """The heads whose weights appear among HF keys: masked-LM, next-sentence, pooler, ..."""
    keys = list(keys)
    return list(dict.fromkeys(name for mark, name in _HEAD_MARKS  # BERT's and ELECTRA's MLM heads: one name
                              if any(k.startswith(mark) or (mark == "pooler.dense." and mark in k) for k in keys)))


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
def _normalise_keys(state: dict[str, Tensor], want_prefix: bool, prefix: str) -> dict[str, Tensor]:
    """Legacy LayerNorm names, and the layout's "bert." / "electra." prefix added or dropped to suit
    the target."""
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


def _matched(model, state, same_architecture: bool, layout: Layout, shared: tuple[str, ...]):
    """(tensors to copy by our name, HF keys used, HF keys missing, shape problems, initialised)."""
    import torch

    vocab, padded = model.config.vocab_size, model.config.padded_vocab_size
    new, used, missing, shapes, initialized = {}, set(), [], [], []
    for name, target in model.state_dict().items():
        if name.endswith(_TIED) or (shared and name.startswith(shared)):
            continue
        keys, encoder = hf_names(model, name, layout)
        if not all(k in state for k in keys):
            # A head (or a pooler) the checkpoint never had starts from BERT's initialisation.
            pooler = ".pooler." in f".{name}"
            if (not same_architecture and (not encoder or pooler)) or (pooler and not layout.pooler):
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
                       source: object = "checkpoint", layout: Layout = LAYOUTS["bert"],
                       shared: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Copy an HF state dict in `layout` into `model`; returns {"initialized": [...], "skipped": [...]}
    (HF keys). Parameters whose names start with `shared` are not in the file: another model's,
    saved beside it (`save_pretrained`'s `leave_out`), fill them."""
    import torch

    want_prefix = any(k.startswith(_OURS_ENCODER) for k in model.state_dict())
    state = _normalise_keys(state, want_prefix, layout.prefix)
    new, used, missing, shapes, initialized = _matched(model, state, same_architecture, layout, shared)
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

    hf_layout = "bert"  # the layout `save_pretrained` writes (`save_layout`); ELECTRA's classes say "electra"

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
        saved = json.loads((path / "config.json").read_text(encoding="utf-8"))
        layout = layout_of(saved)
        model = cls(config)
        same_architecture = layout.hf_class(cls.__name__) in (saved.get("architectures") or [])
        model.load_report = load_hf_state_dict(model, read_state_dict(path), same_architecture, path, layout)
        return model

    def save_pretrained(self, path, tokenizer=None, leave_out: tuple[str, ...] = ()) -> None:
        """Write config.json and model.safetensors (and the tokenizer's files when given),
        each atomically, in the model's layout (`save_layout`); transformers' class of the same
        name (ELECTRA's: of the same role) loads the folder strictly. `leave_out`: parameters not
        written, by prefix of our names (shared with a model saved beside it)."""
        from safetensors.torch import save_file

        from bertkit.io import atomic_path, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        layout = save_layout(self)
        with atomic_path(path / WEIGHTS) as tmp:
            save_file(to_hf_state_dict(self, leave_out), str(tmp), metadata={"format": "pt"})
        write_json(path / "config.json", {**config_to_dict(self.config, layout.model_type),
                                          "architectures": [layout.hf_class(type(self).__name__)]})
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
