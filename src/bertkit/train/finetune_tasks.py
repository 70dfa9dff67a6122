"""What each fine-tuning task needs beyond the shared loop: its head, inputs, predictions, metric.

A task object reads its files, encodes examples into feature dicts, turns a batch into a loss,
predicts on prepared data and scores the predictions. `bertkit finetune` (dev evaluation after
each epoch) and `bertkit evaluate` both go through `Task.prepare` -> `Task.predict` ->
`Task.score`, so the two report the same numbers for the same model and file.

Tasks, with the paper's output layer for each (§4):
- `SequenceTask`: GLUE and your own tables; the pooled [CLS] vector -> linear (one output and MSE
  for regression).
- `TokenTask`: NER; each word's first sub-token -> linear, as the paper (§5.3) predicts only there.
- `QATask`: SQuAD v1.1; start/end logits over the tokens, windows of the context with a stride.
The feature-based NER tagger (§5.3) is in `bertkit.train.feature_tagger`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.errors import UserError
from bertkit.heads import (
    IGNORE,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)


@dataclass
class Runtime:
    """Where and how models run: device, autocast precision, evaluation batch size."""

    device: torch.device
    precision: str = "fp32"  # "fp32" or "bf16" (autocast; weights and optimizer stay fp32)
    eval_batch_size: int = 64
    progress: bool = True

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


# Sequence keys padded to the batch's longest row, and their padding values.
_PAD = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 0, "labels": IGNORE}


def collate(features: list[dict], pad_id: int = 0) -> dict[str, Tensor]:
    """Stack feature dicts into tensors, padding sequences to the longest in the batch.

    Lists become (B, T) tensors padded with `_PAD` (input ids with `pad_id`); scalars become (B,)
    float tensors when any is a float (regression targets), long otherwise.
    """
    batch: dict[str, Tensor] = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], (list, tuple)):
            T = max(len(v) for v in values)
            pad = pad_id if key == "input_ids" else _PAD.get(key, 0)
            batch[key] = torch.tensor([list(v) + [pad] * (T - len(v)) for v in values], dtype=torch.long)
        elif any(isinstance(v, float) for v in values):
            batch[key] = torch.tensor(values, dtype=torch.float32)
        else:
            batch[key] = torch.tensor(values, dtype=torch.long)
    if "attention_mask" not in batch and "input_ids" in batch:
        lengths = torch.tensor([len(f["input_ids"]) for f in features])
        batch["attention_mask"] = (torch.arange(batch["input_ids"].shape[1])[None] < lengths[:, None]).long()
    return batch


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@torch.no_grad()
def infer(model: nn.Module, features: list[dict], rt: Runtime, pad_id: int = 0):
    """Yield (feature indices, model output) over `features`, in eval mode.

    Batches group features of similar length (sorted by length), so little compute goes to
    padding; callers put results back in place by index.
    """
    from tqdm import tqdm

    model.eval()
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    with tqdm(total=len(order), desc="evaluating", unit="input", leave=False, mininterval=1.0,
              disable=not rt.progress) as bar:
        for start in range(0, len(order), rt.eval_batch_size):
            indices = order[start : start + rt.eval_batch_size]
            chunk = [{k: features[i][k] for k in _MODEL_INPUTS if k in features[i]} for i in indices]
            batch = to_device(collate(chunk, pad_id), rt.device)
            with rt.autocast():
                yield indices, model(**batch)
            bar.update(len(indices))


def require_trained_head(model: nn.Module, model_dir: Path) -> None:
    """Evaluation needs a fine-tuned head: refuse a directory whose head would be random."""
    if getattr(model, "load_report", {}).get("initialized"):
        raise UserError(f"model has no trained {type(model).__name__} head; fine-tune it first "
                        f"(missing: {', '.join(model.load_report['initialized'])})", model_dir)


class HeadTask:
    """What the BERT-head tasks share: a `BertFor...` model loaded, built and saved in HF format."""

    head: type = BertForSequenceClassification
    labels: list[str] | None = None

    def config_changes(self) -> dict:
        return {"id2label": dict(enumerate(self.labels))} if self.labels else {}

    def new_model(self, model_dir: Path) -> nn.Module:
        """The pretrained encoder with this task's head (fresh when the checkpoint has none)."""
        return self.head.from_pretrained(model_dir, **self.config_changes())

    def load_model(self, model_dir: Path) -> nn.Module:
        """A fine-tuned model for evaluation: its head must come from the checkpoint."""
        model = self.head.from_pretrained(model_dir)
        require_trained_head(model, model_dir)
        saved = [model.config.id2label[i] for i in sorted(model.config.id2label or {})]
        if self.labels and saved != self.labels:
            raise UserError(f"model's labels ({', '.join(saved)}) are not this task's ({', '.join(self.labels)})",
                            model_dir)
        return model

    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None:
        model.save_pretrained(out, tokenizer=tokenizer)

    def collate(self, features: list[dict]) -> dict[str, Tensor]:
        return collate(features, self.tokenizer.pad_id)

    def loss(self, model, batch: dict[str, Tensor]) -> Tensor:
        return model(**batch).loss


