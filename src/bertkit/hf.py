"""Hugging Face model directories: our only checkpoint format, and the only place HF names are used.

A model directory is `config.json` + `model.safetensors` (HF key names) + tokenizer files, in the
layout of one family (`bertkit.families.FAMILIES`, by config.json's `model_type`: BERT, ELECTRA,
RoBERTa, XLM-R, DistilBERT, ALBERT, DeBERTa-v2, ModernBERT). This module applies a family's tables:
- config.json <-> `BertConfig` (the family's fields, then what every family shares: `model_type`,
  `is_decoder`, `id2label` string keys, `problem_type`, `architectures`);
- our parameter names (`encoder.layers.3.qkv`, `output`, `mlm`, `summary`, `rtd`) <-> the family's
  HF keys (`bert.encoder.layer.3.attention.self.query`, `classifier` / `qa_outputs`, ...);
- what a directory holds (which heads), read without loading tensors (`bertkit.weights` reads them).

A model is read in its directory's family and written in its own (`save_family`): its config's
`model_type`, except that ELECTRA's classes (`hf_layout = "electra"`) of a BERT and any BERT with an
embedding projection are written in ELECTRA's layout (a descendant's discriminator and generator
in its own family's: DeBERTa-v3's as `deberta.` + `mask_predictions`). A task head read from
ELECTRA's layout (sequence, token, QA) is written back in it, as transformers' Electra class of
that head; an ELECTRA encoder with a pooler (ELECTRA has none; ours starts new) is written as BERT
unless a projection forces ELECTRA's layout.

Loading is strict: a key we cannot place, a parameter we cannot find, or a shape that differs
raises a `UserError` naming them. The one leniency is the one fine-tuning needs: a task head
absent from the checkpoint (a classifier on a pretrained encoder) starts from BERT's
initialisation, and the heads of other tasks in the file are skipped; `load_report` on the model
lists both, in HF's key names. A file whose class is a task head of the same kind as the one
loading it (`...ForSequenceClassification` into our sequence classifier) holds trained weights:
its head is read strictly too, so a layout we do not read is refused, never replaced by a new head.

torch is imported inside functions, so `bertkit info` reads a directory without it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.families import FAMILIES, Family, family_of
from bertkit.families.bert import BERT, ELECTRA
from bertkit.families.deberta import RENAMED as DEBERTA_RENAMED
from bertkit.weights import WEIGHTS, read_state_dict
from bertkit.weights import weight_shapes as weight_shapes  # re-exported: what a directory holds

if TYPE_CHECKING:
    from torch import Tensor, nn

# ---- config.json ----
_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def config_to_dict(config: BertConfig, model_type: str | None = None) -> dict:
    """config.json's content in the layout of `model_type` (default: the config's own family):
    transformers' config class of that family reads every field."""
    model_type = model_type or config.model_type
    d = {"model_type": model_type, **family_of(model_type).write_config(config)}
    d["is_decoder"] = config.attention == "causal"  # transformers builds the same causal model
    if config.id2label is not None:
        d["id2label"] = {str(i): name for i, name in config.id2label.items()}
        d["label2id"] = {name: i for i, name in config.id2label.items()}
    if config.problem_type is not None:
        d["problem_type"] = config.problem_type
    return d


def config_from_dict(d: dict) -> BertConfig:
    """A BertConfig from config.json's content; ValueError naming the first field that is wrong."""
    if not isinstance(d, dict):
        raise ValueError(f"expected a JSON object of config fields, found a {type(d).__name__}")
    model_type = d.get("model_type", "bert")
    family = family_of(model_type)
    kwargs = family.read_config(d)
    missing = [f for f in _SHAPE_FIELDS if f not in kwargs]
    if missing:
        raise ValueError(f"no {missing[0]} field (a {model_type} config.json names its model's shape)")
    kwargs["model_type"] = model_type
    if d.get("problem_type") is not None:
        kwargs["problem_type"] = d["problem_type"]
    if "attention" not in kwargs and d.get("is_decoder"):
        kwargs["attention"] = "causal"
    labels = d.get("id2label")
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


# ---- the key tables (each family's, in bertkit.families) ----
_OURS_ENCODER = "encoder."  # where a head keeps its encoder
_TIED = "mlm.word_embeddings.weight"  # the decoder, tied to the word embeddings
_VOCAB_ROWS = ("embeddings.word.weight", "mlm.bias")  # padded to a multiple of 64 inside the model
LAYOUTS = FAMILIES  # the name ELECTRA's code reads them by


