"""The CPU thread count of a command: chosen once, from the machine's load, unless the user chose.

PyTorch's default is one OpenMP thread per core. On a machine another job shares, that is slow:
every parallel region waits at its barrier for the thread whose core is taken, so each op runs at
the pace of the busiest core (beside one busy process on 2 cores, `finetune` took 94 s with the
default and 23 s with one thread; `serve` answered 5.7 against 69.2 requests/s). So a command
takes the cores no other process keeps busy, from the 1-minute load average, at least one;
`--threads N`, or OMP_NUM_THREADS in the environment, fixes the count instead. `bertkit.cli`
applies the choice before a command's work starts and reports it in one line on stderr, printed
when the command writes its first output, so that a mistake found before is the only line.

OpenMP's wait policy is part of the same choice. Between parallel regions libgomp's idle threads
spin before they sleep; on a core another process wants, a spinning thread takes that core's time
from the process that needs it, and in `serve` from the server's own event loop and tokenizing
thread. So with more than one thread, the threads wait passively (OMP_WAIT_POLICY=PASSIVE) when the
machine is not idle (1-minute load of 0.5 or more) and always in `serve`; OMP_WAIT_POLICY in the
environment wins. It is read when torch loads, so it is set before torch is imported
(bench/README.md, "serve vs infinity", has the measurements behind it).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

IDLE_LOAD = 0.5  # a 1-minute load average below this: no other process keeps a core busy


@dataclass(frozen=True)
class Threads:
    count: int  # torch's intra-op threads
    reason: str  # "--threads", "OMP_NUM_THREADS", or the cores and load it was chosen from
    chosen: bool  # True when picked from the load, False when the user fixed it
    wait_policy: str | None = None  # OMP_WAIT_POLICY to set ("PASSIVE"), None: OpenMP's default

    def line(self) -> str:
        """`threads: 1 (2 cores, load 1.2; --threads N to override)`."""
        waits = ", passive wait" if self.wait_policy == "PASSIVE" else ""
        return f"threads: {self.count}{waits} ({self.reason}; --threads N to override)"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _omp_env() -> int | None:
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def wait_policy(count: int, load: float, server: bool = False) -> str | None:
    """"PASSIVE" when `count` > 1 threads would spin beside other work: on a machine that is not
    idle, or in a server (whose event loop and tokenizer share the cores); None otherwise, or
    when OMP_WAIT_POLICY is already set."""
    if os.environ.get("OMP_WAIT_POLICY", "").strip() or count <= 1:
        return None
    return "PASSIVE" if server or load >= IDLE_LOAD else None


def choose_threads(requested: int | None = None, server: bool = False) -> Threads:
    """`requested` if given, else OMP_NUM_THREADS if set, else the cores the load leaves free
    (cores minus the 1-minute load average, rounded, between 1 and the cores); with the wait
    policy for that count (`wait_policy`; `server`: the command is `serve`)."""
    load = _load()
    if requested:
        return Threads(requested, "--threads", False, wait_policy(requested, load, server))
    env = _omp_env()
    if env is not None:
        return Threads(env, "OMP_NUM_THREADS", False, wait_policy(env, load, server))
    cores = _cores()
    count = max(1, min(cores, int(cores - load + 0.5)))
    return Threads(count, f"{cores} cores, load {load:.1f}", True, wait_policy(count, load, server))


def apply_threads(threads: Threads) -> None:
    """Give torch `threads.count` intra-op threads and the wait policy. Before torch is imported
    these are OMP_NUM_THREADS and OMP_WAIT_POLICY, which OpenMP reads when torch loads (so a
    command that fails before it needs torch never pays for importing it) and which processes it
    starts inherit; once torch is loaded only the count can still change."""
    if threads.wait_policy and "torch" not in sys.modules:
        os.environ["OMP_WAIT_POLICY"] = threads.wait_policy
    if "torch" not in sys.modules:
        os.environ["OMP_NUM_THREADS"] = str(threads.count)
        return
    import torch

    if torch.get_num_threads() != threads.count:
        torch.set_num_threads(threads.count)
