"""The pretraining loop: one explicit loop, in the usual order.

Each step: learning rate, periodic evaluation and checkpoint, micro-steps (forward, backward),
gradient clipping, optimizer step, zeroing, logging, stopping. Nothing hides behind callbacks.

Reproducibility is by construction rather than by saved generator states: the data order is a
permutation drawn from (seed, epoch) and the stream position is checkpointed; masking (and
ELECTRA's sampling draw) uses a generator seeded from (seed, step, micro-step); dropout's generator is re-seeded from
(seed, step, rank) at every step. A run resumed from a checkpoint therefore computes exactly
what the uninterrupted run computed, bit for bit on CPU.

With the budget recipe and a time budget (`TrainConfig.time_schedule`) the step's learning rate
is the time schedule's value at the moment the step is expected to end (elapsed time plus the
last steps' mean duration), and the loop stops when the next step would end past the deadline:
the run ends on time with the learning rate at ~0. Time is checkpointed, so a resumed run
continues the same schedule; a time-scheduled run is not bit-reproducible (it follows the clock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertkit.devices import resolve_device, resolve_precision
from bertkit.errors import UserError
from bertkit.hf import config_to_dict
from bertkit.io import write_json
from bertkit.pretrain.build import build_model, build_objective, generator_of, save_final
from bertkit.pretrain.objective import Objective, derived_seed, evaluate, slice_rows
from bertkit.pretrain.report import RunLog, Throughput, first_line, init_report, status_line
from bertkit.pretrain.setup import (
    TrainConfig,
    check_resume,
    check_run_dir,
    clear_run_dir,
    data_note,
    open_data,
    run_record,
)
from bertkit.train.checkpoint import check_checkpoint_space, latest_checkpoint, remove_partial, save_checkpoint
from bertkit.train.compile import compile_blocks
from bertkit.train.distributed import Dist, agree, all_sum, barrier, close_distributed, init_distributed
from bertkit.train.optim import lr_at, lr_at_time, warmup_steps
from bertkit.train.stop import StopRequest

if TYPE_CHECKING:
    from bertkit.data.shards import PretrainingDataset
    from bertkit.tokenizer import Tokenizer


class DataStream:
    """Sequence indices in a fresh permutation per epoch, drawn from (seed, epoch);
    `position` (sequences consumed so far) is all a checkpoint needs to continue the stream."""

    def __init__(self, size: int, seed: int, position: int = 0):
        self.size, self.seed, self.position = size, seed, position
        self._epoch, self._order = -1, np.empty(0, dtype=np.int64)

    def take(self, count: int) -> np.ndarray:
        out = []
        while count:
            epoch, offset = divmod(self.position, self.size)
            if epoch != self._epoch:
                self._epoch, self._order = epoch, np.random.default_rng([self.seed, epoch]).permutation(self.size)
            chunk = self._order[offset : offset + count]
            out.append(chunk)
            self.position += len(chunk)
            count -= len(chunk)
        return np.concatenate(out)


def pretrain(cfg: TrainConfig) -> int:
    """Run (or resume) pretraining as `cfg` says; the process exit status."""
    device = resolve_device(cfg.device, allowed=("cpu", "cuda"))
    d = init_distributed(device.type)
    if device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
        torch.set_float32_matmul_precision("high")
    cfg = dataclasses.replace(cfg, precision=resolve_precision(cfg.precision, device))
    try:
        status = _run(cfg, device, d)
        # Every rank done with its collectives before any tears its group down, and nothing left
        # holding the group when it goes: DDP's reducer keeps its own reference inside reference
        # cycles, and a gloo group first freed during interpreter shutdown aborts the process
        # ("terminate called without an active exception", seen in CI on rank 1 after a finished run).
        gc.collect()
        barrier(d)
        return status
    finally:
        close_distributed(d)


def _wrap(model, cfg: TrainConfig, d: Dist, device: torch.device):
    """The module the loop calls: compiled and/or wrapped for data parallelism."""
    train_model = compile_blocks(model) if cfg.compile else model
    if d.enabled:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        train_model = DistributedDataParallel(train_model, device_ids=ids)
    return train_model


def _run(cfg: TrainConfig, device: torch.device, d: Dist) -> int:
    per_rank = cfg.grad_accum * d.world_size
    if cfg.batch_size % per_rank:
        raise UserError(f"--batch-size {cfg.batch_size} must be divisible by --grad-accum x processes = {per_rank}")
    train, val, tokenizer = open_data(cfg)
    checkpoint = latest_checkpoint(cfg.out) if cfg.resume else None
    check_run_dir(cfg, checkpoint is not None)
    changes = {}
    if checkpoint is not None:
        from bertkit.data import check_tokenizer
        from bertkit.tokenizer import Tokenizer

        check_tokenizer(cfg.data, Tokenizer.from_pretrained(checkpoint.path))
        changes = check_resume(cfg, checkpoint.path, train.manifest)
    barrier(d)  # every rank has checked the run folder before rank 0 writes into it
    model, optimizer = build_model(cfg, train.manifest, checkpoint, device)
    if d.is_main:  # refuse early, with the numbers, when the disk cannot hold the checkpoints the run keeps
        check_checkpoint_space(cfg.out, model, cfg.keep)
    objective = build_objective(cfg, train.manifest, tokenizer)
    start = checkpoint.step if checkpoint is not None else 0
    if d.is_main and cfg.overwrite:
        clear_run_dir(cfg)  # only now: every check passed and the model was built
    log = RunLog(cfg.out, d.is_main, resumed_step=start if checkpoint is not None else None, report_to=cfg.report_to)
    if d.is_main:
        remove_partial(cfg.out)
        write_json(Path(cfg.out) / "config.json", run_record(
            cfg, config_to_dict(model.config), train.manifest, {"world_size": d.world_size, "device": str(device)},
            start if checkpoint is not None else None, changes))
        if checkpoint is None and cfg.init_from:
            print(init_report(cfg.init_from, model.load_report, generator_of(model)), flush=True)
        note = data_note(cfg, train.manifest)
        if note:
            print(note, file=sys.stderr, flush=True)
        parameters = sum(p.numel() for p in model.parameters())
        print(first_line(cfg, checkpoint.path if checkpoint is not None else None, changes, parameters, len(train),
                         d.world_size, device), flush=True)
    state = checkpoint.state if checkpoint is not None else {"position": 0, "elapsed": 0.0}
    loop = _Loop(cfg, d, device, _Parts(model, optimizer, objective, train, val, tokenizer, log))
    try:
        return loop.run(start, DataStream(len(train), cfg.seed, int(state["position"])), float(state["elapsed"]))
    finally:
        log.close()


@dataclass
class _Parts:
    """What a run's loop works on, built by `_run`."""

    model: torch.nn.Module  # the bare model (checkpoints, evaluation, the saved copy)
    optimizer: torch.optim.Optimizer
    objective: Objective
    train: PretrainingDataset
    val: PretrainingDataset | None  # None or empty: no evaluation
    tokenizer: Tokenizer  # saved with every checkpoint and the final model
    log: RunLog


