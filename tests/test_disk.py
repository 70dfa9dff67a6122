"""A disk that refuses a write, an output folder deleted under a run, too little free space, and
what a stopped run leaves behind: each is one line on stderr, and no work that was saved is lost.

A refused write (ENOSPC, EFBIG from RLIMIT_FSIZE, EIO, EROFS) or a vanished output folder ends a
command with exit status 1 and one line naming the path, what was kept and the command that
continues; the checkpoint before it stays loadable, and that command ends as an uninterrupted run
would. A disk too small for a run's checkpoints is refused before the first step, with the
numbers. Hidden temporaries a dead bertkit process left beside an output are removed by the next
run with a note, never a user's file or a live process's; the threads line waits for the first
output, so a mistake found before it is the only line.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bertkit.io
import bertkit.train.checkpoint as checkpoint_module
from bertkit.cli import Notice, main
from bertkit.errors import UserError
from bertkit.finetune import resume as resume_module
from bertkit.io import remove_leftovers
from bertkit.train.checkpoint import latest_checkpoint, read_state
from finetune_helpers import write_sst2
from pretrain_helpers import env, tiny_args

ROOT = Path(__file__).resolve().parents[1]
PT_STEPS = ("--steps", "12", "--save-every", "4", "--eval-samples", "0", "--log-every", "1", "--threads", "1")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("disk-data")
    write_sst2(root / "train.tsv", 40, 0)
    write_sst2(root / "dev.tsv", 12, 1)
    return root


def _ft(tiny_dir, data: Path, out: Path, *extra: str) -> list[str]:
    return ["finetune", "--model", str(tiny_dir), "--task", "sst2", "--train", str(data / "train.tsv"), "--dev",
            str(data / "dev.tsv"), "--out", str(out), "--seeds", "1,2", "--epochs", "2", "--batch-size", "8",
            "--save-every", "2", "--no-progress", "--threads", "1", *extra]


@pytest.fixture(scope="module")
def whole(tiny_dir, data, tmp_path_factory) -> Path:
    """The uninterrupted fine-tuning, for the continued runs to end as."""
    out = tmp_path_factory.mktemp("disk-whole") / "out"
    assert main(_ft(tiny_dir, data, out)) == 0
    return out


def _same_model(a: Path, b: Path) -> None:
    x, y = load_file(str(a / "model" / "model.safetensors")), load_file(str(b / "model" / "model.safetensors"))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert (a / "predictions.tsv").read_bytes() == (b / "predictions.tsv").read_bytes()


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


Refusal = namedtuple("Refusal", "code reason")


@pytest.mark.parametrize("refusal", [Refusal(errno.ENOSPC, "no space left on device"),
                                     Refusal(errno.EIO, "input/output error"),
                                     Refusal(errno.EROFS, "read-only file system")], ids=lambda r: r.reason)
def test_a_refused_checkpoint_keeps_the_one_before_and_the_run_continues(refusal, tiny_dir, data, whole, tmp_path,
                                                                        monkeypatch, capsys):
    real, calls = checkpoint_module.save_file, []

    def refusing(tensors, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 4:  # seed 1's fourth checkpoint
            raise OSError(refusal.code, os.strerror(refusal.code))
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "save_file", refusing)
    out = tmp_path / "out"
    assert main(_ft(tiny_dir, data, out)) == 1
    line = _one_line(capsys.readouterr().err)
    kept = re.search(r"; kept the next seed's checkpoint at step (\d+) in (\S+); continue with: (.+)$", line)
    assert line.startswith(f"bertkit finetune: error: {out.parent}/.out.partial/checkpoint/step-") and kept, line
    assert f": {refusal.reason}; kept" in line
    assert kept[3].startswith("bertkit finetune --model") and kept[3].endswith("--threads 1 --resume")
    folder = tmp_path / ".out.partial" / "checkpoint"
    assert [p.name for p in folder.iterdir()] == [f"step-{int(kept[1]):07d}"]  # nothing half-written beside it
    tensors, state = read_state(folder / f"step-{int(kept[1]):07d}")
    assert state["step"] == int(kept[1]) and any(k.startswith("model.") for k in tensors)
    monkeypatch.undo()
    assert main(_ft(tiny_dir, data, out, "--resume")) == 0
    assert f"seed 1: continuing from step {kept[1]}" in capsys.readouterr().out
    _same_model(whole, out)


def test_a_file_size_limit_is_one_line_and_nothing_half_written(tiny_dir, data, whole, tmp_path):
    """RLIMIT_FSIZE in the child: the checkpoint's tensor file is over the limit (EFBIG)."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bertkit.cli", *_ft(tiny_dir, data, out)], env=env(),
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000)))
    assert done.returncode == 1, done.stderr
    line = _one_line(done.stderr)
    assert re.fullmatch(rf"bertkit finetune: error: {out.parent}/\.out\.partial/checkpoint/step-0000002/"
                        rf"state\.safetensors: file too large; kept nothing yet in \S+; continue with: .+ --resume",
                        line), line
    assert not list((tmp_path / ".out.partial").rglob("step-*")) and not list(tmp_path.rglob("*.tmp"))
    assert main(_ft(tiny_dir, data, out, "--resume")) == 0
    _same_model(whole, out)


