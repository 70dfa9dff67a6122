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

A run is built in `.OUT.partial` beside OUT (`finetune.resume`) and becomes OUT when its last seed
is done: finished seeds are kept there, and the running seed is checkpointed at each evaluation
(and every `Hyper.save_every` steps), so `Hyper.resume` continues a killed run where its newest
checkpoint stopped, ending bit for bit as the uninterrupted run (CPU, fp32): each seed's data
order is drawn up front from its seed, and the checkpoint restores the weights, AdamW's moments,
every generator's state, the losses and evaluations so far and the best evaluation. SIGTERM and
Ctrl-C finish the step, checkpoint it and raise `train.stop.Stopped`.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bertkit.errors import UserError
from bertkit.finetune.best import BestCheckpoint, lower_is_better
from bertkit.finetune.curve import Curve, summarize
from bertkit.finetune.hyper import Hyper, as_record, resume_settings
from bertkit.finetune.registry import RUN_FILE
from bertkit.finetune.resume import RunFolder, SeedCheckpoints
from bertkit.finetune.task import Prepared, Runtime, Task, pooler_note
from bertkit.io import WriteError, atomic_dir, write_json, writing
from bertkit.model_card import finetune_card, write_card
from bertkit.tracking import FOLDER, Tracker, open_tracker
from bertkit.train.checkpoint import optimizer_tensors, restore_optimizer, rng_state, set_rng_state
from bertkit.train.optim import build_optimizer, lr_at, warmup_steps
from bertkit.train.stop import StopRequest

__all__ = ["Hyper", "SeedRun", "epoch_batches", "finetune", "seed_model", "set_seed", "summarize", "train_seed"]


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


def _progress(total: int, desc: str, enabled: bool, initial: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True, mininterval=1.0,
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
               on_eval: Callable[[dict], None] | None = None, saver: SeedCheckpoints | None = None,
               stop: StopRequest | None = None) -> tuple[SeedRun, list]:
    """Train `model` on `train` for hp.epochs, scoring `dev` after each epoch (and every hp.eval_every
    steps); `tracker` gets the scalars (--report-to), `on_eval` each evaluation's record (`bertkit tune`'s
    trial; what it raises, a pruned trial, ends training). With `saver` the seed continues from its
    newest checkpoint and is checkpointed as it goes; `stop` (a signal) ends it after a step with a
    checkpoint, raising `Stopped`. The run record and last dev predictions."""
    return _Seed(task, model, train, dev, hp, rt, seed, log, tracker, on_eval, saver, stop).run()


