"""Fine-tuning: one explicit loop for every task (GLUE, your own tables, NER, SQuAD).

The paper's recipe (§4 and Appendix A.3): start from the pretrained weights, add one output
layer, train everything end to end for a few epochs with Adam (weight decay 0.01, none on biases
and LayerNorm), linear warm-up over the first 10% of the steps then linear decay to zero, batch
32, learning rate 2e-5..5e-5, gradient norm clipped at 1.0. Fine-tuning is unstable on small
sets, so the paper ran several restarts and kept the best on dev; we run each seed from the same
pretrained weights and report every seed, the median and the standard deviation.

The saved model (`OUT/model`) is the seed with the best dev main metric, as it stands after its
last epoch (no per-epoch checkpoint selection); `OUT/predictions.*` are that model's dev
predictions, so `bertkit evaluate` on the same file reproduces its numbers.
"""

from __future__ import annotations

import dataclasses
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
from bertkit.io import atomic_dir, atomic_path, write_json
from bertkit.train.finetune_tasks import Runtime, to_device
from bertkit.train.optim import build_optimizer, lr_at, warmup_steps

RUN_FILE = "finetune.json"  # in OUT/model: the task and encoding options `bertkit evaluate` reuses
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "qnli", "mnli", "qqp", "wnli")
TASKS = (*GLUE_TASKS, "classify", "regress", "squad", "ner")


def make_task(name: str, tokenizer, max_seq_len: int | None = None, text_columns: list[str] | None = None,
              label_column: str | None = None, labels: list[str] | None = None, feature_based: bool = False,
              model_dir: Path | None = None, rt: Runtime | None = None, layers: tuple[int, ...] | None = None):
    """The task object for a task name (see TASKS). `labels` fixes the label set (a saved model's);
    otherwise GLUE's official set, or the training set's (`fit_labels`) for your own data."""
    from bertkit.data.tasks import custom_spec, glue_task, read_glue, read_table
    from bertkit.train.finetune_tasks import QATask, SequenceTask, TokenTask

    if name == "squad":
        return QATask(tokenizer, max_seq_len or 384)
    seq_len = max_seq_len or 128
    if name == "ner":
        if not feature_based:
            return TokenTask(labels, tokenizer, seq_len)
        from bertkit.train.feature_tagger import FeatureTaggerTask

        return FeatureTaggerTask(labels, tokenizer, seq_len, model_dir, rt, layers or (-4, -3, -2, -1))
    if name in GLUE_TASKS:
        return SequenceTask(glue_task(name), lambda path: read_glue(name, path), tokenizer, seq_len)
    if name not in ("classify", "regress"):
        raise UserError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    if not text_columns or not label_column:
        raise UserError(f"task {name} needs --text-columns a[,b] and --label-column c")
    if len(text_columns) > 2:
        raise UserError(f"--text-columns takes one or two names, got {len(text_columns)}")
    kind = "classification" if name == "classify" else "regression"
    spec = custom_spec(name, kind, labels if kind == "classification" else None)
    spec = dataclasses.replace(spec, pair=len(text_columns) == 2)
    return SequenceTask(spec, lambda path: read_table(path, text_columns, label_column, kind), tokenizer, seq_len)


@dataclass
class Hyper:
    """The fine-tuning hyper-parameters (defaults: the paper's)."""

    epochs: int = 3
    lr: float = 2e-5  # peak learning rate
    batch_size: int = 32
    warmup: float = 0.1  # below 1: fraction of the steps; otherwise a step count
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seeds: tuple[int, ...] = (1, 2, 3)
    group_by_length: bool = False  # batches of similar length: less padding, same examples per epoch


@dataclass
class SeedRun:
    seed: int
    dev: dict  # the dev metrics after the last epoch
    epochs: list[dict]  # {"epoch", "train_loss", **dev metrics} per epoch
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


