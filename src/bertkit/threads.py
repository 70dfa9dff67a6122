"""The CPU thread count of a command: chosen once, from the machine's load, unless the user chose.

PyTorch's default is one OpenMP thread per core. On a machine another job shares, that is slow:
every parallel region waits at its barrier for the thread whose core is taken, so each op runs at
the pace of the busiest core (beside one busy process on 2 cores, `finetune` took 94 s with the
default and 23 s with one thread; `serve` answered 5.7 against 69.2 requests/s). So a command
takes the cores no other process keeps busy, from the 1-minute load average, at least one;
`--threads N`, or OMP_NUM_THREADS in the environment, fixes the count instead. `bertkit.cli`
applies the choice before a command's work starts and reports it in one line on stderr.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Threads:
    count: int  # torch's intra-op threads
    reason: str  # "--threads", "OMP_NUM_THREADS", or the cores and load it was chosen from
    chosen: bool  # True when picked from the load, False when the user fixed it

    def line(self) -> str:
        """`threads: 1 (2 cores, load 1.2; --threads N to override)`."""
        return f"threads: {self.count} ({self.reason}; --threads N to override)"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _omp_env() -> int | None:
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def choose_threads(requested: int | None = None) -> Threads:
    """`requested` if given, else OMP_NUM_THREADS if set, else the cores the load leaves free
    (cores minus the 1-minute load average, rounded, between 1 and the cores)."""
    if requested:
        return Threads(requested, "--threads", False)
    env = _omp_env()
    if env is not None:
        return Threads(env, "OMP_NUM_THREADS", False)
    cores = _cores()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    free = int(cores - load + 0.5)
    return Threads(max(1, min(cores, free)), f"{cores} cores, load {load:.1f}", True)


def apply_threads(threads: Threads) -> None:
    """Give torch `threads.count` intra-op threads. Before torch is imported this is
    OMP_NUM_THREADS, which torch reads when it loads (so a command that fails before it needs
    torch never pays for importing it) and which processes it starts inherit."""
    if "torch" not in sys.modules:
        os.environ["OMP_NUM_THREADS"] = str(threads.count)
        return
    import torch

    if torch.get_num_threads() != threads.count:
        torch.set_num_threads(threads.count)
