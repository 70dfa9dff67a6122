"""The best checkpoint of a fine-tuning run, and early stopping (--metric-for-best, --early-stopping).

After each dev evaluation the loop hands the metrics to `BestCheckpoint.update`; when the chosen
metric improves, a copy of the model's weights goes to CPU memory (one state_dict, replaced on
each improvement: nothing is written to disk per evaluation). `stop` turns true after `patience`
evaluations in a row without improvement, and `restore` puts the best weights back, so the model
the loop saves is the best evaluation's, as transformers' `load_best_model_at_end` and
`EarlyStoppingCallback` do. Greater is better, except for a metric whose name ends in "loss".
A tie is no improvement: the earlier checkpoint is kept. A seed's checkpoint (`finetune.resume`)
holds the best weights and the count (`state_dict` / `load`); the best evaluation's predictions are
not saved but computed again from those weights when the seed ends.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from bertkit.errors import UserError

NOT_METRICS = ("step", "epoch")  # what an evaluation record holds besides metrics


def lower_is_better(name: str) -> bool:
    return name.endswith("loss")


class BestCheckpoint:
    """The best evaluation so far of one seed: its step, metrics, predictions and weights."""

    def __init__(self, metric: str, patience: int | None = None):
        self.metric, self.patience = metric, patience
        self.sign = -1.0 if lower_is_better(metric) else 1.0
        self.step: int | None = None
        self.value = -math.inf  # sign * the best value: greater is better
        self.metrics: dict = {}
        self.predictions: list = []
        self.state: dict[str, torch.Tensor] | None = None
        self.bad = 0  # evaluations since the last improvement

    def update(self, model: nn.Module, record: dict, metrics: dict, predictions) -> bool:
        """Take one evaluation (`record` holds its step and every metric); True when it is the new best."""
        value = record.get(self.metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            names = [k for k, v in record.items() if isinstance(v, (int, float)) and k not in NOT_METRICS]
            raise UserError(f"--metric-for-best {self.metric}: this task's evaluations report "
                            f"{', '.join(names)}")
        if self.sign * value <= self.value:
            self.bad += 1
            return False
        self.step, self.value, self.bad = record["step"], self.sign * value, 0
        self.metrics, self.predictions = dict(metrics), predictions
        self.state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        return True

    @property
    def stop(self) -> bool:
        return self.patience is not None and self.bad >= self.patience

    @property
    def best_metric(self) -> float:
        return self.sign * self.value

    def restore(self, model: nn.Module) -> None:
        """Load the best evaluation's weights into `model` (on the model's own device)."""
        if self.state is not None:
            model.load_state_dict(self.state)

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(the best weights as `best.NAME` tensors, the rest as JSON) for a seed's checkpoint."""
        tensors = {f"best.{k}": v for k, v in (self.state or {}).items()}
        return tensors, {"step": self.step, "value": self.value, "metrics": self.metrics, "bad": self.bad}

    def load(self, tensors: dict[str, torch.Tensor], saved: dict) -> None:
        """Continue from a checkpoint's `state_dict`; `predictions` stays None until recomputed."""
        self.step, self.value, self.metrics, self.bad = saved["step"], saved["value"], saved["metrics"], saved["bad"]
        self.state = {k[len("best."):]: v for k, v in tensors.items() if k.startswith("best.")} or None
        self.predictions = None
