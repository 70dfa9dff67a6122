"""No work lost to a kill: every long command killed with SIGKILL at three points a seed chooses,
then continued, ends with the outputs of an uninterrupted run.

pretrain, finetune, distill, tune, index and ablate (a tiny plan) each run once uninterrupted (in
this process, one thread, like the children) and once as a chain of child processes: started,
killed when its progress (a checkpoint's step, a finished trial's or cell's count, passages
embedded) reaches the first seeded point, after a pause of a seeded fraction of the time the run
takes to advance once (so the kill lands anywhere: mid-step, mid-evaluation, mid-write, on a busy
machine as on an idle one), continued with the command that continues it
(`--resume`, or the same command for tune and ablate), killed at the second point, and so on, then
run to the end. Deterministic outputs are compared bit for bit (every tensor with torch.equal,
predictions and JSON records byte for byte or field by field without times); the HNSW graph,
rebuilt from the stored vectors on a resume, by the searches it answers. The chains run side by
side. Each run is a child forked from this process, which has imported torch and bertkit already,
so a child costs its own work and not an interpreter's start-up (~3.5 s of CPU each, 24 children);
it runs `bertkit.cli.main` on the command line as typed, and the SIGKILL is the kernel's.
Fine-tuning draws two of its points in its second seed, and each continued fine-tuning run must
say it continues the checkpoint its kill left (equal outputs cannot tell a resume from a restart
at step 0). A `--resume` while the first process still lives is refused, and the first one ends as
if alone. `test_disk.py` covers full disks and vanished folders.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from ablate_helpers import write_inputs
from bertkit.ablate.report import render_markdown
from bertkit.cli import main
from finetune_helpers import write_sst2, write_stsb
from kill_helpers import Child, continued_from, resume_point, same_folder, tensors_equal, without_times
from pretrain_helpers import tiny_args

SEED = 45


def _ft(inputs: dict, out: str) -> list[str]:
    return ["finetune", "--model", inputs["tiny"], "--task", "sst2", "--train", inputs["train"], "--dev",
            inputs["dev"], "--out", out, "--seeds", "1,2", "--epochs", "2", "--batch-size", "8", "--max-seq-len",
            "32", "--eval-every", "7", "--metric-for-best", "accuracy", "--save-every", "3", "--no-progress",
            "--threads", "1"]


def _di(inputs: dict, out: str) -> list[str]:
    return ["distill", "--teacher", inputs["teacher"], "--task", "sst2", "--student-preset", "teacher",
            "--student-layers", "1", "--train", inputs["train"], "--dev", inputs["dev"], "--out", out, "--epochs", "6",
            "--batch-size", "8", "--save-every", "2", "--no-progress", "--threads", "1"]


def _tu(inputs: dict, out: str) -> list[str]:
    return ["tune", "--model", inputs["tiny"], "--task", "stsb", "--train", inputs["stsb_train"], "--dev",
            inputs["stsb_dev"], "--out", out, "--search", "lr=1e-4:1e-2:log,epochs=2:3,batch-size=4|8", "--trials", "4",
            "--prune-startup", "2", "--eval-every", "5", "--save-every", "2", "--no-progress", "--threads", "1"]


def _pt(inputs: dict, out: str) -> list[str]:
    return tiny_args(Path(inputs["data"]), Path(out), "--steps", "100", "--save-every", "4", "--eval-samples", "0",
                     "--log-every", "1", "--keep", "3", "--threads", "1")


def _ix(inputs: dict, out: str) -> list[str]:
    return ["index", "--model", inputs["tiny"], "--input", inputs["docs"], "--out", out, "--chunk", "64",
            "--ann-threshold", "0", "--no-progress", "--threads", "1"]


def _ab(inputs: dict, out: str) -> list[str]:
    return ["ablate", "--corpus", inputs["corpus"], "--data-dir", inputs["ablate_data"], "--out", out, "--scale",
            "tiny", "--only", "t5-bert", "--tasks", "mrpc", "--seeds", "1,2,3,4,5", "--threads", "1"]


def _newest_step(folder: Path) -> int:
    steps = [int(p.name.split("-")[-1]) for p in folder.glob("step-*")] if folder.is_dir() else []
    return max(steps, default=0)


def _seed_progress(root: Path, per_seed: int) -> int:
    """Steps done by a fine-tuning run (finished seeds, then the running one's newest checkpoint)."""
    partial = root / ".out.partial"
    try:
        finished = len(json.loads((partial / "progress.json").read_text())["finished"])
    except (OSError, ValueError, KeyError):
        finished = 0
    return per_seed * finished + _newest_step(partial / "checkpoint")


def _trial_progress(root: Path) -> int:
    """100 x the running trial's number + its newest checkpoint's step."""
    trials = [(int(p.name[6:]), _newest_step(p)) for p in (root / "out" / "checkpoints").glob("trial-*")]
    return max((100 * n + s for n, s in trials), default=0)


def _index_progress(root: Path) -> int:
    try:
        return json.loads((root / ".out.partial" / "progress.json").read_text())["done"]
    except (OSError, ValueError, KeyError):
        return 0


@dataclass
class Command:
    argv: object  # (inputs, out) -> argv
    progress: object  # (the chain's folder) -> a number that grows as the run goes
    points: list[int]  # where a kill may be asked for (three are drawn)
    resume: bool = True  # continued with --resume (else: the same command)
    marker: str = ""  # what a finished run's output holds: a kill after it is no kill
    per_seed: int = 0  # fine-tuning: steps per seed (points past it are in a later seed: two are drawn there)

    def draw(self, rng: random.Random) -> list[int]:
        later = [p for p in self.points if p > self.per_seed] if self.per_seed else []
        if not later:
            return sorted(rng.sample(self.points, 3))
        return sorted(rng.sample([p for p in self.points if p <= self.per_seed], 1) + rng.sample(later, 2))

    def finished(self, root: Path) -> bool:
        return bool(self.marker) and (root / "out" / self.marker).exists() and not (root / ".out.partial").exists()


COMMANDS = {
    "pretrain": Command(_pt, lambda root: _newest_step(root / "out" / "checkpoints"), list(range(4, 100, 4)),
                        marker="model/model.safetensors"),
    "finetune": Command(_ft, lambda root: _seed_progress(root, 30), [3, 7, 12, 15, 21, 30, 33, 37, 45, 51],
                        marker="results.json", per_seed=30),
    "distill": Command(_di, lambda root: _seed_progress(root, 90), [2, 6, 10, 15, 22, 30, 36, 42],
                       marker="distill.json"),
    "tune": Command(_tu, _trial_progress, [2, 4, 102, 104, 202, 204, 302], resume=False),
    "index": Command(_ix, _index_progress, list(range(64, 1600, 128)), marker="meta.json"),
    "ablate": Command(_ab, lambda root: len(list((root / "out" / "work" / "done").glob("*.json"))), [1, 2, 3, 4, 5],
                      resume=False),
}


@pytest.fixture(scope="module")
def inputs(tiny_dir, pretraining_data, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("kill-inputs")
    write_sst2(root / "train.tsv", 120, 0)
    write_sst2(root / "dev.tsv", 12, 1)
    write_stsb(root / "stsb_train.tsv", 60, 0)
    write_stsb(root / "stsb_dev.tsv", 20, 1)
    with open(root / "docs.txt", "w", encoding="utf-8") as f:
        f.writelines(f"passage {i}: the {'good' if i % 3 else 'bad'} film about paris and the river, part {i % 7} .\n"
                     for i in range(3840))
    ablate = write_inputs(root / "ablate", pretraining_data)
    teacher = root / "teacher"
    assert main(["finetune", "--model", str(tiny_dir), "--task", "sst2", "--train", str(root / "train.tsv"), "--dev",
                 str(root / "dev.tsv"), "--out", str(teacher), "--seeds", "1", "--epochs", "1", "--no-progress",
                 "--threads", "1"]) == 0
    return {"tiny": str(tiny_dir), "train": str(root / "train.tsv"), "dev": str(root / "dev.tsv"),
            "stsb_train": str(root / "stsb_train.tsv"), "stsb_dev": str(root / "stsb_dev.tsv"),
            "docs": str(root / "docs.txt"), "data": str(pretraining_data / "nsp"), "teacher": str(teacher / "model"),
            "corpus": str(ablate["corpus"]), "ablate_data": str(ablate["data"])}


@pytest.fixture(scope="module")
def uninterrupted(inputs, tmp_path_factory) -> dict[str, Path]:
    """Each command run to the end in this process (one thread, as the children), from a folder of
    its own so that `out` is the same relative path as in its chain."""
    folders = {}
    here = os.getcwd()
    try:
        for name, command in COMMANDS.items():
            folders[name] = tmp_path_factory.mktemp(f"whole-{name}")
            os.chdir(folders[name])
            assert main(command.argv(inputs, "out")) == 0, name
    finally:
        os.chdir(here)
    return folders


@dataclass
class Chain:
    """One command killed at its points, continued after each, then run to the end."""

    name: str
    command: Command
    root: Path
    argv: list[str]
    points: list[int]
    pauses: list[float]  # each kill waits this fraction of the time the run takes to advance once
    kills: list[dict] = field(default_factory=list)  # {"point", "progress" when killed, "exit"}
    proc: Child | None = None
    log: Path | None = None  # the running (or last) run's output
    kill_at: float | None = None  # when the pending kill is due
    began_at: int = 0  # the progress the running process started from: a kill waits for its own
    seen: tuple[float, int] = (0.0, 0)  # (when, progress) of the last change seen
    advance: float = 0.1  # seconds the run took to advance, lately

    def start(self) -> None:
        again = self.kills and self.command.resume
        self.began_at = self.command.progress(self.root)
        self.seen, self.log = (time.monotonic(), self.began_at), self.root / f"run{len(self.kills)}.log"
        self.proc = Child([*self.argv, "--resume"] if again else self.argv, self.root, self.log)

    def poll(self) -> bool:
        """Advance: kill when due, start the next run; True once the last run has ended."""
        if self.proc.poll() is not None:
            return self.ended()
        if len(self.kills) == len(self.points):
            return False
        now, point, done = time.monotonic(), self.points[len(self.kills)], self.command.progress(self.root)
        if done != self.seen[1]:  # the pause follows the run's pace, so a slow machine moves it alike
            if self.seen[1] != self.began_at:  # not the first advance, whose time holds the process's start
                self.advance = now - self.seen[0]
            self.seen = (now, done)
        if self.kill_at is None and done >= point and done > self.began_at:
            self.kill_at = now + self.pauses[len(self.kills)] * self.advance
        if self.kill_at is not None and now >= self.kill_at:
            self.proc.kill()
            if self.proc.returncode == 0 or self.command.finished(self.root):  # the signal came after the end
                return self.ended()
            self.kills.append({"point": point, "progress": self.command.progress(self.root),
                               "exit": self.proc.returncode, "from": resume_point(self.root / ".out.partial")})
            self.kill_at = None
            self.start()
        return False

    def ended(self) -> bool:
        """The run ended by itself (or was killed after its output was complete): no point is left."""
        self.points = self.points[: len(self.kills)]
        return True

    @property
    def complete(self) -> bool:
        return self.proc.returncode == 0 or self.command.finished(self.root)


@pytest.fixture(scope="module")
def chains(inputs, tmp_path_factory) -> dict[str, Chain]:
    rng = random.Random(SEED)
    runs = {}
    for name, command in COMMANDS.items():
        root = tmp_path_factory.mktemp(f"killed-{name}")
        points = command.draw(rng)
        runs[name] = Chain(name, command, root, command.argv(inputs, "out"), points,
                           [round(rng.uniform(0, 1), 3) for _ in points])
        runs[name].start()
    pending, deadline = set(runs), time.monotonic() + 300
    while pending and time.monotonic() < deadline:
        pending -= {name for name in pending if runs[name].poll()}
        time.sleep(0.01)
    for name in pending:
        runs[name].proc.kill()
    assert not pending, f"still running after 300 s: {sorted(pending)}"
    return runs


def _check(chains, name: str) -> Chain:
    chain = chains[name]
    log = chain.log.read_text()
    assert chain.complete, f"{name}: the last run ended with {chain.proc.returncode}:\n{log[-3000:]}"
    assert all(k["exit"] == -signal.SIGKILL for k in chain.kills), chain.kills
    assert "Traceback" not in log
    return chain


@pytest.mark.parametrize("name, per_epoch", [("finetune", 15), ("distill", 15)])
def test_fine_tuning_killed_three_times_ends_bit_identical(name, per_epoch, chains, uninterrupted):
    chain = _check(chains, name)
    files = same_folder(uninterrupted[name] / "out", chain.root / "out")
    assert "model/model.safetensors" in files and "results.json" in files
    assert not (chain.root / ".out.partial").exists() and not list(chain.root.glob(".out.*"))
    resumes = json.loads((chain.root / "out" / "results.json").read_text())["resumes"]
    assert len(resumes) == len(chain.kills)
    for n, kill in enumerate(chain.kills):  # each continued run began at the checkpoint its kill left, not at 0
        continued_from(chain.root / f"run{n + 1}.log", kill["from"], per_epoch)
    if COMMANDS[name].per_seed:  # issue 51: a kill in a later seed of several
        assert any(k["progress"] > COMMANDS[name].per_seed for k in chain.kills), chain.kills


def test_pretraining_killed_three_times_ends_bit_identical(chains, uninterrupted):
    chain = _check(chains, "pretrain")
    whole, killed = uninterrupted["pretrain"] / "out", chain.root / "out"
    tensors_equal(whole / "model" / "model.safetensors", killed / "model" / "model.safetensors")

    def losses(run: Path) -> dict:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}

    assert losses(whole) == losses(killed)


def test_tune_killed_three_times_holds_the_same_trials(chains, uninterrupted):
    chain = _check(chains, "tune")
    whole, killed = uninterrupted["tune"] / "out", chain.root / "out"
    for name in ("trials.json", "best.json"):
        assert without_times(json.loads((whole / name).read_text())) == \
            without_times(json.loads((killed / name).read_text())), name
    assert not (killed / "checkpoints").exists()


def test_index_killed_three_times_stores_the_same_vectors_and_answers_the_same(chains, uninterrupted):
    from bertkit.search.index import SearchIndex

    chain = _check(chains, "index")
    whole, killed = uninterrupted["index"] / "out", chain.root / "out"
    same_folder(whole, killed, skip=("ann.usearch",))
    a, b = SearchIndex(whole), SearchIndex(killed)
    queries = np.ascontiguousarray(a.vectors.rows(0, 64))
    for exact in (False, True):
        (pa, sa), (pb, sb) = a.search(queries, 10, exact), b.search(queries, 10, exact)
        assert np.array_equal(pa, pb) and np.array_equal(sa, sb)


def test_ablation_killed_three_times_reports_the_same(chains, uninterrupted):
    chain = _check(chains, "ablate")
    whole, killed = uninterrupted["ablate"] / "out", chain.root / "out"
    assert without_times(json.loads((whole / "report.json").read_text())) == \
        without_times(json.loads((killed / "report.json").read_text()))

    report = json.loads((killed / "report.json").read_text())
    assert render_markdown(report) == (killed / "report.md").read_text()  # (its times are the chain's)
    assert report["cells"]["done"] == report["cells"]["total"] == 9  # vocab, data, task, pretraining, 5 seeds


def test_every_chain_was_killed_at_its_three_points(chains, progress):
    """The table in docs/cli.md: the kill points each command met (progress when killed)."""
    for name, chain in chains.items():
        progress(f"test_kill: {name}: killed at {[(k['point'], k['progress']) for k in chain.kills]}")
        assert len(chain.kills) >= 2, (name, chain.kills)  # the third may come after a fast run's end


def test_sigterm_stops_fine_tuning_after_a_checkpoint_and_it_continues_identically(inputs, uninterrupted, tmp_path):
    child = Child(_ft(inputs, "out"), tmp_path, tmp_path / "stopped.log")
    deadline = time.monotonic() + 120
    while _seed_progress(tmp_path, 30) < 5 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(signal.SIGTERM)
    assert child.wait() == 143
    last = (tmp_path / "stopped.log").read_text().splitlines()[-1]
    stopped = re.fullmatch(r"stopped by SIGTERM: seed 1 at step (\d+) of 30, its checkpoint in "
                           r"\.out\.partial/checkpoint/step-(\d{7}); continue with --resume \(exit status 143\)", last)
    assert stopped and int(stopped[1]) == int(stopped[2]), last
    again = Child([*_ft(inputs, "out"), "--resume"], tmp_path, tmp_path / "continued.log")
    assert again.wait() == 0
    assert f"seed 1: continuing from step {stopped[1]} of 30" in (tmp_path / "continued.log").read_text()
    same_folder(uninterrupted["finetune"] / "out", tmp_path / "out")


@pytest.mark.parametrize("name, started", [("finetune", 33), ("distill", 4)])
def test_a_resume_while_the_first_run_still_lives_is_refused_and_the_first_one_finishes(name, started, inputs,
                                                                                      uninterrupted, tmp_path):
    """Issue 51: a SIGKILL that reached a wrapper (a shell, `uv run`) leaves bertkit running. A
    `--resume` then must not train the rest beside it (the first to finish renamed the folder to
    OUT and the other exited 1, "the run's folder was deleted while it ran"): it is refused in one
    line naming the live process, touching nothing, and the first run ends as if alone."""
    argv = COMMANDS[name].argv(inputs, "out")
    first = Child(argv, tmp_path, tmp_path / "first.log")
    deadline = time.monotonic() + 120
    while COMMANDS[name].progress(tmp_path) < started and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)  # it holds the run, and the folder stays as it is while it waits
    try:
        partial = tmp_path / ".out.partial"
        before = {p: p.read_bytes() for p in partial.rglob("*") if p.is_file()}
        second = Child([*argv, "--resume"], tmp_path, tmp_path / "second.log")
        assert second.wait() == 2
        lines = (tmp_path / "second.log").read_text().splitlines()
        assert lines == [f"bertkit {name}: error: .out.partial: another process (pid {first.pid}) is still running "
                         f"this run; let it finish (its result goes to out) or stop it, then continue with --resume"]
        assert {p: p.read_bytes() for p in partial.rglob("*") if p.is_file()} == before
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait() == 0, (tmp_path / "first.log").read_text()[-2000:]
    same_folder(uninterrupted[name] / "out", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "results.json").read_text())["resumes"] == []
    assert not partial.exists()