class SequenceTask(HeadTask):
    """Sentence (pair) classification or regression: GLUE tasks and `classify` / `regress`."""

    head = BertForSequenceClassification
    prediction_suffix = ".tsv"

    def __init__(self, spec, reader, tokenizer, max_seq_len: int):
        """`spec` is a bertkit.data.tasks.TaskSpec; a classification spec without labels (your
        own table) takes them from the training set in `fit_labels`."""
        self.spec, self.reader, self.tokenizer, self.max_seq_len = spec, reader, tokenizer, max_seq_len
        self.regression = spec.kind == "regression"
        self.main_metric = spec.main_metric
        self._set_labels(["score"] if self.regression else list(spec.labels or ()))

    def _set_labels(self, labels: list[str]) -> None:
        self.labels = labels
        self.label2id = {name: i for i, name in enumerate(labels)}

    def fit_labels(self, train_examples) -> None:
        from bertkit.data.tasks import custom_spec, label_list

        if not self.regression and not self.labels:
            labels = label_list(train_examples)
            if len(labels) < 2:
                raise UserError(f"training set has {len(labels)} distinct label(s); need at least 2")
            self.spec = custom_spec(self.spec.name, "classification", labels)
            self._set_labels(labels)

    def read(self, path):
        return self.reader(path)

    def config_changes(self) -> dict:
        kind = "regression" if self.regression else "single_label_classification"
        return {"id2label": dict(enumerate(self.labels)), "problem_type": kind}

    def _target(self, example):
        if self.regression:
            return float(example.label)
        label = str(example.label)
        if label not in self.label2id:
            raise UserError(f"example {example.guid}: label {label!r} is not one of {', '.join(self.labels)}")
        return self.label2id[label]

    def prepare(self, examples, train: bool = False) -> dict:
        if not examples:
            raise UserError("no examples to encode")
        pairs = [e.text_b or "" for e in examples] if self.spec.pair else None
        encs = self.tokenizer.encode_batch([e.text_a for e in examples], pairs, max_length=self.max_seq_len)
        features = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encs]
        has_labels = all(e.label is not None for e in examples)
        if has_labels:
            for f, e in zip(features, examples):
                f["labels"] = self._target(e)
        return {"examples": examples, "features": features, "has_labels": has_labels}

    def predict(self, model, data: dict, rt: Runtime) -> list:
        out: list = [None] * len(data["features"])
        for indices, o in infer(model, data["features"], rt, self.tokenizer.pad_id):
            logits = o.logits.float()
            if self.regression:
                values = logits.squeeze(-1).tolist()
            else:
                values = [self.labels[i] for i in logits.argmax(-1).tolist()]
            for i, v in zip(indices, values):
                out[i] = v
        return out

    def score(self, data: dict, predictions: list) -> dict:
        from bertkit.eval.metrics import task_metrics

        if not data["has_labels"]:
            return {}
        return task_metrics(self.spec, predictions, [e.label for e in data["examples"]])

    def write_predictions(self, path: Path, data: dict, predictions: list) -> None:
        from bertkit.io import write_text

        rows = [f"{i}\t{p:.4f}" if self.regression else f"{i}\t{p}" for i, p in enumerate(predictions)]
        write_text(path, "index\tprediction\n" + "".join(r + "\n" for r in rows))