def save_family(model) -> Family:
    """The family `model` is written in (see the module docstring)."""
    config, head = model.config, _head_class(model)
    if config.model_type == "electra" and head in TASK_HEADS:
        return ELECTRA
    if config.model_type in ("bert", "electra") and (model.hf_layout == "electra" or config.embedding_size is not None):
        if config.model_type == "bert" and head == "BertForSequenceClassification":
            raise UserError("a BERT sequence classifier (pooler + linear) with an embedding projection has no "
                            "transformers class to be saved as; give its config model_type 'electra' "
                            "(ELECTRA's classifier) or no embedding_size")
        return ELECTRA
    return BERT if config.model_type == "electra" else family_of(config.model_type)


save_layout = save_family


def layout_of(config_json: dict) -> Family:
    """The family of a directory whose config.json `config_from_dict` has accepted."""
    return family_of(config_json.get("model_type", "bert"))


# our head classes (bertkit.heads.HEADS), by name: the names the families' class tables use
HEAD_CLASSES = ("BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
                "BertForTokenClassification", "BertForQuestionAnswering")
TASK_HEADS = HEAD_CLASSES[2:]  # the heads a fine-tuned directory's trained weights are


def _head_class(model) -> str:
    """Our head class `model` is (or derives from): the name families' tables use."""
    return next((c.__name__ for c in type(model).__mro__ if c.__name__ in HEAD_CLASSES), type(model).__name__)


def _lookup(table: dict, name: str) -> tuple[str | tuple[str, ...] | None, str | None, str | None]:
    """(the table's entry for one of our names, its layer index, its parameter): two dict
    lookups, by the name with its layer index as "{}" and then with its parameter as "{p}"."""
    layer = re.search(r"\.(\d+)\.", name)
    template = re.sub(r"\.\d+\.", ".{}.", name, count=1)
    if template in table:  # a parameter named in full, such as mlm.bias
        return table[template], layer and layer.group(1), None
    stem, _, p = template.rpartition(".")
    return table.get(stem + ".{p}"), layer and layer.group(1), p


def hf_names(model, our_name: str, family: Family | None = None) -> tuple[tuple[str, ...], bool]:
    """HF key(s) for one of `model`'s parameter names in `family` (the one it is saved in unless
    given), and whether it belongs to the encoder."""
    family = family or save_family(model)
    in_head = our_name.startswith(_OURS_ENCODER)
    output = family.output_layer(_head_class(model))
    for table, encoder, name in ((family.encoder_keys, True, our_name.removeprefix(_OURS_ENCODER)),
                                 (family.head_keys, False, our_name)):
        hf, layer, p = _lookup(table, name)
        if hf is None:
            continue
        names = tuple(n.replace("{}", str(layer)).replace("{p}", str(p)).replace("{output}", output)
                      for n in (hf if isinstance(hf, tuple) else (hf,)))
        prefix = family.prefix if encoder and in_head else ""
        return tuple(prefix + n for n in names), encoder
    raise KeyError(our_name)


def to_hf_state_dict(model: nn.Module, leave_out: tuple[str, ...] = ()) -> dict[str, Tensor]:
    """Our state dict in HF's names and shapes (fused QKV split, vocabulary padding dropped), in
    the family `model` is saved in; parameters whose names start with `leave_out` are left out."""
    vocab, family = model.config.vocab_size, save_family(model)
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(_TIED) or (leave_out and name.startswith(leave_out)):
            continue
        keys, _ = hf_names(model, name, family)
        if name.endswith(_VOCAB_ROWS):
            tensor = tensor[:vocab]
        for key, part in zip(keys, tensor.chunk(len(keys), dim=0)):
            out[key] = part.detach().to("cpu").contiguous().clone()
    return out


# ---- what a directory holds ----
def heads_in(keys, model_type: str = "bert") -> list[str]:
    """The heads whose weights appear among HF keys of a `model_type` directory: masked-LM,
    next-sentence, pooler, classifier, ..."""
    keys = list(keys)
    marks = family_of(model_type).marks if model_type in FAMILIES else FAMILIES["bert"].marks
    found = [name for mark, name in marks if any(k.startswith(mark) for k in keys)]
    summary = "pooler." if model_type == "deberta-v2" else None  # DeBERTa's classifier layer, not a pooler
    if any(".pooler." in f".{k}" and not (summary and k.startswith(summary)) for k in keys):
        found.append("pooler")
    return list(dict.fromkeys(found))


def our_architectures(config_json: dict) -> list[str]:
    """config.json's `architectures` as our class names (RobertaForMaskedLM -> BertForMaskedLM);
    a name no family maps is kept as it is."""
    family = FAMILIES.get(config_json.get("model_type", "bert"), BERT)
    theirs = {hf: ours for ours, hf in family.classes.items()}
    return [theirs.get(name, name) for name in config_json.get("architectures") or []]


