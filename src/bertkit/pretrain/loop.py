"""The pretraining loop: one explicit loop, in the usual order.

Each step: learning rate, periodic evaluation and checkpoint, micro-steps (forward, backward),
gradient clipping, optimizer step, zeroing, logging, stopping. Nothing hides behind callbacks.

Reproducibility is by construction rather than by saved generator states: the data order is a
permutation drawn from (seed, epoch) and the stream position is checkpointed; masking uses a
generator seeded from (seed, step, micro-step); dropout's generator is re-seeded from
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
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.config import IGNORE_INDEX
from bertkit.devices import resolve_device, resolve_precision
from bertkit.errors import UserError
from bertkit.heads import BertForMaskedLM, BertForPreTraining
from bertkit.hf import config_to_dict
from bertkit.io import write_json
from bertkit.pretrain.init import initialise
from bertkit.pretrain.objective import Objective, derived_seed, evaluate, slice_rows
from bertkit.pretrain.report import RunLog, Throughput, status_line
from bertkit.pretrain.setup import (
    TrainConfig,
    check_resume,
    check_run_dir,
    clear_run_dir,
    data_note,
    model_config,
    open_data,
    run_record,
)
from bertkit.train.checkpoint import (
    latest_checkpoint,
    load_optimizer,
    remove_partial,
    save_checkpoint,
    write_model_copy,
)
from bertkit.train.compile import compile_blocks
from bertkit.train.distributed import Dist, agree, all_sum, barrier, close_distributed, init_distributed
from bertkit.train.optim import build_optimizer, lr_at, lr_at_time, warmup_steps


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


class StopRequest:
    """SIGTERM / SIGINT ask the loop to finish its step, save and exit; a second Ctrl-C aborts."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    @property
    def exit_code(self) -> int:
        """128 + the signal's number (143 SIGTERM, 130 SIGINT), as a shell reports a process the
        signal stopped, so a scheduler can tell a stopped run from a finished one. A rank stopped
        because another rank got the signal reports SIGTERM's."""
        return 128 + (self.signum or signal.SIGTERM)


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
        # Every rank done with its collectives before any tears its group down: a gloo rank that
        # destroyed its group while a peer's last work was in flight once aborted in CI
        # ("terminate called without an active exception").
        barrier(d)
        return status
    finally:
        close_distributed(d)


def _build(cfg: TrainConfig, manifest: dict, checkpoint, device: torch.device):
    cls = BertForPreTraining if cfg.objective == "mlm+nsp" else BertForMaskedLM
    if checkpoint is not None:
        model = cls.from_pretrained(checkpoint.path)
    elif cfg.init_from:
        torch.manual_seed(cfg.seed)  # the same new heads on every rank
        model = cls.from_pretrained(cfg.init_from)
    else:
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        model = initialise(cls(model_config(cfg, manifest)), cfg.init)
    model.to(device)
    if cfg.dropout is not None:
        from bertkit.pretrain.recipes import set_dropout

        set_dropout(model, cfg.dropout)
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.adam_beta2))
    if checkpoint is not None:
        load_optimizer(checkpoint, optimizer)
    return model, optimizer


def init_report(source: str, report: dict) -> str:
    """One line on what continued pretraining kept from `source` and what starts new."""
    from bertkit.hf import heads_in

    new = heads_in(report.get("initialized", []))
    line = f"initialised from {source}: encoder loaded"
    if "masked-LM" in new:
        line += "; no masked-LM head there, so it starts new with its decoder tied to the word embeddings"
    else:
        line += ", masked-LM head loaded"
    rest = [h for h in new if h != "masked-LM"]
    if rest:
        line += f"; new: {', '.join(rest)}"
    skipped = heads_in(report.get("skipped", []))
    if skipped:
        line += f"; not used: {', '.join(skipped)}"
    return line


def _objective(cfg: TrainConfig, manifest: dict, tokenizer) -> Objective:
    if cfg.objective == "ltr":
        return Objective("ltr", None, cfg.seed)
    from bertkit.data import Masker, continuation_table

    masker = Masker(cfg.masking(), int(manifest["vocab_size"]), int(manifest["mask_id"]),
                    list(manifest["special_ids"]), continuation_table(tokenizer))
    return Objective(cfg.objective, masker, cfg.seed)


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
    model, optimizer = _build(cfg, train.manifest, checkpoint, device)
    objective = _objective(cfg, train.manifest, tokenizer)
    start = checkpoint.step if checkpoint is not None else 0
    if d.is_main and cfg.overwrite:
        clear_run_dir(cfg)  # only now: every check passed and the model was built
    log = RunLog(cfg.out, d.is_main, resumed_step=start if checkpoint is not None else None)
    if d.is_main:
        remove_partial(cfg.out)
        write_json(Path(cfg.out) / "config.json", run_record(
            cfg, config_to_dict(model.config), train.manifest, {"world_size": d.world_size, "device": str(device)},
            start if checkpoint is not None else None, changes))
        if checkpoint is not None:
            began = f"resuming from {checkpoint.path}"
            if changes:
                began += " with " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())
        else:
            began = f"starting fresh (--resume found no checkpoint in {cfg.out})" if cfg.resume else "starting"
            if cfg.init_from:
                print(init_report(cfg.init_from, model.load_report), flush=True)
        note = data_note(cfg, train.manifest)
        if note:
            print(note, file=sys.stderr, flush=True)
        print(f"{began}: {sum(p.numel() for p in model.parameters()):,} parameters, {len(train):,} training "
              f"sequences, {d.world_size} process(es) on {device}, {cfg.precision}", flush=True)
    state = checkpoint.state if checkpoint is not None else {"position": 0, "elapsed": 0.0}
    loop = _Loop(cfg, d, device, model, optimizer, objective, train, val, tokenizer, log)
    return loop.run(start, DataStream(len(train), cfg.seed, int(state["position"])), float(state["elapsed"]))


