"""--report-to tensorboard: every scalar a run logs is in its event files, read back with
TensorBoard's own reader, at every logged step, with the value metrics.jsonl (pretraining) or
results.json (fine-tuning) records; a missing tensorboard package is one line naming the flag."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bertkit.cli import main
from finetune_helpers import run_cli, write_sst2
from pretrain_helpers import tiny_args


def read_events(folder: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value}, as TensorBoard reads the folder's event files."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def assert_same(events: dict, tag: str, expected: dict[int, float], tolerance: float = 1e-6) -> None:
    """The tag's steps are exactly `expected`'s, each value within float32's rounding (plus `tolerance`)."""
    assert tag in events, f"{tag} missing; the event files hold {sorted(events)}"
    assert sorted(events[tag]) == sorted(expected), f"{tag}: steps {sorted(events[tag])} != {sorted(expected)}"
    for step, value in expected.items():
        assert events[tag][step] == pytest.approx(value, rel=1e-6, abs=tolerance), f"{tag} at step {step}"


def test_pretraining_events_hold_every_metrics_record(pretraining_data, tmp_path):
    out = tmp_path / "run"
    assert main(tiny_args(pretraining_data / "nsp", out, "--steps", "12", "--log-every", "3", "--eval-every", "6",
                          "--eval-samples", "16", "--device", "cpu", "--report-to", "tensorboard")) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    expected: dict[str, dict[int, float]] = {}
    for r in records:
        for key, value in r.items():
            if key not in ("step", "kind", "elapsed", "eta_s") and is_number(value):  # the clocks are TensorBoard's
                expected.setdefault(f"{r['kind']}/{key}", {})[r["step"]] = value
    events = read_events(out / "tensorboard")
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "val/mlm_accuracy"} <= set(expected)
    assert sorted(expected["train/loss"]) == [3, 6, 9, 12] and sorted(expected["val/loss"]) == [0, 6, 12]
    assert set(events) == set(expected)
    for tag, values in expected.items():
        assert_same(events, tag, values)


def test_finetuning_events_hold_every_step_and_evaluation_of_each_seed(tiny_dir, tmp_path):
    write_sst2(tmp_path / "train.tsv", 40, 0)
    write_sst2(tmp_path / "dev.tsv", 12, 1)
    out = tmp_path / "out"
    assert run_cli("finetune", "--model", tiny_dir, "--task", "sst2", "--train", tmp_path / "train.tsv",
                   "--dev", tmp_path / "dev.tsv", "--out", out, "--epochs", "2", "--batch-size", "4",
                   "--seeds", "1,2", "--eval-every", "4", "--no-progress", "--report-to", "tensorboard") == 0
    results = json.loads((out / "results.json").read_text())
    assert sorted(p.name for p in (out / "tensorboard").iterdir()) == ["seed1", "seed2"]
    for run in results["seeds"]:
        events = read_events(out / "tensorboard" / f"seed{run['seed']}")
        total = run["steps"]
        logged = [s for s in range(1, total + 1) if s % 10 == 0 or s == total]
        assert total == 20 and logged == [10, 20]
        # results.json keeps each step's loss to 5 decimals
        assert_same(events, "train/loss", {s: run["train_loss"][s - 1] for s in logged}, tolerance=6e-6)
        for tag in ("train/lr", "train/grad_norm", "train/epoch", "train/steps_per_s"):
            assert sorted(events[tag]) == logged, tag
        assert_same(events, "train/epoch", {s: s / 10 for s in logged})
        assert [e["step"] for e in run["evals"]] == [4, 8, 10, 12, 16, 20]
        metrics = {k for e in run["evals"] for k, v in e.items() if is_number(v)} - {"step", "epoch", "train_loss"}
        assert "accuracy" in metrics
        for metric in metrics:
            assert_same(events, f"dev/{metric}", {e["step"]: e[metric] for e in run["evals"]})
        assert set(events) == {f"dev/{m}" for m in metrics} | {"train/loss", "train/lr", "train/grad_norm",
                                                                "train/epoch", "train/steps_per_s"}


def test_report_to_none_writes_no_event_files(tiny_dir, tmp_path):
    write_sst2(tmp_path / "train.tsv", 8, 0)
    write_sst2(tmp_path / "dev.tsv", 4, 1)
    assert run_cli("finetune", "--model", tiny_dir, "--task", "sst2", "--train", tmp_path / "train.tsv",
                   "--dev", tmp_path / "dev.tsv", "--out", tmp_path / "out", "--epochs", "1", "--seeds", "1",
                   "--no-progress") == 0
    assert not (tmp_path / "out" / "tensorboard").exists()


@pytest.mark.parametrize("command", ["pretrain", "finetune", "distill"])
def test_a_missing_tensorboard_package_is_one_line_naming_the_flag(command, tiny_dir, pretraining_data, tmp_path,
                                                                   monkeypatch, capsys):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else found(name, *a))
    write_sst2(tmp_path / "train.tsv", 8, 0)
    argv = {"pretrain": tiny_args(pretraining_data / "nsp", tmp_path / "run", "--steps", "2"),
            "finetune": ["finetune", "--model", str(tiny_dir), "--task", "sst2", "--train", str(tmp_path / "train.tsv"),
                         "--dev", str(tmp_path / "train.tsv"), "--out", str(tmp_path / "out")],
            "distill": ["distill", "--teacher", str(tiny_dir), "--task", "sst2", "--student-preset", "teacher",
                        "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "train.tsv"),
                        "--out", str(tmp_path / "out")]}[command]
    assert main([*argv, "--report-to", "tensorboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--report-to tensorboard needs the tensorboard package" in err[0], err
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()