def parameter_count(shapes: dict[str, list[int]], model_type: str = "bert") -> int:
    """Parameters of a directory's tensors, without buffers and the tied MLM decoder's copies."""
    family = FAMILIES.get(model_type, FAMILIES["bert"])
    total = 0
    for key, shape in shapes.items():
        if family.is_redundant(key):
            continue
        n = 1
        for s in shape:
            n *= s
        total += n
    return total


# ---- loading ----
# keys older files (or other heads' layouts) use for what the tables call otherwise
_RENAMED = {**DEBERTA_RENAMED}


def _normalise_keys(state: dict[str, Tensor], want_prefix: bool, family: Family) -> dict[str, Tensor]:
    """Legacy LayerNorm names and renamed heads, without redundant copies, and the family's
    prefix ("bert.", "roberta.", ...) added or dropped to suit the target."""
    out = {}
    prefix, heads = family.prefix, family.head_prefixes
    for key, t in state.items():
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        for old, new in _RENAMED.items():
            if key.startswith(old):
                key = new + key[len(old):]
        if family.is_redundant(key):
            continue
        is_head = key.startswith(heads)
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


def _matched(model, state, same_architecture: bool, family: Family, shared: tuple[str, ...]):
    """(tensors to copy by our name, HF keys used, HF keys missing, shape problems, initialised)."""
    import torch

    vocab, padded = model.config.vocab_size, model.config.padded_vocab_size
    new, used, missing, shapes, initialized = {}, set(), [], [], []
    for name, target in model.state_dict().items():
        if name.endswith(_TIED) or (shared and name.startswith(shared)):
            continue
        keys, encoder = hf_names(model, name, family)
        if not all(k in state for k in keys):
            # A head (or a pooler) the checkpoint never had starts from BERT's initialisation.
            pooler = ".pooler." in f".{name}"
            if (not same_architecture and (not encoder or pooler)) or (pooler and not family.pooler):
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
                       source: object = "checkpoint", layout: Family | None = None,
                       shared: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Copy an HF state dict in family `layout` (BERT's unless given) into `model`; returns
    {"initialized": [...], "skipped": [...]} (HF keys). Parameters whose names start with `shared`
    are not in the file: another model's, saved beside it (`save_pretrained`'s `leave_out`), fill them."""
    import torch

    family = layout or BERT
    want_prefix = any(k.startswith(_OURS_ENCODER) for k in model.state_dict())
    state = _normalise_keys(state, want_prefix, family)
    new, used, missing, shapes, initialized = _matched(model, state, same_architecture, family, shared)
    leftover = [k for k in state if k not in used]
    skipped = [k for k in leftover if k.startswith(family.head_prefixes) or ("pooler" in k and not same_architecture)]
    unexpected = [k for k in leftover if k not in skipped]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing keys: {_listing(missing)}")
        if same_architecture and skipped:  # its own head, in a layout we do not read
            problems.append(f"its head's keys are not a layout bertkit reads: {_listing(skipped)}")
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


def _holds_head(model, family: Family, architectures: list[str]) -> bool:
    """Whether a file of class `architectures` holds `model`'s own head, to be read strictly: the
    family's class for it, or any class of the same task (`...ForSequenceClassification`), whose
    trained weights are never to be replaced by a new head."""
    head = _head_class(model)
    if family.hf_class(type(model).__name__) in architectures:
        return True
    task = head.removeprefix("Bert")
    return head in TASK_HEADS and any(name.endswith(task) for name in architectures)


class PretrainedMixin:
    """`from_pretrained` / `save_pretrained` on Hugging Face model directories."""

    hf_layout = "bert"  # ELECTRA's classes say "electra": written in ELECTRA's layout (`save_family`)

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
        family = layout_of(saved)
        model = cls(config)
        same_architecture = _holds_head(model, family, saved.get("architectures") or [])
        model.load_report = load_hf_state_dict(model, read_state_dict(path), same_architecture, path, family)
        return model

    def save_pretrained(self, path, tokenizer=None, leave_out: tuple[str, ...] = ()) -> None:
        """Write config.json and model.safetensors (and the tokenizer's files when given),
        each atomically, in the model's family (`save_family`); transformers' class of the same
        role in that family loads the folder strictly. `leave_out`: parameters not
        written, by prefix of our names (shared with a model saved beside it)."""
        from safetensors.torch import save_file

        from bertkit.io import atomic_path, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        family = save_family(self)
        with atomic_path(path / WEIGHTS) as tmp:
            save_file(to_hf_state_dict(self, leave_out), str(tmp), metadata={"format": "pt"})
        write_json(path / "config.json", {**config_to_dict(self.config, family.name),
                                          "architectures": [family.hf_class(_head_class(self))]})
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