class _Loop:
    """The state the loop shares between its step and its bookkeeping."""

    def __init__(self, cfg, d, device, model, optimizer, objective, train, val, tokenizer, log):
        self.cfg, self.d, self.device = cfg, d, device
        self.model, self.optimizer, self.objective = model, optimizer, objective
        self.train, self.val, self.tokenizer, self.log = train, val, tokenizer, log
        self.train_model = _wrap(model, cfg, d, device)
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
        cfg, d = self.cfg, self.d
        last_eval = last_save = step if self.log.resumed_step is not None else -1
        meter = Throughput(self.model, cfg, int(self.train.manifest["max_seq_len"]), self.device, step, elapsed)
        started = time.perf_counter() - elapsed
        first_step = step + 1
        stopped = False  # a signal reached some rank: every rank stops after the same step
        with StopRequest() as stop:
            while not self.done(step, elapsed):
                lr = self.lr(step, elapsed)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                if step % cfg.eval_every == 0 and step != last_eval:
                    self.evaluate(step)
                    last_eval = step
                if step % cfg.save_every == 0 and step not in (0, last_save):
                    self.save(step, stream, elapsed)
                    last_save = step
                torch.manual_seed(derived_seed(cfg.seed, step, d.rank, 1))  # dropout's generator
                step_began = time.perf_counter()
                losses = self.accumulate(step, stream)
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                step += 1
                meter.add(losses)
                now = time.perf_counter()
                stopping, elapsed, step_s = agree([float(stop.signum is not None), now - started, now - step_began],
                                                  d, self.device)
                stopped = bool(stopping)
                if step > first_step:  # the first step of a process is slow (allocation, kernel set-up)
                    self.step_s = 0.8 * self.step_s + 0.2 * step_s if self.step_s else step_s
                if step % cfg.log_every == 0 or self.done(step, elapsed) or stopped:
                    self.report(step, lr, grad_norm, meter, elapsed)
                if stopped:
                    break
            if step != last_eval and not stopped:  # a stopped run saves at once instead
                self.evaluate(step)
            if step != last_save:
                path = self.save(step, stream, elapsed)
            else:
                path = latest_checkpoint(cfg.out).path if d.is_main else None
        if stopped:
            if d.is_main:
                cause = signal.Signals(stop.signum).name if stop.signum is not None else "a signal to another rank"
                print(f"stopped by {cause} at step {step}; checkpoint in {path}; continue with --resume "
                      f"(exit status {stop.exit_code})", flush=True)
            return stop.exit_code
        if d.is_main:
            write_model_copy(self.model, Path(cfg.out) / "model", self.tokenizer)
            print(f"done: {step} steps; model in {Path(cfg.out) / 'model'}", flush=True)
        return 0

    def accumulate(self, step: int, stream: DataStream) -> torch.Tensor:
        """Forward and backward over this step's micro-batches; this rank's share of the global
        mean losses (total, token, NSP) as a tensor, left on the device."""
        cfg, d = self.cfg, self.d
        indices = stream.take(cfg.batch_size)  # the same global batch on every rank
        micro = cfg.batch_size // cfg.grad_accum
        prepared = [self.objective.prepare(self.train.batch(indices[m * micro : (m + 1) * micro]),
                                           self.device, step, m) for m in range(cfg.grad_accum)]
        # Divide by counts over the whole global batch so the gradient is that of its mean.
        tokens = sum((p["labels"] != IGNORE_INDEX).sum() for p in prepared).clamp(min=1).float()
        losses = torch.zeros(3, device=self.device)
        for m, inputs in enumerate(prepared):
            last = m == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if last or not d.enabled else self.train_model.no_sync()
            with sync:
                with self.autocast():
                    sums = self.objective.loss_sums(self.train_model, slice_rows(inputs, d.rows(micro)))
                token = sums["token_loss"] / tokens
                nsp = sums["nsp_loss"] / cfg.batch_size if "nsp_loss" in sums else torch.zeros_like(token)
                # DDP averages gradients over ranks; scaling by their number makes that a sum.
                ((token + nsp) * d.world_size).backward()
            losses += torch.stack([token + nsp, token, nsp]).detach()
        return losses

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

    def report(self, step: int, lr: float, grad_norm: torch.Tensor, meter: "Throughput", elapsed: float) -> None:
        """The logging step: the only place values leave the device (`.item()`)."""
        window_losses, window_steps = meter.take()
        loss, token, nsp = (all_sum(window_losses, self.d) / window_steps).tolist()
        record = {"kind": "train", "step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm.item(),
                  **meter.rates(step, elapsed, self.total, self.budget)}
        record["next_token_loss" if self.objective.name == "ltr" else "mlm_loss"] = token
        if self.objective.nsp:
            record["nsp_loss"] = nsp
        if self.d.is_main:
            self.log.record(record)
            print(status_line(record, self.total), flush=True)