class _Seed:
    """One seed's training, in the usual order (`run`): lr, forward, backward, clip, step, zero,
    log, evaluate, checkpoint, stop."""

    def __init__(self, task, model, train, dev, hp, rt, seed, log, tracker, on_eval, saver, stop):
        self.task, self.model, self.train, self.hp, self.rt, self.seed = task, model, train, hp, rt, seed
        self.log, self.saver, self.stop = log, saver, stop
        self.start = time.time()
        g = torch.Generator().manual_seed(seed)
        self.plan = [_batches(task, train, hp, g) for _ in range(hp.epochs)]  # the same draws, epoch by epoch
        self.ends = list(itertools.accumulate(map(len, self.plan)))  # the step each epoch ends at
        self.per_epoch, self.total = len(self.plan[0]), self.ends[-1]
        self.warm = warmup_steps(hp.warmup, self.total)
        model.to(rt.device)
        self.optimizer = build_optimizer(model, hp.lr, hp.weight_decay, eps=hp.adam_eps)
        self.clip = hp.max_grad_norm if hp.max_grad_norm > 0 else math.inf  # inf: the norm, unclipped
        self.step_losses: list[torch.Tensor] = []
        self.curve = Curve(task, dev, rt, self.per_epoch, seed, hp.epochs, log, tracker or Tracker(), on_eval)
        if hp.keep_best:
            self.curve.best = BestCheckpoint(hp.metric_for_best or task.main_metric, hp.early_stopping)
        self.saved = -1  # the step of the newest checkpoint

    def run(self) -> tuple[SeedRun, list]:
        hp, curve, model = self.hp, self.curve, self.model
        step, epochs_done = self.resume()
        self.bar = bar = _progress(self.total, f"seed {self.seed}", self.rt.progress, initial=step)
        for epoch in range(epochs_done + 1, hp.epochs + 1):
            if curve.stop:
                break
            model.train()
            first = self.ends[epoch - 2] if epoch > 1 else 0
            for indices in self.plan[epoch - 1][step - first :]:
                step = self.train_step(step, epoch, indices)
                bar.update(1)
                evaluated = bool(hp.eval_every and step % hp.eval_every == 0 and step % self.per_epoch)
                if evaluated:
                    curve.evaluate(model, step, self.step_losses)
                    model.train()
                if step < self.ends[epoch - 1]:  # an epoch's end is saved after its evaluation
                    self.maybe_save(step, epoch - 1, evaluated)
                if curve.stop:
                    break
            if curve.stop:  # stopped between two epoch ends
                break
            curve.end_epoch(model, epoch, step, self.step_losses, first)
            self.maybe_save(step, epoch, True)
        bar.close()
        return self.finish(step)

    def train_step(self, step: int, epoch: int, indices: list[int]) -> int:
        lr = lr_at(step, self.total, self.warm, self.hp.lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = self.task.collate([self.train.features[j] for j in indices]).to(self.rt.device)
        with self.rt.autocast():
            loss = self.task.loss(self.model, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step_losses.append(loss.detach().float())
        step += 1
        if step % 10 == 0 or step == self.total:  # .item() only here: it syncs the device
            self.bar.set_postfix_str(f"epoch {epoch} loss {loss.item():.4f} lr {lr:.2e} |g| {norm.item():.2f}")
            self.curve.track(step, loss, lr, norm)
        return step

    def maybe_save(self, step: int, epochs_done: int, evaluated: bool) -> None:
        """A checkpoint when one is due, or when a signal asks to stop (then `Stopped` is raised)."""
        stopping = self.stop is not None and self.stop.requested
        if self.saver is None or not (stopping or self.saver.due(step, evaluated)):
            return
        if self.saved != step:
            self.save(step, epochs_done)
        if stopping:
            raise self.stop.stopped(f"seed {self.seed} at step {step} of {self.total}, its checkpoint in "
                                    f"{self.saver.root / f'step-{step:07d}'}")

    def save(self, step: int, epochs_done: int) -> None:
        """Checkpoint everything the rest of the seed depends on (`resume` puts it back)."""
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        optimizer, groups = optimizer_tensors(self.optimizer)
        generators, rng = rng_state()
        best, best_state = self.curve.best.state_dict() if self.curve.best is not None else ({}, None)
        losses = torch.stack(self.step_losses) if self.step_losses else torch.zeros(0)
        state = {"epochs_done": epochs_done, "optimizer_groups": groups, "rng": rng, "curve": self.curve.record(),
                 "best": best_state, "elapsed": time.time() - self.start}
        self.saver.save(step, {**tensors, **optimizer, **generators, **best, "losses": losses}, state)
        self.saved = step

    def resume(self) -> tuple[int, int]:
        """(step, epochs done) of the newest checkpoint, restored into this seed; (0, 0) without one."""
        found = self.saver.latest() if self.saver is not None else None
        if found is None:
            return 0, 0
        tensors, state = found
        self.model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        restore_optimizer(self.optimizer, tensors, state["optimizer_groups"])
        self.step_losses = list(tensors["losses"].to(self.rt.device).unbind())
        self.curve.restore(state["curve"])
        if self.curve.best is not None:
            self.curve.best.load(tensors, state["best"])
        set_rng_state(tensors, state["rng"])
        self.start = time.time() - state["elapsed"]
        self.saved = state["step"]
        self.log(f"seed {self.seed}: continuing from step {state['step']} of {self.total} (its checkpoint)")
        return state["step"], state["epochs_done"]

    def finish(self, step: int) -> tuple[SeedRun, list]:
        """The run record, and the predictions of the model it keeps (computed again when the
        evaluation that made them was before a resume)."""
        curve, model = self.curve, self.model
        losses = [round(x, 5) for x in torch.stack(self.step_losses).tolist()] if self.step_losses else []
        epochs = curve.epochs
        run = SeedRun(self.seed, epochs[-1] if epochs else {}, epochs, curve.evals, losses, step,
                      time.time() - self.start)
        run.dev = {k: v for k, v in run.dev.items() if k not in ("epoch", "train_loss")}
        if curve.best is None:
            predictions = curve.predictions
        else:
            predictions = _keep_best(model, curve.best, run, step < self.total, self.log)
        if predictions is None:
            predictions = self.task.predict(model, curve.dev, self.rt)
        return run, predictions


def _keep_best(model: nn.Module, best: BestCheckpoint, run: SeedRun, stopped: bool, log) -> list | None:
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


def finetune(task: Task, model_dir: Path, train: Prepared, dev: Prepared, hp: Hyper, rt: Runtime, out: Path,
             tokenizer, run_info: dict, log=print, new_model=None, report_to: str = "none",
             settings: dict | None = None, flags: dict[str, str] | None = None,
             before_publish: Callable[[Path, dict], None] | None = None) -> dict:
    """Fine-tune one model per seed; save the best seed's model (with its model card), predictions,
    results and plots.

    `new_model(task, model_dir)` builds each seed's model (default: the task's own head);
    `report_to` "tensorboard" writes each seed's curves to OUT/tensorboard/seedN as they happen.
    `settings` are what `hp.resume` must find unchanged besides the hyper-parameters (`flags`:
    their flags where not --their-name). `before_publish(folder, results)` adds files to the finished
    run before it becomes OUT."""
    if not train.features:
        raise UserError("no training features (is the training file empty?)")
    folder = RunFolder(out, resume_settings(hp, settings or {}), hp.seeds, flags)
    folder.open(hp.resume, log)
    try:
        with writing(folder.path), StopRequest() as stop:
            results = _train_and_save(task, model_dir, train, dev, hp, rt, folder, tokenizer, run_info, log,
                                      new_model, report_to, stop)
            if before_publish is not None:
                before_publish(folder.path, results)
            folder.publish()
    except WriteError as e:
        e.kept = e.kept or folder.kept()
        raise
    except BaseException:
        folder.discard_if_empty()  # a mistake found before any work was kept changes nothing
        raise
    finally:
        folder.release()
    return results


def _train_and_save(task: Task, model_dir: Path, train: Prepared, dev: Prepared, hp: Hyper, rt: Runtime,
                    folder: RunFolder, tokenizer, run_info: dict, log, new_model, report_to: str,
                    stop: StopRequest) -> dict:
    runs = [SeedRun(**record) for record in folder.finished]
    best = folder.progress["best"]
    if best is not None:  # what the saved seed's evaluation chose, as when it was saved
        task.adopt(next(r for r in runs if r.seed == best[0]).dev)
    start = time.time() - sum(r.time_s for r in runs)
    out = folder.path
    todo = [s for s in hp.seeds if s not in {r.seed for r in runs}]
    for seed in todo:
        if stop.requested:
            raise stop.stopped(f"{len(runs)} of {len(hp.seeds)} seeds done, kept in {out}")
        model = seed_model(task, model_dir, seed, new_model)
        if not runs and (note := pooler_note(model)):
            log("note: " + note)
        if not runs and report_to != "none":
            log(f"{report_to}: live curves in {out / FOLDER} (moved to OUT/{FOLDER} when the run ends)")
        if seed == todo[0]:
            folder.check_space(model, hp.keep_best, hp.checkpoints)
        saver = folder.seed_checkpoints(seed, hp.save_every)
        resumed = saver.newest_step()
        tracker = open_tracker(report_to, out / FOLDER / f"seed{seed}", purge_step=resumed + 1 if resumed else None)
        run, predictions = train_seed(task, model, train, dev, hp, rt, seed, log, tracker, saver=saver, stop=stop)
        tracker.close()
        runs.append(run)
        score = _seed_score(task, hp, run)
        if best is None or score > best[1]:
            best = [seed, score]
            task.adopt(run.dev)  # what the saved evaluation chose (multi-label: its threshold)
            folder.check()
            with atomic_dir(out / "model") as tmp:
                task.save_model(model.to("cpu"), tmp, tokenizer)
                write_json(tmp / RUN_FILE, {**task.settings(), **run_info})
                write_card(tmp, finetune_card(task, run_info, run, replace(hp, resume=False)))  # resuming is how
            task.write_predictions(out / f"predictions{task.prediction_suffix}", dev, predictions)
        folder.finish_seed(asdict(run), best)
        del model
    return _write_results(task, train, dev, hp, runs, best[0], run_info, out, start, folder.progress["resumes"])


def _write_results(task: Task, train: Prepared, dev: Prepared, hp: Hyper, runs: list[SeedRun], saved: int,
                   run_info: dict, out: Path, start: float, resumes: list) -> dict:
    from bertkit.plots import plot_finetuning

    results = {
        "task": task.name,
        **{k: run_info[k] for k in ("model", "train", "dev", "long_inputs_report") if k in run_info},
        "main_metric": task.main_metric,
        "n_train": len(train.examples),
        "n_dev": len(dev.examples),
        "seeds": [asdict(r) for r in runs],
        "summary": summarize(runs),
        "saved_seed": saved,
        **_saved_model(task, hp, runs, saved),
        "task_settings": task.settings(),
        "time_s": round(time.time() - start, 1),
        "hyper": {k: v for k, v in as_record(hp).items() if k != "resume"},
        "args": run_info.get("args", {}),
        "resumes": resumes,
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
