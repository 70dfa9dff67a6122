"""Sentence (pair) classification and regression: the GLUE tasks and your own tables.

The paper's output layer (§4.1): the pooled [CLS] vector -> linear over the labels, or one
output trained with MSE for regression (STS-B).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.task import HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForSequenceClassification


class SequenceTask(HeadTask):
    """GLUE tasks and `classify` / `regress` on a table."""

    head = BertForSequenceClassification
    prediction_suffix = ".tsv"

    def __init__(self, spec, reader, tokenizer, max_seq_len: int, options: dict | None = None):
        """`spec` is a bertkit.data.glue.TaskSpec; a classification spec without labels (your
        own table) takes them from the training set in `fit_labels`. `options` are the reader's
        settings (table columns), saved with the model."""
        self.spec, self.reader, self.tokenizer, self.max_seq_len = spec, reader, tokenizer, max_seq_len
        self.name, self.options = spec.name, dict(options or {})
        self.regression = spec.kind == "regression"
        self.main_metric = spec.main_metric
        self._set_labels(["score"] if self.regression else list(spec.labels or ()))

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> SequenceTask:
        """A GLUE task by its name (its official labels), or `classify` / `regress` on a table's
        `text_columns` and `label_column` (the labels given, else the training set's)."""
        from bertkit.data.glue import glue_task, read_glue

        name, seq_len = settings["task"], settings.get("max_seq_len") or 128
        if name in ("classify", "regress"):
            task = cls._table(name, tokenizer, seq_len, settings)
        else:
            task = cls(glue_task(name), lambda path: read_glue(name, path), tokenizer, seq_len)
        task.classifier_dropout = settings.get("classifier_dropout")
        return task

    @classmethod
    def _table(cls, name: str, tokenizer, seq_len: int, settings: dict) -> SequenceTask:
        from bertkit.data.glue import custom_spec, read_table

        text_columns, label_column = settings.get("text_columns"), settings.get("label_column")
        if not text_columns or not label_column:
            raise UserError(f"task {name} needs --text-columns a[,b] and --label-column c")
        if len(text_columns) > 2:
            raise UserError(f"--text-columns takes one or two names, got {len(text_columns)}")
        kind = "classification" if name == "classify" else "regression"
        labels = settings.get("labels") if kind == "classification" else None
        spec = dataclasses.replace(custom_spec(name, kind, labels), pair=len(text_columns) == 2)
        options = {"text_columns": list(text_columns), "label_column": label_column}
        return cls(spec, lambda path: read_table(path, text_columns, label_column, kind), tokenizer, seq_len, options)

    def _set_labels(self, labels: list[str]) -> None:
        self.labels = labels
        self.label2id = {name: i for i, name in enumerate(labels)}

    def fit_labels(self, train_examples) -> None:
        from bertkit.data.glue import custom_spec, label_list

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
        return {"id2label": dict(enumerate(self.labels)), "problem_type": kind, **self.dropout_change()}

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len, "labels": self.labels, **self.options}

    def _target(self, example):
        if self.regression:
            return float(example.label)
        label = str(example.label)
        if label not in self.label2id:
            raise UserError(f"example {example.guid}: label {label!r} is not one of {', '.join(self.labels)}")
        return self.label2id[label]

    def prepare(self, examples, train: bool = False) -> Prepared:
        if not examples:
            raise UserError("no examples to encode")
        pairs = [e.text_b or "" for e in examples] if self.spec.pair else None
        encs = self.tokenizer.encode_batch([e.text_a for e in examples], pairs, max_length=self.max_seq_len)
        features = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encs]
        has_labels = all(e.label is not None for e in examples)
        if has_labels:
            for f, e in zip(features, examples):
                f["labels"] = self._target(e)
        return Prepared(examples, features, [len(e.ids) for e in encs], has_labels,
                        cut=sum(e.truncated for e in encs))

    def predict(self, model, data: Prepared, rt: Runtime) -> list:
        out: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            logits = o.logits.float()
            if self.regression:
                values = logits.squeeze(-1).tolist()
            else:
                values = [self.labels[i] for i in logits.argmax(-1).tolist()]
            for i, v in zip(indices, values):
                out[i] = v
        return out

    def score(self, data: Prepared, predictions: list) -> dict:
        from bertkit.eval.metrics import task_metrics

        if not data.has_labels:
            return {}
        return task_metrics(self.spec, predictions, [e.label for e in data.examples])

    def write_predictions(self, path: Path, data: Prepared, predictions: list) -> None:
        from bertkit.io import write_text

        rows = [f"{i}\t{p:.4f}" if self.regression else f"{i}\t{p}" for i, p in enumerate(predictions)]
        write_text(path, "index\tprediction\n" + "".join(r + "\n" for r in rows))