def test_pretraining_on_a_full_disk_keeps_its_checkpoint_and_says_so(pretraining_data, tmp_path, monkeypatch,
                                                                    capsys):
    whole = tmp_path / "whole"
    assert main(tiny_args(pretraining_data / "nsp", whole, *PT_STEPS)) == 0
    real, calls = checkpoint_module.save_file, []

    def full(tensors, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the step-8 checkpoint's optimizer state
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "save_file", full)
    run = tmp_path / "run"
    assert main(tiny_args(pretraining_data / "nsp", run, *PT_STEPS)) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"error: {run}/checkpoints/step-0000008/optimizer.safetensors: no space left on device; kept the " \
           f"checkpoint of step 4 in " \
           f"{run}/checkpoints/step-0000004; continue with: bertkit pretrain " in line and line.endswith(" --resume")
    assert latest_checkpoint(run).step == 4 and not list((run / "checkpoints").glob(".*"))
    monkeypatch.undo()
    assert main(tiny_args(pretraining_data / "nsp", run, *PT_STEPS, "--resume")) == 0
    x, y = load_file(str(whole / "model" / "model.safetensors")), load_file(str(run / "model" / "model.safetensors"))
    assert all(torch.equal(x[k], y[k]) for k in x)


def test_an_output_folder_deleted_under_the_run_is_one_line(tiny_dir, data, tmp_path, monkeypatch, capsys):
    real, calls = resume_module.SeedCheckpoints.save, []

    def deleting(self, step, tensors, state):
        calls.append(step)
        if len(calls) == 3:
            shutil.rmtree(self.folder.path)
        return real(self, step, tensors, state)

    monkeypatch.setattr(resume_module.SeedCheckpoints, "save", deleting)
    out = tmp_path / "out"
    assert main(_ft(tiny_dir, data, out)) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"bertkit finetune: error: {tmp_path}/.out.partial: the run's folder was deleted while it "
                           f"ran; kept nothing of this run (its folder is gone); continue with: bertkit finetune ")
    assert not (tmp_path / ".out.partial").exists() and not out.exists()


