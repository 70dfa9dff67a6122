"""The fine-tuning task interface: what every task gives the one generic loop.

A task turns a file into examples, examples into unpadded features (`Prepared`), a list of
features into a `Batch`, a batch into a loss; it builds, loads and saves its model, predicts on
prepared data and scores the predictions with the official metric. `bertkit finetune` (dev
evaluation after each epoch) and `bertkit evaluate` both go through prepare -> predict -> score,
so the two report the same numbers for the same model and file. A task class builds itself from
its settings (`from_settings`); a task's `settings()` are saved beside the model (finetune.json)
and rebuild the same task for evaluation.

`TaskBase` holds the defaults of the members most tasks need not define. `HeadTask` is the shared half
of the tasks whose model is one of bertkit's `BertFor...` heads (sequence, token, span and rerank;
the feature-based NER tagger reuses its collate, the bi-encoder none of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from bertkit.data.batching import collate, to_device
from bertkit.errors import UserError
from bertkit.long_inputs import Policy


@dataclass
class Runtime:
    """Where and how models run: device, autocast precision, evaluation batch size."""

    device: torch.device
    precision: str = "fp32"  # "fp32" or "bf16" (autocast; weights and optimizer stay fp32)
    eval_batch_size: int = 64
    progress: bool = True

    def autocast(self):
        from bertkit.devices import autocast

        return autocast(self.precision, self.device)


@dataclass
class Batch:
    """A collated batch: the model's keyword inputs and the loss's targets, as tensors."""

    inputs: dict[str, Tensor]
    targets: dict[str, Tensor] = field(default_factory=dict)

    def to(self, device: torch.device) -> Batch:
        return Batch(to_device(self.inputs, device), to_device(self.targets, device))


@dataclass
class Prepared:
    """A task's encoded examples: what the loop batches and what predicting and scoring read."""

    examples: list  # as read from the file
    features: list[dict]  # one per model input: unpadded lists (or tensors), targets included when training
    lengths: list[int]  # each feature's length, for length-grouped batches
    has_labels: bool = True
    decoding: Any = None  # what maps model outputs back to examples (SQuAD windows, NER word ids)
    cut: int = 0  # inputs longer than the task's max_seq_len, cut to it (SQuAD uses windows instead)
    long_inputs: Any = None  # a `long_inputs.LongReport` where the task follows the long-input policy


class Task(Protocol):
    """What the fine-tuning loop, `run_job` and `bertkit evaluate` use; one implementation per task
    kind, named in `finetune.registry.TASKS`. `TaskBase` gives the optional members defaults."""

    name: str
    main_metric: str  # the dev metric that picks the saved seed
    labels: list[str] | None
    prediction_suffix: str  # predictions file: ".tsv", ".conll", ".json"
    max_seq_len: int | None  # inputs are cut to this many tokens (it must fit the model's positions); None: no cut
    head: type | None  # the `BertFor...` class of its model (an ONNX export of one can stand in); None: another model
    policy: Policy  # an input longer than max_seq_len: cut, or read in windows (tasks that can; others truncate)

    @classmethod
    def from_settings(cls, tokenizer, settings: dict, model_dir: Path, rt: Runtime) -> Task:
        """The task `settings` describe: `bertkit finetune`'s options when training ("task",
        "max_seq_len", "text_columns", "label_column", "feature_based", "layers", "combine",
        "classifier_dropout" and the task's own `TaskKind.options`, None where not given), or a
        fine-tuned model's finetune.json with `model_settings` and the command's overrides when
        evaluating. `model_dir` is the model the task is for; `rt` where models run."""
        ...

    @classmethod
    def model_settings(cls, model_dir: Path, config) -> dict:
        """What a fine-tuned model's directory fixes of its task's settings (its labels)."""
        ...

    def read(self, path) -> list: ...
    def read_dev(self, path) -> list: ...
    def fit_labels(self, train_examples: list) -> None: ...
    def prepare(self, examples: list, train: bool = False) -> Prepared: ...

    def batches(self, train: Prepared, batch_size: int, g: torch.Generator) -> list[list[int]] | None:
        """An epoch's batches of feature indices, drawn with `g`; None: the loop's `epoch_batches`."""
        ...

    def collate(self, features: list[dict]) -> Batch: ...
    def new_model(self, model_dir: Path) -> nn.Module: ...
    def load_model(self, model_dir: Path) -> nn.Module: ...
    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None: ...
    def loss(self, model: nn.Module, batch: Batch) -> Tensor: ...
    def predict(self, model: nn.Module, data: Prepared, rt: Runtime): ...
    def score(self, data: Prepared, predictions) -> dict: ...

    def adopt(self, dev_metrics: dict) -> None:
        """Fix what the saved model's dev evaluation chose, before its settings are saved (a
        multi-label task's tuned decision threshold)."""
        ...

    def write_predictions(self, path: Path, data: Prepared, predictions) -> None: ...
    def settings(self) -> dict: ...


