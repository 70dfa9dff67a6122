"""An unfinished fine-tuning run, kept beside its output so that `--resume` continues it.

`bertkit finetune` (and `distill`, which trains through the same loop) builds OUT in the hidden
folder `.OUT.partial` beside it, renamed to OUT when the last seed is done (a previous OUT is
replaced only then, so a stopped run never leaves a half-written OUT). It holds
- progress.json: the run's settings (what `--resume` compares, naming each that differs), each
  finished seed's record, the best seed so far and the resumes;
- what OUT receives as seeds finish: model/ (the best seed so far), its predictions, tensorboard/;
- checkpoint/step-NNNNNNN/: the running seed's newest checkpoint (`train.checkpoint.write_state`):
  its weights, AdamW's moments, every generator's state, the step losses and evaluations so far,
  and the best evaluation's weights with early stopping's count. Each is written under a temporary
  name and renamed; the previous one is deleted only then;
- .lock: held (flock) by the one process running the folder, released by the kernel when that
  process ends, however it ends. A second process on the same run (a `--resume` while the first
  still lives: a SIGKILL sent to a wrapper, a shell or `uv run`, leaves bertkit running) is refused
  before it touches anything; two processes would each train the rest, the first to finish would
  rename the folder to OUT, and the other would find its folder gone.
The seed's data order is drawn from its seed, so with those a resumed seed computes exactly what
the uninterrupted one would have. This module reads and compares progress.json without torch
(`describe`, the CLI's check); the tensors are `train.checkpoint`'s.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import (
    WriteError,
    check_free_space,
    partial_dir,
    publish_dir,
    read_json,
    remove_leftovers,
    size_text,
    write_json,
)

PROGRESS = "progress.json"
CHECKPOINTS = "checkpoint"
LOCK = ".lock"
VERSION = 1


def describe(out: str | Path) -> str | None:
    """What an unfinished run of `out` holds, for a message; None when there is none."""
    path = partial_dir(out)
    if not (path / PROGRESS).is_file():
        return None
    try:
        progress = json.loads((path / PROGRESS).read_text(encoding="utf-8"))
        seeds, done = progress["seeds"], [r["seed"] for r in progress["finished"]]
    except (ValueError, KeyError, TypeError):
        return f"an unfinished run whose {PROGRESS} cannot be read is kept in {path}"
    steps = sorted((path / CHECKPOINTS).glob("step-*"))
    running = f"; the next seed's checkpoint at step {int(steps[-1].name[5:])}" if steps else ""
    return f"an unfinished run ({len(done)} of {len(seeds)} seeds done{running}) is kept in {path}"


def _flat(settings: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def differences(saved: dict, now: dict, flags: dict[str, str]) -> list[str]:
    """Each setting that differs, as `--flag before -> now` (`flags`: a setting's flag where it is
    not --its-last-name)."""
    before, after = _flat(json.loads(json.dumps(saved))), _flat(json.loads(json.dumps(now)))
    changed = [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
    return [f"{flags.get(k, '--' + k.rsplit('.', 1)[-1].replace('_', '-'))} {before.get(k)!r} -> {after.get(k)!r}"
            for k in changed]


def checkpoint_bytes(model, keep_best: bool) -> tuple[int, int]:
    """(bytes of `model`'s weights, of a seed's checkpoint of it: the weights, AdamW's two moments of
    the trained ones, and with `keep_best` the best evaluation's weights)."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    moments = 2 * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weights, weights * (2 if keep_best else 1) + moments


class RunFolder:
    """`.OUT.partial`: opened fresh, or continued (`resume`) when its settings are the run's."""

    def __init__(self, out: str | Path, settings: dict, seeds: tuple[int, ...], flags: dict[str, str] | None = None):
        self.out, self.path = Path(out), partial_dir(out)
        self.settings, self.seeds, self.flags = settings, list(seeds), flags or {}
        self.progress: dict = {}
        self._lock: int | None = None  # the descriptor holding LOCK while this process runs the folder

    def open(self, resume: bool, log=print) -> None:
        """Continue the folder (`resume`: the same settings, else a UserError naming each that
        differs) or start it afresh, replacing an unfinished run that --resume did not ask for.
        The folder's lock is held from here until `release` (refused: another process holds it)."""
        try:
            self._open(resume, log)
        except BaseException:
            self.release()
            raise

    def _open(self, resume: bool, log) -> None:
        if resume and (self.path / PROGRESS).is_file():
            self._take()
            self.compare()
            for note in remove_leftovers(self.path / PROGRESS) + self._clear_temporaries():
                log(f"note: {note}")
            self.progress["resumes"].append({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                             "finished_seeds": len(self.finished)})
        else:
            if self.path.is_dir():  # never a folder another process is running
                self._take(create=False)
                self.release()
            if resume:
                log(f"note: --resume: no unfinished run in {self.path}; starting from the first seed")
            elif self.path.exists():
                log(f"note: removed the unfinished run in {self.path} (starting again)")
            shutil.rmtree(self.path, ignore_errors=True)
            self.path.mkdir(parents=True)
            self._take()
            self.progress = {"version": VERSION, "settings": self.settings, "seeds": self.seeds, "finished": [],
                             "best": None, "resumes": []}
        self._write()

    def discard_if_empty(self) -> None:
        """Delete the folder when this run made it and it holds no finished seed or checkpoint yet."""
        if self.progress and not self.progress["resumes"] and not self.finished and self.path.is_dir() \
                and not (self.path / CHECKPOINTS).exists():
            shutil.rmtree(self.path, ignore_errors=True)

    def compare(self) -> None:
        """With an unfinished run kept: a UserError naming each setting that differs from it."""
        if not (self.path / PROGRESS).is_file():
            return
        if self._lock is None:  # before any data is read: a run another process is running is not ours
            self._take(create=False)
            self.release()
        self.progress = read_json(self.path / PROGRESS, "an unfinished run's progress")
        changed = differences(self.progress.get("settings", {}), self.settings, self.flags)
        if changed or self.progress.get("version") != VERSION:
            raise UserError(f"--resume with settings that differ from the unfinished run it continues: "
                            f"{'; '.join(changed) or 'another version'} (give the run's own settings, or "
                            f"--overwrite to start again)", self.path)

    def _take(self, create: bool = True) -> None:
        """Hold LOCK until `release` or the process's end; a UserError saying who holds it when
        another live process does. Without `create` (a check that changes nothing) a folder without
        LOCK is held by no one."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): one process per folder is the user's to keep
            return
        try:
            fd = os.open(self.path / LOCK, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            holder = f"another process (pid {pid})" if pid else "another process"
            raise UserError(f"{holder} is still running this run; let it finish (its result goes to {self.out}) "
                            f"or stop it, then continue with --resume", self.path) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode("ascii"))
        self._lock = fd

    def release(self) -> None:
        """Let go of LOCK (the run is published, or this process stops working on it)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def bytes_held(self) -> int:
        """Bytes the folder holds now (what a resumed run replaces rather than adds)."""
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file()) if self.path.is_dir() else 0

    def check_space(self, model, keep_best: bool, checkpoints: bool) -> None:
        """Before the first step: refuse, with the numbers, a disk that cannot hold the saved model
        and the running seed's checkpoints (two at once while the next is written)."""
        weights, checkpoint = checkpoint_bytes(model, keep_best)
        needed = weights + (2 * checkpoint if checkpoints else 0) - self.bytes_held()
        what = f"the saved model ({size_text(weights)})" + (
            f" and the running seed's checkpoints (2 of {size_text(checkpoint)}; --save-every 0 writes none)"
            if checkpoints else "")
        check_free_space(self.out, needed, what)

    def _clear_temporaries(self) -> list[str]:
        """What a killed write left inside the folder: hidden temporaries (a checkpoint or model
        half-written), a model moved aside while it was being replaced."""
        notes = []
        for folder in (self.path, self.path / CHECKPOINTS):
            found = [*folder.glob(".*.tmp"), *folder.glob(".*.old")] if folder.is_dir() else []
            for entry in sorted(found):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                notes.append(f"removed {entry}, which a stopped run left half-written")
        return notes

    def _write(self) -> None:
        try:
            write_json(self.path / PROGRESS, self.progress)
        except WriteError as e:
            e.kept = e.kept or self.kept()
            raise

    def check(self) -> None:
        """A WriteError when the folder was deleted under the run (its next write would recreate it empty)."""
        if not (self.path / PROGRESS).is_file():
            raise WriteError(errno.ENOENT, "the run's folder was deleted while it ran", self.path,
                             kept="nothing of this run (its folder is gone)")

    @property
    def finished(self) -> list[dict]:
        return self.progress["finished"]

    def finish_seed(self, record: dict, best: list | None) -> None:
        """A seed is done: its record and the best seed so far (its outputs already in the folder)."""
        self.progress["finished"].append(record)
        self.progress["best"] = best
        self.check()
        self._write()
        shutil.rmtree(self.path / CHECKPOINTS, ignore_errors=True)

    def seed_checkpoints(self, seed: int, every: int | None) -> SeedCheckpoints:
        return SeedCheckpoints(self.path / CHECKPOINTS, seed, every, self)

    def kept(self) -> str:
        """What a failed write leaves for `--resume`, in words."""
        done = [str(r["seed"]) for r in self.progress.get("finished", [])]
        steps = sorted((self.path / CHECKPOINTS).glob("step-*"))
        parts = [f"seed{'s' * (len(done) > 1)} {', '.join(done)} (finished)"] if done else []
        if steps:
            parts.append(f"the next seed's checkpoint at step {int(steps[-1].name[5:])}")
        return f"{' and '.join(parts) or 'nothing yet'} in {self.path}"

    def publish(self) -> None:
        """The run is complete: the folder becomes OUT (replacing a previous OUT only now)."""
        self.check()
        shutil.rmtree(self.path / CHECKPOINTS, ignore_errors=True)
        publish_dir(self.path, self.out)
        (self.out / PROGRESS).unlink()  # after the rename: a run stopped in between loses nothing
        (self.out / LOCK).unlink(missing_ok=True)
        self.release()