def test_an_index_folder_deleted_under_the_build_is_one_line(tiny_dir, tmp_path, monkeypatch, capsys):
    from bertkit.search import index as index_module

    (tmp_path / "docs.txt").write_text("".join(f"passage {i} about a film .\n" for i in range(300)), encoding="utf-8")
    real, calls = index_module._Build.chunk_done, []

    def deleting(self, *args):
        calls.append(1)
        if len(calls) == 2:
            shutil.rmtree(self.out)
        return real(self, *args)

    monkeypatch.setattr(index_module._Build, "chunk_done", deleting)
    out = tmp_path / "idx"
    assert main(["index", "--model", str(tiny_dir), "--input", str(tmp_path / "docs.txt"), "--out", str(out),
                 "--chunk", "64", "--no-progress", "--threads", "1"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"error: {tmp_path}/.idx.partial: the index folder was deleted while it was built; kept nothing" in line
    assert not out.exists() and not (tmp_path / ".idx.partial").exists()


def test_too_little_free_space_is_refused_before_training_with_the_numbers(tiny_dir, data, tmp_path, monkeypatch,
                                                                          capsys):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(bertkit.io.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 200_000, 200_000))
    out = tmp_path / "out"
    assert main(_ft(tiny_dir, data, out)) == 2
    line = _one_line(capsys.readouterr().err)
    found = re.fullmatch(r"bertkit finetune: error: \S+/out: needs about ([\d.]+) kB free for the saved "
                         r"model \(([\d.]+) kB\) and the running seed's checkpoints \(2 of ([\d.]+) kB; --save-every 0 "
                         r"writes none\), and \S+ has 200\.0 kB free: free some space or choose another --out", line)
    assert found, line
    weights, checkpoint = float(found[2]), float(found[3])
    assert checkpoint == pytest.approx(3 * weights, rel=0.05)  # the weights and AdamW's two moments
    assert float(found[1]) == pytest.approx(weights + 2 * checkpoint, rel=0.01)
    assert sorted(os.listdir(tmp_path)) == []  # refused before the first step: nothing written
    assert main(_ft(tiny_dir, data, out, "--save-every", "0")) == 0  # the model alone fits
    assert (out / "model" / "model.safetensors").is_file()


def test_what_a_dead_run_left_is_removed_with_a_note_and_nothing_else(tiny_dir, data, tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / f".out.{pid}.abcd1234.tmp").mkdir()  # a folder a killed process was writing
    (tmp_path / f".out.{pid}.abcd1234.tmp" / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".out.k3j2h1g0.tmp").write_text("an older version's temporary file")
    (tmp_path / f".out.{os.getppid()}.zzzzzzzz.tmp").write_text("a live process's")
    (tmp_path / ".out.notes.tmp").write_text("a user's file")
    (tmp_path / ".other.12345678.tmp").write_text("another output's")
    assert main(_ft(tiny_dir, data, tmp_path / "out", "--seeds", "1", "--epochs", "1")) == 0
    notes = capsys.readouterr().err.splitlines()
    assert notes == [f"bertkit finetune: note: removed .out.{pid}.abcd1234.tmp, which a stopped run left behind",
                     "bertkit finetune: note: removed .out.k3j2h1g0.tmp, which a stopped run left behind"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f".out.{os.getppid()}.zzzzzzzz.tmp", ".out.notes.tmp", ".other.12345678.tmp", "out"])


def test_a_result_moved_aside_by_a_stopped_swap_is_put_back(tmp_path):
    (tmp_path / ".out.old").mkdir()
    (tmp_path / ".out.old" / "results.json").write_text("{}")
    assert remove_leftovers(tmp_path / "out") == [
        "put back out, which a run stopped while replacing it had moved to .out.old"]
    assert (tmp_path / "out" / "results.json").is_file() and not (tmp_path / ".out.old").exists()
    (tmp_path / ".out.old").mkdir()
    assert remove_leftovers(tmp_path / "out") == ["removed .out.old, the previous result a stopped run had replaced"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_the_threads_line_waits_for_the_first_output(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    notice = Notice("bertkit x: ")
    notice.add("threads: 1 (2 cores, load 1.0; --threads N to override)", None)
    with pytest.raises(UserError), notice:
        raise UserError("a mistake")  # found before any output: the line is dropped
    assert err.getvalue() == "" and sys.stdout is out and sys.stderr is err
    with notice:
        print("first line of work")
        print("a note", file=sys.stderr)
    assert out.getvalue() == "first line of work\n"
    assert err.getvalue() == "bertkit x: threads: 1 (2 cores, load 1.0; --threads N to override)\na note\n"
    assert sys.stdout is out and sys.stderr is err


def test_a_resume_refuses_another_setting_in_one_line_before_reading_data(tiny_dir, data, tmp_path, monkeypatch,
                                                                         capsys):
    out = tmp_path / "out"
    real = resume_module.SeedCheckpoints.save

    def stop_after_one(self, step, tensors, state):
        real(self, step, tensors, state)
        raise KeyboardInterrupt  # as a second Ctrl-C, right after the first checkpoint

    monkeypatch.setattr(resume_module.SeedCheckpoints, "save", stop_after_one)
    assert main(_ft(tiny_dir, data, out)) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert main(_ft(tiny_dir, data, out, "--resume", "--lr", "3e-5", "--epochs", "3")) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--resume with settings that differ from the unfinished run it continues: --epochs 2 -> 3; --lr 2e-05 -> " \
           "3e-05 (give the run's own settings, or --overwrite to start again)" in line
    assert main(_ft(tiny_dir, data, out)) == 2
    assert "an unfinished run (0 of 2 seeds done; the next seed's checkpoint at step 2) is kept in" in \
        capsys.readouterr().err
    progress = json.loads((tmp_path / ".out.partial" / "progress.json").read_text())
    assert progress["finished"] == [] and progress["settings"]["hyper"]["lr"] == 2e-5