class TaskBase:
    """The defaults of `Task`'s optional members: a task defines only what differs."""

    labels: list[str] | None = None
    max_seq_len: int | None = None
    head: type | None = None
    policy: Policy = Policy()

    @classmethod
    def model_settings(cls, model_dir: Path, config) -> dict:
        """The labels in the model's config.json (id2label), None when it has none."""
        return {"labels": config_labels(config) or None}

    def read_dev(self, path) -> list:
        """The dev file's examples: the same layout as training's unless a task says otherwise."""
        return self.read(path)

    def batches(self, train: Prepared, batch_size: int, g: torch.Generator) -> list[list[int]] | None:
        """None: the loop's own `epoch_batches` (a task overrides this to keep a rule of its own)."""
        return None

    def adopt(self, dev_metrics: dict) -> None:
        """Nothing to fix: a task's saved settings do not depend on its dev evaluation."""


@torch.no_grad()
def infer(model: nn.Module, collate, data: Prepared, rt: Runtime, **forward_kwargs):
    """Yield (feature indices, model output) over `data`, in eval mode; `collate` is a task's.

    Batches group features of similar length (sorted by length), so little compute goes to
    padding; callers put results back in place by index.
    """
    from tqdm import tqdm

    model.eval()
    order = sorted(range(len(data.features)), key=lambda i: data.lengths[i])
    with tqdm(total=len(order), desc="evaluating", unit="input", leave=False, mininterval=1.0,
              disable=not rt.progress) as bar:
        for start in range(0, len(order), rt.eval_batch_size):
            indices = order[start : start + rt.eval_batch_size]
            batch = collate([data.features[i] for i in indices]).to(rt.device)
            with rt.autocast():
                yield indices, model(**batch.inputs, **forward_kwargs)
            bar.update(len(indices))


def pooler_note(model: nn.Module) -> str | None:
    """A warning when a new head reads a pooler whose weights are near zero (all-MiniLM-L6-v2's
    weight std is 0.009, where BERT's init gives 0.02 and trained poolers more): the pooled [CLS]
    is then ~0.05 in size, and at the usual learning rates (2e-5 to 5e-5) the head's logits barely
    move in hundreds of steps. None when the head is not new or reads no pooler."""
    pooler = getattr(getattr(model, "encoder", None), "pooler", None)
    if pooler is None or not getattr(model, "load_report", {}).get("initialized"):
        return None
    std = float(pooler.weight.detach().float().std())
    if std >= 0.01:
        return None
    return (f"the checkpoint's pooler is near zero (weight std {std:.3f}): a new head on the pooled [CLS] "
            "learns slowly at small learning rates; if the training loss stays flat, raise --lr (e.g. 3e-4)")


def require_trained_head(model: nn.Module, model_dir: Path) -> None:
    """Evaluation needs a fine-tuned head: refuse a directory whose head would be random."""
    if getattr(model, "load_report", {}).get("initialized"):
        raise UserError(f"model has no trained {type(model).__name__} head; fine-tune it first "
                        f"(missing: {', '.join(model.load_report['initialized'])})", model_dir)


def config_labels(config) -> list[str]:
    """A model config's labels (id2label), in id order; [] when it has none."""
    return [config.id2label[i] for i in sorted(config.id2label or {})]


def check_labels(config, labels: list[str] | None, where) -> None:
    """Refuse a fine-tuned model (torch or ONNX) whose saved labels are not the task's."""
    saved = config_labels(config)
    if labels and saved != list(labels):
        raise UserError(f"model's labels ({', '.join(saved)}) are not this task's ({', '.join(labels)})", where)


def agreement(predictions: list, reference: list, regression: bool) -> float:
    """x100: the share of equal predictions, or for regression the Pearson correlation."""
    if regression:
        import numpy as np

        return float(np.corrcoef(predictions, reference)[0, 1] * 100)
    return 100.0 * sum(p == t for p, t in zip(predictions, reference)) / max(len(reference), 1)