class SeedCheckpoints:
    """A running seed's checkpoints under `root` (a `RunFolder`'s, or a `bertkit tune` trial's):
    `latest`, and `save` (every `every` steps and at each evaluation; never when `every` is 0,
    except for a stop). The newest one is kept; each is complete or absent."""

    def __init__(self, root: Path, seed: int, every: int | None, folder: RunFolder | None = None):
        self.root, self.seed, self.every, self.folder = Path(root), seed, every, folder

    def due(self, step: int, evaluated: bool) -> bool:
        if self.every == 0:
            return False
        return evaluated or (self.every is not None and step % self.every == 0)

    def newest_step(self) -> int | None:
        steps = sorted(self.root.glob("step-*")) if self.root.is_dir() else []
        return int(steps[-1].name[5:]) if steps else None

    def latest(self):
        """(tensors, state) of this seed's newest checkpoint, or None."""
        from bertkit.train.checkpoint import STATE_JSON, read_state

        found = sorted(p for p in self.root.glob("step-*") if (p / STATE_JSON).is_file()) if self.root.is_dir() else []
        if not found:
            return None
        tensors, state = read_state(found[-1])
        finished = {r["seed"] for r in self.folder.finished} if self.folder is not None else set()
        if state.get("seed") in finished:  # a finished seed's, left by a run stopped as the seed ended
            shutil.rmtree(self.root, ignore_errors=True)
            return None
        if state.get("seed") != self.seed:
            raise UserError(f"holds a checkpoint of seed {state.get('seed')}, not of seed {self.seed} that runs next",
                            found[-1])
        return tensors, state

    def kept(self) -> str:
        step = self.newest_step()
        return f"the checkpoint of step {step} in {self.root}" if step is not None else "no checkpoint of it yet"

    def save(self, step: int, tensors: dict, state: dict) -> Path:
        from bertkit.train.checkpoint import write_state

        if self.folder is not None:
            self.folder.check()
        dest = self.root / f"step-{step:07d}"
        try:
            write_state(dest, tensors, {**state, "seed": self.seed, "step": step})
        except WriteError as e:
            e.kept = self.folder.kept() if self.folder is not None else self.kept()
            raise
        for old in self.root.glob("step-*"):
            if old != dest:
                shutil.rmtree(old, ignore_errors=True)
        return dest