def train_seed(task, model: nn.Module, train: dict, dev: dict, hp: Hyper, rt: Runtime, seed: int,
               log=print) -> tuple[SeedRun, list]:
    """Train `model` on `train` for hp.epochs, scoring `dev` after each epoch.

    Returns the run record and the last epoch's dev predictions.
    """
    start = time.time()
    g = torch.Generator().manual_seed(seed)
    features = train["features"]
    n = len(features)
    lengths = [len(f["input_ids"] if "input_ids" in f else f["features"]) for f in features]
    per_epoch = math.ceil(n / hp.batch_size)
    total = per_epoch * hp.epochs
    warm = warmup_steps(hp.warmup, total)
    model.to(rt.device)
    optimizer = build_optimizer(model, hp.lr, hp.weight_decay)
    step_losses: list[torch.Tensor] = []
    epochs: list[dict] = []
    predictions: list = []
    bar = _progress(total, f"seed {seed}", rt.progress)
    step = 0
    for epoch in range(1, hp.epochs + 1):
        model.train()
        first = len(step_losses)
        for indices in epoch_batches(lengths, hp.batch_size, g, hp.group_by_length):
            lr = lr_at(step, total, warm, hp.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = to_device(task.collate([features[j] for j in indices]), rt.device)
            with rt.autocast():
                loss = task.loss(model, batch)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step_losses.append(loss.detach().float())
            step += 1
            bar.update(1)
            if step % 10 == 0 or step == total:  # .item() only here: it syncs the device
                bar.set_postfix_str(f"epoch {epoch} loss {loss.item():.4f} lr {lr:.2e} |g| {norm.item():.2f}")
        predictions = task.predict(model, dev, rt)
        metrics = task.score(dev, predictions)
        epoch_loss = torch.stack(step_losses[first:]).mean().item()
        epochs.append({"epoch": epoch, "train_loss": epoch_loss, **metrics})
        log(f"seed {seed} epoch {epoch}/{hp.epochs}: train loss {epoch_loss:.4f}  dev " + _fmt(metrics))
    bar.close()
    losses = [round(x, 5) for x in torch.stack(step_losses).tolist()] if step_losses else []
    run = SeedRun(seed, epochs[-1] if epochs else {}, epochs, losses, step, time.time() - start)
    run.dev = {k: v for k, v in run.dev.items() if k not in ("epoch", "train_loss")}
    return run, predictions


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


def finetune(task, model_dir: Path, train: dict, dev: dict, hp: Hyper, rt: Runtime, out: Path,
             tokenizer, run_info: dict, log=print) -> dict:
    """Fine-tune one model per seed; save the best seed's model, predictions, results and plots."""
    if not train["features"]:
        raise UserError("no training features (is the training file empty?)")
    out.mkdir(parents=True, exist_ok=True)
    runs: list[SeedRun] = []
    best = None
    start = time.time()
    for seed in hp.seeds:
        set_seed(seed)
        model = task.new_model(model_dir)
        run, predictions = train_seed(task, model, train, dev, hp, rt, seed, log)
        runs.append(run)
        score = run.dev.get(task.main_metric, -math.inf)
        if best is None or score > best[1]:
            best = (seed, score)
            with atomic_dir(out / "model") as tmp:
                task.save_model(model.to("cpu"), tmp, tokenizer)
                write_json(tmp / RUN_FILE, run_info)
            task.write_predictions(out / f"predictions{task.prediction_suffix}", dev, predictions)
        del model
    results = {
        **{k: run_info[k] for k in ("task", "model", "train", "dev") if k in run_info},
        "main_metric": task.main_metric,
        "n_train": len(train["examples"]),
        "n_dev": len(dev["examples"]),
        "seeds": [asdict(r) for r in runs],
        "summary": summarize(runs),
        "saved_seed": best[0],
        "saved_model": "the seed with the best dev main metric, after its last epoch",
        "time_s": round(time.time() - start, 1),
        "hyper": {**asdict(hp), "seeds": list(hp.seeds)},
        "args": run_info.get("args", {}),
    }
    write_json(out / "results.json", results)
    plot_curves(runs, task.main_metric, out)
    return results


def plot_curves(runs: list[SeedRun], metric: str, out: Path) -> None:
    """train_loss.png (loss per step, one line per seed) and dev_<metric>.png (per epoch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, draw in (("train_loss", _draw_loss), (f"dev_{metric}", _draw_dev)):
        fig, ax = plt.subplots(figsize=(7, 4))
        draw(ax, runs, metric)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
        with atomic_path(out / f"{name}.png") as tmp:
            fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)


def _draw_loss(ax, runs: list[SeedRun], metric: str) -> None:
    for r in runs:
        ax.plot(range(1, len(r.train_loss) + 1), r.train_loss, label=f"seed {r.seed}", linewidth=0.8)
    ax.set(xlabel="step", ylabel="training loss", title="Fine-tuning loss")


def _draw_dev(ax, runs: list[SeedRun], metric: str) -> None:
    for r in runs:
        xs = [e["epoch"] for e in r.epochs if metric in e]
        ax.plot(xs, [e[metric] for e in r.epochs if metric in e], marker="o", label=f"seed {r.seed}")
    ax.set(xlabel="epoch", ylabel=f"dev {metric}", title=f"Dev {metric} per epoch")
