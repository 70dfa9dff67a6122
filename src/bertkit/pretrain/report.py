"""What a run tells a person: its first line, the status line, metrics.jsonl, throughput and MFU, the plots.

Only rank 0 writes. metrics.jsonl gets one JSON record per logging step ("train") and per
evaluation ("val"); a resumed run first drops the records its crashed predecessor wrote after
the checkpoint it resumes from, so the file reads as one uninterrupted run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from bertkit.flops import peak_flops, step_flops
from bertkit.io import write_text
from bertkit.plots import write_plots
from bertkit.tracking import FOLDER, open_tracker, tagged

_NOT_CURVES = ("step", "kind", "elapsed", "eta_s")  # the axis, the prefix, and clocks TensorBoard keeps itself


class RunLog:
    """metrics.jsonl, the plots drawn from it, and the same records as live curves (--report-to:
    RUN/tensorboard, each record's numbers tagged "train/..." or "val/...")."""

    def __init__(self, out: str | Path, is_main: bool, resumed_step: int | None, report_to: str = "none"):
        self.path = Path(out) / "metrics.jsonl"
        self.out, self.is_main, self.resumed_step = Path(out), is_main, resumed_step
        self.records: list[dict] = []
        self.tracker = open_tracker(report_to, self.out / FOLDER, is_main,
                                    purge_step=resumed_step + 1 if resumed_step is not None else None)
        if not is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        if resumed_step is not None and self.path.exists():
            self.records = [r for r in _read_records(self.path) if r.get("step", 0) <= resumed_step]
        write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.records))

    def record(self, record: dict) -> None:
        if not self.is_main:
            return
        self.records.append(record)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        self.tracker.scalars(record["step"], tagged(record["kind"], record, skip=_NOT_CURVES))

    def close(self) -> None:
        self.tracker.close()

    def plots(self) -> None:
        if self.is_main:
            write_plots(self.records, self.out)


def _read_records(path: Path) -> list[dict]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the last line of a killed run may be cut short
    return records


class Throughput:
    """Losses summed on the device between logging steps, tokens/s, MFU and ETA."""

    def __init__(self, model, cfg, seq_len: int, device: torch.device, step: int, elapsed: float, size: int):
        """`size`: the length of what each step adds (`Objective.logged`)."""
        self.flops_per_step = useful_flops(model, cfg, seq_len)
        self.peak = peak_flops(device, cfg.precision)
        self.tokens_per_step = cfg.batch_size * seq_len
        self.losses = torch.zeros(size, device=device)
        self.steps = 0
        self.mark_step, self.mark_time, self.mark_elapsed = step, time.perf_counter(), elapsed

    def add(self, losses: torch.Tensor) -> None:
        self.losses += losses
        self.steps += 1

    def take(self) -> tuple[torch.Tensor, int]:
        losses, steps = self.losses, max(self.steps, 1)
        self.losses, self.steps = torch.zeros_like(losses), 0
        return losses, steps

    def rates(self, step: int, elapsed: float, total: int | None, budget: float | None) -> dict:
        now = time.perf_counter()
        seconds = max(now - self.mark_time, 1e-9)
        per_step = seconds / max(step - self.mark_step, 1)
        tokens_per_s = self.tokens_per_step / per_step
        mfu = self.flops_per_step / per_step / self.peak if self.peak else None
        eta = budget - elapsed if budget is not None else (total - step) * per_step
        self.mark_step, self.mark_time = step, now
        return {"tokens_per_s": tokens_per_s, "mfu": mfu, "elapsed": elapsed, "eta_s": max(eta, 0.0),
                "steps_per_s": 1 / per_step}