class TokenTask(HeadTask):
    """NER by fine-tuning: a label for each word's first sub-token; the others are ignored."""

    head = BertForTokenClassification
    prediction_suffix = ".conll"
    main_metric = "f1"

    def __init__(self, labels: list[str] | None, tokenizer, max_seq_len: int):
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len
        self._set_labels(list(labels or ()))

    def _set_labels(self, labels: list[str]) -> None:
        self.labels = labels
        self.label2id = {name: i for i, name in enumerate(labels)}

    def fit_labels(self, sentences) -> None:
        from bertkit.data.ner import tag_list

        if not self.labels:
            self._set_labels(tag_list(sentences))

    def read(self, path):
        from bertkit.data.ner import read_conll

        return read_conll(path)

    def prepare(self, sentences, train: bool = False) -> dict:
        from bertkit.data.ner import Sentence, encode_sentences

        if not sentences:
            raise UserError("no sentences to encode")
        if train:
            features = encode_sentences(self.tokenizer, sentences, self.label2id, self.max_seq_len)
        else:
            # Gold tags may include ones training never saw; prediction needs only the words.
            blank = [Sentence(s.tokens, [self.labels[0]] * len(s.tokens)) for s in sentences]
            features = encode_sentences(self.tokenizer, blank, self.label2id, self.max_seq_len)
        word_ids = [f["word_ids"] for f in features]
        features = [{k: f[k] for k in ("input_ids", "token_type_ids", "attention_mask", "labels") if k in f}
                    for f in features]
        return {"examples": sentences, "features": features, "word_ids": word_ids}

    def predict(self, model, data: dict, rt: Runtime) -> list[list[str]]:
        from bertkit.data.ner import word_predictions

        id2label = dict(enumerate(self.labels))
        out: list = [None] * len(data["features"])
        for indices, o in infer(model, data["features"], rt, self.tokenizer.pad_id):
            for i, row in zip(indices, o.logits.argmax(-1).tolist()):  # (B, T) label ids
                out[i] = word_predictions(data["word_ids"][i], row, len(data["examples"][i].tokens), id2label)
        return out

    def score(self, data: dict, predictions: list[list[str]]) -> dict:
        from bertkit.eval.conlleval import evaluate

        return evaluate([s.tags for s in data["examples"]], predictions)

    def write_predictions(self, path: Path, data: dict, predictions: list[list[str]]) -> None:
        write_conll(path, data["examples"], predictions)


def write_conll(path: Path, sentences, predictions: list[list[str]]) -> None:
    """`token gold predicted` per line, a blank line between sentences (conlleval's input)."""
    from bertkit.io import write_text

    blocks = ["".join(f"{t} {g} {p}\n" for t, g, p in zip(s.tokens, s.tags, tags))
              for s, tags in zip(sentences, predictions)]
    write_text(path, "\n".join(blocks))


class QATask(HeadTask):
    """SQuAD v1.1: windows of the context with a stride; answers from the best start/end span."""

    head = BertForQuestionAnswering
    prediction_suffix = ".json"
    main_metric = "f1"

    def __init__(self, tokenizer, max_seq_len: int = 384, doc_stride: int = 128, max_query_len: int = 64):
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len
        self.doc_stride, self.max_query_len = doc_stride, max_query_len

    def fit_labels(self, examples) -> None:
        """Span prediction has no label set."""

    def read(self, path):
        from bertkit.data.squad import read_squad

        return read_squad(path)

    def prepare(self, examples, train: bool = False) -> dict:
        from bertkit.data.squad import make_features

        if not examples:
            raise UserError("no questions to encode")
        sf = make_features(examples, self.tokenizer, max_seq_len=self.max_seq_len,
                           doc_stride=min(self.doc_stride, self.max_seq_len // 2),
                           max_query_len=self.max_query_len)
        features = []
        for i, n in enumerate(sf.attention_mask.sum(axis=1).tolist()):
            # Windows come padded to max_seq_len; unpadded, a batch pads only to its longest.
            f = {"input_ids": sf.input_ids[i, :n].tolist(), "token_type_ids": sf.token_type_ids[i, :n].tolist()}
            if train:
                f["start_positions"] = int(sf.start_positions[i])
                f["end_positions"] = int(sf.end_positions[i])
            features.append(f)
        return {"examples": examples, "features": features, "squad_features": sf}

    def predict(self, model, data: dict, rt: Runtime) -> dict[str, str]:
        from bertkit.data.squad import postprocess

        T = data["squad_features"].input_ids.shape[1]
        starts = np.full((len(data["features"]), T), -1e9, dtype=np.float32)  # padding: never an answer
        ends = starts.copy()
        for indices, o in infer(model, data["features"], rt, self.tokenizer.pad_id):
            s, e = o.start_logits.float().cpu().numpy(), o.end_logits.float().cpu().numpy()
            for i, srow, erow in zip(indices, s, e):
                n = len(data["features"][i]["input_ids"])
                starts[i, :n], ends[i, :n] = srow[:n], erow[:n]
        return postprocess(data["examples"], data["squad_features"], starts, ends, n_best=20, max_answer_len=30)

    def score(self, data: dict, predictions: dict[str, str]) -> dict:
        from bertkit.eval.squad import evaluate

        return evaluate(data["examples"], predictions)

    def write_predictions(self, path: Path, data: dict, predictions: dict[str, str]) -> None:
        from bertkit.io import write_json

        write_json(path, predictions)
