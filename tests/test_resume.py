"""Exact resume: a run killed (SIGKILL), stopped (SIGTERM) or crashed mid-checkpoint and then
resumed ends with weights bit-identical to the uninterrupted run (CPU, fp32, dropout on). A stop
by a signal exits with 128 + its number; a resume with another model, objective or masking is
refused, and options that may change are recorded in the run's history."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import torch

from bertkit.cli import main
from bertkit.train import checkpoint as checkpoint_module
from bertkit.train.checkpoint import latest_checkpoint, list_checkpoints
from pretrain_helpers import assert_bit_identical, start, tiny_args

STEPS = ("--steps", "40", "--save-every", "4", "--eval-samples", "0", "--log-every", "5", "--keep", "3")


@pytest.fixture(scope="module")
def data(pretraining_data) -> Path:
    return pretraining_data / "nsp"


def _args(data: Path, out: Path, *extra: str) -> list[str]:
    return tiny_args(data, out, *STEPS, *extra)



@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> Path:
    """The uninterrupted run (in this process, one thread like the child processes)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(_args(data, out)) == 0
    torch.set_num_threads(before)
    return out


@pytest.fixture(scope="module")
def interrupted(data, tmp_path_factory) -> dict:
    """Child runs, started together to share their start-up time, each sent one signal (KILL,
    TERM, INT) as soon as its first checkpoint appears. {signal: (run folder, stdout, status, stderr)}"""
    signals = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
    runs = {sig: tmp_path_factory.mktemp(sig.name) / "run" for sig in signals}
    procs = {sig: start(_args(data, out)) for sig, out in runs.items()}
    pending, deadline = set(procs), time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for sig in list(pending):
            if latest_checkpoint(runs[sig]) is not None:
                procs[sig].send_signal(sig)
                pending.discard(sig)
            else:
                assert procs[sig].poll() is None, procs[sig].communicate()[1]
        time.sleep(0.005)
    results = {}
    for sig, proc in procs.items():
        if sig in pending:
            proc.kill()
        stdout, stderr = proc.communicate(timeout=60)
        results[sig] = (runs[sig], stdout, proc.returncode, stderr)
    assert not pending, "no checkpoint appeared"
    return results


def test_sigkill_then_resume_is_bit_identical(data, reference, interrupted, one_thread, capsys):
    out, _, status, _ = interrupted[signal.SIGKILL]
    assert status == -signal.SIGKILL
    assert not (out / "model").exists()
    resumed_from = latest_checkpoint(out).step
    assert 4 <= resumed_from < 40
    assert main(_args(data, out, "--resume")) == 0
    assert f"resuming from {out / 'checkpoints' / f'step-{resumed_from:07d}'}" in capsys.readouterr().out
    assert_bit_identical(reference / "model", out / "model")
    # metrics.jsonl reads as one run: no step logged twice.
    records = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["kind"] == "train"]
    assert steps == list(range(5, 41, 5))


def test_sigterm_saves_exits_143_and_resumes_identically(data, reference, interrupted, one_thread):
    out, stdout, status, stderr = interrupted[signal.SIGTERM]
    assert status == 128 + signal.SIGTERM == 143, stderr  # a scheduler can tell it from a finished run
    stopped = latest_checkpoint(out)
    assert stdout.splitlines()[-1] == (f"stopped by SIGTERM at step {stopped.step}; checkpoint in {stopped.path}; "
                                       "continue with --resume (exit status 143)")
    assert stopped.step < 40 and not (out / "model").exists()
    assert main(_args(data, out, "--resume")) == 0
    assert_bit_identical(reference / "model", out / "model")


def test_sigint_saves_and_exits_130(interrupted):
    out, stdout, status, stderr = interrupted[signal.SIGINT]
    assert status == 130, stderr
    stopped = latest_checkpoint(out)
    assert stdout.splitlines()[-1].startswith(f"stopped by SIGINT at step {stopped.step}; checkpoint in {stopped.path}")
    assert stdout.splitlines()[-1].endswith("(exit status 130)")
    assert "Traceback" not in stderr


