"""The fine-tuning loop: one explicit loop for every task (GLUE, your own tables, NER, SQuAD, text pairs).

The paper's recipe (§4 and Appendix A.3): start from the pretrained weights, add one output
layer, train everything end to end for a few epochs with Adam (weight decay 0.01, none on biases
and LayerNorm), linear warm-up over the first 10% of the steps then linear decay to zero, batch
32, learning rate 2e-5..5e-5, gradient norm clipped at 1.0, Adam's epsilon 1e-6 (`Hyper` holds
these knobs, with the classifier's dropout and how often dev is scored). Fine-tuning is unstable
on small sets, so the paper ran several restarts and kept the best on dev; we run each seed from
the same pretrained weights and report every seed, the median and the standard deviation.

The saved model (`OUT/model`) is the seed with the best dev main metric, as it stands after its
last epoch; with --metric-for-best or --early-stopping (`finetune.best`), each seed's best
evaluation by that metric instead (its weights kept in memory, training stopped after PATIENCE
evaluations without improvement), and the seed whose best is best. `OUT/predictions.*` are that
model's dev predictions, so `bertkit evaluate` on the same file reproduces its numbers. The loop knows tasks
only through `bertkit.finetune.task.Task`; the model comes from a factory (the task's own by
default), so another implementation of the same head can be trained with the same recipe.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bertkit.errors import UserError
from bertkit.finetune.best import BestCheckpoint, lower_is_better
from bertkit.finetune.registry import RUN_FILE
from bertkit.finetune.task import Prepared, Runtime, Task, pooler_note
from bertkit.io import atomic_dir, write_json
from bertkit.tracking import FOLDER, Tracker, open_tracker, tagged
from bertkit.train.optim import build_optimizer, lr_at, warmup_steps


@dataclass
class Hyper:
    """The fine-tuning hyper-parameters (defaults: the paper's)."""

    epochs: int = 3
    lr: float = 2e-5  # peak learning rate
    batch_size: int = 32
    warmup: float = 0.1  # below 1: fraction of the steps; otherwise a step count
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0  # 0: no clipping
    seeds: tuple[int, ...] = (1, 2, 3)
    group_by_length: bool = False  # batches of similar length: less padding, same examples per epoch
    classifier_dropout: float | None = None  # dropout before the output layer; None: the model config's
    eval_every: int | None = None  # also score dev every N optimizer steps; None: after each epoch only
    adam_eps: float = 1e-6  # BERT's; transformers' Trainer defaults to 1e-8
    early_stopping: int | None = None  # stop a seed after this many evaluations without improvement; None: never
    metric_for_best: str | None = None  # keep each seed's best evaluation by this dev metric; None: the last
    # (with early_stopping alone: the task's main metric)

    @property
    def keep_best(self) -> bool:
        """Whether each seed's model is its best evaluation's (else its last)."""
        return self.early_stopping is not None or self.metric_for_best is not None


@dataclass
class SeedRun:
    seed: int
    dev: dict  # the dev metrics after the last epoch
    epochs: list[dict]  # {"epoch", "train_loss", **dev metrics} per epoch
    evals: list[dict]  # {"step", "epoch" (step / steps per epoch), "train_loss" since the last, **dev} per evaluation
    train_loss: list[float]  # per optimizer step
    steps: int
    time_s: float
    best_step: int | None = None  # with Hyper.keep_best: the step of the evaluation whose weights were kept
    best_metric: float | None = None  # and its value of the chosen metric (its metrics are `dev`)
    stopped_at: int | None = None  # the step early stopping ended the seed at; None: it ran every epoch


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def seed_model(task: Task, model_dir: Path, seed: int, new_model=None) -> nn.Module:
    """A seed's starting model, after seeding every generator: what makes a run repeatable (the
    same head initialisation and dropout draws in `bertkit finetune` and in a `bertkit tune` trial)."""
    set_seed(seed)
    return new_model(task, model_dir) if new_model is not None else task.new_model(model_dir)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, mininterval=1.0,
                disable=not enabled, leave=False)


def epoch_batches(lengths: list[int], batch_size: int, g: torch.Generator, group_by_length: bool) -> list[list[int]]:
    """One epoch's batches of example indices, in a fresh random order.

    With group_by_length, each window of 50 batches is sorted by length before it is cut into
    batches, and the batches are then shuffled: batches hold inputs of similar length (little
    compute spent on padding) while every epoch still sees different batches in a random order.
    """
    order = torch.randperm(len(lengths), generator=g).tolist()
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    window = 50 * batch_size
    batches = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda j: lengths[j])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]


