"""Multi-label classification (`--task multilabel`): any number of labels per text, each a yes/no.

The sequence classifier's head (pooled [CLS] -> linear, one logit per label), trained with
binary cross-entropy on each label (--pos-weight scales each label's positive terms, for rare
labels: one number, "balanced" for each label's negatives per positive, or a {label: weight} file),
as transformers' `problem_type="multi_label_classification"`, which the saved config.json names
so `AutoModelForSequenceClassification` loads it and computes the same loss. A label is predicted
when its sigmoid is at least the decision threshold: given (--threshold), or tuned on dev to
maximise micro-F1 at each evaluation, the saved model's chosen one written to finetune.json, so
`bertkit evaluate`, `serve` (/predict) and an ONNX export decide with it. Rows come from a table
(`data.glue.read_label_sets`: names joined by a separator, or a JSON list); long inputs are cut
or read in windows as the single-label task does.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import UserError
from bertkit.finetune.sequence import SequenceTask
from bertkit.finetune.task import Batch, Prepared, Runtime
from bertkit.long_inputs import Policy

DEFAULT_SEPARATOR = ","


class MultiLabelTask(SequenceTask):
    """A table's text (or text pair) -> a set of labels."""

    main_metric = "micro_f1"
    fixed: float | None = None  # the threshold every evaluation uses (given, or saved); None: tune it on dev
    threshold: float | None = None  # the saved model's: given, or tuned by its dev evaluation (`adopt`)
    pos_weight = None  # --pos-weight as given (number, "balanced", file) or as saved ({label: weight})
    pos_weights: list[float] | None = None  # per label id, resolved on the training set (`fit_labels`)

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path | None = None, rt=None) -> MultiLabelTask:
        """Its own settings (`TaskKind.options`): label_separator, threshold, pos_weight."""
        from bertkit.data.glue import custom_spec, read_label_sets

        text_columns, label_column = settings.get("text_columns"), settings.get("label_column")
        if not text_columns or not label_column:
            raise UserError("task multilabel needs --text-columns a[,b] and --label-column c")
        if len(text_columns) > 2:
            raise UserError(f"--text-columns takes one or two names, got {len(text_columns)}")
        separator = settings.get("label_separator") or DEFAULT_SEPARATOR
        spec = custom_spec("multilabel", "classification", settings.get("labels"))
        spec = dataclasses.replace(spec, metrics=("micro_f1",), main_metric="micro_f1", pair=len(text_columns) == 2)
        options = {"text_columns": list(text_columns), "label_column": label_column, "label_separator": separator}
        task = cls(spec, lambda path: read_label_sets(path, text_columns, label_column, separator), tokenizer,
                   settings.get("max_seq_len") or 128, options)
        task.classifier_dropout = settings.get("classifier_dropout")
        task.policy = Policy.from_settings(settings)
        task.fixed = task.threshold = settings.get("threshold")  # fixed: None tunes it on dev at each evaluation
        task.tuned = settings.get("threshold_tuned", task.threshold is None)
        task.pos_weight = settings.get("pos_weight")
        return task

    def fit_labels(self, train_examples) -> None:
        from bertkit.finetune.task import positive_weights

        if not self.labels:
            labels = sorted({name for e in train_examples for name in e.label or ()})
            if len(labels) < 2:
                raise UserError(f"training set has {len(labels)} distinct label(s); multi-label needs at least 2")
            self._set_labels(labels)
        positives = Counter(name for e in train_examples for name in set(e.label or ()))
        self.pos_weights = positive_weights(self.pos_weight, self.labels, positives, len(train_examples))

    def config_changes(self) -> dict:
        return {"id2label": dict(enumerate(self.labels)), "problem_type": "multi_label_classification",
                **self.dropout_change()}

    def settings(self) -> dict:
        weights = self.pos_weight if self.pos_weights is None else dict(zip(self.labels, self.pos_weights))
        return {**super().settings(), "threshold": self.threshold, "threshold_tuned": self.tuned, "pos_weight": weights}

    def _target(self, example) -> list[float]:
        unknown = [name for name in example.label if name not in self.label2id]
        if unknown:
            raise UserError(f"example {example.guid}: label {unknown[0]!r} is not one of {', '.join(self.labels)}")
        hot = [0.0] * len(self.labels)
        for name in example.label:
            hot[self.label2id[name]] = 1.0
        return hot

    def collate(self, features: list[dict]) -> Batch:
        batch = super().collate([{k: v for k, v in f.items() if k != "labels"} for f in features])
        if "labels" in features[0]:
            batch.targets["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.float32)  # (B, L)
        return batch

    def loss(self, model, batch: Batch) -> Tensor:
        logits = model(**batch.inputs).logits.float()  # (B, L)
        weight = None if self.pos_weights is None else torch.tensor(self.pos_weights, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits, batch.targets["labels"], pos_weight=weight)

    def predict(self, model, data: Prepared, rt: Runtime) -> np.ndarray:
        """Each example's label probabilities (N, L): the sigmoid of its (aggregated) logits."""
        logits = np.stack(self.example_logits(model, data, rt)).astype(np.float64)
        return 1.0 / (1.0 + np.exp(-logits))

    def gold(self, data: Prepared) -> np.ndarray:
        return np.array([self._target(e) for e in data.examples], dtype=bool).reshape(len(data.examples), -1)

    def score(self, data: Prepared, predictions: np.ndarray) -> dict:
        """Micro/macro-F1, subset accuracy and per-label F1 at the threshold: the given (or saved)
        one, else the one that maximises micro-F1 on this data (reported as "threshold")."""
        from bertkit.eval.metrics import best_threshold, multilabel_metrics

        if not data.has_labels:
            return {}
        gold = self.gold(data)
        threshold = best_threshold(predictions, gold) if self.fixed is None else self.fixed
        return {**multilabel_metrics(predictions >= threshold, gold, self.labels), "threshold": threshold}

    def adopt(self, dev_metrics: dict) -> None:
        """The saved model decides with the threshold its dev evaluation tuned."""
        if self.fixed is None and "threshold" in dev_metrics:
            self.threshold = dev_metrics["threshold"]

    def agreement(self, predictions, reference) -> float:
        """x100: the share of (example, label) decisions two models' predictions agree on."""
        t = 0.5 if self.threshold is None else self.threshold
        return 100.0 * float(np.mean((np.asarray(predictions) >= t) == (np.asarray(reference) >= t)))

    def write_predictions(self, path: Path, data: Prepared, predictions: np.ndarray) -> None:
        """`index, prediction (the labels at or above the threshold, joined by the separator), then
        each label's probability`, one row per example."""
        from bertkit.io import write_text

        t = 0.5 if self.threshold is None else self.threshold
        sep = self.options["label_separator"]
        rows = [f"{i}\t{sep.join(n for n, p in zip(self.labels, row) if p >= t)}\t"
                + "\t".join(f"{p:.4f}" for p in row) for i, row in enumerate(predictions)]
        write_text(path, "\t".join(["index", "prediction", *self.labels]) + "\n" + "".join(r + "\n" for r in rows))
