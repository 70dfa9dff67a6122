"""The fine-tuning task interface: what every task gives the one generic loop.

A task turns a file into examples, examples into unpadded features (`Prepared`), a list of
features into a `Batch`, a batch into a loss; it builds, loads and saves its model, predicts on
prepared data and scores the predictions with the official metric. `bertkit finetune` (dev
evaluation after each epoch) and `bertkit evaluate` both go through prepare -> predict -> score,
so the two report the same numbers for the same model and file. A task's `settings()` are saved
beside the model (finetune.json) and rebuild the same task for evaluation.

`HeadTask` is the shared half of the tasks whose model is one of bertkit's `BertFor...` heads
(everything but the feature-based NER tagger).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from bertkit.data.batching import collate, to_device
from bertkit.errors import UserError


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


@dataclass
class Batch:
    """A collated batch: the model's keyword inputs and the loss's targets, as tensors."""

    inputs: dict[str, Tensor]
    targets: dict[str, Tensor] = field(default_factory=dict)

    def to(self, device: torch.device) -> "Batch":
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


class Task(Protocol):
    """What the fine-tuning loop and `bertkit evaluate` call; one implementation per task kind."""

    name: str
    main_metric: str  # the dev metric that picks the saved seed
    labels: list[str] | None
    prediction_suffix: str  # predictions file: ".tsv", ".conll", ".json"

    def read(self, path) -> list: ...
    def fit_labels(self, train_examples: list) -> None: ...
    def prepare(self, examples: list, train: bool = False) -> Prepared: ...
    def collate(self, features: list[dict]) -> Batch: ...
    def new_model(self, model_dir: Path) -> nn.Module: ...
    def load_model(self, model_dir: Path) -> nn.Module: ...
    def save_model(self, model: nn.Module, out: Path, tokenizer) -> None: ...
    def loss(self, model: nn.Module, batch: Batch) -> Tensor: ...
    def predict(self, model: nn.Module, data: Prepared, rt: Runtime): ...
    def score(self, data: Prepared, predictions) -> dict: ...
    def write_predictions(self, path: Path, data: Prepared, predictions) -> None: ...
    def settings(self) -> dict: ...


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


class HeadTask:
    """What the BERT-head tasks share: a `BertFor...` model loaded, built and saved in HF format,
    inputs collated by `bertkit.data.batching`, and the head's own loss."""

    head: type
    targets: tuple[str, ...] = ("labels",)  # feature keys the loss reads, not the model's inputs
    labels: list[str] | None = None
    tokenizer: Any = None
    classifier_dropout: float | None = None  # set by the run (--classifier-dropout); None: the config's

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
        saved = [model.config.id2label[i] for i in sorted(model.config.id2label or {})]
        if self.labels and saved != self.labels:
            raise UserError(f"model's labels ({', '.join(saved)}) are not this task's ({', '.join(self.labels)})",
                            model_dir)
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
        return model(**batch.inputs, **batch.targets).loss