def useful_flops(model, cfg, seq_len: int) -> float:
    """The benchmark's useful-FLOP accounting (bertkit.flops) of a step: encoder matrices,
    attention, and the MLM head at the labelled positions only (left to right: at every position);
    for ELECTRA, the generator so and the discriminator at every token (its small RTD head not
    counted)."""
    from bertkit.pretrain.build import generator_of

    # the positions the head predicts: every next token left to right, else the masked share
    per_sequence = seq_len - 1 if cfg.objective == "ltr" else seq_len * cfg.mask_rate
    labelled = round(cfg.batch_size * per_sequence)
    lengths = [seq_len] * cfg.batch_size
    generator = generator_of(model)
    if generator is None:
        return step_flops(model.config, lengths, labelled, training=True)
    return step_flops(generator, lengths, labelled, training=True) + step_flops(model.config, lengths, training=True)


def init_report(source: str, report: dict, generator=None) -> str:
    """One line on what continued pretraining kept from `source` and what starts new (for ELECTRA,
    the config of its new `generator`)."""
    from bertkit.hf import heads_in

    new = heads_in(report.get("initialized", []))
    line = f"initialised from {source}: encoder loaded"
    if generator is None:
        line += ("; no masked-LM head there, so it starts new with its decoder tied to the word embeddings"
                 if "masked-LM" in new else ", masked-LM head loaded")
    rest = [h for h in new if h != "masked-LM"]
    if generator is not None:
        rest.insert(0, f"a generator ({generator.num_hidden_layers} layers, hidden {generator.hidden_size}) "
                       f"sharing its embeddings")
    if rest:
        line += f"; new: {', '.join(rest)}"
    skipped = heads_in(report.get("skipped", []))
    if skipped:
        line += f"; not used: {', '.join(skipped)}"
    if report.get("was_causal"):
        line += "; its left-to-right attention now reads both directions (causal-then-masked)"
    return line


def first_line(cfg, resumed_from: Path | None, changes: dict, parameters: int, sequences: int, world_size: int,
               device: torch.device) -> str:
    """The run's first line: fresh or resumed (with the options it changes), its size, where it runs."""
    if resumed_from is not None:
        began = f"resuming from {resumed_from}"
        if changes:
            began += " with " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())
    else:
        began = f"starting fresh (--resume found no checkpoint in {cfg.out})" if cfg.resume else "starting"
    mfu = "" if peak_flops(device, cfg.precision) else f" (no MFU: no known peak FLOP/s for {device.type})"
    return (f"{began}: {parameters:,} parameters, {sequences:,} training sequences, {world_size} process(es) "
            f"on {device}, {cfg.precision}{mfu}")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def status_line(r: dict, total: int | None, budget: float | None) -> str:
    """One fixed-width line: step/total, loss, lr, grad norm, tokens/s, MFU (a GPU with a known
    peak; "-" elsewhere: `first_line` says why), ETA. A time-budgeted run has no step total: it
    shows the step alone and, in place of the ETA, the time used of its budget. An ELECTRA run's line
    goes on with the generator's MLM loss and accuracy, the RTD loss, and the discriminator's
    accuracy at replaced and at original tokens."""
    mfu = f"{r['mfu']:6.1%}" if r.get("mfu") is not None else "     -"
    if budget is None:
        step, end = f"step {r['step']:>7d}/{total:<7d}", f"eta {_clock(r['eta_s']):>9}"
    else:
        step, end = f"step {r['step']:>7d}", f"time {_clock(r['elapsed']):>8} of {_clock(budget)}"
    line = (f"{step} | loss {r['loss']:8.4f} | lr {r['lr']:9.3e} | gnorm {r['grad_norm']:8.3f} | "
            f"{r['tokens_per_s']:>11,.0f} tok/s | mfu {mfu} | {end}")
    if "rtd_loss" in r:
        line += (f" | mlm {r['mlm_loss']:7.4f} acc {r['mlm_accuracy']:6.1%} | rtd {r['rtd_loss']:6.4f} "
                 f"replaced {r['replaced_accuracy']:6.1%} original {r['original_accuracy']:6.1%}")
    return line