def train_seed(task: Task, model: nn.Module, train: Prepared, dev: Prepared, hp: Hyper, rt: Runtime,
               seed: int, log=print, tracker: Tracker | None = None,
               on_eval: Callable[[dict], None] | None = None) -> tuple[SeedRun, list]:
    """Train `model` on `train` for hp.epochs, scoring `dev` after each epoch (and every hp.eval_every
    steps); `tracker` gets the scalars (--report-to), `on_eval` each evaluation's record (`bertkit tune`'s
    trial; what it raises, a pruned trial, ends training). The run record and last dev predictions."""
    start = time.time()
    g = torch.Generator().manual_seed(seed)
    features = train.features
    plan = [_batches(task, train, hp, g) for _ in range(hp.epochs)]  # the same draws, epoch by epoch
    per_epoch = len(plan[0])
    total = sum(map(len, plan))
    warm = warmup_steps(hp.warmup, total)
    model.to(rt.device)
    optimizer = build_optimizer(model, hp.lr, hp.weight_decay, eps=hp.adam_eps)
    clip = hp.max_grad_norm if hp.max_grad_norm > 0 else math.inf  # inf: the norm, unclipped
    step_losses: list[torch.Tensor] = []
    curve = _Curve(task, dev, rt, per_epoch, seed, hp.epochs, log, tracker or Tracker(), on_eval)
    if hp.keep_best:
        curve.best = BestCheckpoint(hp.metric_for_best or task.main_metric, hp.early_stopping)
    bar = _progress(total, f"seed {seed}", rt.progress)
    step = 0
    for epoch in range(1, hp.epochs + 1):
        model.train()
        first = len(step_losses)
        for indices in plan[epoch - 1]:
            lr = lr_at(step, total, warm, hp.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = task.collate([features[j] for j in indices]).to(rt.device)
            with rt.autocast():
                loss = task.loss(model, batch)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step_losses.append(loss.detach().float())
            step += 1
            bar.update(1)
            if step % 10 == 0 or step == total:  # .item() only here: it syncs the device
                bar.set_postfix_str(f"epoch {epoch} loss {loss.item():.4f} lr {lr:.2e} |g| {norm.item():.2f}")
                curve.track(step, loss, lr, norm)
            if hp.eval_every and step % hp.eval_every == 0 and step % per_epoch:
                curve.evaluate(model, step, step_losses)
                model.train()
                if curve.stop:
                    break
        if curve.stop:  # stopped between two epoch ends
            break
        curve.end_epoch(model, epoch, step, step_losses, first)
        if curve.stop:
            break
    bar.close()
    losses = [round(x, 5) for x in torch.stack(step_losses).tolist()] if step_losses else []
    epochs = curve.epochs
    run = SeedRun(seed, epochs[-1] if epochs else {}, epochs, curve.evals, losses, step, time.time() - start)
    run.dev = {k: v for k, v in run.dev.items() if k not in ("epoch", "train_loss")}
    if curve.best is None:
        return run, curve.predictions
    return run, _keep_best(model, curve.best, run, step < total, log)


def _keep_best(model: nn.Module, best: BestCheckpoint, run: SeedRun, stopped: bool, log) -> list:
    """Put the seed's best weights back in `model` and record them; the best evaluation's predictions."""
    best.restore(model)
    run.dev, run.best_step, run.best_metric = best.metrics, best.step, best.best_metric
    if stopped:
        run.stopped_at = run.steps
    log(f"seed {run.seed}: " + (f"stopped early at step {run.steps} ({best.patience} evaluations without "
                                 f"improvement); " if stopped else "") +
        f"kept step {best.step}'s weights ({best.metric} {best.best_metric:.4g})")
    return best.predictions


def _batches(task: Task, train: Prepared, hp: Hyper, g: torch.Generator) -> list[list[int]]:
    """One epoch's batches: the task's own when it has a rule (no repeated text in a contrastive
    batch), else `epoch_batches`."""
    own = task.batches(train, hp.batch_size, g)
    return own if own is not None else epoch_batches(train.lengths, hp.batch_size, g, hp.group_by_length)


class _Curve:
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

    def end_epoch(self, model: nn.Module, epoch: int, step: int, step_losses: list, first: int) -> None:
        metrics = self.evaluate(model, step, step_losses)
        epoch_loss = torch.stack(step_losses[first:]).mean().item()
        self.epochs.append({"epoch": epoch, "train_loss": epoch_loss, **metrics})
        self.log(f"seed {self.seed} epoch {epoch}/{self.n_epochs}: train loss {epoch_loss:.4f}  dev " + _fmt(metrics))


def _fmt(metrics: dict) -> str:
    """The scalar metrics on one line (per-type breakdowns stay in results.json)."""
    return "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in metrics.items() if isinstance(v, (int, float)))


def summarize(runs: list[SeedRun]) -> dict:
    """Median, standard deviation (sample; 0 for one seed), min and max of each dev metric."""
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


def finetune(task: Task, model_dir: Path, train: Prepared, dev: Prepared, hp: Hyper, rt: Runtime, out: Path,
             tokenizer, run_info: dict, log=print, new_model=None, report_to: str = "none") -> dict:
    """Fine-tune one model per seed; save the best seed's model (with its model card), predictions,
    results and plots.

    `new_model(task, model_dir)` builds each seed's model (default: the task's own head);
    `report_to` "tensorboard" writes each seed's curves to OUT/tensorboard/seedN as they happen."""
    if not train.features:
        raise UserError("no training features (is the training file empty?)")
    # Written under a temporary name and renamed at the end: a failed or interrupted run leaves
    # no half-filled folder, and a previous result is replaced only by a complete one.
    with atomic_dir(out) as tmp:
        results = _train_and_save(task, model_dir, train, dev, hp, rt, tmp, tokenizer, run_info, log, new_model,
                                  report_to)
    return results


def _train_and_save(task: Task, model_dir: Path, train: Prepared, dev: Prepared, hp: Hyper, rt: Runtime, out: Path,
                    tokenizer, run_info: dict, log, new_model, report_to: str) -> dict:
    from bertkit.model_card import finetune_card, write_card
    from bertkit.plots import plot_finetuning

    runs: list[SeedRun] = []
    best = None
    start = time.time()
    for seed in hp.seeds:
        model = seed_model(task, model_dir, seed, new_model)
        if seed == hp.seeds[0] and (note := pooler_note(model)):
            log("note: " + note)
        if seed == hp.seeds[0] and report_to != "none":
            log(f"{report_to}: live curves in {out / FOLDER} (moved to OUT/{FOLDER} when the run ends)")
        tracker = open_tracker(report_to, out / FOLDER / f"seed{seed}")
        run, predictions = train_seed(task, model, train, dev, hp, rt, seed, log, tracker)
        tracker.close()
        runs.append(run)
        score = _seed_score(task, hp, run)
        if best is None or score > best[1]:
            best = (seed, score)
            task.adopt(run.dev)  # what the saved evaluation chose (multi-label: its threshold)
            with atomic_dir(out / "model") as tmp:
                task.save_model(model.to("cpu"), tmp, tokenizer)
                write_json(tmp / RUN_FILE, {**task.settings(), **run_info})
                write_card(tmp, finetune_card(task, run_info, run, hp))
            task.write_predictions(out / f"predictions{task.prediction_suffix}", dev, predictions)
        del model
    results = {
        "task": task.name,
        **{k: run_info[k] for k in ("model", "train", "dev", "long_inputs_report") if k in run_info},
        "main_metric": task.main_metric,
        "n_train": len(train.examples),
        "n_dev": len(dev.examples),
        "seeds": [asdict(r) for r in runs],
        "summary": summarize(runs),
        "saved_seed": best[0],
        **_saved_model(task, hp, runs, best[0]),
        "task_settings": task.settings(),
        "time_s": round(time.time() - start, 1),
        "hyper": {**asdict(hp), "seeds": list(hp.seeds)},
        "args": run_info.get("args", {}),
    }
    write_json(out / "results.json", results)
    plot_finetuning([asdict(r) for r in runs], task.main_metric, out)
    return results


def _seed_score(task: Task, hp: Hyper, run: SeedRun) -> float:
    """What picks the saved seed, greater better: its best evaluation's metric with keep_best, else
    its last evaluation's main metric."""
    if not hp.keep_best:
        return run.dev.get(task.main_metric, -math.inf)
    metric = hp.metric_for_best or task.main_metric
    return -run.best_metric if lower_is_better(metric) else run.best_metric


def _saved_model(task: Task, hp: Hyper, runs: list[SeedRun], seed: int) -> dict:
    """What results.json says about the saved model: which seed and which evaluation."""
    if not hp.keep_best:
        return {"saved_model": "the seed with the best dev main metric, after its last epoch"}
    metric = hp.metric_for_best or task.main_metric
    run = next(r for r in runs if r.seed == seed)
    return {"saved_model": f"each seed's best evaluation by dev {metric}; the seed whose best is best",
            "metric_for_best": metric, "best_step": run.best_step, "best_metric": run.best_metric}
