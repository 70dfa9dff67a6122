"""The dev learning curve of one fine-tuning seed, and the summary of several seeds.

`Curve` scores dev at the end of each epoch and, with --eval-every, between; it feeds the best
checkpoint (`finetune.best`), the tracker (--report-to) and a `bertkit tune` trial's pruning, and
its record is what a seed's checkpoint keeps of it (`record` / `restore`). `summarize` gives
results.json's median, standard deviation, min and max over seeds.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from bertkit.finetune.best import BestCheckpoint
from bertkit.finetune.task import Prepared, Runtime, Task
from bertkit.tracking import Tracker, tagged


class Curve:
    """The dev learning curve of one seed: an evaluation at the end of each epoch and, with
    --eval-every, between; each records its step, its (fractional) epoch and the mean training
    loss since the previous evaluation. `best` (with --metric-for-best / --early-stopping) sees
    every evaluation and keeps the best one's weights."""

    best: BestCheckpoint | None = None

    @property
    def stop(self) -> bool:
        return self.best is not None and self.best.stop

    def __init__(self, task: Task, dev: Prepared, rt: Runtime, per_epoch: int, seed: int, n_epochs: int, log,
                 tracker: Tracker, on_eval: Callable[[dict], None] | None = None):
        self.task, self.dev, self.rt, self.per_epoch = task, dev, rt, per_epoch
        self.seed, self.n_epochs, self.log, self.tracker = seed, n_epochs, log, tracker
        self.on_eval = on_eval
        self._mark = (0, time.perf_counter())  # (step, time) of the previous logging step: steps/s
        self.epochs: list[dict] = []
        self.evals: list[dict] = []
        self.predictions: list = []
        self._since = 0  # index of the first step loss after the previous evaluation

    def evaluate(self, model: nn.Module, step: int, step_losses: list) -> dict:
        self.predictions = self.task.predict(model, self.dev, self.rt)
        metrics = self.task.score(self.dev, self.predictions)
        loss = torch.stack(step_losses[self._since :]).mean().item() if step_losses[self._since :] else math.nan
        self._since = len(step_losses)
        self.evals.append({"step": step, "epoch": round(step / self.per_epoch, 4), "train_loss": loss, **metrics})
        if self.best is not None:
            self.best.update(model, self.evals[-1], metrics, self.predictions)
        self.tracker.scalars(step, tagged("dev", metrics))
        if step % self.per_epoch:
            self.log(f"seed {self.seed} step {step} (epoch {step / self.per_epoch:.2f}): train loss {loss:.4f}  dev "
                     + _fmt(metrics))
        if self.on_eval is not None:
            self.on_eval(self.evals[-1])
        return metrics

    def track(self, step: int, loss: torch.Tensor, lr: float, norm: torch.Tensor) -> None:
        """A logging step's scalars: this step's loss, lr and gradient norm, the epoch, steps/s."""
        now = time.perf_counter()
        rate = (step - self._mark[0]) / max(now - self._mark[1], 1e-9)
        self._mark = (step, now)
        self.tracker.scalars(step, {"train/loss": loss.item(), "train/lr": lr, "train/grad_norm": norm.item(),
                                    "train/epoch": step / self.per_epoch, "train/steps_per_s": rate})

    def record(self) -> dict:
        """What a checkpoint keeps of the curve (JSON)."""
        return {"epochs": self.epochs, "evals": self.evals, "since": self._since}

    def restore(self, saved: dict) -> None:
        """Continue from `record()`; the last evaluation's predictions are computed again if needed."""
        self.epochs, self.evals, self._since = saved["epochs"], saved["evals"], saved["since"]
        self.predictions = None

    def end_epoch(self, model: nn.Module, epoch: int, step: int, step_losses: list, first: int) -> None:
        metrics = self.evaluate(model, step, step_losses)
        epoch_loss = torch.stack(step_losses[first:]).mean().item()
        self.epochs.append({"epoch": epoch, "train_loss": epoch_loss, **metrics})
        self.log(f"seed {self.seed} epoch {epoch}/{self.n_epochs}: train loss {epoch_loss:.4f}  dev " + _fmt(metrics))


def _fmt(metrics: dict) -> str:
    """The scalar metrics on one line (per-type breakdowns stay in results.json)."""
    return "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in metrics.items() if isinstance(v, (int, float)))


def summarize(runs: list) -> dict:
    """Median, standard deviation (sample; 0 for one seed), min and max of each dev metric of the
    seeds' runs (`loop.SeedRun`s)."""
    out = {}
    for key in runs[0].dev:
        values = [r.dev[key] for r in runs if isinstance(r.dev.get(key), (int, float))]
        if len(values) != len(runs):
            continue
        out[key] = {
            "median": statistics.median(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values),
            "max": max(values),
        }
    return out
