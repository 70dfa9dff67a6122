"""The fine-tuning loop: one explicit loop for every task (GLUE, your own tables, NER, SQuAD, text pairs).

The paper's recipe (§4 and Appendix A.3): start from the pretrained weights, add one output
layer, train everything end to end for a few epochs with Adam (weight decay 0.01, none on biases
and LayerNorm), linear warm-up over the first 10% of the steps then linear decay to zero, batch
32, learning rate 2e-5..5e-5, gradient norm clipped at 1.0, Adam's epsilon 1e-6 (`Hyper` holds
these knobs, with the classifier's dropout and how often dev is scored). Fine-tuning is unstable
on small sets, so the paper ran several restarts and kept the best on dev; we run each seed from
the same pretrained weights and report every seed, the median and the standard deviation.

The saved model (`OUT/model`) is the seed with the best dev main metric, as it stands after its
last epoch (no per-epoch checkpoint selection); `OUT/predictions.*` are that model's dev
predictions, so `bertkit evaluate` on the same file reproduces its numbers. The loop knows tasks
only through `bertkit.finetune.task.Task`; the model comes from a factory (the task's own by
default), so another implementation of the same head can be trained with the same recipe.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bertkit.errors import UserError
from bertkit.finetune.registry import RUN_FILE
from bertkit.finetune.task import Prepared, Runtime, Task, pooler_note
from bertkit.io import atomic_dir, write_json
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


@dataclass
class SeedRun:
    seed: int
    dev: dict  # the dev metrics after the last epoch
    epochs: list[dict]  # {"epoch", "train_loss", **dev metrics} per epoch
    evals: list[dict]  # {"step", "epoch" (step / steps per epoch), "train_loss" since the last, **dev} per evaluation
    train_loss: list[float]  # per optimizer step
    steps: int
    time_s: float


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
               seed: int, log=print) -> tuple[SeedRun, list]:
    """Train `model` on `train` for hp.epochs, scoring `dev` after each epoch (and every
    hp.eval_every steps). Returns the run record and the last epoch's dev predictions."""
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
    curve = _Curve(task, dev, rt, per_epoch, seed, hp.epochs, log)
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
            if hp.eval_every and step % hp.eval_every == 0 and step % per_epoch:
                curve.evaluate(model, step, step_losses)
                model.train()
        curve.end_epoch(model, epoch, step, step_losses, first)
    bar.close()
    losses = [round(x, 5) for x in torch.stack(step_losses).tolist()] if step_losses else []
    epochs = curve.epochs
    run = SeedRun(seed, epochs[-1] if epochs else {}, epochs, curve.evals, losses, step, time.time() - start)
    run.dev = {k: v for k, v in run.dev.items() if k not in ("epoch", "train_loss")}
    return run, curve.predictions


def _batches(task: Task, train: Prepared, hp: Hyper, g: torch.Generator) -> list[list[int]]:
    """One epoch's batches: the task's own when it has a rule (no repeated text in a contrastive
    batch), else `epoch_batches`."""
    own = task.batches(train, hp.batch_size, g)
    return own if own is not None else epoch_batches(train.lengths, hp.batch_size, g, hp.group_by_length)


class _Curve:
    """The dev learning curve of one seed: an evaluation at the end of each epoch and, with
    --eval-every, between; each records its step, its (fractional) epoch and the mean training
    loss since the previous evaluation."""

    def __init__(self, task: Task, dev: Prepared, rt: Runtime, per_epoch: int, seed: int, n_epochs: int, log):
        self.task, self.dev, self.rt, self.per_epoch = task, dev, rt, per_epoch
        self.seed, self.n_epochs, self.log = seed, n_epochs, log
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
        if step % self.per_epoch:
            self.log(f"seed {self.seed} step {step} (epoch {step / self.per_epoch:.2f}): train loss {loss:.4f}  dev "
                     + _fmt(metrics))
        return metrics

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
             tokenizer, run_info: dict, log=print, new_model=None) -> dict:
    """Fine-tune one model per seed; save the best seed's model, predictions, results and plots.

    `new_model(task, model_dir)` builds each seed's model (default: the task's own head)."""
    if not train.features:
        raise UserError("no training features (is the training file empty?)")
    # Written under a temporary name and renamed at the end: a failed or interrupted run leaves
    # no half-filled folder, and a previous result is replaced only by a complete one.
    with atomic_dir(out) as tmp:
        results = _train_and_save(task, model_dir, train, dev, hp, rt, tmp, tokenizer, run_info, log, new_model)
    return results


def _train_and_save(task: Task, model_dir: Path, train: Prepared, dev: Prepared, hp: Hyper, rt: Runtime, out: Path,
                    tokenizer, run_info: dict, log, new_model) -> dict:
    from bertkit.plots import plot_finetuning

    runs: list[SeedRun] = []
    best = None
    start = time.time()
    for seed in hp.seeds:
        set_seed(seed)
        model = new_model(task, model_dir) if new_model is not None else task.new_model(model_dir)
        if seed == hp.seeds[0] and (note := pooler_note(model)):
            log("note: " + note)
        run, predictions = train_seed(task, model, train, dev, hp, rt, seed, log)
        runs.append(run)
        score = run.dev.get(task.main_metric, -math.inf)
        if best is None or score > best[1]:
            best = (seed, score)
            with atomic_dir(out / "model") as tmp:
                task.save_model(model.to("cpu"), tmp, tokenizer)
                write_json(tmp / RUN_FILE, {**task.settings(), **run_info})
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
        "saved_model": "the seed with the best dev main metric, after its last epoch",
        "time_s": round(time.time() - start, 1),
        "hyper": {**asdict(hp), "seeds": list(hp.seeds)},
        "args": run_info.get("args", {}),
    }
    write_json(out / "results.json", results)
    plot_finetuning([asdict(r) for r in runs], task.main_metric, out)
    return results
