"""What the kill tests share: a command run in a child forked from the test process, and output
folders compared the way a continued run must equal an uninterrupted one (tensors with
torch.equal, JSON without its times, other files byte for byte)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import traceback
from pathlib import Path

import torch
from safetensors.torch import load_file

from bertkit.cli import main

TIMES = ("time_s", "started", "wall_s", "cell_time_s", "elapsed_s", "build_seconds", "seconds", "resumes", "time")


class Child:
    """`bertkit ARGV` in a child forked from this process, in `cwd`, its output in `log`."""

    def __init__(self, argv: list[str], cwd: Path, log: Path):
        self.returncode: int | None = None
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            _child(argv, cwd, log)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        self.wait()


def _own_progress_bar_lock() -> None:
    """tqdm's write lock is a multiprocessing lock that a forked child shares with the test process:
    a child killed while holding it (mid-bar) would leave the next bar in the test process waiting
    forever. The child takes a lock of its own."""
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _child(argv: list[str], cwd: Path, log: Path) -> None:
    """In the forked child: the command's output to `log`, run it, exit with its status (never return)."""
    code = 70
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)  # noqa: SIM115 - until os._exit
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _own_progress_bar_lock()
        os.chdir(cwd)
        code = main(argv)
    except BaseException:  # whatever it was, the log says it and the status shows it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def tensors_equal(a: Path, b: Path) -> None:
    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys(), a
    differ = [k for k in x if not torch.equal(x[k], y[k])]
    assert not differ, f"{a}: {len(differ)} tensors differ ({differ[:3]})"


def without_times(value):
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


def same_folder(a: Path, b: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Every file of `a` in `b` with the same content (tensors by torch.equal, JSON without times,
    PNGs left out); the files compared."""
    files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file() and not p.name.startswith("."))
    other = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert files == other, f"{set(files) ^ set(other)}"
    for name in files:
        if name.endswith(".png") or name.startswith(skip) or "tensorboard" in name:
            continue
        if name.endswith(".safetensors"):
            tensors_equal(a / name, b / name)
        elif name.endswith(".json"):
            assert without_times(json.loads((a / name).read_text())) == \
                without_times(json.loads((b / name).read_text())), name
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    return files


def resume_point(partial: Path) -> tuple[int, int] | None:
    """(seed, step) of the checkpoint a killed fine-tuning run left for its running seed (complete:
    its trainer_state.json is written last), or None: the continued run starts that seed at step 0."""
    try:
        finished = {r["seed"] for r in json.loads((partial / "progress.json").read_text())["finished"]}
    except (OSError, ValueError, KeyError):
        finished = set()
    states = sorted((partial / "checkpoint").glob("step-*/trainer_state.json"))
    if not states:
        return None
    seed = json.loads(states[-1].read_text())["seed"]
    return None if seed in finished else (seed, int(states[-1].parent.name[5:]))


def continued_from(log: Path, point: tuple[int, int] | None, per_epoch: int) -> None:
    """The continued run whose output is `log` began where `point` says: it says it continues seed S
    from step N, and every evaluation it logs for seed S comes after step N (a restart at step 0
    logs the earlier ones again); with no checkpoint, it continues none."""
    text = log.read_text()
    said = re.findall(r"seed (\d+): continuing from step (\d+) of", text)
    if point is None:
        assert not said, (log, said)
        return
    seed, step = point
    assert said == [(str(seed), str(step))], (log, said, point)
    evals = [int(m[0]) if m[0] else int(m[1]) * per_epoch
             for m in re.findall(rf"seed {seed} (?:step (\d+) |epoch (\d+)/\d+:)", text)]
    assert all(e > step for e in evals), (log, point, evals)