def test_crash_while_saving_keeps_previous_checkpoint(data, reference, tmp_path, monkeypatch, one_thread):
    out = tmp_path / "run"
    real_save = checkpoint_module.save_file

    def failing_save(tensors, path, *args, **kwargs):
        if "step-0000008" in str(path):  # the optimizer file of the second checkpoint
            raise OSError("disk full (simulated)")
        return real_save(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "save_file", failing_save)
    with pytest.raises(OSError, match="simulated"):
        main(_args(data, out))
    monkeypatch.undo()
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step-0000004"]  # the half-written folder was a hidden temp, now gone
    # What a SIGKILL mid-write could leave: a hidden temp folder, and a folder lacking files.
    (out / "checkpoints" / ".step-0000008.abc123.tmp").mkdir()
    (out / "checkpoints" / ".step-0000008.abc123.tmp" / "config.json").write_text("{}")
    (out / "checkpoints" / "step-0000012").mkdir()
    (out / "checkpoints" / "step-0000012" / "config.json").write_text("{}")
    assert latest_checkpoint(out).step == 4
    assert main(_args(data, out, "--resume")) == 0
    assert_bit_identical(reference / "model", out / "model")
    assert not list((out / "checkpoints").glob(".step-*"))  # the resumed run cleared the leftover


def test_resume_records_changed_options_and_refuses_another_model(data, tmp_path, capsys, one_thread):
    out = tmp_path / "run"
    first = ("--steps", "4", "--save-every", "2", "--eval-samples", "0", "--log-every", "2")
    assert main(tiny_args(data, out, *first)) == 0
    original = json.loads((out / "config.json").read_text())
    assert original["resumes"] == []
    capsys.readouterr()
    # lr and steps may change: the run goes on with them, and config.json keeps the original
    # arguments with the change appended to its history.
    longer = ("--steps", "6", "--save-every", "2", "--eval-samples", "0", "--log-every", "2", "--lr", "1e-3")
    assert main(tiny_args(data, out, *longer, "--resume")) == 0
    stdout = capsys.readouterr().out
    assert f"resuming from {out / 'checkpoints' / 'step-0000004'} with steps 4 -> 6, lr 0.002 -> 0.001" in stdout
    saved = json.loads((out / "config.json").read_text())
    assert saved["train"] == original["train"] and saved["model"] == original["model"]
    (resume,) = saved["resumes"]
    assert resume["step"] == 4 and resume["changed"] == {"steps": [4, 6], "lr": [0.002, 0.001]}
    # The same again changes nothing further: the history is measured from the options in force.
    assert main(tiny_args(data, out, *longer, "--resume")) == 0
    assert json.loads((out / "config.json").read_text())["resumes"][-1]["changed"] == {}
    # Another model shape, objective or masking is refused, the fields named, the run untouched.
    before = sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*"))
    capsys.readouterr()
    assert main(tiny_args(data, out, *longer, "--resume", "--whole-word-mask", hidden_size=64)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "whole_word_mask False -> True" in err and "hidden_size 32 -> 64" in err, err
    assert sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*")) == before


def test_resume_without_checkpoint_says_it_starts_fresh(data, tmp_path, capsys, one_thread):
    out = tmp_path / "run"
    assert main(tiny_args(data, out, "--steps", "1", "--eval-samples", "0", "--resume")) == 0
    assert f"starting fresh (--resume found no checkpoint in {out})" in capsys.readouterr().out


def test_overwrite_starts_a_previous_run_again(data, tmp_path, capsys, one_thread):
    out = tmp_path / "run"
    assert main(tiny_args(data, out, "--steps", "2", "--save-every", "1", "--eval-samples", "0")) == 0
    assert main(tiny_args(data, out, "--steps", "1", "--eval-samples", "0", "--overwrite")) == 0
    assert [c.step for c in list_checkpoints(out)] == [1]  # the old run's checkpoints are gone
    assert json.loads((out / "config.json").read_text())["train"]["steps"] == 1
