"""Interleaved timing of competing implementations in one process, and their peak memory.

On a shared or thermally throttled machine, timing A for a minute and then B for a minute
measures the neighbours as much as A and B. Here every repetition runs each contender once, in
an order that alternates, and the median per contender is reported: slow periods hit both.
"""

from __future__ import annotations

import ctypes
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class Contender:
    """One implementation of a case's work."""

    name: str  # "bertkit", "transformers", "transformers-compiled", "bertkit-fp32", ...
    step: Callable[[], object]  # one timed unit of work
    outputs: Callable[[], dict[str, torch.Tensor]] | None = None  # deterministic outputs to compare
    times: list[float] = field(default_factory=list)  # seconds per step
    peak_bytes: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(contenders: list[Contender], device: torch.device, warmup: int, repeats: int,
                     status: Callable[[str], None] = print) -> None:
    """Fill each contender's `times`: `warmup` untimed steps each, then `repeats` rounds in which
    every contender runs once (forward order on even rounds, reverse on odd)."""
    for c in contenders:
        for _ in range(warmup):
            c.step()
        sync(device)
    for r in range(repeats):
        for c in contenders if r % 2 == 0 else contenders[::-1]:
            sync(device)
            start = time.perf_counter()
            c.step()
            sync(device)
            c.times.append(time.perf_counter() - start)
        last = "  ".join(f"{c.name} {c.times[-1] * 1e3:.0f} ms" for c in contenders)
        status(f"  round {r + 1}/{repeats}: {last}")


def _proc_status_kb(field_name: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def measure_peak(contender: Contender, device: torch.device) -> None:
    """Peak memory of one step: CUDA max allocated, or on CPU the resident-set growth
    (Linux: the high-water mark is reset through /proc/self/clear_refs first)."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        contender.step()
        sync(device)
        contender.peak_bytes = torch.cuda.max_memory_allocated(device) - before
        return
    gc.collect()
    try:
        # Hand freed heap pages back to the OS so the step's own growth shows in the RSS.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return  # not Linux/glibc, or not allowed: leave the peak unknown
    before = _proc_status_kb("VmRSS")
    contender.step()
    peak = _proc_status_kb("VmHWM")
    if before is not None and peak is not None:
        contender.peak_bytes = max(peak - before, 0) * 1024


def max_abs_diffs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    """Largest absolute difference of each output the two contenders share."""
    return {k: float((a[k].float() - b[k].float()).abs().max()) for k in a if k in b and a[k].numel()}
