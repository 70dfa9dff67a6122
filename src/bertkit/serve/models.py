"""What a served model directory is, read before any weights are loaded: its kind and routes.

The kind comes from the heads the weights file holds (`hf.heads_in`), the architecture
config.json names and the task `bertkit finetune` saved beside the model (`finetune.json`,
read by `finetune.registry.saved_settings`). Every kind serves POST /, /tokenize, /decode and
the embedding routes (/embed, /embed_all, /similarity, /v1/embeddings, /embeddings); besides:

| kind | heads | routes |
|---|---|---|
| encoder | none (a bare or sentence-transformers encoder) | - |
| masked-lm | masked-LM (BertForMaskedLM, BertForPreTraining) | /fill-mask |
| classifier | sequence classifier | /predict; /rerank too when it has one output |
| token-classifier | token classifier (NER) | /ner |
| question-answering | span head (SQuAD) | /qa |

Every kind embeds with its encoder, as `bertkit embed` does for a directory of any head, pooled
as its sentence-transformers files say (`st.model_pooling`; mean otherwise).

With `--backend onnx` the directory is a `bertkit export` folder and the kind comes from its
`onnx.json`: an embedding graph serves the embedding routes, a head graph its head's route,
POST /, /tokenize and /decode only (the graph gives the head's logits, not the encoder's vectors).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from bertkit.errors import UserError
from bertkit.long_inputs import Policy

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TEXT_ROUTES = ("/", "/tokenize", "/decode")  # every model (POST / dispatches by kind: serve.compat)
EMBED_ROUTES = ("/embed", "/embed_all", "/similarity", "/v1/embeddings", "/embeddings")
KIND_ROUTES = {"encoder": (), "masked-lm": ("/fill-mask",), "classifier": ("/predict",),
               "token-classifier": ("/ner",), "question-answering": ("/qa",)}
QA_WINDOW = 384  # tokens per question-answering window, unless the model was trained with another


@dataclass
class ModelSpec:
    """A model directory as served: everything but the weights."""

    name: str
    path: Path
    kind: str
    config: object  # BertConfig
    tokenizer: object  # bertkit Tokenizer
    max_length: int  # longest input in tokens (longer: 422, or cut with "truncate")
    pooling: str  # for the embedding routes
    labels: list[str]  # classifier and token-classifier outputs, in id order; [] otherwise
    embeds: bool = True  # serves the embedding routes (an ONNX head graph does not)
    int8: bool = False  # int8 inference: an ONNX export's int8 graph, or torch's int8 linear layers (CPU)
    precision: str = "fp32"  # "bf16": the torch backend runs under bf16 autocast (`devices.autocast`)
    policy: Policy = field(default_factory=Policy)  # windows' stride and aggregation, as fine-tuned (finetune.json)
    threshold: float | None = None  # a multi-label classifier's decision threshold on each sigmoid; None: single-label
    index: object = None  # a `search.index.SearchIndex` served on /search (`serve --index`, `serve.search`)

    @property
    def routes(self) -> tuple[str, ...]:
        extra = KIND_ROUTES[self.kind]
        if self.kind == "classifier" and self.config.num_labels == 1:
            extra = (*extra, "/rerank")
        search = ("/search",) if self.index is not None else ()
        return (*TEXT_ROUTES, *(EMBED_ROUTES if self.embeds else ()), *extra, *search)

    @property
    def regression(self) -> bool:
        return self.kind == "classifier" and self.config.num_labels == 1

    def info(self) -> dict:
        return {"name": self.name, "path": str(self.path), "kind": self.kind, "routes": list(self.routes),
                "max_input_length": self.max_length, "pooling": self.pooling, "labels": self.labels,
                "precision": self.precision, "int8": self.int8, "window_stride": self.policy.stride,
                "aggregate": self.policy.aggregate, "threshold": self.threshold,
                "hidden_size": self.config.hidden_size, "num_hidden_layers": self.config.num_hidden_layers,
                "index": None if self.index is None else {"path": str(self.index.folder), "passages": len(self.index),
                                                          "graphs": len(self.index.graphs)}}


def _kind(heads: list[str], architectures: list[str], task: str | None) -> str:
    if "question-answering" in heads or "BertForQuestionAnswering" in architectures:
        return "question-answering"
    if "classifier" in heads:
        if "BertForTokenClassification" in architectures or task == "ner":
            return "token-classifier"
        return "classifier"
    if "masked-LM" in heads:
        return "masked-lm"
    return "encoder"


def _max_length(path: Path, config, kind: str, saved: dict) -> int:
    limit = config.max_tokens
    settings = path / "sentence_bert_config.json"
    if kind == "question-answering":
        return min(limit, int(saved.get("max_seq_len") or QA_WINDOW))
    if settings.is_file():
        from bertkit.st import model_pooling

        return min(limit, model_pooling(path)[1])
    return limit


# an ONNX export's graph kind (onnx.json) -> the served kind
_EXPORT_KINDS = {"embedding": "encoder", "BertForSequenceClassification": "classifier",
                 "BertForTokenClassification": "token-classifier", "BertForQuestionAnswering": "question-answering",
                 "BertForMaskedLM": "masked-lm", "BertForPreTraining": "masked-lm"}


def describe(name: str, path: str | Path, backend: str = "torch", int8: bool = False,
             precision: str = "fp32") -> ModelSpec:
    """The served form of a model directory (for `backend` "onnx", an export folder, its int8
    graph when `int8`; for "torch", `int8` quantizes the linear layers as `bertkit.quantize` does,
    and `precision` "bf16" runs it under autocast); a UserError for one that cannot be served."""
    from bertkit.export import META_FILE, check_backend

    if not NAME.fullmatch(name):
        raise UserError(f"model name {name!r} must be letters, digits, '.', '_' or '-' (at most 64)")
    check_backend(path, backend)
    if backend == "onnx":
        from bertkit.io import read_json

        meta = read_json(Path(path) / META_FILE, "an ONNX export's description")
        if int8 and "int8" not in meta.get("files", {}):
            raise UserError("exported without --int8: no int8 graph (export again with --int8)", path)
        return _describe_export(name, Path(path), meta, int8)
    from bertkit.st import static_module

    if static_module(path) is not None:
        return _describe_static(name, Path(path), int8)
    return replace(_describe_weights(name, Path(path), int8), precision=precision)


def _describe_static(name: str, path: Path, int8: bool) -> ModelSpec:
    """A static embedding model (`bertkit.static`): an encoder of one layer-free table, mean pooled."""
    from bertkit.static import load_static

    if int8:
        raise UserError("a static model is a table of vectors, with no layers to run in int8: drop --int8", path)
    model, tokenizer = load_static(path)
    return ModelSpec(name, path, "encoder", model.config, tokenizer, model.config.max_tokens, "mean", [])


def _describe_export(name: str, path: Path, meta: dict, int8: bool) -> ModelSpec:
    from bertkit.finetune.registry import saved_settings
    from bertkit.hf import load_config
    from bertkit.st import model_pooling
    from bertkit.tokenizer import Tokenizer

    if meta.get("kind") not in _EXPORT_KINDS:
        raise UserError(f"onnx.json names an unknown graph kind {meta.get('kind')!r}", path)
    kind = _EXPORT_KINDS[meta["kind"]]
    config = load_config(path)
    tokenizer = Tokenizer.from_pretrained(path)
    labels = _labels(config, kind)
    pooling = meta.get("pooling") or model_pooling(path)[0]
    saved = saved_settings(path)
    return ModelSpec(name, path, kind, config, tokenizer, _max_length(path, config, kind, saved),
                     pooling, labels, embeds=kind == "encoder", int8=int8, policy=Policy.from_settings(saved),
                     threshold=_threshold(config, kind, saved))


def _labels(config, kind: str) -> list[str]:
    if kind not in ("classifier", "token-classifier"):
        return []
    names = config.id2label or {}
    return [str(names.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]


def _describe_weights(name: str, path: Path, int8: bool = False) -> ModelSpec:
    from bertkit.finetune.feature_ner import TAGGER_CONFIG
    from bertkit.finetune.registry import saved_settings
    from bertkit.hf import heads_in, load_config, our_architectures, weight_shapes
    from bertkit.st import model_pooling
    from bertkit.tokenizer import Tokenizer

    config = load_config(path)
    if (path / TAGGER_CONFIG).exists():
        raise UserError("a feature-based tagger (BiLSTM on frozen features) is not served; serve a "
                        "fine-tuned token classifier", path)
    heads = heads_in(weight_shapes(path), config.model_type)
    architectures = our_architectures(json.loads((path / "config.json").read_text(encoding="utf-8")))
    saved = saved_settings(path)
    kind = _kind(heads, architectures, saved.get("task"))
    tokenizer = Tokenizer.from_pretrained(path)
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"vocab.txt has {len(tokenizer)} entries but the model only {config.vocab_size}: "
                        "tokenizer and weights do not belong together", path)
    pooling = model_pooling(path)[0]
    return ModelSpec(name, path, kind, config, tokenizer, _max_length(path, config, kind, saved), pooling,
                     _labels(config, kind), int8=int8, policy=Policy.from_settings(saved),
                     threshold=_threshold(config, kind, saved))


def _threshold(config, kind: str, saved: dict) -> float | None:
    """A multi-label classifier's threshold: the one finetune.json saved, else 0.5 (a directory
    transformers wrote with problem_type multi_label_classification); None for other models."""
    if kind != "classifier" or config.problem_type != "multi_label_classification":
        return None
    return float(saved.get("threshold") or 0.5)


def parse_entry(text: str) -> tuple[str, str]:
    """`NAME=DIR` or `DIR` (named after its folder) -> (name, dir)."""
    name, sep, folder = text.partition("=")
    if sep and NAME.fullmatch(name) and folder:
        return name, folder
    if sep and not Path(text).exists():
        raise UserError(f"expected NAME=DIR or DIR, not {text!r} (a name is letters, digits, '.', '_' or '-')")
    folder = text
    name = Path(folder).resolve().name or "model"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:64] or "model"
    return name, folder
