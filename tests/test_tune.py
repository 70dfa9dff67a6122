"""`bertkit tune` end to end on a tiny random model and tiny STS-B files (a continuous metric, so
trials differ): the study is stored and continued, each trial is scored by its best checkpoint,
the median rule prunes a bad trial, and the printed `bertkit finetune` command trains the best
trial's model again to the same dev metric (same seed, deterministic on the CPU)."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

pytest.importorskip("optuna")

from bertkit.finetune.search_space import build_space, parse_search
from finetune_helpers import run_cli, write_stsb

SEARCH = "lr=1e-4:1e-2:log,epochs=2:3,batch-size=4|8"
BAD = {"lr": 1e-2, "epochs": 3, "batch_size": 4, "warmup": 0.0, "weight_decay": 0.0}  # diverges in one epoch


@pytest.fixture(scope="module")
def study(tiny_dir, tmp_path_factory):
    """A 4-trial study, and the command that made it (the test of its continuation reruns it)."""
    root = tmp_path_factory.mktemp("tune")
    write_stsb(root / "train.tsv", 40, 0)
    write_stsb(root / "dev.tsv", 20, 1)
    argv = ["tune", "--model", str(tiny_dir), "--task", "stsb", "--train", str(root / "train.tsv"),
            "--dev", str(root / "dev.tsv"), "--out", str(root / "st"), "--search", SEARCH,
            "--prune-startup", "2", "--no-progress", "--threads", "1"]
    assert run_cli(*argv, "--trials", "4") == 0
    return root / "st", argv


def _trials(out) -> list[dict]:
    return json.loads((out / "trials.json").read_text())["trials"]


def test_trials_are_scored_by_their_best_checkpoint_and_best_command_reproduces(study, capsys):
    out, _ = study
    assert (out / "study.db").stat().st_size > 0 and (out / "trials.png").stat().st_size > 0
    trials = _trials(out)
    assert len(trials) == 4 and {t["state"] for t in trials} <= {"complete", "pruned"}
    complete = [t for t in trials if t["state"] == "complete"]
    assert len(complete) >= 2
    for t in complete:  # the score is the best evaluation's, wherever it fell
        assert t["value"] == max(t["evaluations"].values())
    assert any(t["value"] > list(t["evaluations"].values())[-1] for t in complete), \
        "no trial whose best evaluation came before its last: the data no longer tests best-vs-last"
    best = json.loads((out / "best.json").read_text())
    assert best["value"] == max(t["value"] for t in complete) and best["seed"] == 1
    assert best["trial"] == next(t["number"] for t in complete if t["value"] == best["value"])

    argv = shlex.split(best["command"])
    assert argv[:2] == ["bertkit", "finetune"] and "--metric-for-best" in argv and "--seeds" in argv
    assert run_cli(*argv[1:]) == 0
    results = json.loads((out / "best" / "results.json").read_text())
    assert results["best_metric"] == pytest.approx(best["value"], abs=1e-9)
    assert results["best_step"] == best["best_step"]


def test_rerun_continues_the_study_and_a_stale_trial_and_prunes_a_bad_one(study, capsys):
    import optuna

    out, argv = study
    before = _trials(out)
    stored = optuna.load_study(study_name="bertkit-tune", storage=f"sqlite:///{out / 'study.db'}")
    stale = stored.ask()  # as if a process had been killed in the middle of this trial
    stored.enqueue_trial(BAD)
    capsys.readouterr()
    assert run_cli(*argv, "--trials", "6") == 0
    lines = capsys.readouterr().out.splitlines()
    after = _trials(out)
    assert after[:4] == before  # the earlier trials are kept as they were
    states = {t["number"]: t["state"] for t in after}
    assert states[stale.number] in ("complete", "pruned")  # continued, with the parameters its number draws
    assert f"continuing trial {stale.number}, which a stopped run left before its first checkpoint" in lines
    bad = next(t for t in after if t["params"] == BAD)
    assert bad["state"] == "pruned" and bad["pruned_at_epoch"] == 1.0
    assert sum(s in ("complete", "pruned") for s in states.values()) == 6 and len(after) == 6
    assert [ln.split("]")[0] for ln in lines if ln.startswith("trial ")] == ["trial 5/6 [4", "trial 6/6 [5"]
    assert not (out / "checkpoints").exists()
    assert any("pruned at epoch 1.00" in ln for ln in lines)

    # the same study with another search space is refused before any data is read
    changed = [*argv, "--trials", "7"]
    changed[changed.index(SEARCH)] = SEARCH.replace("epochs=2:3", "epochs=2:4")
    assert run_cli(*changed) == 2
    assert "holds a study made with other settings (search)" in capsys.readouterr().err
    assert len(_trials(out)) == 6


def test_a_trial_below_the_median_only_at_its_last_evaluation_completes(tiny_dir, tmp_path):
    """Pruning at the last evaluation saves nothing: that trial completes, scored by its best."""
    import optuna

    write_stsb(tmp_path / "train.tsv", 24, 0)
    write_stsb(tmp_path / "dev.tsv", 12, 1)
    argv = ["tune", "--model", str(tiny_dir), "--task", "stsb", "--train", str(tmp_path / "train.tsv"),
            "--dev", str(tmp_path / "dev.tsv"), "--out", str(tmp_path / "st"), "--search", "lr=1e-4:1e-3:log",
            "--epochs", "1", "--prune-startup", "1", "--no-progress", "--threads", "1"]
    assert run_cli(*argv, "--trials", "1") == 0
    stored = optuna.load_study(study_name="bertkit-tune", storage=f"sqlite:///{tmp_path / 'st' / 'study.db'}")
    stored.enqueue_trial({"lr": 1e-2})  # diverges: below the first trial's dev metric at its one evaluation
    assert run_cli(*argv, "--trials", "2") == 0
    first, bad = _trials(tmp_path / "st")
    assert bad["params"]["lr"] == 1e-2 and bad["value"] < first["value"]
    assert bad["state"] == "complete" and bad["pruned_at_epoch"] is None


def test_search_space_defaults_overrides_and_fixed_flags():
    space = build_space({"lr": None, "epochs": 3, "batch_size": None, "warmup": None, "weight_decay": None},
                        parse_search("lr=1e-4:1e-2:log,batch-size=8|16"))
    assert space.fixed == {"epochs": 3}
    assert [d.spec() for d in space.dims] == ["lr=0.0001:0.01:log", "batch-size=8|16", "warmup=0:0.2",
                                              "weight-decay=0:0.1"]
    with pytest.raises(ValueError, match="--epochs fixes epochs; --search names it too"):
        build_space({"epochs": 3}, parse_search("epochs=2:4"))
    for bad in ("lr=1e-3:1e-5", "lr=0:1:log", "epochs=1.5:3", "batch-size=0|8", "momentum=0:1", "lr=1:2,lr=2:3"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_search(bad)