class _Loop:
    """One explicit loop, in the usual order (`run`), and the concerns it calls: the learning
    rate, evaluation, checkpoints, one optimizer step, agreement across ranks, logging, the end."""

    def __init__(self, cfg: TrainConfig, d: Dist, device: torch.device, parts: _Parts):
        self.cfg, self.d, self.device = cfg, d, device
        self.model, self.optimizer, self.objective = parts.model, parts.optimizer, parts.objective
        self.train, self.val, self.tokenizer, self.log = parts.train, parts.val, parts.tokenizer, parts.log
        self.train_model = _wrap(self.model, cfg, d, device)
        use_bf16 = cfg.precision == "bf16"
        self.autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)
        self.total = cfg.total_steps
        self.warmup = warmup_steps(cfg.warmup, self.total) if self.total else cfg.warmup
        self.budget = cfg.minutes * 60 if cfg.minutes is not None else None
        self.step_s = 0.0  # mean seconds per step lately (time schedule only)

    def lr(self, step: int, elapsed: float) -> float:
        if self.cfg.time_schedule:  # the value when this step is expected to end
            return lr_at_time(elapsed + self.step_s, self.budget, self.cfg.warmup, self.cfg.lr)
        if self.budget is not None:  # a time budget: the schedule runs on milliseconds
            ms = self.budget * 1000
            return lr_at(elapsed * 1000, ms, self.warmup * ms, self.cfg.lr)
        return lr_at(step, self.total, self.warmup, self.cfg.lr)

    def done(self, step: int, elapsed: float) -> bool:
        if self.cfg.time_schedule:  # the next step would end past the deadline
            return elapsed + self.step_s > self.budget
        return elapsed >= self.budget if self.budget is not None else step >= self.total

    def run(self, step: int, stream: DataStream, elapsed: float) -> int:
        """Train from `step`, `elapsed` seconds into the run, until it is done or a signal stops
        it; the exit status."""
        self.last_eval = self.last_save = step if self.log.resumed_step is not None else -1
        self.meter = Throughput(self.model, self.cfg, int(self.train.manifest["max_seq_len"]), self.device, step,
                                elapsed, len(self.objective.logged))
        self.started, self.first_step = time.perf_counter() - elapsed, step + 1
        stopped = False  # a signal reached some rank: every rank stops after the same step
        with StopRequest() as stop:
            while not stopped and not self.done(step, elapsed):
                lr = self.set_lr(step, elapsed)
                self.maybe_evaluate(step)
                self.maybe_save(step, stream, elapsed)
                began = time.perf_counter()
                losses, grad_norm = self.train_step(step, stream)
                step += 1
                self.meter.add(losses)
                stopped, elapsed = self.agree(stop, step, began)
                if step % self.cfg.log_every == 0 or stopped or self.done(step, elapsed):
                    self.report(step, lr, grad_norm, elapsed)
            path = self.last_checkpoint(step, stream, elapsed, evaluate=not stopped)
        return self.finish(step, path, stop if stopped else None)

    def set_lr(self, step: int, elapsed: float) -> float:
        lr = self.lr(step, elapsed)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def maybe_evaluate(self, step: int) -> None:
        if step % self.cfg.eval_every == 0 and step != self.last_eval:
            self.evaluate(step)
            self.last_eval = step

    def maybe_save(self, step: int, stream: DataStream, elapsed: float) -> None:
        if step % self.cfg.save_every == 0 and step not in (0, self.last_save):
            self.save(step, stream, elapsed)
            self.last_save = step

    def train_step(self, step: int, stream: DataStream) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer update: micro-steps, clipping, step, zeroing. (losses, gradient norm),
        left on the device."""
        torch.manual_seed(derived_seed(self.cfg.seed, step, self.d.rank, 1))  # dropout's generator
        losses = self.accumulate(step, stream)
        clip = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses, grad_norm

    def agree(self, stop: StopRequest, step: int, began: float) -> tuple[bool, float]:
        """(stop now?, seconds since the run began), the same on every rank (under DDP an
        all-reduce, every step), so all ranks stop after the same step; updates the recent step
        time the time schedule looks ahead by."""
        now = time.perf_counter()
        stopping, elapsed, step_s = agree([float(stop.signum is not None), now - self.started, now - began],
                                          self.d, self.device)
        if step > self.first_step:  # the first step of a process is slow (allocation, kernel set-up)
            self.step_s = 0.8 * self.step_s + 0.2 * step_s if self.step_s else step_s
        return bool(stopping), elapsed

    def last_checkpoint(self, step: int, stream: DataStream, elapsed: float, evaluate: bool) -> Path | None:
        """The final evaluation (not when stopping: a stopped run saves at once) and the checkpoint
        of the last step, unless it was just saved; its folder (on rank 0)."""
        if evaluate and step != self.last_eval:
            self.evaluate(step)
        if step != self.last_save:
            return self.save(step, stream, elapsed)
        return latest_checkpoint(self.cfg.out).path if self.d.is_main else None

    def finish(self, step: int, path: Path | None, stopped_by: StopRequest | None) -> int:
        """The last line, the final model (when not stopped) and the exit status."""
        if stopped_by is not None:
            if self.d.is_main:
                signum = stopped_by.signum
                cause = signal.Signals(signum).name if signum is not None else "a signal to another rank"
                print(f"stopped by {cause} at step {step}; checkpoint in {path}; continue with --resume "
                      f"(exit status {stopped_by.exit_code})", flush=True)
            return stopped_by.exit_code
        if self.d.is_main:
            saved = save_final(self.model, self.cfg, self.tokenizer, self.log.records)
            print(f"done: {step} steps; {saved}", flush=True)
        return 0

    def accumulate(self, step: int, stream: DataStream) -> torch.Tensor:
        """Forward and backward over this step's micro-batches; this rank's share of what the
        status line shows (`Objective.logged`: each loss's global mean, accuracy counts) as a
        tensor, left on the device."""
        cfg, d, objective = self.cfg, self.d, self.objective
        indices = stream.take(cfg.batch_size)  # the same global batch on every rank
        micro = cfg.batch_size // cfg.grad_accum
        prepared = [objective.prepare(self.train.batch(indices[m * micro : (m + 1) * micro]),
                                      self.device, step, m) for m in range(cfg.grad_accum)]
        # Divide by counts over the whole global batch so the gradient is that of its mean.
        counts = [objective.counts(p) for p in prepared]
        totals = {k: sum(c[k] for c in counts).clamp(min=1).float() for k in objective.losses}
        logged = torch.zeros(len(objective.logged), device=self.device)
        for m, inputs in enumerate(prepared):
            last = m == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if last or not d.enabled else self.train_model.no_sync()
            with sync:
                with self.autocast():
                    sums = objective.loss_sums(self.train_model, slice_rows(inputs, d.rows(micro)),
                                               accuracy=objective.train_accuracy)
                means = {k: sums[k] / totals[k] for k in objective.losses}
                loss = sum(weight * means[k] for k, (_, weight) in objective.losses.items())
                # DDP averages gradients over ranks; scaling by their number makes that a sum.
                (loss * d.world_size).backward()
            logged += torch.stack([means[k] if k in means else sums[k].float() for k in objective.logged]).detach()
        return logged

    def evaluate(self, step: int) -> None:
        if not self.d.is_main or self.val is None or len(self.val) == 0 or self.cfg.eval_samples < 1:
            return
        batch = self.cfg.batch_size // self.cfg.grad_accum
        metrics = evaluate(self.model, self.objective, self.val, self.device, self.cfg.eval_samples, batch,
                           self.autocast)
        self.log.record({"kind": "val", "step": step, **metrics})
        print("  val  " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
        self.log.plots()

    def save(self, step: int, stream: DataStream, elapsed: float) -> Path | None:
        if not self.d.is_main:
            return None
        state = {"position": stream.position, "elapsed": elapsed, "epoch": stream.position / stream.size}
        return save_checkpoint(self.cfg.out, step, self.model, self.optimizer, state, self.tokenizer,
                               keep=self.cfg.keep)

    def report(self, step: int, lr: float, grad_norm: torch.Tensor, elapsed: float) -> None:
        """The logging step: the one place a step's losses and gradient norm are read back from
        the device (`.item()`, `.tolist()`); `agree` is the other per-step sync, under DDP only."""
        window, window_steps = self.meter.take()
        values = dict(zip(self.objective.logged, (all_sum(window, self.d) / window_steps).tolist()))
        metrics = self.objective.metrics(values, dict.fromkeys(self.objective.losses, 1.0))  # means already
        record = {"kind": "train", "step": step, "loss": metrics.pop("loss"), "lr": lr, "grad_norm": grad_norm.item(),
                  **self.meter.rates(step, elapsed, self.total, self.budget), **metrics}
        if self.d.is_main:
            self.log.record(record)
            print(status_line(record, self.total, self.budget), flush=True)