class HeadTask(TaskBase):
    """What the BERT-head tasks share: a `BertFor...` model loaded, built and saved in HF format,
    inputs collated by `bertkit.data.batching`, and the head's own loss."""

    head: type | None
    targets: tuple[str, ...] = ("labels",)  # feature keys the loss reads, not the model's inputs
    tokenizer: Any = None
    classifier_dropout: float | None = None  # from the settings (--classifier-dropout); None: the config's
    regression: bool = False  # one real-valued output (predictions are numbers, not labels)
    sparse_outputs: bool = False  # the head gives logits at the labelled positions only (MLM)
    class_weights: list[float] | None = None  # per label id: weighted cross-entropy (--class-weights); None: plain

    def config_changes(self) -> dict:
        """What a new model's config changes from the checkpoint's: labels, head dropout."""
        labels = {"id2label": dict(enumerate(self.labels))} if self.labels else {}
        return {**labels, **self.dropout_change()}

    def dropout_change(self) -> dict:
        return {} if self.classifier_dropout is None else {"classifier_dropout": self.classifier_dropout}

    def new_model(self, model_dir: Path) -> nn.Module:
        """The pretrained encoder with this task's head (fresh when the checkpoint has none)."""
        return self.head.from_pretrained(model_dir, **self.config_changes())

    def load_model(self, model_dir: Path) -> nn.Module:
        """A fine-tuned model for evaluation: its head must come from the checkpoint."""
        model = self.head.from_pretrained(model_dir)
        require_trained_head(model, model_dir)
        check_labels(model.config, self.labels, model_dir)
        return model

    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None:
        # save_pretrained(path) is what bertkit's heads and transformers' models both have.
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)

    def collate(self, features: list[dict]) -> Batch:
        tensors = collate(features, self.tokenizer.pad_id)
        targets = {k: tensors.pop(k) for k in self.targets if k in tensors}
        return Batch(tensors, targets)

    def loss(self, model, batch: Batch) -> Tensor:
        if self.class_weights is None:
            return model(**batch.inputs, **batch.targets).loss
        return weighted_cross_entropy(model(**batch.inputs).logits, batch.targets["labels"], self.class_weights)

    def class_weight_settings(self) -> dict:
        """{"class_weights": {label: weight}} when the loss is weighted, for finetune.json and results."""
        if self.class_weights is None:
            return {}
        return {"class_weights": dict(zip(self.labels, self.class_weights))}

    def agreement(self, predictions, reference) -> float:
        """x100: how far two models' predictions on the same data agree (distillation's
        teacher_agreement): the share of equal ones, or for regression their Pearson correlation."""
        return agreement(predictions, reference, self.regression)


def weighted_cross_entropy(logits: Tensor, labels: Tensor, weights: list[float]) -> Tensor:
    """Cross-entropy with a weight per class, as torch's (and transformers' users') `CrossEntropyLoss(
    weight=w)`: sum_i w[y_i] * -log p_i(y_i) / sum_i w[y_i] over the labelled rows (or tokens)."""
    from bertkit.config import IGNORE_INDEX

    w = torch.tensor(weights, dtype=torch.float32, device=logits.device)
    return nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), weight=w,
                                       ignore_index=IGNORE_INDEX)


def class_weights(setting, labels: list[str], counts: dict[str, int]) -> list[float] | None:
    """Each label's loss weight, in id order, from --class-weights: "balanced" (scikit-learn's
    n_samples / (n_classes * count); a class training never shows weighs as if seen once), a JSON
    file (or its dict) of {label: weight} naming every label, or None (unweighted)."""
    if setting is None:
        return None
    if setting == "balanced":
        n = sum(counts.get(label, 0) for label in labels)
        return [n / (len(labels) * max(counts.get(label, 0), 1)) for label in labels]
    return weight_table(setting, labels, "class weight")


def positive_weights(setting, labels: list[str], positives: dict[str, int], rows: int) -> list[float] | None:
    """Each label's weight on its positive terms of the binary cross-entropy, in id order, from
    --pos-weight: a number (every label), "balanced" (its negatives per positive in training, as
    torch's BCEWithLogitsLoss suggests; 1 for a label that is always or never there), a JSON file
    (or its dict) of {label: weight} naming every label, or None (unweighted)."""
    if setting is None:
        return None
    if isinstance(setting, (int, float)) and not isinstance(setting, bool):
        return [float(setting)] * len(labels)
    if setting == "balanced":
        return [(rows - p) / p if 0 < p < rows else 1.0 for p in (positives.get(label, 0) for label in labels)]
    return weight_table(setting, labels, "positive weight")


def weight_table(setting, labels: list[str], what: str) -> list[float]:
    """A {label: positive number} table naming every label (a dict, or a JSON file's), in id order;
    a mistake in it is a UserError naming the file."""
    import math

    from bertkit.io import read_json

    where = None if isinstance(setting, dict) else setting
    table = setting if isinstance(setting, dict) else read_json(setting, f"{what}s")
    if not isinstance(table, dict):
        raise UserError(f'{what}s must be a JSON object {{"label": weight, ...}}', where)
    unknown = [k for k in table if k not in labels]
    missing = [label for label in labels if label not in table]
    if unknown or missing:
        raise UserError(f"{what}s must name each label ({', '.join(labels)}): "
                        + (f"unknown {', '.join(map(repr, unknown))}" if unknown else f"missing {', '.join(missing)}"),
                        where)
    bad = [k for k, v in table.items() if isinstance(v, bool) or not isinstance(v, (int, float))
           or not math.isfinite(v) or v <= 0]
    if bad:
        raise UserError(f"{what} of {bad[0]!r} must be a positive number, not {table[bad[0]]!r}", where)
    return [float(table[label]) for label in labels]
