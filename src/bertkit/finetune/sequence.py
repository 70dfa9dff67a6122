"""Sentence (pair) classification and regression: the GLUE tasks and your own tables.

The paper's output layer (§4.1): the pooled [CLS] vector -> linear over the labels, or one
output trained with MSE for regression (STS-B). An input longer than `max_seq_len` is cut, or
with the windows policy (`bertkit.long_inputs`) read in overlapping windows (a pair's first text
carried by each): training sees each window with its document's label, and a prediction is the
windows' logits averaged (or their maximum, `aggregate`), as the saved finetune.json says.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.task import HeadTask, Prepared, Runtime, infer
from bertkit.heads import BertForSequenceClassification
from bertkit.long_inputs import Plan, Policy, aggregate


class SequenceTask(HeadTask):
    """GLUE tasks and `classify` / `regress` on a table."""

    head = BertForSequenceClassification
    prediction_suffix = ".tsv"
    weighting = None  # --class-weights as given: "balanced", a JSON file, or the saved {label: weight}

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
        task.policy = Policy.from_settings(settings)
        task.weighting = settings.get("class_weights")
        if task.weighting is not None and task.regression:
            raise UserError(f"--class-weights applies to classification, not the regression task {name}")
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
        from collections import Counter

        from bertkit.data.glue import custom_spec, label_list
        from bertkit.finetune.task import class_weights

        if not self.regression and not self.labels:
            labels = label_list(train_examples)
            if len(labels) < 2:
                raise UserError(f"training set has {len(labels)} distinct label(s); need at least 2")
            self.spec = custom_spec(self.spec.name, "classification", labels)
            self._set_labels(labels)
        if not self.regression:
            counts = Counter(str(e.label) for e in train_examples)
            self.class_weights = class_weights(self.weighting, self.labels, counts)

    def read(self, path):
        return self.reader(path)

    def config_changes(self) -> dict:
        kind = "regression" if self.regression else "single_label_classification"
        return {"id2label": dict(enumerate(self.labels)), "problem_type": kind, **self.dropout_change()}

    def settings(self) -> dict:
        return {"task": self.name, "max_seq_len": self.max_seq_len, "labels": self.labels, **self.options,
                **self.policy.settings(), **self.class_weight_settings()}

    def _target(self, example):
        if self.regression:
            return float(example.label)
        label = str(example.label)
        if label not in self.label2id:
            raise UserError(f"example {example.guid}: label {label!r} is not one of {', '.join(self.labels)}")
        return self.label2id[label]

    def prepare(self, examples, train: bool = False) -> Prepared:
        """A feature per row: an example cut to `max_seq_len`, or each window of it; `decoding`
        holds the example of each row."""
        import numpy as np

        from bertkit.long_inputs import LongReport

        if not examples:
            raise UserError("no examples to encode")
        if self.policy.windows:
            rows, owner, report = self._windows(examples)
        else:
            pairs = [e.text_b or "" for e in examples] if self.spec.pair else None
            encs = self.tokenizer.encode_batch([e.text_a for e in examples], pairs, max_length=self.max_seq_len)
            rows, owner = [(e.ids, e.type_ids) for e in encs], np.arange(len(encs))
            report = LongReport("truncate", self.max_seq_len, len(encs), sum(e.truncated for e in encs))
        features = [{"input_ids": ids, "token_type_ids": types} for ids, types in rows]
        has_labels = all(e.label is not None for e in examples)
        if has_labels:
            targets = [self._target(e) for e in examples]
            for f, i in zip(features, owner.tolist()):
                f["labels"] = targets[i]
        return Prepared(examples, features, [len(ids) for ids, _ in rows], has_labels, decoding=owner,
                        cut=0 if self.policy.windows else report.long, long_inputs=report)

    def _windows(self, examples):
        """(rows, the example of each row, report): windows over text_a, or over text_b with text_a
        carried by each window of a pair."""
        ids = self.tokenizer.encode_ids_batch
        if self.spec.pair:
            contents, prefixes = ids([e.text_b or "" for e in examples]), ids([e.text_a for e in examples])
        else:
            contents, prefixes = ids([e.text_a for e in examples]), None
        plan = Plan(contents, self.max_seq_len, self.tokenizer, prefixes, self.policy.stride)
        return [plan.row(r) for r in range(len(plan))], plan.owner, plan.report("windows")

    def predict(self, model, data: Prepared, rt: Runtime) -> list:
        """One prediction per example: the label of its largest logit, or the regression value."""
        return [float(values[0]) if self.regression else self.labels[int(values.argmax())]
                for values in self.example_logits(model, data, rt)]

    def example_logits(self, model, data: Prepared, rt: Runtime) -> list:
        """Each example's logits (L,): its rows' logits aggregated (one row: its own)."""
        import numpy as np

        logits: list = [None] * len(data.features)
        for indices, o in infer(model, self.collate, data, rt):
            for i, row in zip(indices, o.logits.float().cpu().numpy()):
                logits[i] = row
        owner = data.decoding
        bounds = np.searchsorted(owner, np.arange(len(data.examples) + 1))  # rows of an example are adjacent
        return [aggregate(np.stack(logits[bounds[i]:bounds[i + 1]]), self.policy.aggregate)
                for i in range(len(data.examples))]

    def score(self, data: Prepared, predictions: list) -> dict:
        from bertkit.eval.metrics import task_metrics

        if not data.has_labels:
            return {}
        return task_metrics(self.spec, predictions, [e.label for e in data.examples])

    def write_predictions(self, path: Path, data: Prepared, predictions: list) -> None:
        from bertkit.io import write_text

        rows = [f"{i}\t{p:.4f}" if self.regression else f"{i}\t{p}" for i, p in enumerate(predictions)]
        write_text(path, "index\tprediction\n" + "".join(r + "\n" for r in rows))
